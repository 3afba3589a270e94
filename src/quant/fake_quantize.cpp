// Fake quantization op (autograd) and the FakeQuantize module; see
// include/mixp/quant/fake_quantize.h.
#include "mixp/quant/fake_quantize.h"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "ops/dispatch.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {

void check_params(const QParams& p, const char* who) {
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale) || p.qmin >= p.qmax || p.zero_point < p.qmin ||
      p.zero_point > p.qmax) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::{}: invalid parameters (scale {}, zero point {}, range [{}, {}]); the scale "
        "must be positive and finite and the zero point inside the range",
        who, p.scale, p.zero_point, p.qmin, p.qmax));
  }
}

QuantizeSpec::IntParams to_qp(const QParams& p) {
  return {p.scale, 1.0f / p.scale, static_cast<float>(p.zero_point), static_cast<float>(p.qmin),
          static_cast<float>(p.qmax)};
}

// The op: `params` holds one entry (per tensor) or one per channel along `axis`.
Tensor fake_quantize_impl(const Tensor& x0, std::span<const QParams> params, bool per_channel,
                          int axis, const char* who) {
  mixp::detail::check_defined(x0, who, "x");
  mixp::detail::check_float(x0, who, "x");
  Tensor in[1] = {x0};
  apply_cast_policy(OpId::fake_quantize, in);
  const Tensor& x = in[0];
  for (const QParams& p : params) check_params(p, who);
  detail::ChannelLayout g;
  if (per_channel) {
    g = detail::channel_layout(std::span<const int64_t>(x.shape().data(), x.shape().size()), axis,
                               static_cast<size_t>(x.numel()), who);
    if (static_cast<size_t>(g.channels) != params.size()) {
      throw std::invalid_argument(
          fmt::format("mixp::quant::{}: {} channel parameters for {} "
                      "channels along axis {}",
                      who, params.size(), g.channels, axis));
    }
  } else {
    g.inner = x.numel();
  }
  const Tensor xc = mixp::detail::raw_contiguous(mixp::detail::as_compute(x, DType::fp32));
  const Device dev = xc.device();
  Tensor y = Tensor::empty(x.shape(), {.dtype = DType::fp32, .device = dev});
  const bool record = mixp::detail::should_record({&x});
  Tensor mask =
      record ? Tensor::empty(x.shape(), {.dtype = DType::uint8, .device = dev}) : Tensor();
  std::vector<QuantizeSpec::IntParams> qp;
  for (const QParams& p : params) qp.push_back(to_qp(p));
  backend_for(xc).quantize({.kind = QuantizeSpec::Kind::int_fake,
                            .params = qp,
                            .channels = g.channels,
                            .inner = g.inner},
                           y, mask, xc);
  Tensor out = mixp::detail::finish(y, x.dtype());
  if (record) {
    mixp::detail::record(OpId::fake_quantize, DType::fp32, {&x}, {&out},
                         [mask](BackwardContext& ctx) {
                           const Tensor gr = mixp::detail::raw_contiguous(ctx.grad());
                           Tensor gx = Tensor::empty(gr.shape(),
                                                     {.dtype = DType::fp32, .device = gr.device()});
                           backend_for(gx, gr, mask).mask_grad(gx, gr, mask);
                           ctx.grad_inputs[0] = gx;
                         });
  }
  return out;
}

}  // namespace

Tensor fake_quantize(const Tensor& x, const QParams& p) {
  return fake_quantize_impl(x, std::span<const QParams>(&p, 1), false, 0, "fake_quantize");
}

Tensor fake_quantize_per_channel(const Tensor& x, std::span<const QParams> p, int axis) {
  return fake_quantize_impl(x, p, true, axis, "fake_quantize_per_channel");
}

// ---- FakeQuantize

FakeQuantize::FakeQuantize(const ObserverSpec& spec, int64_t channels)
    : nn::Module("fake_quantize"), spec_(spec), channels_(channels), observer_(spec, channels) {
  const float inf = std::numeric_limits<float>::infinity();
  min_val_ = &register_buffer("min_val", full({channels}, inf));
  max_val_ = &register_buffer("max_val", full({channels}, -inf));
  scale_ = &register_buffer("scale", ones({channels}));
  zero_point_ = &register_buffer("zero_point", zeros({channels}, {.dtype = DType::int32}));
}

// The buffers are read and written through the host-access paths (to_vector, copy_ from a host
// tensor): a few values per channel, once per forward.
bool FakeQuantize::has_data() const {
  const std::vector<float> mn = min_val_->to_vector<float>(), mx = max_val_->to_vector<float>();
  for (size_t c = 0; c < mn.size(); ++c) {
    if (!(mn[c] <= mx[c]) || !std::isfinite(mn[c]) || !std::isfinite(mx[c])) return false;
  }
  return true;
}

std::vector<QParams> FakeQuantize::qparams() const {
  const QuantRange r = quant_range(spec_.config.dtype, spec_.config.reduce_range);
  std::vector<QParams> out;
  const std::vector<float> s = scale_->to_vector<float>();
  const std::vector<int32_t> z = zero_point_->to_vector<int32_t>();
  for (size_t c = 0; c < s.size(); ++c) out.push_back(QParams{s[c], z[c], r.qmin, r.qmax});
  return out;
}

void FakeQuantize::refresh_qparams() {
  const std::vector<float> mn = min_val_->to_vector<float>(), mx = max_val_->to_vector<float>();
  observer_.set_state(mn, mx);
  if (!observer_.has_data()) return;
  const std::vector<QParams> p = observer_.qparams();
  std::vector<float> s;
  std::vector<double> z;
  for (const QParams& q : p) {
    s.push_back(q.scale);
    z.push_back(q.zero_point);
  }
  detail::write_buffer(*scale_, s);
  detail::write_buffer(*zero_point_, z);
}

Tensor FakeQuantize::forward(const Tensor& x) {
  if (observer_enabled_) {
    const std::vector<float> mn = min_val_->to_vector<float>(), mx = max_val_->to_vector<float>();
    observer_.set_state(mn, mx);
    observer_.observe(x);
    detail::write_buffer(*min_val_,
                 std::vector<float>(observer_.min_vals().begin(), observer_.min_vals().end()));
    detail::write_buffer(*max_val_,
                 std::vector<float>(observer_.max_vals().begin(), observer_.max_vals().end()));
    refresh_qparams();
  }
  if (!fake_quant_enabled_ || !has_data()) return x;
  const std::vector<QParams> p = qparams();
  if (spec_.per_channel) return fake_quantize_per_channel(x, p, spec_.axis);
  return fake_quantize(x, p[0]);
}

std::string FakeQuantize::describe() const {
  return fmt::format("{}{}{}", quant::describe(spec_), observer_enabled_ ? "" : ", observer off",
                     fake_quant_enabled_ ? "" : ", fake quant off");
}

}  // namespace mixp::quant
