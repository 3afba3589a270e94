// GEMM throughput on a CUDA device (docs/cuda.md, "Benchmarks"): the library side of
// `mixp bench gemm --device cuda` and bench/cuda_gemm.cpp. n x n x n products per format through
// the CUDA backend, best of `repeat` timed runs after a warm-up, each run `iters` GEMMs between
// two stream synchronizations; against fp32 and bf16 measured in the same run and against the
// GPU's datasheet dense peak (cuda_gemm_peak). Throws "no CUDA device: ..." without a device.
//
//   row              what is timed
//   fp32             cuBLASLt fp32 (CUBLAS_COMPUTE_32F)
//   tf32             fp32 operands on the tf32 grid, CUBLAS_COMPUTE_32F_FAST_TF32
//   bf16 -> fp32     bf16 x bf16, fp32 accumulation and output
//   bf16, fp16       16-bit output
//   fp8 e4m3         E4M3 x E4M3 -> bf16, per-tensor scale pointers, fast accumulation
//   fp8 e4m3 x e5m2  the backward GEMMs' mix -> bf16 (native on sm_89/sm_90, else emulated)
//   int8             int8 x int8 -> int32 (CUBLAS_COMPUTE_32I)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mixp::bench {

// Dense (no sparsity) peaks in TFLOP/s (TOPS for int8) from NVIDIA's datasheets; 0 = none.
struct CudaPeak {
  const char* name_contains;  // matched against the device name, first match wins
  double fp32, tf32, bf16, fp8, int8;
};
// The entry for a device name ("NVIDIA H100 80GB HBM3" -> H100 SXM), or nullptr.
const CudaPeak* cuda_gemm_peak(const std::string& device_name);

struct CudaGemmRow {
  std::string name;  // "fp32", "tf32", "fp8 e4m3", ...
  std::string path;  // what ran, e.g. "cuBLASLt FP8 (native)" or "emulated (bf16 GEMM)"
  double tflops = 0;
  double vs_fp32 = 0, vs_bf16 = 0;  // against the fp32 and the bf16 -> fp32 rows of this run
  double peak_tflops = 0;           // the datasheet's, 0 when unknown
  double fraction_of_peak = 0;
};
struct CudaGemmReport {
  std::string gpu;
  int cc_major = 0, cc_minor = 0;
  int64_t n = 0;
  int repeat = 0, iters = 0;
  bool peak_known = false;
  std::vector<CudaGemmRow> rows;
  // The targets (issue 19) on an H100: bf16 >= 70% of peak, fp8 >= 1.6x bf16,
  // tf32 >= 2.5x fp32; each "name: value (target) PASS|FAIL".
  std::vector<std::string> targets;
};

CudaGemmReport run_cuda_gemm_bench(int64_t n, int repeat, int iters, int device = 0);
std::string cuda_gemm_report_text(const CudaGemmReport& r);
std::string cuda_gemm_report_json(const CudaGemmReport& r);

}  // namespace mixp::bench
