#include "mixp/amp/fp8_quantize.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "amp/fp8_kernels.h"
#include "mixp/amp/fp8_scaling.h"
#include "mixp/backend/cpu_features.h"
#include "mixp/backend/gemm.h"
#include "ops/dispatch.h"

namespace mixp::amp {

namespace fp8k {
const Kernels& kernels() {
  // The getters, not their tables: only the chosen tier's code may run on this CPU.
  static const Kernels* k = &by_tier(&kernels_avx512, &kernels_avx2, &kernels_generic)();
  return *k;
}
}  // namespace fp8k

namespace {

// Below this many elements a parallel region costs more than it saves (the cpu backend's grain).
constexpr int64_t kGrain = 1 << 15;

// Runs f(lo, hi) over [0, n) in one contiguous chunk per thread (multiples of `align`); returns
// the max of what the chunks return.
template <class F>
float parallel_max(int64_t n, int64_t align, F&& f) {
  const int threads = omp_get_max_threads();
  if (n < kGrain || threads == 1) return n > 0 ? f(int64_t{0}, n) : 0.0f;
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

bool is_e5m2(DType fp8) {
  if (fp8 == DType::fp8_e5m2) return true;
  if (fp8 == DType::fp8_e4m3) return false;
  throw std::invalid_argument("FP8 quantization: the format must be fp8_e4m3 or fp8_e5m2, got " +
                              std::string(name(fp8)));
}

void check_sizes(size_t in, size_t out, const char* what) {
  if (in != out) {
    throw std::invalid_argument(
        fmt::format("{}: {} inputs but {} outputs; the spans must have equal sizes", what, in, out));
  }
}

// x as a contiguous fp32 tensor (x itself when it already is one), not recorded.
Tensor f32_contiguous(const Tensor& x) {
  Tensor c = detail::as_compute(x, DType::fp32);
  return detail::raw_contiguous(c);
}

std::span<const float> span_of(const Tensor& t) {
  return {static_cast<const float*>(t.data_ptr()), static_cast<size_t>(t.numel())};
}
std::span<uint16_t> bits_of(const Tensor& t) {
  return {static_cast<uint16_t*>(t.data_ptr()), static_cast<size_t>(t.numel())};
}

}  // namespace

const char* fp8_kernel_tier() { return fp8k::kernels().tier; }

float fp8_amax(std::span<const float> x) {
  const auto& k = fp8k::kernels();
  return parallel_max(static_cast<int64_t>(x.size()), 16,
                      [&](int64_t lo, int64_t hi) { return k.amax(x.data() + lo, hi - lo); });
}

float fp8_quantize_to_bf16(std::span<const float> x, DType fp8, float scale,
                           std::span<uint16_t> out) {
  check_sizes(x.size(), out.size(), "fp8_quantize_to_bf16");
  const bool e5m2 = is_e5m2(fp8);
  const auto& k = fp8k::kernels();
  return parallel_max(static_cast<int64_t>(x.size()), 32, [&](int64_t lo, int64_t hi) {
    return k.scale_cast_bf16(x.data() + lo, hi - lo, scale, e5m2, out.data() + lo);
  });
}

void mxfp8_quantize_to_bf16(std::span<const float> x, int64_t row_len, DType fp8, int block,
                            std::span<uint16_t> out) {
  check_sizes(x.size(), out.size(), "mxfp8_quantize_to_bf16");
  const bool e5m2 = is_e5m2(fp8);
  if (block < 1) throw std::invalid_argument("mxfp8_quantize_to_bf16: block must be >= 1");
  const int64_t n = static_cast<int64_t>(x.size());
  if (n == 0) return;
  if (row_len < 1 || n % row_len != 0) {
    throw std::invalid_argument(fmt::format(
        "mxfp8_quantize_to_bf16: {} values do not split into rows of {}", n, row_len));
  }
  const int64_t rows = n / row_len;
  const auto& k = fp8k::kernels();
  // Whole rows per thread (blocks never span rows).
  (void)parallel_max(rows, 1, [&](int64_t lo, int64_t hi) {
    k.mx_cast_bf16(x.data() + lo * row_len, hi - lo, row_len, block, e5m2,
                   out.data() + lo * row_len);
    return 0.0f;
  });
}

Fp8Quantized fp8_quantize(const Tensor& x, DType fp8, float scale) {
  detail::check_float(x, "fp8_quantize", "x");
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    throw std::invalid_argument(
        fmt::format("mixp::amp::fp8_quantize: the scale must be finite and > 0, got {}", scale));
  }
  const Tensor xf = f32_contiguous(x);
  Fp8Quantized q;
  q.data = Tensor::empty(x.shape(), {.dtype = DType::bf16});
  q.scale = scale;
  q.scale_inv = 1.0f / scale;
  q.amax = fp8_quantize_to_bf16(span_of(xf), fp8, scale, bits_of(q.data));
  return q;
}

Fp8Quantized fp8_quantize_current(const Tensor& x, DType fp8, int margin) {
  detail::check_float(x, "fp8_quantize_current", "x");
  const Tensor xf = f32_contiguous(x);
  const float amax = fp8_amax(span_of(xf));
  Fp8Quantized q;
  q.scale = fp8_current_scale(amax, fp8_max(fp8), margin);
  q.scale_inv = 1.0f / q.scale;
  q.amax = amax;
  q.data = Tensor::empty(x.shape(), {.dtype = DType::bf16});
  (void)fp8_quantize_to_bf16(span_of(xf), fp8, q.scale, bits_of(q.data));
  return q;
}

Fp8Quantized mxfp8_quantize(const Tensor& x, DType fp8, int block) {
  detail::check_float(x, "mxfp8_quantize", "x");
  const Tensor xf = f32_contiguous(x);
  Fp8Quantized q;
  q.data = Tensor::empty(x.shape(), {.dtype = DType::bf16});
  const int64_t row_len = x.dim() == 0 ? 1 : x.size(-1);
  if (x.numel() > 0) mxfp8_quantize_to_bf16(span_of(xf), row_len, fp8, block, bits_of(q.data));
  q.amax = fp8_amax(span_of(xf));
  return q;
}

Tensor fp8_gemm(const Fp8Quantized& a, const Fp8Quantized& b) {
  if (a.data.dim() != 2 || b.data.dim() != 2) {
    throw std::invalid_argument("mixp::amp::fp8_gemm: expected a [M, K] and b [K, N], got " +
                                a.data.shape().str() + " and " + b.data.shape().str());
  }
  Tensor dst = Tensor::empty({a.data.size(0), b.data.size(1)});
  gemm(dst, a.data, b.data);
  const float alpha = a.scale_inv * b.scale_inv;
  if (alpha != 1.0f) fp8k::kernels().scale_inplace(static_cast<float*>(dst.data_ptr()), dst.numel(), alpha);
  return dst;
}

Tensor fp8_fake_quantize(const Tensor& x, DType fp8, float scale) {
  Fp8Quantized q;
  {
    NoGradGuard ng;
    q = fp8_quantize(x, fp8, scale);
  }
  Tensor out = detail::as_compute(q.data, DType::fp32);
  fp8k::kernels().scale_inplace(static_cast<float*>(out.data_ptr()), out.numel(), q.scale_inv);
  if (detail::should_record({&x})) {
    detail::record(OpId::to, DType::fp32, {&x}, {&out},
                   [](BackwardContext& ctx) { ctx.grad_inputs[0] = ctx.grad(); });
  }
  return out;
}

}  // namespace mixp::amp
