// Weight-only 4-bit inference (QLoRA / bitsandbytes style): Linear weights stored as int4 or NF4
// codes in blocks of 64 with one absmax scale per block (format/block_int4.h), dequantized at
// every forward to the compute dtype (bf16 by default) for the GEMM; activations, biases and the
// other layers stay in fp32.
//
//   forward(x) = act(x W^T + b) with W = dequantize(codes, scales) rounded to bf16 (nearest
//   even) and x rounded to bf16: oneDNN bf16 x bf16 -> fp32 GEMM (mixp::gemm), then + b, act.
//   compute fp32 instead dequantizes to fp32 and runs the fp32 linear.
//
// Blocks run over the flattened weight (row-major [out, in]), as bitsandbytes' quantize_4bit.
// Sizes that are not a multiple of the block: the last block is partial (its absmax covers the
// values it holds); nothing is padded and nothing is refused (block_int4.h). The storage is
// ceil(n / 2) bytes of codes and ceil(n / 64) fp32 scales: 4.5 bits per weight.
//
// Double quantization (QLoRA section 3, optional): the fp32 block scales are themselves quantized,
// after subtracting their mean, to int8 (symmetric absmax) in blocks of 256 with one fp32 scale
// each: 8 + 32/256 bits per 64 weights, about 4.127 bits per weight. QLoRA quantizes them to FP8
// with bitsandbytes' dynamic map; int8 absmax is mixp's simpler variant (the decoded scales differ
// by at most half an int8 step of their block's largest deviation from the mean).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mixp/format/block_int4.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/linear.h"

namespace mixp::quant {

inline constexpr int kDoubleQuantBlock = 256;

// Double quantization of fp32 block scales (above; shared with QLoRA's frozen base, qlora.h):
// mean = their mean (fp32 of the double sum), then per block of kDoubleQuantBlock scales
// s2 = max |scale - mean| / 127 (1 when all equal the mean) and code = round_nearest_even(
// (scale - mean) / s2) in [-127, 127]. The decoded scale is mean + float(code) * s2 (fp32), what
// the GEMMs use; `scales` is rewritten to the decoded values.
struct DoubleQuantized {
  float mean = 0.0f;
  std::vector<int8_t> codes;     // one per block scale
  std::vector<float> dq_scales;  // one per kDoubleQuantBlock scales
};
DoubleQuantized double_quantize_scales(std::span<float> scales);
// The decoded scales (bit for bit those double_quantize_scales wrote back).
void decode_double_quantized(std::span<float> out, std::span<const int8_t> codes,
                             std::span<const float> dq_scales, float mean);

struct WeightOnlyOptions {
  Block4 kind = Block4::nf4;
  int block_size = kInt4DefaultBlock;  // 64
  DType compute = DType::bf16;         // bf16 | fp32
  bool double_quant = false;
};

// "nf4" / "int4" -> Block4; throws std::invalid_argument naming the accepted names.
Block4 parse_block4(const std::string& name);

class WeightOnlyLinear : public nn::Module {
 public:
  // Quantizes src's weight (its bias, activation and kind are kept).
  WeightOnlyLinear(const nn::Linear& src, const WeightOnlyOptions& opt);
  // From stored codes: `data` block4_data_bytes(out * in) bytes, `scales` one per block.
  WeightOnlyLinear(int64_t in_features, int64_t out_features, std::vector<uint8_t> data,
                   std::vector<float> scales, Tensor bias, Activation act,
                   const WeightOnlyOptions& opt);
  Tensor forward(const Tensor& x) override;

  // The weight as the GEMM sees it ([out, in], compute dtype).
  Tensor dequantized_weight() const;
  // Bytes of codes and scales (what replaces the fp32 weight's 4 * out * in).
  int64_t weight_bytes() const;
  const WeightOnlyOptions& options() const { return opt_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 protected:
  std::string describe() const override;

 private:
  void double_quantize();
  int64_t in_, out_;
  Activation act_;
  WeightOnlyOptions opt_;
  std::vector<uint8_t> data_;
  std::vector<float> scales_;     // fp32 block scales (decoded ones after double quantization)
  std::vector<int8_t> dq_codes_;  // double quantization: one code per block scale
  std::vector<float> dq_scales_;  // one per kDoubleQuantBlock scales
  float dq_mean_ = 0.0f;
  Tensor* bias_ = nullptr;
  Tensor no_bias_;
};

// Replaces every Linear that is a child of a Sequential in `model` (the mlp's and cnn's layers)
// by a WeightOnlyLinear; returns how many. Throws std::invalid_argument when there is none
// (e.g. gpt, whose Linear layers sit inside custom modules).
int quantize_weights_4bit(nn::Module& model, const WeightOnlyOptions& opt = {});

// For a checkpoint re-encoded by `mixp convert --to nf4|int4` (io/quantized_safetensors.h):
// replaces every Linear (child of a Sequential) whose "<name>.weight" is stored in `file` as an nf4
// or int4 block tensor by a WeightOnlyLinear that uses the stored codes and scales as they are (no
// second quantization); the layer's bias is taken from the module (load the decoded tensors into
// the model first). Returns how many; `scheme` gets the scheme found ("nf4" / "int4"). Throws
// std::invalid_argument when a stored weight's shape does not match its layer.
int load_weights_4bit(nn::Module& model, const SafeTensorsFile& file, DType compute,
                      std::string* scheme = nullptr);

}  // namespace mixp::quant
