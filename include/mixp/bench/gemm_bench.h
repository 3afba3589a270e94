// GEMM throughput per dtype against the measured instruction peak: the library side of
// `mixp bench gemm` (docs/architecture.md 4.3 and 7). Times n x n x n products of mixp's own
// kernels, best of `repeat` runs after `warmup` runs (the first call builds and caches the
// oneDNN primitive).
//
//   dtype     what is timed                                              peak (measure_peak)
//   fp32      mixp::matmul(a, b) on fp32 Tensors (the op front end)     PeakPath::fp32
//   bf16      mixp::gemm(a, b): bf16 x bf16 -> fp32                      PeakPath::bf16
//   int8      mixp::gemm(a, b): uint8 x int8 -> int32 (oneDNN u8s8s32)   PeakPath::int8
//   fp16      emulated: both inputs widened to fp32 (exact) per call,   PeakPath::fp32
//             then the fp32 mixp::gemm
//   fp8_e4m3  emulated as FP8 training runs it (amp/fp8_quantize.h):   PeakPath::bf16
//   fp8_e5m2  both fp32 inputs quantized per call (per-tensor scale, amax
//             in the same pass), the codes multiplied by the bf16
//             mixp::gemm (exact, fp32 accumulation), scale_inv applied
//             to the fp32 output
//
// Below 8 bits (GemmBenchConfig::lowbit; not part of "all"), the cores of the packed low-bit
// models (backend/lowbit_gemm.h, quant/lowbit_model.h), priced against the int8 peak:
//   int4      B stored as packed int4 codes, unpacked to int8 on every call, then the int8 GEMM
//   int2      the same with int2 codes
//   binary    +-1 x +-1, both operands bit-packed: XNOR + popcount -> s32
//             (AVX-512 VPOPCNTQ where the CPU has it)
// Each binary MAC counts as 2 ops, as for the other rows, so the GOP/s compare directly.
//
// Where oneDNN runs a row's GEMM on AMX tiles (its implementation names "amx": bf16, fp8 and
// int8 on Sapphire Rapids and later), the row is priced against the tile peak of its path
// (measure_tile_peak: TDPBF16PS / TDPBSSD) instead of the vector one (peak_for_implementation).
//
// mixp::matmul on bf16 Tensors would widen them to fp32 (the front end computes in fp32 until
// the mixed-precision issue routes bf16 to MatmulConfig::compute = bf16), so bf16 is timed on
// the kernel the AMP path will use.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/bench/peak.h"
#include "mixp/format/dtype.h"

namespace mixp::bench {

struct GemmBenchConfig {
  int64_t n = 2048;
  // Every dtype that has a GEMM path here (gemm_bench_dtypes()), fp32 first for the speed-ups.
  std::vector<DType> dtypes = {DType::fp32, DType::bf16,     DType::int8,
                               DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2};
  int threads = 0;  // <= 0: mixp::get_num_threads()
  int repeat = 5;   // timed runs; the best is reported
  int warmup = 1;   // untimed runs first (at least 1 is always done)
  uint64_t seed = 1;
  double peak_seconds = 0.05;  // measure_peak's `seconds` per instruction path
  // Rows below 8 bits, after the dtype rows: "int4", "int2", "binary" (see the header comment).
  std::vector<std::string> lowbit;
};

struct GemmBenchResult {
  DType dtype = DType::fp32;   // int8 for the rows below 8 bits (their peak and unit)
  std::string format;          // the row's name: the dtype's, or "int4", "int2", "binary"
  std::string path;            // what was timed, e.g. "mixp::gemm bf16 x bf16 -> fp32"
  std::string implementation;  // oneDNN's kernel, e.g. "brg:avx512_core_bf16"
  bool emulated = false;       // the dtype has no kernel of its own (widened to another)
  int64_t n = 0;
  int threads = 1;
  int repeat = 1;
  double seconds = 0;  // best of `repeat`
  double gflops = 0;   // 2 n^3 / seconds / 1e9 (GOP/s for int8)
  PeakResult peak;     // the instruction peak of the path this dtype runs on (tiles on AMX)
  double peak_gflops = 0;
  double fraction_of_peak = 0;            // gflops / peak_gflops
  std::optional<double> speedup_vs_fp32;  // gflops / fp32's gflops, when fp32 ran in the same call
  std::optional<double> speedup_vs_int8;  // gflops / int8's gflops, when int8 ran in the same call
  bool lowbit = false;                    // a row of GemmBenchConfig::lowbit
};

// The dtypes run_gemm_bench takes, in the order of the table above.
std::vector<DType> gemm_bench_dtypes();
// "fp32,bf16,int8" -> dtypes; "all" is every dtype of gemm_bench_dtypes(). Registry names and their
// aliases are accepted; an unknown name or a format without a GEMM path throws
// std::invalid_argument saying which are supported (and, for known formats, why this one is not).
std::vector<DType> parse_gemm_bench_dtypes(std::string_view comma_separated);
// As parse_gemm_bench_dtypes, also taking the rows below 8 bits ("int4", "int2", "binary",
// or "lowbit" for the three), returned in `lowbit`.
std::vector<DType> parse_gemm_bench_list(std::string_view comma_separated,
                                         std::vector<std::string>* lowbit);
// The PeakPath a dtype's GEMM runs on.
PeakPath gemm_peak_path(DType dtype);

// Sets mixp::set_num_threads(threads) for the run and restores the previous count. Throws
// std::invalid_argument for n < 1, repeat < 1 or a dtype outside gemm_bench_dtypes().
std::vector<GemmBenchResult> run_gemm_bench(const GemmBenchConfig& config);

}  // namespace mixp::bench
