// The step-time estimate of `mixp plan` (docs/plan.md, "Step time"): a step's GEMM FLOPs
// (study/model_shape.h step_gemm_flops) over this machine's measured GEMM throughput in the
// recipe's compute format (`mixp bench gemm`, bench/gemm_bench.h), times an allowance for what
// is not an n x n x n GEMM: the elementwise work (norms, GELU, softmax, the cross-entropy over
// the vocabulary, the optimizer's passes over every parameter, autocast's weight casts) and the
// GEMMs' lower efficiency at the model's shapes (attention's per-head T x T x 64 products).
//
// The allowance is one factor per compute class, calibrated on GPT-2 124M at B8 T256 on the
// idle machine (docs/benchmarks.md "GPT-2 124M step time and memory vs PyTorch", re-measured
// rows, against the "`mixp bench gemm`" table of the same machine): fp32 11182 ms measured over
// 4130 ms of ideal GEMM time = 2.71; bf16 4556 over 1931 = 2.36. The same factors predict the
// B4 T64 steps at 0.93x (fp32) and 0.89x (bf16) of the measured; the validation against measured
// runs is in docs/benchmarks.md ("GPT-2: step-time estimate and analytic model"). For much wider
// models (LLaMA-7B, GPT-3) the GEMMs dominate more, so the factor over-estimates their step.
#pragma once
#include <string>

#include "mixp/format/dtype.h"

namespace mixp::study {

// The non-GEMM allowance (see above): fp32 and tf32 compute, and everything narrower.
inline constexpr double kNonGemmFactorFp32 = 2.71;
inline constexpr double kNonGemmFactor16 = 2.36;

struct GemmThroughput {
  DType bench_dtype = DType::fp32;  // the `mixp bench gemm` row the compute format runs on
  double gflops = 0;
  std::string source;  // "measured now (n = 2048, best of 3)" or "mixp bench gemm record, DATE"
};

// The `mixp bench gemm` row a compute format's GEMMs run on: fp32 (also tf32 and int8-qat's fake
// quantization), bf16, fp16 (emulated on fp32), fp8_e4m3 / fp8_e5m2 (emulated on bf16).
DType gemm_bench_row_for(DType compute);

// This machine's GEMM throughput for `compute`: with `use_record`, the saved `mixp bench gemm`
// record (bench/bench_record.h) when it has the row, else (or without `use_record`) measured now
// on `threads` threads (<= 0: all), about a second on 2 cores. Measuring now sees the same load
// as the run it plans; the record may be from a quieter or busier moment.
GemmThroughput gemm_throughput(DType compute, bool use_record, int threads);

// The factor for a compute format (kNonGemmFactorFp32 for fp32 and tf32, else kNonGemmFactor16).
double non_gemm_factor(DType compute);

// Planned milliseconds per step: flops / throughput x the factor.
double estimate_step_ms(double gemm_flops, const GemmThroughput& t, DType compute);

}  // namespace mixp::study
