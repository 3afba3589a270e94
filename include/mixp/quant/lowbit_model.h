// The packed model of a low-bit QAT run (lowbit_qat.h): integer and bit-packed weights, integer
// GEMMs, and the same fp32 epilogue ops as the fake-quantized model, so that its outputs equal
// the fake-quantized model's in eval mode bit for bit (docs/quantization.md, "Below 8 bits").
//
// Weight storage per scheme (row o of [O, K], K = in_features or C*KH*KW; rows padded to bytes):
//   int8     one byte per code (two's complement)
//   int4     two codes per byte, code k in the low nibble for even k, 4-bit two's complement
//   int2     four codes per byte, code k in bits 2*(k % 4), 2-bit two's complement
//   ternary  two bit-planes [2, O, ceil(K/8)]: plane 0 bit k = code != 0, plane 1 bit k =
//            code < 0 (bit k % 8 of byte k / 8)
//   binary / binary-act  one bit-plane [O, ceil(K/8)]: bit k = code < 0 (-1), else +1
// plus per output channel the weight scale (fp32) and the bias.
//
// Inference: int8/int4/int2/ternary/binary weights are unpacked to int8 once, when the model is
// built or loaded, and run as oneDNN's u8 (or s8) x s8 -> s32 GEMM (VNNI) or int8 convolution;
// int4/int2 GEMMs with u8 inputs read the packed codes instead (lowbit_gemm_s32: expanded in
// registers, the same sums). binary-act layers keep their weights bit-packed and run XNOR + popcount
// on bit-packed sign activations: dot = K - 2 * popcount(a XOR w), AVX-512 VPOPCNTQ when the
// CPU has it, a portable loop elsewhere; for a padded convolution the padded positions, which
// hold 0 in the fake-quantized model, are encoded as +1 and their weights subtracted again (one
// correction vector per border pattern). The s32 sums are converted to fp32 and go through the
// fake-quantized model's own ops: rescale (lowbit_rescale), BatchNorm in eval mode, ReLU or sign,
// activation codes (lowbit_act_codes), max pooling and flattening on the codes. Except where a
// layer feeds a binary-act layer through [batch norm ->] sign: there the chain is monotone in the
// integer sum per channel, so one integer threshold per channel, found when the model is built
// by evaluating those same ops, gives the same signs; the layer writes sign bits directly, and
// max pooling (an AND of the bits) and flattening work on bits until the next layer's XNOR GEMM
// (src/quant/lowbit_fused.cpp).
//
// File (save_packed_model / load_packed_model): one .safetensors holding per weight layer <name>
//   <name>.weight        U8 packed codes ([O, bytes] or [2, O, bytes] for ternary)
//   <name>.weight_scale  F32 [O]     <name>.bias F32 [O]
// per batch norm <name>: running_mean, running_var, weight, bias (F32 [C]); and
// __metadata__["mixp.packed_model"] = {"format": "mixp-packed", "version": 1, "steps": [...]},
// one entry per step (input | layer | batch_norm | act | max_pool2d | flatten) with its numbers.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mixp/backend/lowbit_gemm.h"  // the GEMM cores the packed layers run
#include "mixp/io/safetensors.h"
#include "mixp/nn/module.h"
#include "mixp/ops/ops.h"
#include "mixp/quant/lowbit.h"

namespace mixp::quant {

// Bytes of one packed row of K codes (one plane for ternary).
int64_t packed_row_bytes(int64_t K, LowBitScheme s);
// [O, K] integer codes (fp32 values in the scheme's range) -> the packed bytes of the header
// comment (ternary: both planes, plane 0 first). Throws std::invalid_argument for a code outside
// the scheme's range.
std::vector<uint8_t> pack_weight_codes(const float* codes, int64_t O, int64_t K, LowBitScheme s);
// The inverse, to int8 codes [O, K].
std::vector<int8_t> unpack_weight_codes(const uint8_t* packed, int64_t O, int64_t K,
                                        LowBitScheme s);

// One step of a PackedModel (see the header comment).
struct PackedStep {
  std::string kind;  // input | layer | batch_norm | act | max_pool2d | flatten
  std::string name;
  // input, act
  ActCodeParams act;
  bool relu = false;
  // layer
  LowBitScheme scheme = LowBitScheme::int8;
  bool conv = false;
  int64_t out = 0, in = 0, kernel = 1, stride = 1, padding = 0;
  float input_scale = 1.0f;
  ActCodeKind input_kind = ActCodeKind::unsigned_bits;
  std::vector<uint8_t> packed;
  std::vector<float> weight_scale;
  Tensor bias;  // [O] or undefined
  // batch_norm
  Tensor running_mean, running_var, gamma, beta;
  double eps = 1e-5, momentum = 0.1;
  // max_pool2d
  int64_t pool_kernel = 2, pool_stride = 2, pool_padding = 0;
};

class PackedModel : public nn::Module {
 public:
  PackedModel();
  ~PackedModel() override;
  // x: fp32 [N, C, H, W] or [N, K]; returns fp32 logits. No gradients. Where a convolution's
  // output goes through fp32 steps, a large batch runs in slices of kSlice samples, each through
  // every step, so that the activations between steps stay in the cache (every step is per
  // sample: the same logits bit for bit).
  Tensor forward(const Tensor& x) override;
  static constexpr int64_t kSlice = 16;
  void add_step(PackedStep s);
  const std::vector<PackedStep>& steps() const { return steps_; }
  // Bytes of packed weights, scales, biases and batch-norm tensors.
  int64_t weight_bytes() const;
  // When set, forward adds each step's wall time in seconds to (*t)[step index] (resized to the
  // number of steps); a fused layer's time holds the batch norm and sign it replaced, which get
  // none. For benchmarks (bench/bench_lowbit_eval.cpp); null turns it off.
  void time_steps(std::vector<double>* t) { step_times_ = t; }
  // Whether layer step `i` ends in the fused sign epilogue (integer thresholds to sign bits).
  bool sign_fused(size_t i) const;
  struct Runtime;  // per step: the weights unpacked for the kernels (lowbit_model.cpp)

 protected:
  std::string describe() const override;

 private:
  std::vector<PackedStep> steps_;
  std::vector<std::unique_ptr<Runtime>> rt_;
  std::vector<double>* step_times_ = nullptr;
  Tensor forward_slice(Tensor y);  // every step on fp32 contiguous input
};

// A model prepared with prepare_lowbit_qat (trained or calibrated) -> its packed model. Throws
// std::invalid_argument for a model that is not prepared, or whose activation observers have
// seen no data.
std::shared_ptr<PackedModel> convert_to_packed(const nn::Module& prepared);

void save_packed_model(const PackedModel& m, const std::filesystem::path& path);
std::shared_ptr<PackedModel> load_packed_model(const std::filesystem::path& path);
std::shared_ptr<PackedModel> load_packed_model(const SafeTensorsFile& file,
                                               const std::filesystem::path& path);

}  // namespace mixp::quant
