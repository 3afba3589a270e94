// The low-bit weight and activation quantizers (autograd ops); see include/mixp/quant/lowbit.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mixp/backend/backend.h"
#include "mixp/backend/quant_kernels.h"
#include "mixp/quant/lowbit.h"
#include "mixp/tensor/factories.h"
#include "ops/dispatch.h"
#include "quant/quant_util.h"
#include "util/enum_names.h"
#include "util/text.h"

namespace mixp::quant {

namespace {
constexpr float kMinScale = 0x1p-23f;  // block_int8.h's floor (torch.finfo(float32).eps)
constexpr mixp::detail::EnumName<LowBitScheme> kSchemeNames[] = {
    {LowBitScheme::int8, "int8"},     {LowBitScheme::int4, "int4"},
    {LowBitScheme::int2, "int2"},     {LowBitScheme::ternary, "ternary"},
    {LowBitScheme::binary, "binary"}, {LowBitScheme::binary_act, "binary-act"}};
}  // namespace

std::string_view name(LowBitScheme s) {
  return mixp::detail::name_of(kSchemeNames, s);
}

LowBitScheme parse_lowbit_scheme(std::string_view s) {
  if (const auto x = mixp::detail::value_of(kSchemeNames, s)) return *x;
  throw std::invalid_argument(
      fmt::format("unknown low-bit layer format '{}'; choose {}", s,
                  mixp::detail::join_or(mixp::detail::names_of(kSchemeNames))));
}

int weight_bits(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return 8;
    case LowBitScheme::int4:
      return 4;
    case LowBitScheme::int2:
    case LowBitScheme::ternary:
      return 2;
    case LowBitScheme::binary:
    case LowBitScheme::binary_act:
      return 1;
  }
  return 8;
}

int32_t weight_qmin(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return -128;
    case LowBitScheme::int4:
      return -8;
    case LowBitScheme::int2:
      return -2;
    default:
      return -1;
  }
}

int32_t weight_qmax(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return 127;
    case LowBitScheme::int4:
      return 7;
    default:
      return 1;
  }
}

namespace {
LowBitCodesSpec weight_codes_spec(LowBitScheme scheme) {
  switch (scheme) {
    case LowBitScheme::int8:
    case LowBitScheme::int4:
    case LowBitScheme::int2:
      return {.kind = LowBitCodesSpec::Kind::weight_int,
              .qmin = static_cast<float>(weight_qmin(scheme)),
              .qmax = static_cast<float>(weight_qmax(scheme))};
    case LowBitScheme::ternary:
      return {.kind = LowBitCodesSpec::Kind::weight_ternary};
    case LowBitScheme::binary:
    case LowBitScheme::binary_act:
      return {.kind = LowBitCodesSpec::Kind::weight_binary};
  }
  return {};
}
}  // namespace

void lowbit_weight_codes_raw(const float* w, int64_t O, int64_t K, LowBitScheme scheme,
                             float* codes, float* scales, uint8_t* mask) {
  qk::lowbit_codes(weight_codes_spec(scheme), w, O, K, codes, scales, mask);
}

namespace {

// Records dx = dcodes * inv_scales[row % channels] * mask for rows of `inner` values (the
// backend's lowbit_codes_backward).
void record_ste(const Tensor& x, Tensor& out, Tensor mask, Tensor inv_scales, int64_t inner) {
  mixp::detail::record(OpId::fake_quantize, DType::fp32, {&x}, {&out},
                       [mask, inv_scales, inner](BackwardContext& ctx) {
                         const Tensor gr = mixp::detail::raw_contiguous(
                             mixp::detail::as_compute(ctx.grad(), DType::fp32));
                         Tensor gx = Tensor::empty(gr.shape(),
                                                   {.dtype = DType::fp32, .device = gr.device()});
                         backend_for(gx, gr, mask, inv_scales)
                             .lowbit_codes_backward(gx, gr, mask, inv_scales, inner);
                         ctx.grad_inputs[0] = gx;
                       });
}

}  // namespace

Tensor lowbit_weight_codes(const Tensor& w0, LowBitScheme scheme, std::vector<float>* scales) {
  mixp::detail::check_defined(w0, "lowbit_weight_codes", "w");
  mixp::detail::check_float(w0, "lowbit_weight_codes", "w");
  if (w0.dim() < 1 || w0.numel() == 0) {
    throw std::invalid_argument("mixp::quant::lowbit_weight_codes: expected a non-empty weight");
  }
  const Tensor wc = mixp::detail::raw_contiguous(mixp::detail::as_compute(w0, DType::fp32));
  const Device dev = wc.device();
  const int64_t O = w0.size(0);
  const bool rec = mixp::detail::should_record({&w0});
  Tensor codes = Tensor::empty(w0.shape(), {.dtype = DType::fp32, .device = dev});
  Tensor mask = Tensor::empty(w0.shape(), {.dtype = DType::uint8, .device = dev});
  Tensor st = Tensor::empty({O}, {.dtype = DType::fp32, .device = dev});
  backend_for(wc).lowbit_codes(weight_codes_spec(scheme), codes, st, mask, wc);
  // The scales go back to the host (explicit host access, docs/architecture.md 3.5): the layer
  // folds them into its output multipliers (lowbit_qat.cpp).
  std::vector<float> s = st.to_vector<float>();
  if (rec) {
    std::vector<float> inv(s.size());
    for (size_t o = 0; o < s.size(); ++o) inv[o] = 1.0f / s[o];
    record_ste(w0, codes, mask, from_vector(inv, {O}).to(dev), w0.numel() / O);
  }
  if (scales) *scales = std::move(s);
  return codes;
}

int32_t ActCodeParams::qmin() const {
  switch (kind) {
    case ActCodeKind::unsigned_bits:
      return 0;
    case ActCodeKind::signed8:
      return -128;
    case ActCodeKind::signed_bits:
      return -(1 << (bits - 1));
    case ActCodeKind::sign:
      return -1;
  }
  return 0;
}

int32_t ActCodeParams::qmax() const {
  switch (kind) {
    case ActCodeKind::unsigned_bits:
      return (1 << bits) - 1;
    case ActCodeKind::signed8:
      return 127;
    case ActCodeKind::signed_bits:
      return (1 << (bits - 1)) - 1;
    case ActCodeKind::sign:
      return 1;
  }
  return 0;
}

float lowbit_act_scale(ActCodeKind kind, int bits, float min_val, float max_val) {
  if (!(min_val <= max_val) || !std::isfinite(min_val) || !std::isfinite(max_val)) return 1.0f;
  const float mn = std::min(min_val, 0.0f), mx = std::max(max_val, 0.0f);
  switch (kind) {
    case ActCodeKind::unsigned_bits:
      return std::max(mx / static_cast<float>((1 << bits) - 1), kMinScale);
    case ActCodeKind::signed8:
      return std::max(std::max(-mn, mx) / 127.5f, kMinScale);
    case ActCodeKind::signed_bits:
      return std::max(std::max(-mn, mx) / (static_cast<float>((1 << bits) - 1) / 2.0f), kMinScale);
    case ActCodeKind::sign:
      return 1.0f;
  }
  return 1.0f;
}

Tensor lowbit_act_codes(const Tensor& x0, const ActCodeParams& p) {
  mixp::detail::check_defined(x0, "lowbit_act_codes", "x");
  mixp::detail::check_float(x0, "lowbit_act_codes", "x");
  if (p.kind == ActCodeKind::unsigned_bits && (p.bits < 1 || p.bits > 8)) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::lowbit_act_codes: {} bits; unsigned codes take 1 to 8", p.bits));
  }
  if (p.kind == ActCodeKind::signed_bits && (p.bits < 2 || p.bits > 8)) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::lowbit_act_codes: {} bits; signed codes take 2 to 8", p.bits));
  }
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale)) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::lowbit_act_codes: the scale must be positive and finite, got {}", p.scale));
  }
  const Tensor xc = mixp::detail::raw_contiguous(mixp::detail::as_compute(x0, DType::fp32));
  const Device dev = xc.device();
  const bool rec = mixp::detail::should_record({&x0});
  Tensor y = Tensor::empty(x0.shape(), {.dtype = DType::fp32, .device = dev});
  Tensor mask =
      rec ? Tensor::empty(x0.shape(), {.dtype = DType::uint8, .device = dev}) : Tensor();
  const bool sign = p.kind == ActCodeKind::sign;
  Tensor no_scales;
  backend_for(xc).lowbit_codes({.kind = sign ? LowBitCodesSpec::Kind::act_sign
                                             : LowBitCodesSpec::Kind::act_int,
                                .qmin = static_cast<float>(p.qmin()),
                                .qmax = static_cast<float>(p.qmax()),
                                .scale = p.scale},
                               y, no_scales, mask, xc);
  if (rec) {
    const float inv = sign ? 1.0f : 1.0f / p.scale;
    record_ste(x0, y, mask, from_vector(std::vector<float>{inv}, {1}).to(dev), x0.numel());
  }
  return y;
}

}  // namespace mixp::quant
