// Quantization-aware training and post-training calibration: qconfigs, prepare, the switches
// QAT turns during training, and Conv+BN folding (docs/quantization.md is the user guide).
//
//   auto model = nn::make_model({.name = "cnn"});
//   quant::prepare_qat(*model, quant::default_qat_qconfig());   // in place
//   ... train as usual; at epoch k: quant::freeze_batch_norm(*model),
//   quant::set_observers_enabled(*model, false) auto int8 = quant::convert_to_int8(*model); //
//   int8_model.h
//
// What prepare handles: a Sequential model (the built-in mlp and cnn) whose children are Linear
// (ReLU fused or not), Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten and Dropout. Fused groups,
// as PyTorch's fuse_modules would make them: Conv2d [+ BatchNorm2d] [+ ReLU], Linear [+ ReLU].
// Each group's weight is fake-quantized per output channel; the group's output (after its ReLU)
// gets an activation fake quant; the model input gets one on the first group. MaxPool2d, Flatten
// and Dropout pass quantized values through unchanged (a max of codes is a code of the same
// scale), so they need none. The last group's output (the logits) is not quantized unless
// QConfig::quantize_output: the int8 model returns it in fp32 straight from the s32 accumulators,
// which is more accurate than PyTorch's requantize-then-dequantize and costs nothing.
// Any other Module tree (a custom model with nested containers, attention, LayerNorm, GELU;
// docs/custom-models.md) is prepared layer by layer instead: every Linear and Conv2d, found by
// type wherever it sits (as the FP8 path finds its layers), runs through a QatLinear/QatConv2d
// that shares its parameters, registered as its child "qat" ("head.qat.weight_fake_quant") and
// installed as its forward wrapper; each such layer fake-quantizes its input, its weight and (but
// the last) its output. That model trains and evaluates with fake quantization; convert_to_int8
// needs the fused Sequential form (is_int8_convertible).
#pragma once
#include <memory>

#include "mixp/nn/module.h"
#include "mixp/quant/observer.h"

namespace mixp::quant {

struct QConfig {
  ObserverSpec activation;  // per tensor
  ObserverSpec weight;      // per channel along axis 0 (or per tensor)
  bool quantize_output = false;
};

// PyTorch's x86/fbgemm QAT qconfig (get_default_qat_qconfig("fbgemm")): activations
// MovingAverageMinMaxObserver(0.01) quint8 affine, weights MovingAveragePerChannelMinMaxObserver
// (0.01) qint8 symmetric along axis 0. reduce_range (activations in [0, 127]) is set only when the
// CPU lacks AVX512-VNNI, where oneDNN's u8 x s8 pairs could saturate int16 (fbgemm sets it always).
QConfig default_qat_qconfig();
// Post-training static quantization: MinMaxObserver quint8 affine activations (PyTorch's fbgemm
// default uses a HistogramObserver; min-max is what mixp offers), PerChannelMinMaxObserver qint8
// symmetric weights; reduce_range as above.
QConfig default_ptq_qconfig();
// True when activations should use reduce_range here: oneDNN's effective ISA (what it will run,
// after ONEDNN_MAX_CPU_ISA) has neither AVX512-VNNI nor AVX-VNNI.
bool default_reduce_range();

// Swaps the model's layers for their QAT versions (qat_modules.h) in place and adds the fake
// quantization modules. Parameters keep their identity and names. Observers and fake
// quantization start enabled, batch norm unfrozen. Throws std::invalid_argument for a model it
// cannot handle (see the header comment) or one prepared already.
void prepare_qat(nn::Module& model, const QConfig& qconfig = default_qat_qconfig());
// For post-training calibration: prepare_qat with fake quantization disabled (observers only, as
// PyTorch's prepare for static quantization) and the model in eval mode.
void prepare_ptq(nn::Module& model, const QConfig& qconfig = default_ptq_qconfig());
// True when prepare_qat/prepare_ptq has run on the model.
bool is_prepared(const nn::Module& model);
// True when the model was prepared as fused groups of a Sequential (the built-in mlp and cnn),
// the form convert_to_int8 turns into an int8 model.
bool is_int8_convertible(const nn::Module& model);

// Switches for every FakeQuantize in the model (PyTorch's enable/disable_observer and
// enable/disable_fake_quant).
void set_observers_enabled(nn::Module& model, bool on);
void set_fake_quant_enabled(nn::Module& model, bool on);
// Freezes (or unfreezes) every QatBatchNorm2d: running statistics are used and no longer updated.
void freeze_batch_norm(nn::Module& model, bool on = true);
// Whether every FakeQuantize has observed data (what convert needs); `missing`, when given, gets
// the dotted name of the first one that has not.
bool observers_calibrated(const nn::Module& model, std::string* missing = nullptr);

// Conv+BN folding (PyTorch torch.nn.utils.fusion.fuse_conv_bn_weights):
//   g = gamma / sqrt(running_var + eps)         (gamma = 1 without affine)
//   w' = w * g[o]  (every weight of output channel o)
//   b' = (b - running_mean) * g + beta           (b = 0 without conv bias, beta = 0 without affine)
// Computed in double and rounded once to the tensors' dtype (PyTorch computes in the dtype:
// rsqrt, then products); fp64 tensors are therefore exact to a few ulps (tests/quant).
struct FoldedConv {
  Tensor weight;  // [O, C, KH, KW], the conv weight's dtype
  Tensor bias;    // [O]
  Tensor factor;  // g, [O], fp64: what the int8 convert multiplies the per-channel scale by
};
FoldedConv fold_conv_bn(const Tensor& conv_weight, const Tensor& conv_bias,
                        const Tensor& running_mean, const Tensor& running_var, const Tensor& gamma,
                        const Tensor& beta, double eps);

}  // namespace mixp::quant
