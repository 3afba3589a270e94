// The cpu backend's scaling and quantization kernels (backend.h: amax, minmax, quantize,
// mask_grad, scale_bias_act): the tiered loops of fp8_kernels.h (amp's FP8/MX recipes) and
// qkernels.h (quant's QAT), split over the OpenMP threads. Moved unchanged from
// src/amp/fp8_quantize.cpp, src/amp/fp8_linear.cpp, src/quant/fake_quantize.cpp and
// src/quant/observer.cpp; the ref backend's scalar loops (src/backend/ref/ref_quantize.cpp) are
// their oracle in tests/backend.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/fp8_kernels.h"
#include "backend/cpu/lowbit_codes_kernel.h"
#include "backend/cpu/qkernels.h"
#include "mixp/format/cpu_features.h"

namespace mixp {

namespace cpu::fp8k {
const Kernels& kernels() {
  // The getters, not their tables: only the chosen tier's code may run on this CPU.
  static const Kernels* k = &by_tier(&kernels_avx512, &kernels_avx2, &kernels_generic)();
  return *k;
}
}  // namespace cpu::fp8k

namespace {

// Runs f(lo, hi) over [0, n) in one contiguous chunk per thread (multiples of `align`); returns
// the max of what the chunks return.
template <class F>
float parallel_max(int64_t n, int64_t align, F&& f) {
  const int threads = omp_get_max_threads();
  if (n < cpu::kParallelGrain || threads == 1) return n > 0 ? f(int64_t{0}, n) : 0.0f;
  std::vector<float> part(static_cast<size_t>(threads), 0.0f);
#pragma omp parallel num_threads(threads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = ((n + nt - 1) / nt + align - 1) / align * align;
    const int64_t lo = std::min<int64_t>(n, t * chunk), hi = std::min<int64_t>(n, lo + chunk);
    if (lo < hi) part[static_cast<size_t>(t)] = f(lo, hi);
  }
  return *std::max_element(part.begin(), part.end());
}

void need_f32(const Tensor& t, const char* kernel, const char* what) {
  if (!t.defined() || t.dtype() != DType::fp32 || !t.is_contiguous()) {
    throw std::logic_error(std::string("mixp cpu backend: ") + kernel + " needs " + what +
                           " contiguous fp32");
  }
}

bool e5m2_of(DType fp8) {
  if (fp8 == DType::fp8_e5m2) return true;
  if (fp8 == DType::fp8_e4m3) return false;
  throw std::invalid_argument("FP8 quantization: the format must be fp8_e4m3 or fp8_e5m2, got " +
                              std::string(name(fp8)));
}

float amax_of(const float* x, int64_t n) {
  const auto& k = cpu::fp8k::kernels();
  return parallel_max(n, 16, [&](int64_t lo, int64_t hi) { return k.amax(x + lo, hi - lo); });
}

struct MinMaxNan {
  float min, max;
};

// Min/max of n contiguous values (the vectorized kernel); NaN in both when a value is not finite.
MinMaxNan span_minmax(const float* x, int64_t n) {
  MinMaxNan m{};
  bool bad = false;
  cpu::qk::kernels().minmax(x, n, &m.min, &m.max, &bad);
  if (bad) {
    return {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN()};
  }
  return m;
}

MinMaxNan merge(MinMaxNan a, MinMaxNan b) {
  if (std::isnan(a.min) || std::isnan(b.min)) return {std::nanf(""), std::nanf("")};
  return {std::min(a.min, b.min), std::max(a.max, b.max)};
}

}  // namespace

void CpuBackend::amax(Tensor& dst, const Tensor& src) {
  need_f32(src, "amax", "src");
  dst.data<float>()[0] = amax_of(src.data<float>(), src.numel());
}

void CpuBackend::minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels,
                        int64_t inner) {
  need_f32(src, "minmax", "src");
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float* x = src.data<float>();
  const int64_t n = src.numel();
  float* mn = min.data<float>();
  float* mx = max.data<float>();
  if (channels == 1) {
    MinMaxNan total{kInf, -kInf};
    const int nt = n >= (1 << 16) ? omp_get_max_threads() : 1;
    std::vector<MinMaxNan> part(static_cast<size_t>(nt), MinMaxNan{kInf, -kInf});
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; ++t) {
      const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
      part[static_cast<size_t>(t)] = span_minmax(x + lo, hi - lo);
    }
    for (const MinMaxNan& m : part) total = merge(total, m);
    mn[0] = total.min;
    mx[0] = total.max;
    return;
  }
  const int64_t outer = channels > 0 && inner > 0 ? n / (channels * inner) : 0;
  std::vector<MinMaxNan> out(static_cast<size_t>(channels), MinMaxNan{kInf, -kInf});
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* p = x + (o * channels + c) * inner;
      out[static_cast<size_t>(c)] = merge(out[static_cast<size_t>(c)], span_minmax(p, inner));
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    mn[c] = out[static_cast<size_t>(c)].min;
    mx[c] = out[static_cast<size_t>(c)].max;
  }
}

namespace {
// fp8_mx with along_columns: src and dst [R, C] contiguous, blocks of `block` rows down each
// column; tiles of one block of rows x 64 columns spread over the threads.
void mx_along_columns(Tensor& dst, const Tensor& src, DType format, int block) {
  const int64_t R = src.shape()[0], C = src.shape()[1];
  const bool e5m2 = e5m2_of(format);
  const auto& k = cpu::fp8k::kernels();
  constexpr int64_t kCols = 64;
  const int64_t row_tiles = (R + block - 1) / block, col_tiles = (C + kCols - 1) / kCols;
  const float* x = static_cast<const float*>(src.data_ptr());
  auto* out = static_cast<uint16_t*>(dst.data_ptr());
  cpu::parallel_for(row_tiles * col_tiles, R * C, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t r0 = (u / col_tiles) * block, c0 = (u % col_tiles) * kCols;
      const int64_t nr = std::min<int64_t>(block, R - r0), nc = std::min(kCols, C - c0);
      k.mx_cast_bf16_columns(x + r0 * C + c0, nr, nc, C, block, e5m2, out + r0 * C + c0);
    }
  });
}
}  // namespace

void CpuBackend::quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) {
  if (spec.kind == QuantizeSpec::Kind::fp8_mx && spec.along_columns) {
    need_f32(src, "quantize", "src");
    if (spec.block >= 1 && spec.block <= cpu::fp8k::kMaxColumnBlock && src.dim() == 2 &&
        src.is_contiguous() && dst.is_contiguous() && dst.shape() == src.shape())
      return mx_along_columns(dst, src, spec.format, spec.block);
    return RefBackend::quantize(spec, dst, aux, src);
  }
  need_f32(src, "quantize", "src");
  const float* x = src.data<float>();
  const int64_t n = src.numel();
  switch (spec.kind) {
    case QuantizeSpec::Kind::fp8_tensor: {
      const bool e5m2 = e5m2_of(spec.format);
      const auto& k = cpu::fp8k::kernels();
      auto* out = static_cast<uint16_t*>(dst.data_ptr());
      const float a = parallel_max(n, 32, [&](int64_t lo, int64_t hi) {
        return k.scale_cast_bf16(x + lo, hi - lo, spec.scale, e5m2, out + lo);
      });
      if (aux.defined()) aux.data<float>()[0] = a;
      return;
    }
    case QuantizeSpec::Kind::fp8_mx: {
      const bool e5m2 = e5m2_of(spec.format);
      if (n == 0) return;
      const int64_t row_len = src.dim() == 0 ? 1 : src.size(-1);
      const int64_t rows = n / row_len;
      const auto& k = cpu::fp8k::kernels();
      auto* out = static_cast<uint16_t*>(dst.data_ptr());
      // Whole rows per thread (blocks never span rows).
      (void)parallel_max(rows, 1, [&](int64_t lo, int64_t hi) {
        k.mx_cast_bf16(x + lo * row_len, hi - lo, row_len, spec.block, e5m2, out + lo * row_len);
        return 0.0f;
      });
      return;
    }
    case QuantizeSpec::Kind::int_fake: {
      const cpu::qk::Kernels& k = cpu::qk::kernels();
      float* y = dst.data<float>();
      uint8_t* m = aux.defined() ? aux.data<uint8_t>() : nullptr;
      std::vector<cpu::qk::QP> qp;
      for (const QuantizeSpec::IntParams& p : spec.params)
        qp.push_back({p.scale, p.inv_scale, p.zero_point, p.qmin, p.qmax});
      const int64_t inner = spec.inner;
      const int64_t rows = inner ? n / inner : 0;
      if (rows == 1) {
        // One long run: split it across threads.
        cpu::parallel_for(inner, inner, [&](int64_t lo, int64_t hi) {
          k.fake_quant(y + lo, m ? m + lo : nullptr, x + lo, hi - lo, qp[0]);
        });
      } else {
        const auto channels = static_cast<int64_t>(qp.size());
        cpu::parallel_for(rows, n, [&](int64_t lo, int64_t hi) {
          for (int64_t r = lo; r < hi; ++r) {
            const int64_t off = r * inner;
            k.fake_quant(y + off, m ? m + off : nullptr, x + off, inner,
                         qp[static_cast<size_t>(r % channels)]);
          }
        });
      }
      return;
    }
  }
}

void CpuBackend::mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) {
  need_f32(ddst, "mask_grad", "ddst");
  const int64_t n = ddst.numel();
  const float* g = ddst.data<float>();
  float* out = dsrc.data<float>();
  if (mask.dtype() == DType::uint8) {
    const cpu::qk::Kernels& k = cpu::qk::kernels();
    const uint8_t* mp = mask.data<uint8_t>();
    cpu::parallel_for(
        n, n, [&](int64_t lo, int64_t hi) { k.ste_backward(out + lo, g + lo, mp + lo, hi - lo); });
    return;
  }
  need_f32(mask, "mask_grad", "mask (uint8 or fp32)");
  cpu::fp8k::kernels().relu_mask(out, g, mask.data<float>(), n);
}

void CpuBackend::lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales,
                              Tensor& mask, const Tensor& src) {
  need_f32(src, "lowbit_codes", "src");
  const bool weight =
      spec.kind != LowBitCodesSpec::Kind::act_int && spec.kind != LowBitCodesSpec::Kind::act_sign;
  const int64_t O = weight ? scales.numel() : 1, K = src.numel() / std::max<int64_t>(O, 1);
  cpu::lowbit_codes_loop(spec, src.data<float>(), O, K, codes.data<float>(),
                         weight ? scales.data<float>() : nullptr,
                         mask.defined() ? mask.data<uint8_t>() : nullptr);
}

void CpuBackend::lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                                       const Tensor& inv_scales, int64_t inner) {
  need_f32(ddst, "lowbit_codes_backward", "ddst");
  cpu::lowbit_codes_backward_loop(dsrc.data<float>(), ddst.data<float>(), mask.data<uint8_t>(),
                                  inv_scales.data<float>(), inv_scales.numel(), inner,
                                  ddst.numel());
}

void CpuBackend::scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha,
                                Activation act) {
  need_f32(src, "scale_bias_act", "src");
  const auto& k = cpu::fp8k::kernels();
  if (!bias.defined() && act == Activation::none) {
    // The scale alone (the backward GEMMs' scale_invs).
    if (dst.data_ptr() != src.data_ptr()) copy(dst, src);
    k.scale_inplace(dst.data<float>(), dst.numel(), alpha);
    return;
  }
  if (act == Activation::gelu) {
    throw std::logic_error("mixp cpu backend: scale_bias_act takes act none or relu");
  }
  const int64_t n = src.dim() == 0 ? 1 : src.size(-1);
  const int64_t rows = n ? src.numel() / n : 0;
  k.epilogue(dst.data<float>(), src.data<float>(), rows, n, alpha,
             bias.defined() ? bias.data<float>() : nullptr, act == Activation::relu);
}

}  // namespace mixp
