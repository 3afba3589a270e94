// GEMM throughput on cuda:0 (docs/cuda.md, "Benchmarks"): the rows of
// mixp::bench::run_cuda_gemm_bench (include/mixp/bench/cuda_gemm_bench.h; the same as
// `mixp bench gemm --device cuda`): fp32, tf32, bf16 -> fp32, bf16, fp16, FP8 E4M3 x E4M3 and
// E4M3 x E5M2 (cuBLASLt's FP8 kernels with per-tensor scale pointers on sm_89/sm_90, emulated
// elsewhere) and int8 -> int32, each against fp32 and bf16 measured in the same run and against
// the GPU's datasheet dense peak, with the targets (bf16 >= 70% of peak, fp8 >= 1.6x bf16,
// tf32 >= 2.5x fp32). Without a CUDA device it prints why and exits with 77 (skipped).
//
//   build/release/mixp_cuda_gemm [--n=8192] [--repeat=5] [--iters=10] [--json=FILE]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "mixp/backend/cuda.h"
#include "mixp/bench/cuda_gemm_bench.h"

int main(int argc, char** argv) {
  int64_t n = 8192;
  int repeat = 5, iters = 10;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--n=", 0) == 0) {
      n = std::atoll(a.c_str() + 4);
    } else if (a.rfind("--repeat=", 0) == 0) {
      repeat = std::atoi(a.c_str() + 9);
    } else if (a.rfind("--iters=", 0) == 0) {
      iters = std::atoi(a.c_str() + 8);
    } else if (a.rfind("--json=", 0) == 0) {
      json_path = a.substr(7);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--n=8192] [--repeat=5] [--iters=10] [--json=FILE]\n"
                   "GEMM TFLOP/s per dtype on cuda:0 through the CUDA backend (docs/cuda.md)\n",
                   argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  if (n < 16 || repeat < 1 || iters < 1) {
    std::fprintf(stderr, "mixp_cuda_gemm: --n must be at least 16, --repeat and --iters at least 1\n");
    return 2;
  }
  if (!mixp::cuda_available()) {
    std::printf("skipped: %s\n", mixp::cuda_status().message.c_str());
    return 77;
  }
  const mixp::bench::CudaGemmReport r = mixp::bench::run_cuda_gemm_bench(n, repeat, iters, 0);
  std::fputs(mixp::bench::cuda_gemm_report_text(r).c_str(), stdout);
  if (!json_path.empty()) std::ofstream(json_path) << mixp::bench::cuda_gemm_report_json(r) << "\n";
  return 0;
}
