// Internal helpers shared by gpt2_weights.cpp (mixp and Hugging Face layouts) and gpt2_llmc.cpp
// (llm.c's model file); nn/gpt2_weights.h is the interface.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixp/nn/gpt2_weights.h"

namespace mixp::nn::detail {

// mixp names and shapes of a tied-head GPT-2, in state_dict order; tok_emb.weight [vocab, C].
std::vector<std::pair<std::string, std::vector<int64_t>>> gpt2_expected_shapes(const GptConfig& c);
// Throws std::invalid_argument naming the first missing or mis-shaped tensor of w.
void check_gpt2_weights(const Gpt2Weights& w, const std::string& source);

// A 2-D tensor transposed (raw elements moved, any dtype), renamed.
SafeTensor transposed(const SafeTensor& s, std::string name);
// A 2-D tensor cut or extended (with zero rows) to `rows` rows.
SafeTensor with_rows(const SafeTensor& s, int64_t rows);
// Converted to dtype with nearest-even (a copy when it already is).
SafeTensor as_dtype(const SafeTensor& s, DType dtype);

// llm.c's model file (gpt2_llmc.cpp).
bool is_llmc_model_file(const std::filesystem::path& path);
GptConfig read_llmc_config(const std::filesystem::path& path);
Gpt2Weights read_llmc_weights(const std::filesystem::path& path);
void write_llmc_weights(const Gpt2Weights& w, const std::filesystem::path& path,
                        std::optional<DType> dtype);

}  // namespace mixp::nn::detail
