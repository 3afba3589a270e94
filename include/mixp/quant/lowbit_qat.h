// Quantization-aware training below 8 bits: the layers prepare_lowbit_qat swaps into a model
// (the built-in mlp and cnn; other Module trees as prepare_lowbit_qat says) and the configuration
// of each layer (docs/quantization.md, "Below 8 bits"). Latent fp32 weights are kept and trained;
// every forward quantizes them (lowbit.h) with a straight-through gradient.
//
// A quantized layer computes on integer codes and scales after the GEMM:
//   acc    = linear / conv2d(input codes, weight codes)         fp32, exact (integer sums)
//   y      = acc * (s_x * s_w[o]) + b[o]                        (ops mul, add; fp32)
// then, for a conv, the BatchNorm (QatBatchNorm2d, freezable), and the group's activation
// (LowBitActivation, in place of the ReLU): relu + unsigned codes of the next layer's input bits,
// or sign codes when the next layer is binary-act. MaxPool2d and Flatten run on the codes.
// The integer sums are exact in fp32 as long as |partial sums| < 2^24, which holds for the
// built-in models (8-bit x 8-bit over at most 784 inputs with signed input codes); the packed
// model (lowbit_model.h) therefore reproduces this forward bit for bit.
//
// Layer formats: the first and the last Linear/Conv2d stay int8 (8-bit weights and inputs; the
// model input is quantized signed 8-bit), every other one takes the recipe's scheme, and
// `overrides` (a layer name, or "first" / "last", mapped to a scheme) change any of them.
// A layer's input precision follows its scheme: 8 bits for int8, ternary and binary (weights
// only), 4 and 2 bits for int4 and int2, sign for binary-act.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "mixp/nn/conv2d.h"
#include "mixp/nn/linear.h"
#include "mixp/quant/lowbit.h"
#include "mixp/quant/observer.h"

namespace mixp::quant {

struct LowBitConfig {
  LowBitScheme scheme = LowBitScheme::int4;       // the middle layers
  std::map<std::string, LowBitScheme> overrides;  // layer name, "first" or "last" -> scheme
};

// The activation quantizer of the header comment (module kind "lowbit_act"): optional ReLU,
// then codes. Its scale comes from a moving-average min/max observer (constant 0.01, as
// int8-qat's), which runs while enabled; buffers min_val, max_val (checkpointed).
class LowBitActivation : public nn::Module {
 public:
  LowBitActivation(ActCodeKind kind, int bits, bool relu);
  Tensor forward(const Tensor& x) override;
  void enable_observer(bool on) { observer_enabled_ = on; }
  bool has_data() const;
  // The current parameters (scale from the observer's statistics).
  ActCodeParams params() const;
  bool relu() const { return relu_; }

 protected:
  std::string describe() const override;

 private:
  ActCodeKind kind_;
  int bits_;
  bool relu_;
  bool observer_enabled_ = true;
  Observer observer_;
  Tensor* min_val_ = nullptr;
  Tensor* max_val_ = nullptr;
};

// Linear or Conv2d on codes (module kind kept: "linear", "head", "conv2d"). Shares the source's
// weight and bias. `input` is the activation quantizer producing its input codes: owned (child
// "input_quant") for the first layer, else the previous group's.
class LowBitLayer : public nn::Module {
 public:
  LowBitLayer(const nn::Linear& src, LowBitScheme scheme);
  LowBitLayer(const nn::Conv2d& src, LowBitScheme scheme);
  Tensor forward(const Tensor& x) override;

  void set_input_quant(std::shared_ptr<LowBitActivation> q);  // owned, as "input_quant"
  void link_input(const LowBitActivation* q) { in_ = q; }
  void set_output_quant(std::shared_ptr<LowBitActivation> q);  // owned, as "output_quant"

  LowBitScheme scheme() const { return scheme_; }
  bool is_conv() const { return conv_; }
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return *bias_; }
  const Conv2dParams& conv_params() const { return cp_; }
  const LowBitActivation* input_quant() const { return in_; }
  const LowBitActivation* owned_input_quant() const { return own_in_.get(); }
  const LowBitActivation* output_quant() const { return out_.get(); }
  // s_x * s_w[o] for weight scales `sw` (fp32 products; the packed model uses the same).
  std::vector<float> multipliers(const std::vector<float>& sw) const;

 protected:
  std::string describe() const override;

 private:
  LowBitScheme scheme_;
  bool conv_ = false;
  Conv2dParams cp_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor no_bias_;
  const LowBitActivation* in_ = nullptr;
  std::shared_ptr<LowBitActivation> own_in_, out_;
};

// y = acc * m[o] + b[o] over the channel axis 1 (the ops mul and add, so that QAT and the packed
// model round alike).
Tensor lowbit_rescale(const Tensor& acc, const std::vector<float>& m, const Tensor& bias);

// A Sequential of Linear, Conv2d, BatchNorm2d, ReLU, MaxPool2d and Flatten (the built-in mlp and
// cnn; no fused GELU): swaps Linear/Conv2d for LowBitLayer and each ReLU (or fused ReLU) for a
// LowBitActivation, in place; BatchNorm2d becomes QatBatchNorm2d. Throws std::invalid_argument
// for a group that feeds another layer without a ReLU or a last layer ending in one.
// Any other Module tree (docs/custom-models.md): every Linear and Conv2d, found by type through
// named_modules(), keeps its place and runs through a LowBitLayer sharing its parameters
// (registered as its child "qat", called by a forward wrapper) that quantizes the layer's own
// input: signed codes (ActCodeKind::signed8, or signed_bits with 4 and 2 bits for int4 and int2,
// sign for binary-act), since that input need not be a ReLU's output; its output stays fp32
// (then a Linear's fused activation). First and last by named_modules() order; override names
// are named_modules() names ("body.fc1"). Such a model trains and evaluates with fake
// quantization only: is_lowbit_convertible says false and convert_to_packed refuses it.
// Both throw std::invalid_argument for an override naming no layer, a model with no
// Linear/Conv2d, and a model prepared already.
void prepare_lowbit_qat(nn::Module& model, const LowBitConfig& config);
bool is_lowbit_prepared(const nn::Module& model);
// Whether convert_to_packed can pack the model: prepared in the Sequential form.
bool is_lowbit_convertible(const nn::Module& model);
void set_lowbit_observers_enabled(nn::Module& model, bool on);
// Whether every activation quantizer has data; `missing` gets the first that has not.
bool lowbit_observers_calibrated(const nn::Module& model, std::string* missing = nullptr);

}  // namespace mixp::quant
