// Observers; see include/mixp/quant/observer.h.
#include "mixp/quant/observer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/tensor/factories.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

// The backend's per-channel min/max of f (fp32, contiguous), read back to the host.
std::vector<MinMax> minmax_of(const Tensor& f, bool per_channel, int axis) {
  detail::ChannelLayout g;
  if (per_channel) {
    g = detail::channel_layout(std::span<const int64_t>(f.shape().data(), f.shape().size()), axis,
                               static_cast<size_t>(f.numel()), "observer");
  } else {
    g.inner = f.numel();
  }
  const TensorOptions o{.dtype = DType::fp32, .device = f.device()};
  Tensor mn = Tensor::empty({g.channels}, o), mx = Tensor::empty({g.channels}, o);
  backend_for(f).minmax(mn, mx, f, g.channels, g.inner);
  const std::vector<float> lo = mn.to_vector<float>(), hi = mx.to_vector<float>();
  std::vector<MinMax> out;
  for (size_t c = 0; c < lo.size(); ++c) out.push_back({lo[c], hi[c]});
  return out;
}

}  // namespace

std::vector<MinMax> observe_minmax(std::span<const float> x, std::span<const int64_t> shape,
                                   bool per_channel, int axis) {
  NoGradGuard ng;
  if (per_channel) (void)detail::channel_layout(shape, axis, x.size(), "observer");
  const Shape s = per_channel ? Shape(shape) : Shape{static_cast<int64_t>(x.size())};
  return minmax_of(from_blob(const_cast<float*>(x.data()), s, DType::fp32), per_channel, axis);
}

std::string describe(const ObserverSpec& s) {
  std::string r = s.kind == ObserverKind::min_max ? "min_max" : "moving_average";
  if (s.kind == ObserverKind::moving_average) r += fmt::format("({:g})", s.averaging_constant);
  if (s.per_channel) r += fmt::format(" per_channel(axis {})", s.axis);
  r += s.config.dtype == QDType::qint8 ? " qint8" : " quint8";
  r += s.config.scheme == QScheme::symmetric ? " symmetric" : " affine";
  if (s.config.reduce_range) r += " reduce_range";
  return r;
}

Observer::Observer(const ObserverSpec& spec, int64_t channels) : spec_(spec) {
  if (channels <= 0 || (!spec.per_channel && channels != 1)) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Observer: {} channels for a {} observer", channels,
                    spec.per_channel ? "per-channel" : "per-tensor (which has exactly 1)"));
  }
  if (spec.kind == ObserverKind::moving_average &&
      !(spec.averaging_constant > 0.0f && spec.averaging_constant <= 1.0f)) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Observer: averaging constant must be in (0, 1], got {}",
                    spec.averaging_constant));
  }
  compute_qparams(0.0f, 1.0f, spec.config);  // throws for a configuration PyTorch refuses
  min_.assign(static_cast<size_t>(channels), kInf);
  max_.assign(static_cast<size_t>(channels), -kInf);
}

void Observer::observe(const Tensor& x) {
  if (!x.defined() || !x.is_floating_point()) {
    throw std::invalid_argument("mixp::quant::Observer::observe: expected a floating tensor, got " +
                                std::string(x.defined() ? name(x.dtype()) : "an undefined one"));
  }
  NoGradGuard ng;
  const Tensor f = detail::as_fp32_contiguous(x);
  const std::span<const int64_t> shape(f.shape().data(), f.shape().size());
  check_channels(shape, static_cast<size_t>(f.numel()));
  if (f.numel() == 0) return;
  update(minmax_of(f, spec_.per_channel, spec_.axis));
}

void Observer::check_channels(std::span<const int64_t> shape, size_t numel) const {
  if (spec_.per_channel) {
    const detail::ChannelLayout g = detail::channel_layout(shape, spec_.axis, numel, "observer");
    if (g.channels != channels()) {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::Observer: the tensor has {} channels along axis {}, the observer {}",
          g.channels, spec_.axis, channels()));
    }
  }
}

void Observer::observe(std::span<const float> x, std::span<const int64_t> shape) {
  check_channels(shape, x.size());
  if (x.empty()) return;
  update(observe_minmax(x, shape, spec_.per_channel, spec_.axis));
}

void Observer::update(std::span<const MinMax> cur) {
  const float c = spec_.averaging_constant;
  // PyTorch's moving average starts from the first batch it sees (min +inf and max -inf).
  const bool first = min_[0] == kInf && max_[0] == -kInf;
  for (size_t i = 0; i < cur.size(); ++i) {
    const MinMax m = cur[i];
    if (std::isnan(m.min) || m.min > m.max) continue;  // non-finite values, or an empty channel
    if (spec_.kind == ObserverKind::min_max || first || min_[i] == kInf) {
      if (spec_.kind == ObserverKind::min_max) {
        min_[i] = std::min(min_[i], m.min);
        max_[i] = std::max(max_[i], m.max);
      } else {
        min_[i] = m.min;
        max_[i] = m.max;
      }
    } else {
      min_[i] = min_[i] + c * (m.min - min_[i]);
      max_[i] = max_[i] + c * (m.max - max_[i]);
    }
  }
}

bool Observer::has_data() const {
  for (size_t i = 0; i < min_.size(); ++i) {
    if (!(min_[i] <= max_[i])) return false;
  }
  return true;
}

std::vector<QParams> Observer::qparams() const {
  std::vector<QParams> out;
  out.reserve(min_.size());
  for (size_t i = 0; i < min_.size(); ++i)
    out.push_back(compute_qparams(min_[i], max_[i], spec_.config));
  return out;
}

void Observer::set_state(std::span<const float> min_vals, std::span<const float> max_vals) {
  if (min_vals.size() != min_.size() || max_vals.size() != max_.size()) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::Observer::set_state: {} and {} values for an observer of {} channels",
        min_vals.size(), max_vals.size(), min_.size()));
  }
  std::copy(min_vals.begin(), min_vals.end(), min_.begin());
  std::copy(max_vals.begin(), max_vals.end(), max_.begin());
}

void Observer::reset() {
  std::fill(min_.begin(), min_.end(), kInf);
  std::fill(max_.begin(), max_.end(), -kInf);
}

MinMaxObserver::MinMaxObserver(const Int8Config& cfg)
    : Observer(ObserverSpec{ObserverKind::min_max, false, 0, 0.01f, cfg}) {}

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(const Int8Config& cfg, float c)
    : Observer(ObserverSpec{ObserverKind::moving_average, false, 0, c, cfg}) {}

PerChannelMinMaxObserver::PerChannelMinMaxObserver(int64_t channels, int axis,
                                                   const Int8Config& cfg)
    : Observer(ObserverSpec{ObserverKind::min_max, true, axis, 0.01f, cfg}, channels) {}

MovingAveragePerChannelMinMaxObserver::MovingAveragePerChannelMinMaxObserver(int64_t channels,
                                                                             int axis,
                                                                             const Int8Config& cfg,
                                                                             float c)
    : Observer(ObserverSpec{ObserverKind::moving_average, true, axis, c, cfg}, channels) {}

}  // namespace mixp::quant
