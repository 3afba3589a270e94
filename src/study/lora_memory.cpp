// The analytic LoRA / QLoRA memory model (study/lora_memory.h).
#include "mixp/study/lora_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixp/format/block_int4.h"

namespace mixp::study {

namespace {

struct Lin {
  std::string name;  // without the layer prefix
  int64_t in, out;
};

std::vector<Lin> block_linears(const ModelShape& s) {
  const int64_t C = s.width, F = s.ffn;
  const int64_t kv = (s.kv_heads > 0 ? s.kv_heads : s.heads) * (C / s.heads);
  if (s.family == ShapeFamily::llama)
    return {{"self_attn.q_proj", C, C}, {"self_attn.k_proj", C, kv}, {"self_attn.v_proj", C, kv},
            {"self_attn.o_proj", C, C}, {"mlp.gate_proj", C, F},     {"mlp.up_proj", C, F},
            {"mlp.down_proj", F, C}};
  return {{"attn.qkv", C, 3 * C}, {"attn.proj", C, C}, {"mlp.fc", C, F}, {"mlp.proj", F, C}};
}

// Bytes of one 4-bit weight of n values (quant/qlora.h): packed codes, one int8 scale code per
// block of 64, one fp32 second-level scale per 256 blocks (quant::kDoubleQuantBlock; study does
// not include quant, docs/architecture.md), the fp32 offset.
int64_t four_bit_bytes(int64_t n) {
  constexpr int64_t kSecondLevel = 256;
  const int64_t blocks = block4_num_blocks(n, kInt4DefaultBlock);
  return block4_data_bytes(n) + blocks + 4 * ((blocks + kSecondLevel - 1) / kSecondLevel) + 4;
}

}  // namespace

LoraMemory analytic_lora_memory(const ModelShape& s, int64_t batch, int64_t seq,
                                const MemoryFormats& f, bool checkpointing,
                                const nn::LoraOptions& lora, bool four_bit) {
  const int64_t N = batch * seq, C = s.width, F = s.ffn;
  const std::string prefix = s.family == ShapeFamily::llama ? "layers." : "blocks.";
  const std::string head_name = s.family == ShapeFamily::llama ? "lm_head" : "head";
  const std::vector<Lin> lins = block_linears(s);
  const bool dropout = lora.dropout > 0;

  // Adapters and their per-token saves, per block (a pattern may name one layer) and the head.
  int64_t T = 0, extra_saves = 0, max_block_saves = 0, block_linear_values = 0;
  std::vector<bool> used(lora.targets.size(), false);
  auto adapt = [&](const std::string& name, int64_t in, int64_t out, int64_t& saves) {
    bool any = false;
    for (size_t i = 0; i < lora.targets.size(); ++i)
      if (nn::lora_target_matches(lora.targets[i], name)) used[i] = any = true;
    if (!any) return;
    T += lora.r * (in + out);
    saves += N * (lora.r * f.save_bytes + (dropout ? in * (f.save_bytes + 1) : 0));
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    int64_t saves = 0;
    for (const Lin& x : lins) adapt(prefix + std::to_string(l) + "." + x.name, x.in, x.out, saves);
    extra_saves += saves;
    max_block_saves = std::max(max_block_saves, saves);
  }
  int64_t head_saves = 0;
  adapt(head_name, C, s.padded_vocab, head_saves);
  for (size_t i = 0; i < used.size(); ++i)
    if (!used[i])
      throw std::invalid_argument(fmt::format(
          "--lora: target '{}' matches no Linear layer of {} (its Linear layers: {}N.{} ... and "
          "{})",
          lora.targets[i], s.name, prefix, lins.front().name, head_name));
  for (const Lin& x : lins) block_linear_values += x.in * x.out;

  LoraMemory out;
  out.adapter_values = T;
  const int64_t P = parameters(s);
  if (four_bit) {
    int64_t per_block = 0;
    for (const Lin& x : lins) per_block += four_bit_bytes(x.in * x.out);
    out.base_bytes = s.layers * per_block + (P - s.layers * block_linear_values) * 4;
  } else {
    out.base_bytes = P * f.param_bytes;
  }
  // Full fine-tuning's activations of the same shape and formats.
  const AnalyticMemory full = analytic_memory(s, batch, seq, f, checkpointing);
  AnalyticMemory& m = out.memory;
  m.param_bytes = out.base_bytes + T * f.param_bytes;
  m.grad_bytes = T * f.grad_bytes;
  m.master_bytes = T * f.master_bytes;
  m.state_bytes = T * f.state_bytes;
  m.cast_bytes = f.casts_per_use ? 0 : T * f.cast_bytes;
  m.block_activation_bytes = full.block_activation_bytes;
  // A 4-bit layer returns its input's dtype (bitsandbytes' Linear4bit, quant/qlora.h): the
  // layers fed by the fp32 RMSNorm (llama's q, k, v, gate, up) give fp32 outputs where autocast's
  // GEMM gives 16-bit ones, and what is saved from them is that much wider.
  const int64_t kvw = (s.kv_heads > 0 ? s.kv_heads : s.heads) * (C / s.heads);
  const int64_t wide = four_bit && s.family == ShapeFamily::llama
                           ? N * (C + 2 * kvw + 2 * F) * std::max<int64_t>(0, 4 - f.save_bytes)
                           : 0;
  m.activation_bytes = full.activation_bytes +
                       (checkpointing ? max_block_saves + wide : extra_saves + s.layers * wide) +
                       head_saves;
  // The frozen GEMMs' weight copies held for the input gradient (see the header).
  const int64_t copy = f.cast_bytes > 0 ? f.cast_bytes : 0;
  const int64_t head_copy = s.padded_vocab * C * copy;
  const int64_t largest = std::max({C * F, C * C, s.family == ShapeFamily::llama ? 0 : 3 * C * C});
  const int64_t block_copies =
      four_bit ? largest * 2 : (checkpointing ? 1 : s.layers) * block_linear_values * copy;
  // The peak: the last block's backward, with its FFN's two [tokens, F] activation gradients and
  // the fp32 gradient of the residual stream.
  const int64_t fixed =
      m.param_bytes + m.grad_bytes + m.master_bytes + m.state_bytes + m.cast_bytes;
  m.head_peak_bytes = fixed + m.activation_bytes + head_copy + block_copies +
                      N * F * (4 + f.save_bytes) + N * C * 4;
  m.end_peak_bytes = fixed + N * C * 4;
  m.peak_bytes = std::max(m.head_peak_bytes, m.end_peak_bytes);
  return out;
}

}  // namespace mixp::study
