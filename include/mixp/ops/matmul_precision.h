// The precision of fp32 GEMMs: TF32 (and bf16) emulation of tensor-core fp32 matmul/conv, like
// torch.backends.cuda.matmul.allow_tf32 / torch.set_float32_matmul_precision.
//
//   highest  fp32 GEMMs use fp32 inputs (the default, as PyTorch since 1.12).
//   high     TF32: each fp32 input of a GEMM is rounded to tf32 (1-8-10, docs/formats.md) with a
//            named rounding (Round::nearest_even by default; nearest_away is cvt.rna / CUTLASS's
//            default, toward_zero is what tensor cores do to unrounded inputs) by the bulk
//            converter, then the fp32 GEMM runs: tf32 x tf32 products are exact in fp32, so this
//            is tensor-core TF32 exactly, up to the order of the fp32 accumulation.
//   medium   bf16: inputs rounded to bf16 (nearest even) and the bf16 GEMM path runs (native
//            AVX512_BF16 on this CPU class), fp32 accumulation and fp32 result.
//
// Applies to the fp32 GEMMs of matmul, bmm, linear, conv2d (forward and both backward GEMMs) and
// to the q, k, v inputs of attention (its internal P @ V runs in fp32). The setting in effect
// when the forward op runs is captured for its backward GEMMs. GEMMs in fp64, bf16 or fp16 are
// not affected. Unlike PyTorch, one setting covers conv too (cuDNN's allow_tf32 defaults to on).
//
// Global setting: an atomic, safe to change from any thread. Per call: Tf32Guard overrides it on
// this thread for the guard's lifetime (nestable).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "mixp/format/rounding.h"

namespace mixp {

enum class MatmulPrecision : uint8_t { highest, high, medium };

std::string_view to_string(MatmulPrecision p);

// "highest" | "high" | "medium" (std::invalid_argument otherwise, naming the three).
void set_float32_matmul_precision(std::string_view precision);
void set_float32_matmul_precision(MatmulPrecision precision);
// The global setting (ignores guards).
MatmulPrecision float32_matmul_precision();
// allow_tf32(true) is precision "high", false is "highest".
void set_allow_tf32(bool allow);
bool allow_tf32();
// Rounding used for tf32 inputs (global; default Round::nearest_even). Round::stochastic is
// rejected (a GEMM operand must round the same way every time it is read).
void set_tf32_round(Round round);
Round tf32_round();

// What an fp32 GEMM started now on this thread uses: the innermost guard, else the globals.
struct Fp32GemmMode {
  MatmulPrecision precision = MatmulPrecision::highest;
  Round round = Round::nearest_even;  // for precision high
};
Fp32GemmMode effective_fp32_gemm_mode();

// Per-call override on this thread: Tf32Guard g(true) enables TF32 (optionally with a rounding),
// Tf32Guard g(false) forces full fp32; Tf32Guard g(MatmulPrecision::medium) picks bf16.
class Tf32Guard {
 public:
  explicit Tf32Guard(bool enabled, Round round = Round::nearest_even);
  explicit Tf32Guard(MatmulPrecision precision, Round round = Round::nearest_even);
  ~Tf32Guard();
  Tf32Guard(const Tf32Guard&) = delete;
  Tf32Guard& operator=(const Tf32Guard&) = delete;

 private:
  std::optional<Fp32GemmMode> prev_;
};

}  // namespace mixp
