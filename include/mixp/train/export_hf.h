// Export of a LLaMA-family checkpoint folder (`mixp train --model llama ... --save DIR`) to a
// Hugging Face directory (`mixp convert DIR --layout hf -o OUT`, docs/llama.md "Export"):
// config.json, model.safetensors or shards + model.safetensors.index.json, HF's names and dtypes
// (nn::write_llama_hf), written atomically. LoRA adapters, the run's own (a `--lora` run's
// checkpoint) or a PEFT folder's (`lora_from`), are merged into the base first: W + scaling B A
// in fp32, stored in the export's dtype (PEFT's merge_and_unload, then save_pretrained).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "mixp/nn/llama_hf.h"

namespace mixp::train {

struct HfExportOptions {
  nn::LlamaHfWriteOptions write;   // dtype (bf16 default), max_shard_bytes (5 GB), model_type
  std::filesystem::path lora_from;  // a PEFT adapter folder to merge (empty: none)
};

struct HfExportResult {
  nn::LlamaConfig config;
  std::string model_type;    // as written in config.json
  int64_t parameters = 0;    // values written
  int64_t merged_layers = 0; // Linear layers whose adapters were merged
  int shards = 0;            // 1: model.safetensors
};

// Reads and verifies the checkpoint folder (train/checkpoint.h), builds its model in its recipe,
// loads its weights, attaches and merges adapters, and writes `out`. model_type is kept from the
// --init-from directory's config.json (mistral stays mistral) unless `opt.write.model_type` names
// one. Throws TrainError / ConfigError naming the folder: not a llama-family checkpoint, a 4-bit
// QLoRA checkpoint (merge into the unquantized base instead, docs/lora.md), `lora_from` given for
// a checkpoint that has adapters already, `out` the checkpoint folder itself; std::invalid_argument
// from the adapter reader (naming the file and tensor).
HfExportResult export_checkpoint_hf(const std::filesystem::path& checkpoint,
                                    const std::filesystem::path& out, const HfExportOptions& opt);

// A size as transformers' save_pretrained(max_shard_size=...) takes it: an integer number of
// bytes, or a number with a unit, decimal (KB, MB, GB: 10^3, 10^6, 10^9) or binary (KiB, MiB,
// GiB), e.g. "5GB", "500MB", "2GiB", "1.5GB". std::invalid_argument for anything else or 0.
uint64_t parse_byte_size(std::string_view text);

}  // namespace mixp::train
