// Fake quantization with a straight-through gradient, and the FakeQuantize module of QAT
// (PyTorch torch.ao.quantization.FakeQuantize; docs/formats.md "Integer quantization").
//
// The op (recorded by autograd as OpId::fake_quantize):
//   forward   q = zero_point + nearbyint(x * (1/scale)) (ties to even, fp32),
//             y = (clamp(q, qmin, qmax) - zero_point) * scale
//   backward  dx = dy where qmin <= q <= qmax, else 0 (the STE mask, PyTorch's
//             fake_quantize_per_tensor_affine_cachemask); scale and zero point get no gradient
// Bit for bit block_int8's fake_quantize_int8 (the scalar reference), through a vectorized
// kernel. NaN stays NaN with mask 0; +-inf saturate to the range ends with mask 0.
// Inputs of any floating dtype are computed in fp32; the result has the input's dtype.
// The mask is kept for backward (one byte per value) only when x requires a gradient.
//
// FakeQuantize (module kind "fake_quantize"): observer + fake quantization, as PyTorch's:
//   forward(x): if the observer is enabled, observe x and recompute scale and zero point;
//               if fake quantization is enabled and the observer has data, return
//               fake_quantize(x, scale, zero point); else return x unchanged.
// The observer runs in training and in eval mode alike (as in PyTorch); calibration uses that.
// Buffers (saved in checkpoints): min_val, max_val (the observer's statistics, [C]), scale [C]
// (fp32) and zero_point [C] (int32), C = 1 for per-tensor. Until data is seen, min is +inf and
// max -inf and scale/zero point hold PyTorch's defaults (1, 0) — the module then passes x through
// (PyTorch would round to integers with scale 1) and convert refuses it.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "mixp/format/block_int8.h"
#include "mixp/nn/module.h"
#include "mixp/quant/observer.h"

namespace mixp::quant {

// Per tensor.
Tensor fake_quantize(const Tensor& x, const QParams& p);
// Per channel along `axis` (p.size() == x.size(axis)).
Tensor fake_quantize_per_channel(const Tensor& x, std::span<const QParams> p, int axis);

class FakeQuantize : public nn::Module {
 public:
  // `channels`: size of the channel axis for a per-channel spec, else 1.
  explicit FakeQuantize(const ObserverSpec& spec, int64_t channels = 1);
  Tensor forward(const Tensor& x) override;

  void enable_observer(bool on) { observer_enabled_ = on; }
  void enable_fake_quant(bool on) { fake_quant_enabled_ = on; }
  bool observer_enabled() const { return observer_enabled_; }
  bool fake_quant_enabled() const { return fake_quant_enabled_; }

  // True once every channel's observer statistics hold finite values.
  bool has_data() const;
  // The parameters fake quantization uses now (the scale/zero_point buffers).
  std::vector<QParams> qparams() const;
  const ObserverSpec& spec() const { return spec_; }
  int64_t channels() const { return channels_; }
  // Recomputes scale and zero point from min_val/max_val (after loading them from a checkpoint).
  void refresh_qparams();

 protected:
  std::string describe() const override;

 private:
  ObserverSpec spec_;
  int64_t channels_;
  Observer observer_;
  bool observer_enabled_ = true;
  bool fake_quant_enabled_ = true;
  Tensor* min_val_ = nullptr;
  Tensor* max_val_ = nullptr;
  Tensor* scale_ = nullptr;
  Tensor* zero_point_ = nullptr;
};

}  // namespace mixp::quant
