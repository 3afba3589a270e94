// CudaBackend's scaling, quantization and statistics kernels (backend.h: amax, minmax, quantize,
// mask_grad, lowbit_codes (+ backward), scale_bias_act, fp8_scale_update, count_nonfinite,
// binary_cross_entropy (+ backward)): argument checks around cuda_quant.cu. The contracts are
// the interface's; the element rules are math/quant_math.h, checked on the CPU against the ref
// backend (tests/cuda/test_cuda_math.cpp) and on a GPU against the cpu backend
// (tests/cuda/test_cuda_device.cpp).
#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_quant_kernels.h"

namespace mixp::cuda {

namespace {
void need(const char* op, const Tensor& t, DType dt, const char* what) {
  if (!t.defined()) unsupported(op, fmt::format("an undefined {}", what));
  if (t.dtype() != dt)
    unsupported(op, fmt::format("{} of dtype {} (takes {})", what, name(t.dtype()), name(dt)));
  if (!t.is_contiguous()) unsupported(op, fmt::format("a strided {} (contiguous only)", what));
}
const float* cf(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(dev_ptr(t)) : nullptr;
}
float* mf(Tensor& t) {
  return t.defined() ? static_cast<float*>(dev_ptr(t)) : nullptr;
}
bool e5m2_of(DType t, const char* op) {
  if (t == DType::fp8_e5m2) return true;
  if (t == DType::fp8_e4m3) return false;
  throw std::invalid_argument(
      fmt::format("FP8 quantization: the format must be fp8_e4m3 or fp8_e5m2, got {}", name(t)));
}
}  // namespace

void CudaBackend::amax(Tensor& dst, const Tensor& src) {
  need("amax", src, DType::fp32, "src");
  need("amax", dst, DType::fp32, "dst");
  launch_amax(mf(dst), cf(src), src.numel(), ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels,
                         int64_t inner) {
  need("minmax", src, DType::fp32, "src");
  need("minmax", min, DType::fp32, "min");
  need("minmax", max, DType::fp32, "max");
  const int64_t n = src.numel();
  if (channels == 1) inner = n;  // per tensor: one run over everything
  const int64_t outer = channels > 0 && inner > 0 ? n / (channels * inner) : 0;
  launch_minmax(mf(min), mf(max), cf(src), outer, channels, inner > 0 ? inner : 1, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) {
  constexpr const char* op = "quantize";
  need(op, src, DType::fp32, "src");
  const int64_t n = src.numel();
  switch (spec.kind) {
    case QuantizeSpec::Kind::fp8_tensor: {
      const bool e5m2 = e5m2_of(spec.format, op);
      // bf16 values, or the codes themselves where the FP8 GEMMs read them (fp8_matmul()).
      const bool codes = dst.dtype() == spec.format && fp8_matmul();
      need(op, dst, codes ? spec.format : DType::bf16, "dst");
      if (aux.defined()) need(op, aux, DType::fp32, "amax");
      launch_quantize_fp8_tensor(dev_ptr(dst), codes, mf(aux), cf(src), n, spec.scale, e5m2,
                                 ctx().stream);
      break;
    }
    case QuantizeSpec::Kind::fp8_mx: {
      const bool e5m2 = e5m2_of(spec.format, op);
      if (spec.along_columns)  // amp::mxfp8_column_blocks quantizes the transpose's rows here
        throw std::invalid_argument("quantize: MX blocks along columns are not a cuda kernel");
      need(op, dst, DType::bf16, "dst");
      if (spec.block <= 0)
        throw std::invalid_argument(fmt::format(
            "MX block size must be positive (got {}); the OCP default is 32", spec.block));
      if (n == 0) return;
      const int64_t row_len = src.dim() == 0 ? 1 : src.size(-1);
      launch_quantize_mx(static_cast<uint16_t*>(dev_ptr(dst)), cf(src), n / row_len, row_len,
                         spec.block, e5m2, ctx().stream);
      break;
    }
    case QuantizeSpec::Kind::int_fake: {
      need(op, dst, DType::fp32, "dst");
      if (aux.defined()) need(op, aux, DType::uint8, "mask");
      if (spec.params.empty()) throw std::invalid_argument("quantize int_fake: no parameters");
      std::vector<IntQ> p;
      for (const QuantizeSpec::IntParams& q : spec.params)
        p.push_back({q.scale, q.inv_scale, q.zero_point, q.qmin, q.qmax});
      launch_quantize_int(mf(dst), aux.defined() ? static_cast<uint8_t*>(dev_ptr(aux)) : nullptr,
                          cf(src), n, p.data(), static_cast<int64_t>(p.size()), spec.inner,
                          ctx().stream);
      break;
    }
  }
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) {
  need("mask_grad", ddst, DType::fp32, "ddst");
  need("mask_grad", dsrc, DType::fp32, "dsrc");
  const bool u8 = mask.dtype() == DType::uint8;
  need("mask_grad", mask, u8 ? DType::uint8 : DType::fp32, "mask (uint8 or fp32)");
  launch_mask_grad(mf(dsrc), cf(ddst), dev_ptr(mask), u8, ddst.numel(), ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales,
                               Tensor& mask, const Tensor& src) {
  constexpr const char* op = "lowbit_codes";
  need(op, src, DType::fp32, "src");
  need(op, codes, DType::fp32, "codes");
  const bool weight =
      spec.kind != LowBitCodesSpec::Kind::act_int && spec.kind != LowBitCodesSpec::Kind::act_sign;
  if (weight) need(op, scales, DType::fp32, "scales");
  if (mask.defined()) need(op, mask, DType::uint8, "mask");
  LowBitArgs a;
  a.kind = static_cast<int>(spec.kind);
  a.qmin = spec.qmin;
  a.qmax = spec.qmax;
  a.scale = spec.scale;
  a.src = cf(src);
  a.O = weight ? scales.numel() : 1;
  a.K = src.numel() / std::max<int64_t>(a.O, 1);
  a.codes = mf(codes);
  a.scales = weight ? mf(scales) : nullptr;
  a.mask = mask.defined() ? static_cast<uint8_t*>(dev_ptr(mask)) : nullptr;
  launch_lowbit_codes(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}
static_assert(static_cast<int>(LowBitCodesSpec::Kind::weight_int) == 0 &&
                  static_cast<int>(LowBitCodesSpec::Kind::weight_ternary) == 1 &&
                  static_cast<int>(LowBitCodesSpec::Kind::weight_binary) == 2 &&
                  static_cast<int>(LowBitCodesSpec::Kind::act_int) == 3 &&
                  static_cast<int>(LowBitCodesSpec::Kind::act_sign) == 4,
              "LowBitArgs::kind takes LowBitCodesSpec::Kind's values");

void CudaBackend::lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                                        const Tensor& inv_scales, int64_t inner) {
  constexpr const char* op = "lowbit_codes_backward";
  need(op, ddst, DType::fp32, "ddst");
  need(op, dsrc, DType::fp32, "dsrc");
  need(op, mask, DType::uint8, "mask");
  need(op, inv_scales, DType::fp32, "inv_scales");
  launch_lowbit_backward(mf(dsrc), cf(ddst), static_cast<const uint8_t*>(dev_ptr(mask)),
                         cf(inv_scales), inv_scales.numel(), inner > 0 ? inner : 1, ddst.numel(),
                         ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha,
                                 Activation act) {
  constexpr const char* op = "scale_bias_act";
  need(op, src, DType::fp32, "src");
  need(op, dst, DType::fp32, "dst");
  if (bias.defined()) need(op, bias, DType::fp32, "bias");
  if (act == Activation::gelu)
    throw std::logic_error("mixp: scale_bias_act takes act none or relu");
  const int64_t n = src.dim() == 0 ? 1 : src.size(-1);
  const int64_t rows = n ? src.numel() / n : 0;
  launch_scale_bias_act(mf(dst), cf(src), cf(bias), rows, n, alpha, act == Activation::relu,
                        ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::fp8_scale_update(Tensor& history, Tensor& scale, Tensor& scale_inv,
                                   const Fp8ScaleUpdate& u) {
  constexpr const char* op = "fp8_scale_update";
  need(op, history, DType::fp32, "history");
  need(op, scale, DType::fp32, "scale");
  need(op, scale_inv, DType::fp32, "scale_inv");
  launch_fp8_scale_update(mf(history), history.numel(), mf(scale), mf(scale_inv), u.roll, u.amax,
                          u.most_recent, u.fp8_max, u.margin, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::count_nonfinite(Tensor& dst, const Tensor& src) {
  constexpr const char* op = "count_nonfinite";
  need(op, dst, DType::int64, "dst");
  int bytes = 0;
  uint64_t em = 0, mm = 0;
  switch (src.dtype()) {
    case DType::fp32:
      bytes = 4, em = 0x7F800000u, mm = 0x007FFFFFu;
      break;
    case DType::fp64:
      bytes = 8, em = 0x7FF0000000000000ull, mm = 0x000FFFFFFFFFFFFFull;
      break;
    case DType::bf16:
      bytes = 2, em = 0x7F80, mm = 0x007F;
      break;
    case DType::fp16:
      bytes = 2, em = 0x7C00, mm = 0x03FF;
      break;
    default:
      throw std::logic_error(fmt::format(
          "mixp: count_nonfinite takes fp32, fp64, bf16 or fp16, got {}", mixp::name(src.dtype())));
  }
  const Shape8 sh = shape_of(src.shape(), op);
  int64_t stride[kMaxRank] = {};
  for (int d = 0; d < src.dim(); ++d) stride[d] = src.strides()[d];
  launch_count_nonfinite(static_cast<int64_t*>(dev_ptr(dst)), dev_ptr(src), sh, stride, bytes, em,
                         mm, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

namespace {
bool bce_f64(const char* op, std::initializer_list<const Tensor*> ts, DType dt) {
  if (dt != DType::fp32 && dt != DType::fp64)
    unsupported(op, fmt::format("dtype {} (fp32 or fp64)", name(dt)));
  for (const Tensor* t : ts)
    if (t->defined()) need(op, *t, dt, "operand");
  return dt == DType::fp64;
}
}  // namespace

void CudaBackend::binary_cross_entropy(Tensor& loss, const Tensor& x, const Tensor& target,
                                       bool logits) {
  const bool f64 = bce_f64("binary_cross_entropy", {&loss, &x, &target}, x.dtype());
  launch_bce(dev_ptr(loss), dev_ptr(x), dev_ptr(target), x.numel(), logits, f64, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::binary_cross_entropy_backward(Tensor& dx, Tensor& dtarget, const Tensor& dloss,
                                                const Tensor& x, const Tensor& target,
                                                bool logits) {
  const bool f64 =
      bce_f64("binary_cross_entropy_backward", {&dx, &dtarget, &dloss, &x, &target}, x.dtype());
  launch_bce_backward(dx.defined() ? dev_ptr(dx) : nullptr,
                      dtarget.defined() ? dev_ptr(dtarget) : nullptr, dev_ptr(dloss), dev_ptr(x),
                      dev_ptr(target), x.numel(), logits, f64, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

}  // namespace mixp::cuda
