// Real int8 inference: the model convert_to_int8 makes from a prepared (QAT or calibrated) model,
// and its safetensors file.
//
// Arithmetic of a quantized layer (Linear or Conv2d with folded BatchNorm and fused ReLU), with
// activation codes qx (u8, scale s_x, zero point z_x), weight codes qw (s8, symmetric per output
// channel o, scale s_w[o]) and the fp32 bias b[o]:
//
//   acc[o] = sum (qx - z_x) * qw[o]          exact int32 (oneDNN u8 x s8 -> s32; VNNI)
//   y[o]   = m[o] * acc[o] + b[o]            fp32, m[o] = s_x * s_w[o] * g[o]
//   y      = relu(y)                         when the group ends in a ReLU
//   output u8: q = clamp(z_y + round(y / s_y), 0, 255)  (fp32 requantization, nearest even)
//   or fp32 (the model's last layer: logits straight from the accumulators)
//
// g[o] is the BatchNorm factor gamma / sqrt(var + eps) of a folded Conv+BN (1 otherwise): folding
// keeps the QAT weight codes and moves g into the per-channel multiplier (per-channel symmetric
// quantization commutes with per-channel scaling, so these are exactly the codes of the folded
// weights), and b is the folded bias (qat.h fold_conv_bn). m may be negative (negative gamma).
// oneDNN runs it as one primitive: output scales m/s_y per channel, the bias as b/m - z_x *
// sum(qw[o]) in accumulator units (oneDNN adds the bias before scaling), eltwise ReLU post-op and
// u8 or f32 destination. A nonzero input zero point of a padded convolution is handled by padding
// the input explicitly with z_x (the code of 0.0). Activations of convolutions are NHWC u8 end to
// end; Flatten reorders to the NCHW order Linear weights expect. MaxPool2d runs on the codes.
// Inputs are quantized once, by the first layer.
//
// Files (save_int8_model / load_int8_model): one .safetensors with, per quantized layer <name>:
//   <name>.weight        I8  [O, K] or [O, C, KH, KW]   weight codes
//   <name>.weight_scale  F32 [O]    s_w[o] * g[o] (the effective per-channel scale)
//   <name>.bias          F32 [O]    folded bias (zeros when the layer had none)
//   <name>.input_scale   F32 [1]    s_x;  <name>.input_zero_point I32 [1]  z_x
//   <name>.output_scale  F32 [1]    s_y;  <name>.output_zero_point I32 [1] z_y  (u8 outputs only)
// and __metadata__["mixp.int8_model"] = {"format": "mixp-int8", "version": 1, "input_shape": [...],
//   "layers": [{"name", "kind": "quantize|linear|conv2d|max_pool2d|flatten", ...}]}.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixp/format/block_int8.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/module.h"
#include "mixp/ops/ops.h"

namespace mixp::quant {

// An activation between int8 layers: u8 codes with their parameters, or fp32. 4-D activations
// are NHWC ([N, H, W, C]).
struct QAct {
  Tensor data;
  QParams q;
  bool quantized() const { return data.defined() && data.dtype() == DType::uint8; }
};

// Per-layer description, as stored in the file's metadata.
struct Int8LayerSpec {
  std::string name;  // the module's name in the source model ("conv1", "fc1", ...)
  std::string kind;  // quantize | linear | conv2d | max_pool2d | flatten
  bool relu = false;
  bool output_u8 = false;
  int64_t kernel = 0, stride = 0, padding = 0;  // conv2d, max_pool2d
};

class Int8Layer;

class Int8Model : public nn::Module {
 public:
  Int8Model();
  ~Int8Model() override;
  // x: fp32 [N, C, H, W] or [N, K]; returns fp32 logits. No gradients.
  Tensor forward(const Tensor& x) override;
  const std::vector<std::unique_ptr<Int8Layer>>& layers() const { return layers_; }
  void add_layer(std::unique_ptr<Int8Layer> l);
  // Bytes of weights and parameters held (codes, scales, biases).
  int64_t weight_bytes() const;

 protected:
  std::string describe() const override;

 private:
  std::vector<std::unique_ptr<Int8Layer>> layers_;
};

// One step of an Int8Model.
class Int8Layer {
 public:
  virtual ~Int8Layer() = default;
  virtual QAct forward(const QAct& in) = 0;
  virtual Int8LayerSpec spec() const = 0;
  virtual int64_t weight_bytes() const { return 0; }
};

// First layer: fp32 input -> u8 codes (NCHW input becomes NHWC).
class Int8Quantize final : public Int8Layer {
 public:
  Int8Quantize(std::string name, const QParams& q) : name_(std::move(name)), q_(q) {}
  QAct forward(const QAct& in) override;
  Int8LayerSpec spec() const override { return {name_, "quantize"}; }
  const QParams& qparams() const { return q_; }

 private:
  std::string name_;
  QParams q_;
};

// Linear and Conv2d share the parameters of the header comment.
struct Int8WeightLayerParams {
  std::string name;
  Tensor weight;                    // int8 codes, [O, K] or [O, C, KH, KW]
  std::vector<float> weight_scale;  // s_w[o] * g[o]
  std::vector<float> bias;          // b[o] (folded)
  QParams input;                    // s_x, z_x (u8)
  std::optional<QParams> output;    // s_y, z_y; nullopt: fp32 output
  bool relu = false;
  Conv2dParams conv;  // conv2d only (stride, padding; dilation 1)
};

class Int8Linear final : public Int8Layer {
 public:
  explicit Int8Linear(Int8WeightLayerParams p);
  ~Int8Linear() override;
  QAct forward(const QAct& in) override;
  Int8LayerSpec spec() const override;
  int64_t weight_bytes() const override;
  const Int8WeightLayerParams& params() const { return p_; }

 private:
  struct Impl;
  Int8WeightLayerParams p_;
  std::unique_ptr<Impl> impl_;
};

class Int8Conv2d final : public Int8Layer {
 public:
  explicit Int8Conv2d(Int8WeightLayerParams p);
  ~Int8Conv2d() override;
  QAct forward(const QAct& in) override;
  Int8LayerSpec spec() const override;
  int64_t weight_bytes() const override;
  const Int8WeightLayerParams& params() const { return p_; }

 private:
  struct Impl;
  Int8WeightLayerParams p_;
  std::unique_ptr<Impl> impl_;
};

class Int8MaxPool2d final : public Int8Layer {
 public:
  Int8MaxPool2d(std::string name, int64_t kernel, int64_t stride, int64_t padding);
  QAct forward(const QAct& in) override;
  Int8LayerSpec spec() const override;

 private:
  std::string name_;
  int64_t k_, s_, p_;
};

// NHWC -> [N, C*H*W] in NCHW order (what the following Linear's weight columns expect).
class Int8Flatten final : public Int8Layer {
 public:
  explicit Int8Flatten(std::string name) : name_(std::move(name)) {}
  QAct forward(const QAct& in) override;
  Int8LayerSpec spec() const override { return {name_, "flatten"}; }

 private:
  std::string name_;
};

// A prepared model (qat.h) -> an Int8Model. Throws std::invalid_argument with "convert needs
// calibrated observers: run training or `mixp quantize --calibrate N` first" (and the module that
// has seen no data) when an observer is empty, and for a model that was not prepared.
std::shared_ptr<Int8Model> convert_to_int8(const nn::Module& prepared);

// The file format of the header comment. save writes atomically; load throws SafeTensorsError
// for a file that is not an int8 model or is inconsistent (naming the tensor).
void save_int8_model(const Int8Model& m, const std::filesystem::path& path);
std::shared_ptr<Int8Model> load_int8_model(const std::filesystem::path& path);
// The same from a file already read (a checkpoint read and verified once); `path` names it in
// errors.
std::shared_ptr<Int8Model> load_int8_model(const SafeTensorsFile& file,
                                           const std::filesystem::path& path);

// Exact int32 convolution of u8 NHWC codes with s8 OIHW weights (oneDNN; for tests and
// benchmarks): src [N, H, W, C] u8 (zero point 0, zero padding), weight [O, C, KH, KW] int8 ->
// [N, OH, OW, O] int32.
Tensor int8_conv2d_s32(const Tensor& src_nhwc, const Tensor& weight, const Conv2dParams& p);

}  // namespace mixp::quant
