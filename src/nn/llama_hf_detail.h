// Internal: the pieces of nn/llama_hf.h shared by its config and weight files.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "mixp/nn/llama_hf.h"

namespace mixp::nn::detail {

// The regular file `name` (a plain file name) inside `dir`: throws std::invalid_argument when the
// name is not a plain file name, the file is missing, not a regular file, larger than max_bytes
// (0: no limit), or a symlink that leads out of `dir`.
std::filesystem::path checked_file_in(const std::filesystem::path& dir, const std::string& name,
                                      uint64_t max_bytes, const std::string& what);
// The whole of a small text file (after checked_file_in).
std::string read_small_file(const std::filesystem::path& path);
// config.json's JSON for a model (HF's keys).
nlohmann::ordered_json llama_hf_config_json(const LlamaConfig& c, const std::string& model_type,
                                            DType dtype);

}  // namespace mixp::nn::detail
