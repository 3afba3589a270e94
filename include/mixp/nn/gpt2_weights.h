// GPT-2 weights in the three layouts mixp reads and writes (`mixp convert --layout`,
// `mixp train --init-from`, docs/io.md "GPT-2 weights"):
//
//  - mixp: Module::state_dict() of nn::Gpt with a tied head ("tok_emb.weight", "pos_emb.weight",
//    "blocks.N.ln1.weight", "blocks.N.attn.qkv.weight" [3C, C], ..., "ln_f.bias"), in safetensors.
//  - hf: Hugging Face's GPT-2 safetensors ("wte.weight" [V, C], "wpe.weight", "h.N.ln_1.*",
//    "h.N.attn.c_attn.*", "h.N.attn.c_proj.*", "h.N.ln_2.*", "h.N.mlp.c_fc.*", "h.N.mlp.c_proj.*",
//    "ln_f.*"), with or without a "transformer." prefix. Its Conv1D weights are stored [in, out],
//    the transpose of a Linear's [out, in]. The causal-mask buffers ("h.N.attn.bias",
//    "h.N.attn.masked_bias") and a tied "lm_head.weight" are ignored on import.
//  - llmc: llm.c's model file (its train_gpt2.c gpt2_build_from_checkpoint): 256 int32 header
//    (magic 20240326; version 3 = fp32, 5 = bf16; max_seq_len, vocab, layers, heads, channels,
//    padded vocab) then the 16 parameter tensors in llm.c's order (wte [Vp, C], wpe, ln1w, ln1b,
//    qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb), each
//    stacking all layers; weights [out, in] as in a Linear.
//
// In memory the weights are a Gpt2Weights: the configuration and the tensors under mixp's names,
// with the token embedding unpadded ([vocab, C]); padding rows are added when loaded into a model
// or written for llm.c, and dropped otherwise. Heads are not in an hf file: they default to
// width / 64 (every GPT-2 size) unless given.
//
// Errors (std::invalid_argument, or IoError / SafeTensorsError from reading) name the file and the
// first missing or mis-shaped tensor.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "mixp/io/safetensors.h"
#include "mixp/nn/gpt.h"

namespace mixp::nn {

enum class Gpt2Layout { mixp, hf, llmc };
// "mixp", "hf", "llmc"; parse throws std::invalid_argument listing them.
std::string_view to_string(Gpt2Layout layout);
Gpt2Layout parse_gpt2_layout(std::string_view name);

struct Gpt2Weights {
  GptConfig config;         // tied_head set; padded_vocab as the source had it (0 = none)
  SafeTensorsFile tensors;  // mixp names, tok_emb.weight [vocab, C]; dtype as stored in the source
};

// The layout of a file: llm.c by its magic, else safetensors by its tensor names. Throws
// std::invalid_argument when it is neither (naming what was found).
Gpt2Layout detect_gpt2_layout(const std::filesystem::path& path);

// The configuration of a GPT-2 weights file from its header alone (no tensor data read). heads 0:
// the file's (llm.c), else width / 64.
GptConfig read_gpt2_config(const std::filesystem::path& path, int64_t heads = 0);

// Reads any layout. heads as above.
Gpt2Weights read_gpt2_weights(const std::filesystem::path& path, int64_t heads = 0);

// Writes `w` in `layout`, atomically. dtype: the storage dtype (fp32, bf16, fp16 for hf and mixp;
// fp32 or bf16 for llmc); unset keeps the tensors' (llmc: fp32 unless they are all bf16).
void write_gpt2_weights(const Gpt2Weights& w, const std::filesystem::path& path, Gpt2Layout layout,
                        std::optional<DType> dtype = std::nullopt);

// The weights of a model (a copy), and loading weights into one: the configuration (vocab,
// context, width, layers, heads, mlp_width) must match, else std::invalid_argument names the
// first difference; tensors are converted to the model's dtypes with nearest-even.
Gpt2Weights gpt2_weights_of(const Gpt& model);
// Records the model's vocabulary and heads in a mixp-layout file's metadata ("mixp.gpt2.vocab",
// "mixp.gpt2.heads"), which its shapes cannot tell (the embedding is padded); a no-op for a model
// without a tied head. Checkpoints call it, so `mixp convert` of their model.safetensors keeps
// them.
void add_gpt2_metadata(const Module& model, SafeTensorsFile& file);
void load_gpt2_weights(Gpt& model, const Gpt2Weights& w, const std::string& source);

}  // namespace mixp::nn
