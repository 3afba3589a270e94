// QLoRA's frozen 4-bit base (Dettmers et al. 2023; bitsandbytes' Linear4bit / Params4bit, which
// PEFT trains adapters on): the weight of a frozen Linear stored as NF4 (or int4) codes in blocks
// of 64 (format/block_int4.h) with double quantization of the block scales (weight_only.h:
// int8 codes in blocks of 256 around their mean), and dequantized blockwise to bf16 for each GEMM.
// docs/lora.md ("QLoRA") is the user's guide.
//
// quantize_linear_4bit(layer) re-encodes the layer in place, as bitsandbytes' Params4bit does:
//   "weight"               uint8 [ceil(out*in / 2), 1]  packed codes (bnb's layout: element 2i
//                          in the high nibble for NF4); frozen, not floating: no gradient, no
//                          optimizer state, never cast by autocast
//   "weight_absmax"        int8  [ceil(out*in / 64)]    double-quantized block scales
//   "weight_nested_absmax" fp32  [ceil(blocks / 256)]   their second-level scales
//   "weight_offset"        fp32  [1]                    their mean
// (bnb's names weight.absmax, weight.nested_absmax, weight.offset; a module name holds no dot).
// They are the module's state_dict, so a checkpoint holds the 4-bit base and a resume restores
// it bit for bit. The fp32 weight is released: nothing keeps it in full precision. The bias, if
// any, stays as it was (frozen).
//
// The layer's forward (installed with Linear::set_forward_impl, so a LoRA branch adds as usual):
//   W = bf16(dequantize(codes, mean + code2 * s2))   [out, in], rebuilt for every GEMM
//   y = bf16(x) @ W^T (bf16 x bf16 -> fp32, mixp::gemm) + bias, then act; y in x's dtype
//   dx = bf16(dy) @ W, with W dequantized again in backward (bnb's MatMul4Bit): between forward
//   and backward only the 4-bit codes are held. No gradient reaches the weight or the bias.
// x's dtype is kept (bnb casts its output back to the input dtype): bf16 under the bf16 recipe.
#pragma once
#include <string>
#include <vector>

#include "mixp/format/block_int4.h"
#include "mixp/nn/linear.h"

namespace mixp::quant {

// Re-encodes `layer` (a Linear with a floating weight) as above and freezes it. Throws
// std::invalid_argument when the layer is already 4-bit or its weight is not finite.
void quantize_linear_4bit(nn::Linear& layer, Block4 kind);

// Every Linear of `model` except the head (kind "head", a model's LM head or classifier: kept in
// its own precision, as bitsandbytes/PEFT skip lm_head) and LoRA adapters (lora_A, lora_B);
// embeddings and norms are no Linear and stay as they are. Returns the quantized layers' names in
// model order; throws std::invalid_argument when there is none.
std::vector<std::string> quantize_frozen_base(nn::Module& model, Block4 kind);

// Whether `layer` holds a 4-bit frozen weight (quantize_linear_4bit ran on it).
bool is_4bit_linear(const nn::Linear& layer);
// The weight as the GEMMs see it, [out, in] in `dtype` (bf16: bit for bit the forward's; fp32:
// the dequantized values before rounding to bf16). Throws std::invalid_argument for a layer that
// is not 4-bit.
Tensor dequantized_4bit_weight(const nn::Linear& layer, DType dtype = DType::bf16);
// The model's parameter count with each 4-bit weight counted as its out x in values (not its
// packed bytes), as PEFT's print_trainable_parameters counts a bitsandbytes 4-bit base.
int64_t parameter_values(const nn::Module& model);
// Bytes that hold the 4-bit weight (codes, scale codes, second-level scales and offset).
int64_t weight_4bit_bytes(const nn::Linear& layer);

}  // namespace mixp::quant
