// The analytic memory model of LoRA and QLoRA fine-tuning (`mixp plan --model-shape S --lora ...
// [--precision qlora-nf4|qlora-int4]`, the LoRA rows of `--seed-table`; docs/plan.md "LoRA and
// QLoRA"). It prices what mixp holds (docs/lora.md):
//   - the adapters (PEFT's lora_A [r, in], lora_B [out, r] on every Linear a target pattern
//     matches, by mixp's module names: llama layers.N.self_attn.q_proj ... layers.N.mlp.down_proj
//     and lm_head; gpt2 blocks.N.attn.qkv, attn.proj, mlp.fc, mlp.proj and head) as full
//     fine-tuning prices a parameter: weight, gradient, master, optimizer states, cast copy;
//   - the frozen base stored in the recipe's parameter format, or, for 4-bit, each block Linear
//     as its packed codes, int8 scale codes, second-level scales and offset (quant/qlora.h; the
//     head, embeddings and norms stay fp32);
//   - the activations of full fine-tuning (model_shape.h) plus, per adapted Linear and token, A's
//     output (r values) and, with dropout, the dropped input (in values and a byte of mask); a
//     4-bit layer returns its input's dtype, so llama's q, k, v, gate and up (fed by the fp32
//     RMSNorm) give fp32 outputs: 2 more bytes per value than autocast's bf16 ones;
//   - what the frozen GEMMs hold for the input gradient: autocast's bf16 copy of each fp32 base
//     weight lives until its layer's backward (every block's at the head's backward; one block's
//     under checkpointing); a 4-bit layer holds only its codes, plus one layer's dequantized bf16
//     weight while its GEMM runs. The head's copy counts in either case.
#pragma once
#include <cstdint>

#include "mixp/nn/lora.h"
#include "mixp/study/model_shape.h"

namespace mixp::study {

struct LoraMemory {
  int64_t adapter_values = 0;  // trainable values
  int64_t base_bytes = 0;      // the frozen base as stored
  AnalyticMemory memory;       // param_bytes = base + adapters; the rest for the adapters only
};

// Throws std::invalid_argument when a target matches no Linear of the shape.
LoraMemory analytic_lora_memory(const ModelShape& s, int64_t batch, int64_t seq,
                                const MemoryFormats& f, bool checkpointing,
                                const nn::LoraOptions& lora, bool four_bit);

}  // namespace mixp::study
