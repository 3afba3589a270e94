// Observers: running statistics of a tensor from which int8 quantization parameters are chosen
// (PyTorch torch.ao.quantization.observer; docs/formats.md "Integer quantization").
//
//   MinMaxObserver                       min = min(min, min(x)), max = max(max, max(x))
//   MovingAverageMinMaxObserver          first batch: min, max = min(x), max(x); then
//                                        min += c * (min(x) - min), max likewise (c = 0.01)
//   PerChannelMinMaxObserver             MinMaxObserver per channel along `axis` (weights: 0)
//   MovingAveragePerChannelMinMaxObserver  the moving average per channel
//
// All arithmetic is fp32, in PyTorch's order (`m + c * (cur - m)`), so the statistics match
// torch bit for bit (tests/quant compares with a torch 1.13 fixture). qparams() applies
// block_int8's compute_qparams to each (min, max): scale floored at 2^-23, 0 always exact.
//
// Defaults (ObserverSpec's Int8Config): activations affine quint8 [0, 255], weights symmetric
// qint8 per channel: PyTorch's x86/fbgemm qconfig. fbgemm also sets reduce_range for activations
// ([0, 127]) because without VNNI its u8 x s8 products are summed in pairs into saturating int16;
// mixp's default_qat_qconfig() sets it only when the CPU lacks AVX512-VNNI (docs/quantization.md).
//
// Differences from PyTorch, on purpose: a batch holding NaN or +-inf (per channel: a channel
// holding one) leaves the statistics unchanged (PyTorch's become NaN or infinite for good; here
// the value still reaches the loss, where the Trainer's NaN guard reports it). An observer that
// has seen nothing gives
// has_data() == false; qparams() then returns PyTorch's defaults (scale 1, zero point 0) and
// convert refuses such a model.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mixp/format/block_int8.h"
#include "mixp/tensor/tensor.h"

namespace mixp::quant {

enum class ObserverKind : uint8_t { min_max, moving_average };

inline constexpr double kDefaultAveragingConstant = 0.01;

struct ObserverSpec {
  ObserverKind kind = ObserverKind::min_max;
  bool per_channel = false;
  int axis = 0;  // channel axis when per_channel (negative counts from the end)
  float averaging_constant = static_cast<float>(kDefaultAveragingConstant);
  Int8Config config{QDType::quint8, QScheme::affine, false};
};

// "min_max quint8 affine", "moving_average per_channel(0) qint8 symmetric reduce_range", ...
std::string describe(const ObserverSpec& spec);

class Observer {
 public:
  // `channels` is the size of the channel axis (1 for per-tensor observers).
  explicit Observer(const ObserverSpec& spec, int64_t channels = 1);
  virtual ~Observer() = default;

  // Folds the values of `x` (any floating dtype, any layout) into the statistics. Per-channel
  // observers need x.size(axis) == channels. Non-finite values: see the header comment.
  void observe(const Tensor& x);
  // Same on row-major fp32 data of `shape`.
  void observe(std::span<const float> x, std::span<const int64_t> shape);

  // True once a finite value has been observed in every channel.
  bool has_data() const;
  // One QParams per channel (one for per-tensor observers).
  std::vector<QParams> qparams() const;

  const ObserverSpec& spec() const { return spec_; }
  int64_t channels() const { return static_cast<int64_t>(min_.size()); }
  std::span<const float> min_vals() const { return min_; }
  std::span<const float> max_vals() const { return max_; }
  // Replaces the statistics (e.g. from a checkpoint); sizes must equal channels().
  void set_state(std::span<const float> min_vals, std::span<const float> max_vals);
  // Back to "nothing seen" (min +inf, max -inf).
  void reset();

 private:
  void check_channels(std::span<const int64_t> shape, size_t numel) const;
  void update(std::span<const MinMax> cur);
  ObserverSpec spec_;
  std::vector<float> min_, max_;
};

// The four observers of the header comment, with PyTorch's defaults.
class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(const Int8Config& cfg = {QDType::quint8, QScheme::affine, false});
};
class MovingAverageMinMaxObserver : public Observer {
 public:
  explicit MovingAverageMinMaxObserver(
      const Int8Config& cfg = {QDType::quint8, QScheme::affine, false},
      float averaging_constant = static_cast<float>(kDefaultAveragingConstant));
};
class PerChannelMinMaxObserver : public Observer {
 public:
  PerChannelMinMaxObserver(int64_t channels, int axis = 0,
                           const Int8Config& cfg = {QDType::qint8, QScheme::symmetric, false});
};
class MovingAveragePerChannelMinMaxObserver : public Observer {
 public:
  MovingAveragePerChannelMinMaxObserver(
      int64_t channels, int axis = 0,
      const Int8Config& cfg = {QDType::qint8, QScheme::symmetric, false},
      float averaging_constant = static_cast<float>(kDefaultAveragingConstant));
};

// Min and max of x per channel (axis) or over all of it ({+inf, -inf} where there is nothing;
// NaN in both fields where a NaN or an infinity was seen). Parallel over the data.
std::vector<MinMax> observe_minmax(std::span<const float> x, std::span<const int64_t> shape,
                                   bool per_channel, int axis);

}  // namespace mixp::quant
