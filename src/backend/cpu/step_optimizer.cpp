// The fused optimizer updates (step_kernels.h), moved from optim/optimizer.cpp, optim/adam.cpp and
// optim/sgd.cpp: the element rules of Adam/AdamW (tiered fp32 kernel, adam_kernel.h) and SGD, the
// update of fp32/fp64 values with the weight-shadow rewrite, and the chunked update through fp32
// of narrow parameters, narrow states and Kahan compensation.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/adam_kernel.h"
#include "backend/cpu/step_kernels.h"
#include "mixp/format/convert.h"
#include "mixp/tensor/generator.h"

namespace mixp::step_kernels {

namespace {

constexpr size_t kMaxSlots = 8;
// Elements per chunk of the chunked update (fp32 scratch per thread: a few times 16 KiB).
constexpr int64_t kChunk = 4096;
// Elements per chunk of an fp32 update that also rewrites a weight shadow: w, g and two moments
// (4 x 4 KiB) plus the 16-bit shadow stay in L1 between the update and the narrowing (perf: 4096
// left about half of the narrowing's memory stalls).
constexpr int64_t kShadowChunk = 1024;
// Below this many elements a loop runs on one thread (the cpu backend's loops use the same).
constexpr int64_t kOptimParallelGrain = 1 << 15;

// Splits [0, n) into one contiguous chunk per OpenMP thread when n is large enough to pay for the
// parallel region; f(lo, hi) runs each.
template <class F>
void parallel_loop(int64_t n, F&& f) {
  if (n < kOptimParallelGrain || omp_get_max_threads() == 1) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    // Chunks are multiples of 16 elements so that every thread's loop starts on a cache line.
    const int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
    const int64_t lo = std::min<int64_t>(n, t * chunk), hi = std::min<int64_t>(n, lo + chunk);
    if (lo < hi) f(lo, hi);
  }
}

// body(c) for every chunk c of a parameter of n elements, in parallel when n pays for it (the grain
// of parallel_loop). The update kernels see one chunk at a time (serial inside: len < the grain).
template <class F>
void for_each_chunk(int64_t n, F&& body, int64_t chunk = kChunk) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (n < kOptimParallelGrain || omp_get_max_threads() == 1) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) body(c);
  }
}

// The fp64 Adam update (fp64 parameters only): the same operations as adam_f32_generic.
void adam_f64(double* w, const double* g, double* m, double* v, int64_t n, const double (&s)[9]) {
  const auto [b1, b2, one_m_b1, one_m_b2, eps, l2_wd, decay, neg_step_size, bc2_sqrt] = s;
  for (int64_t i = 0; i < n; ++i) {
    const double w0 = w[i];
    const double gi = g[i] + l2_wd * w0;
    const double wi = w0 * decay;
    const double mi = m[i] * b1 + one_m_b1 * gi;
    const double vi = v[i] * b2 + one_m_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi + (neg_step_size * mi) / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

template <class T>
void adam(const UpdateRule& r, T* w, const T* g, T* m, T* v, int64_t n) {
  const double(&s)[9] = r.s;
  if constexpr (std::is_same_v<T, float>) {
    const AdamScalars f{
        static_cast<float>(s[0]), static_cast<float>(s[1]), static_cast<float>(s[2]),
        static_cast<float>(s[3]), static_cast<float>(s[4]), static_cast<float>(s[5]),
        static_cast<float>(s[6]), static_cast<float>(s[7]), static_cast<float>(s[8])};
    const AdamKernelF32 kernel = adam_f32_kernel();
    parallel_loop(
        n, [&](int64_t lo, int64_t hi) { kernel(w + lo, g + lo, m + lo, v + lo, hi - lo, f); });
  } else {
    parallel_loop(
        n, [&](int64_t lo, int64_t hi) { adam_f64(w + lo, g + lo, m + lo, v + lo, hi - lo, s); });
  }
}

template <class T>
void sgd(const UpdateRule& r, T* w, const T* g, T* buf, int64_t n) {
  // Scalars in T, as PyTorch passes them to its fp32 kernels.
  const T lr = static_cast<T>(r.s[0]), wd = static_cast<T>(r.s[1]), mom = static_cast<T>(r.s[2]);
  const T damp1 = static_cast<T>(r.s[3]);
  const bool first = r.sgd_first, nesterov = r.sgd_nesterov, has_wd = r.sgd_weight_decay;
  if (!buf) {
    parallel_loop(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        const T d = has_wd ? g[i] + wd * w[i] : g[i];
        w[i] = w[i] - lr * d;
      }
    });
    return;
  }
  parallel_loop(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const T d = has_wd ? g[i] + wd * w[i] : g[i];
      const T b = first ? d : buf[i] * mom + damp1 * d;
      buf[i] = b;
      const T step_dir = nesterov ? d + mom * b : b;
      w[i] = w[i] - lr * step_dir;
    }
  });
}

// The element rule on n values of T: w updated in place, slots[k] the states.
template <class T>
void update(const UpdateRule& r, T* w, const T* g, T* const* slots, int64_t n) {
  if (r.kind == UpdateRule::Kind::adam) {
    adam<T>(r, w, g, slots[0], slots[1], n);
  } else {
    sgd<T>(r, w, g, r.sgd_momentum ? slots[0] : nullptr, n);
  }
}

// Rounds the updated fp32 values [lo, lo + len) into the shadow exactly as autocast casts.
void write_shadow(unsigned char* shadow, DType sd, const float* w, int64_t lo, int64_t len) {
  convert_f32_to(sd, {w, static_cast<size_t>(len)}, shadow + lo * traits(sd).storage_bytes,
                 {.round = kShadowRound, .overflow = kShadowOverflow});
}

void update_values(const ParamUpdate& u, const UpdateRule& r) {
  const int64_t n = u.values.numel();
  const size_t nslots = u.slots.size();
  if (u.values.dtype() == DType::fp64) {
    double* slots[kMaxSlots];
    for (size_t k = 0; k < nslots; ++k) slots[k] = u.slots[k].data<double>();
    update<double>(r, u.values.data<double>(), u.grad.data<double>(), slots, n);
    return;
  }
  float* slots[kMaxSlots];
  for (size_t k = 0; k < nslots; ++k) slots[k] = u.slots[k].data<float>();
  float* wv = u.values.data<float>();
  const float* gv = u.grad.data<float>();
  if (!u.shadow.defined()) {
    update<float>(r, wv, gv, slots, n);
    return;
  }
  // Chunk by chunk, so that each chunk of new values is rounded into the shadow while it is
  // still in L1 (autocast would read the whole weight again from memory to cast it).
  auto* shadow = static_cast<unsigned char*>(u.shadow.data_ptr());
  const DType sd = u.shadow.dtype();
  for_each_chunk(
      n,
      [&](int64_t c) {
        const int64_t lo = c * kShadowChunk, len = std::min(kShadowChunk, n - lo);
        float* chunk_slots[kMaxSlots];
        for (size_t k = 0; k < nslots; ++k) chunk_slots[k] = slots[k] + lo;
        update<float>(r, wv + lo, gv + lo, chunk_slots, len);
        write_shadow(shadow, sd, wv + lo, lo, len);
      },
      kShadowChunk);
}

void update_chunked(const ParamUpdate& u, const UpdateRule& r) {
  const Tensor& param = u.values;
  const int64_t n = param.numel();
  const DType pd = param.dtype(), gd = u.grad.dtype();
  const bool narrow_param = pd != DType::fp32;
  const bool has_master = u.master.defined();
  const bool kahan = u.comp.defined();
  const size_t nslots = u.slots.size();
  const DType sd = nslots > 0 ? u.slots[0].dtype() : DType::fp32;
  const bool narrow_states = sd != DType::fp32;
  const uint64_t seed = u.seed;
  const ConvertOptions param_round{.round = u.write_back, .overflow = u.overflow, .seed = seed};
  // States round to nearest-even, or stochastically (one stream per slot) when the write-back
  // does; a state is never truncated.
  const Round state_round =
      u.write_back == Round::stochastic ? Round::stochastic : Round::nearest_even;
  auto* pbits = static_cast<unsigned char*>(param.data_ptr());
  const size_t pes = param.element_size();
  float* master = has_master ? u.master.data<float>() : nullptr;
  auto* gbits = static_cast<const unsigned char*>(u.grad.data_ptr());
  const size_t ges = u.grad.element_size();
  auto* cbits = kahan ? static_cast<unsigned char*>(u.comp.data_ptr()) : nullptr;
  unsigned char* sbits[kMaxSlots];
  for (size_t k = 0; k < nslots; ++k) sbits[k] = static_cast<unsigned char*>(u.slots[k].data_ptr());
  const size_t ses = nslots > 0 ? u.slots[0].element_size() : 4;
  unsigned char* shadow =
      u.shadow.defined() ? static_cast<unsigned char*>(u.shadow.data_ptr()) : nullptr;
  const DType shadow_dtype = u.shadow.defined() ? u.shadow.dtype() : DType::fp32;

  auto body = [&](int64_t c) {
    // Scratch: w, g, old p, comp/y, new p, then one per slot.
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>((5 + kMaxSlots) * kChunk));
    const int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    const size_t ulen = static_cast<size_t>(len);
    float* buf_w = scratch.data();
    float* buf_g = buf_w + kChunk;
    float* buf_old = buf_g + kChunk;
    float* buf_c = buf_old + kChunk;
    float* buf_new = buf_c + kChunk;
    float* w;
    if (master) {
      w = master + lo;
    } else if (narrow_param) {
      w = buf_w;
      convert_to_f32(pd, pbits + lo * pes, {w, ulen});
    } else {
      w = reinterpret_cast<float*>(pbits) + lo;  // fp32 parameter, narrow states
    }
    if (kahan) std::copy(w, w + len, buf_old);
    const float* gp;
    if (gd == DType::fp32) {
      gp = reinterpret_cast<const float*>(gbits) + lo;
    } else {
      convert_to_f32(gd, gbits + lo * ges, {buf_g, ulen});
      gp = buf_g;
    }
    float* slots[kMaxSlots];
    for (size_t k = 0; k < nslots; ++k) {
      if (narrow_states) {
        slots[k] = buf_new + (1 + k) * kChunk;
        convert_to_f32(sd, sbits[k] + lo * ses, {slots[k], ulen});
      } else {
        slots[k] = reinterpret_cast<float*>(sbits[k]) + lo;
      }
    }
    update<float>(r, w, gp, slots, len);
    for (size_t k = 0; k < nslots && narrow_states; ++k) {
      convert_f32_to(sd, {slots[k], ulen}, sbits[k] + lo * ses,
                     {.round = state_round,
                      .overflow = Overflow::ieee,
                      .seed = Generator::splitmix64(seed + 0x9E3779B97F4A7C15ULL * (k + 1)),
                      .offset = u.offset + static_cast<uint64_t>(lo)});
    }
    if (!narrow_param) {
      if (shadow) write_shadow(shadow, shadow_dtype, w, lo, len);
      return;
    }
    ConvertOptions pr = param_round;
    pr.offset = u.offset + static_cast<uint64_t>(lo);
    if (!kahan) {
      convert_f32_to(pd, {w, ulen}, pbits + lo * pes, pr);
      return;
    }
    // Kahan: y = (w_new - p) + comp; p' = round(p + y); comp' = y - (p' - p).
    convert_to_f32(pd, cbits + lo * pes, {buf_c, ulen});
    for (int64_t i = 0; i < len; ++i) {
      const float y = (w[i] - buf_old[i]) + buf_c[i];
      buf_c[i] = y;
      w[i] = buf_old[i] + y;
    }
    convert_f32_to(pd, {w, ulen}, pbits + lo * pes, pr);
    convert_to_f32(pd, pbits + lo * pes, {buf_new, ulen});
    for (int64_t i = 0; i < len; ++i) {
      const float y = buf_c[i];
      // A non-finite parameter has no meaningful remainder; keep the buffer finite.
      const float rem = y - (buf_new[i] - buf_old[i]);
      buf_c[i] = std::isfinite(rem) ? rem : 0.0f;
    }
    convert_f32_to(pd, {buf_c, ulen}, cbits + lo * pes,
                   {.round = Round::nearest_even, .overflow = Overflow::saturate});
  };
  for_each_chunk(n, body);
}

}  // namespace

void optimizer_update(const ParamUpdate& u, const UpdateRule& rule) {
  if (u.slots.size() > kMaxSlots) throw std::logic_error("mixp: too many optimizer state slots");
  if (u.chunked) {
    update_chunked(u, rule);
  } else {
    update_values(u, rule);
  }
}

}  // namespace mixp::step_kernels
