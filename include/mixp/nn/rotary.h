// Rotary position embeddings' angle tables (RoPE, Su et al. 2021) as Hugging Face's LLaMA family
// computes them from config.json: inv_freq_j = theta^(-2j / D) for j < D/2 (D the head dim,
// theta `rope_theta`, 10000 by default), adjusted by `rope_scaling`:
//   none     (absent, or rope_type "default")
//   linear   {"type"|"rope_type": "linear", "factor": f}: inv_freq / f (positions divided by f)
//   llama3   {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
//            "original_max_position_embeddings"}: Llama 3.1's band-wise scaling (wavelengths
//            above original / low_freq_factor divided by factor, below original /
//            high_freq_factor unchanged, smoothly interpolated between)
// Other types ("dynamic", "yarn", "longrope", ...) are refused when a config.json is read
// (nn/llama_hf.h) with an error naming the supported ones: "dynamic" rescales theta with the sequence length at run time, which
// these fixed tables cannot express. The tables are computed in double and stored in fp32
// (cos[t, j] = cos(t inv_freq_j)), the operands of ops.h's rope.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp::nn {

struct RopeScaling {
  enum class Type : uint8_t { none, linear, llama3 };
  Type type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;        // llama3
};

std::string rope_scaling_name(RopeScaling::Type t);

// The D/2 inverse frequencies (double) and the [positions, D/2] fp32 cos and sin tables.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s);
std::pair<Tensor, Tensor> rope_tables(int64_t head_dim, int64_t positions, double theta,
                                      const RopeScaling& s);

}  // namespace mixp::nn
