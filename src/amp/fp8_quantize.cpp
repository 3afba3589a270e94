#include "mixp/amp/fp8_quantize.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "mixp/amp/fp8_scaling.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/gemm.h"
#include "mixp/tensor/factories.h"
#include "ops/dispatch.h"

namespace mixp::amp {

namespace {

bool is_e5m2(DType fp8) {
  if (fp8 == DType::fp8_e5m2) return true;
  if (fp8 == DType::fp8_e4m3) return false;
  throw std::invalid_argument("FP8 quantization: the format must be fp8_e4m3 or fp8_e5m2, got " +
                              std::string(name(fp8)));
}

void check_sizes(size_t in, size_t out, const char* what) {
  if (in != out) {
    throw std::invalid_argument(fmt::format(
        "{}: {} inputs but {} outputs; the spans must have equal sizes", what, in, out));
  }
}

// x as a contiguous fp32 tensor (x itself when it already is one), not recorded.
Tensor f32_contiguous(const Tensor& x) {
  Tensor c = detail::as_compute(x, DType::fp32);
  return detail::raw_contiguous(c);
}

// Host spans as cpu tensors (the span functions below compute on host memory).
Tensor host_f32(std::span<const float> x) {
  return from_blob(const_cast<float*>(x.data()), Shape{static_cast<int64_t>(x.size())},
                   DType::fp32);
}
Tensor host_bf16(std::span<uint16_t> out) {
  return from_blob(out.data(), Shape{static_cast<int64_t>(out.size())}, DType::bf16);
}

// The backend's amax (a one-element fp32 tensor on x's device) read back to the host.
float amax_of(const Tensor& xf) {
  Tensor a = Tensor::empty({1}, {.dtype = DType::fp32, .device = xf.device()});
  backend_for(xf).amax(a, xf);
  return a.item<float>();
}

// Per-tensor quantization of xf (fp32, contiguous) into a new tensor on its device: the codes
// as fp8 where the backend's GEMMs take them (Backend::fp8_matmul(): cuda on sm_89+), as bf16
// values elsewhere (the cpu); the amax of xf when `amax` is given.
Tensor scale_cast(const Tensor& xf, DType fp8, float scale, float* amax) {
  Backend& be = backend_for(xf);
  const DType store = be.fp8_matmul() ? fp8 : DType::bf16;
  Tensor out = Tensor::empty(xf.shape(), {.dtype = store, .device = xf.device()});
  Tensor a = amax ? Tensor::empty({1}, {.dtype = DType::fp32, .device = xf.device()}) : Tensor();
  be.quantize({.kind = QuantizeSpec::Kind::fp8_tensor, .format = fp8, .scale = scale}, out, a, xf);
  if (amax) *amax = a.item<float>();
  return out;
}

}  // namespace

float fp8_amax(std::span<const float> x) {
  return amax_of(host_f32(x));
}

float fp8_quantize_to_bf16(std::span<const float> x, DType fp8, float scale,
                           std::span<uint16_t> out) {
  check_sizes(x.size(), out.size(), "fp8_quantize_to_bf16");
  (void)is_e5m2(fp8);
  Tensor dst = host_bf16(out), a = Tensor::empty({1});
  backend().quantize({.kind = QuantizeSpec::Kind::fp8_tensor, .format = fp8, .scale = scale}, dst,
                     a, host_f32(x));
  return a.item<float>();
}

void mxfp8_quantize_to_bf16(std::span<const float> x, int64_t row_len, DType fp8, int block,
                            std::span<uint16_t> out) {
  check_sizes(x.size(), out.size(), "mxfp8_quantize_to_bf16");
  (void)is_e5m2(fp8);
  if (block < 1) throw std::invalid_argument("mxfp8_quantize_to_bf16: block must be >= 1");
  const auto n = static_cast<int64_t>(x.size());
  if (n == 0) return;
  if (row_len < 1 || n % row_len != 0) {
    throw std::invalid_argument(
        fmt::format("mxfp8_quantize_to_bf16: {} values do not split into rows of {}", n, row_len));
  }
  Tensor dst = host_bf16(out).view({n / row_len, row_len}), aux;
  backend().quantize({.kind = QuantizeSpec::Kind::fp8_mx, .format = fp8, .block = block}, dst, aux,
                     host_f32(x).view({n / row_len, row_len}));
}

Tensor mxfp8_rows(const Tensor& xf, DType fp8, int block) {
  (void)is_e5m2(fp8);
  if (block < 1) throw std::invalid_argument("mxfp8_quantize: block must be >= 1");
  Tensor out = Tensor::empty(xf.shape(), {.dtype = DType::bf16, .device = xf.device()}), aux;
  if (xf.numel() == 0) return out;
  backend_for(xf).quantize({.kind = QuantizeSpec::Kind::fp8_mx, .format = fp8, .block = block}, out,
                           aux, xf);
  return out;
}

Tensor mxfp8_column_blocks(const Tensor& xf, DType fp8, int block) {
  (void)is_e5m2(fp8);
  if (block < 1) throw std::invalid_argument("mxfp8_quantize: block must be >= 1");
  if (xf.dim() != 2) throw std::invalid_argument("mxfp8_column_blocks: expected a 2-D tensor");
  // cuda quantizes rows only: the rows of the transpose, transposed back.
  if (xf.device().kind == DeviceKind::cuda)
    return mxfp8_rows(xf.t().contiguous(), fp8, block).t().contiguous();
  const Tensor x = xf.is_contiguous() ? xf : xf.contiguous();
  Tensor out = Tensor::empty(x.shape(), {.dtype = DType::bf16, .device = x.device()}), aux;
  if (x.numel() == 0) return out;
  backend_for(x).quantize(
      {.kind = QuantizeSpec::Kind::fp8_mx, .format = fp8, .block = block, .along_columns = true},
      out, aux, x);
  return out;
}

Tensor mxfp8_columns(const Tensor& xf, DType fp8, int block) {
  if (xf.dim() != 2) return mxfp8_rows(xf.t().contiguous(), fp8, block);
  return mxfp8_column_blocks(xf, fp8, block).t().contiguous();
}

Fp8Quantized fp8_quantize(const Tensor& x, DType fp8, float scale) {
  detail::check_float(x, "fp8_quantize", "x");
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    throw std::invalid_argument(
        fmt::format("mixp::amp::fp8_quantize: the scale must be finite and > 0, got {}", scale));
  }
  (void)is_e5m2(fp8);
  const Tensor xf = f32_contiguous(x);
  Fp8Quantized q;
  q.scale = scale;
  q.scale_inv = 1.0f / scale;
  q.data = scale_cast(xf, fp8, scale, &q.amax);
  return q;
}

Fp8Quantized fp8_quantize_current(const Tensor& x, DType fp8, int margin) {
  detail::check_float(x, "fp8_quantize_current", "x");
  const Tensor xf = f32_contiguous(x);
  const float amax = amax_of(xf);
  Fp8Quantized q;
  q.scale = fp8_current_scale(amax, fp8_max(fp8), margin);
  q.scale_inv = 1.0f / q.scale;
  q.amax = amax;
  q.data = scale_cast(xf, fp8, q.scale, nullptr);
  return q;
}

Fp8Quantized mxfp8_quantize(const Tensor& x, DType fp8, int block) {
  detail::check_float(x, "mxfp8_quantize", "x");
  const Tensor xf = f32_contiguous(x);
  Fp8Quantized q;
  q.data = mxfp8_rows(xf, fp8, block);
  q.amax = amax_of(xf);
  return q;
}

Tensor fp8_gemm(const Fp8Quantized& a, const Fp8Quantized& b) {
  if (a.data.dim() != 2 || b.data.dim() != 2) {
    throw std::invalid_argument("mixp::amp::fp8_gemm: expected a [M, K] and b [K, N], got " +
                                a.data.shape().str() + " and " + b.data.shape().str());
  }
  Tensor dst = Tensor::empty({a.data.size(0), b.data.size(1)}, {.device = a.data.device()});
  gemm(dst, a.data, b.data);
  const float alpha = a.scale_inv * b.scale_inv;
  if (alpha != 1.0f) backend_for(dst).scale_bias_act(dst, dst, Tensor(), alpha, Activation::none);
  return dst;
}

Tensor fp8_fake_quantize(const Tensor& x, DType fp8, float scale) {
  Fp8Quantized q;
  {
    NoGradGuard ng;
    q = fp8_quantize(x, fp8, scale);
  }
  Tensor out = detail::as_compute(q.data, DType::fp32);
  backend_for(out).scale_bias_act(out, out, Tensor(), q.scale_inv, Activation::none);
  if (detail::should_record({&x})) {
    detail::record(OpId::to, DType::fp32, {&x}, {&out},
                   [](BackwardContext& ctx) { ctx.grad_inputs[0] = ctx.grad(); });
  }
  return out;
}

}  // namespace mixp::amp
