// GEMM throughput on cuda:0 (docs/cuda.md, "Benchmarks"): n x n x n products through the CUDA
// backend's cuBLASLt matmul per dtype, best of --repeat timed runs after a warm-up, each run
// --iters GEMMs between two stream synchronizations. Printed against fp32 measured in the same
// run (the ratios: tf32 / fp32 >= 2.5 on an H100) and against the GPU's datasheet dense peak where the GPU
// is in the table below. Without a CUDA device it prints why and exits with 77 (skipped).
//
//   build/release/mixp_cuda_gemm [--n=8192] [--repeat=5] [--iters=10] [--json=FILE]
//
// tf32: fp32 operands rounded to tf32 first (as the front end does at float32_matmul_precision
// "high") and MatmulConfig::tf32, i.e. CUBLAS_COMPUTE_32F_FAST_TF32. Not here yet: FP8 GEMMs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "mixp/backend/backend.h"
#include "mixp/backend/cuda.h"
#include "mixp/backend/platform.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"

namespace {

using namespace mixp;

// Dense (no sparsity) Tensor Core and fp32 peaks in TFLOP/s from NVIDIA's datasheets (A100:
// "NVIDIA A100 Tensor Core GPU" datasheet; H100/H200: "NVIDIA H100 Tensor Core GPU" and H200
// datasheets; L4: "NVIDIA L4" datasheet). The sparse numbers there are twice these.
struct Peak {
  const char* name_contains;
  double fp32, tf32, bf16, fp8;
};
constexpr Peak kPeaks[] = {
    {"H100 PCIe", 51.2, 378.0, 756.0, 1513.0}, {"H100", 66.9, 494.7, 989.4, 1978.9},
    {"H200", 66.9, 494.7, 989.4, 1978.9},      {"A100", 19.5, 156.0, 312.0, 0.0},
    {"L4", 30.3, 60.0, 121.0, 242.0},
};
const Peak* peak_of(const std::string& gpu) {
  for (const Peak& p : kPeaks)
    if (gpu.find(p.name_contains) != std::string::npos) return &p;
  return nullptr;
}

// An n x n operand in `in`, on the tf32 grid (stored as fp32) when tf32.
Tensor operand(int64_t n, DType in, bool tf32, Generator& gen) {
  Tensor x = randn(Shape{n, n}, gen);
  if (tf32) return x.to(DType::tf32, Round::nearest_even, Overflow::ieee, 0).to(DType::fp32);
  return x.to(in, Round::nearest_even, Overflow::ieee, 0);
}

double time_gemm(int64_t n, DType in, DType out, bool tf32, int repeat, int iters) {
  Generator gen(1);
  const Device gpu = Device::cuda(0);
  Tensor a = operand(n, in, tf32, gen).to(gpu);
  Tensor b = operand(n, in, tf32, gen).to(gpu);
  Tensor c = Tensor::empty(Shape{n, n}, {.dtype = out, .device = gpu});
  MatmulConfig cfg;
  cfg.compute = in;
  cfg.tf32 = tf32;
  Backend& be = backend_for(gpu);
  be.matmul(c, a, b, Tensor(), cfg);  // warm-up: cuBLASLt's heuristic and kernel load
  cuda_synchronize(0);
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) be.matmul(c, a, b, Tensor(), cfg);
    cuda_synchronize(0);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / iters);
  }
  return best;
}

}  // namespace

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
  if (n < 1 || repeat < 1 || iters < 1) {
    std::fprintf(stderr, "mixp_cuda_gemm: --n, --repeat and --iters must be at least 1\n");
    return 2;
  }
  if (!cuda_available()) {
    std::printf("skipped: %s\n", cuda_status().message.c_str());
    return 77;
  }
  const GpuProbe& probe = probe_gpus();
  const std::string gpu = probe.gpus.empty() ? std::string("unknown GPU") : probe.gpus[0].name;
  const Peak* peak = peak_of(gpu);
  struct Row {
    const char* name;
    DType in, out;
    bool tf32;
    double peak;
  };
  const std::vector<Row> rows = {
      {"fp32", DType::fp32, DType::fp32, false, peak ? peak->fp32 : 0},
      {"tf32", DType::fp32, DType::fp32, true, peak ? peak->tf32 : 0},
      {"bf16 -> fp32", DType::bf16, DType::fp32, false, peak ? peak->bf16 : 0},
      {"bf16", DType::bf16, DType::bf16, false, peak ? peak->bf16 : 0},
      {"fp16", DType::fp16, DType::fp16, false, peak ? peak->bf16 : 0},
  };
  std::printf("GEMM n=%lld on cuda:0 (%s), best of %d x %d, mixp %s\n", static_cast<long long>(n),
              gpu.c_str(), repeat, iters, cuda_status().toolkit_version.c_str());
  std::printf("%-14s %10s %12s %10s\n", "dtype", "TFLOP/s", "vs fp32", "of peak");
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  double fp32_tflops = 0;
  std::string json = "{\"gpu\": \"" + gpu + "\", \"n\": " + std::to_string(n) + ", \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double tflops = flops / time_gemm(n, r.in, r.out, r.tf32, repeat, iters) / 1e12;
    if (i == 0) fp32_tflops = tflops;
    const double frac = r.peak > 0 ? tflops / r.peak : 0;
    std::printf("%-14s %10.1f %11.2fx %9.0f%%\n", r.name, tflops, tflops / fp32_tflops,
                100 * frac);
    json += (i ? ", " : "") + std::string("{\"dtype\": \"") + r.name +
            "\", \"tflops\": " + std::to_string(tflops) +
            ", \"vs_fp32\": " + std::to_string(tflops / fp32_tflops) +
            ", \"peak_tflops\": " + std::to_string(r.peak) +
            ", \"fraction_of_peak\": " + std::to_string(frac) + "}";
  }
  json += "]}\n";
  if (!peak) std::printf("(no datasheet peak for %s in bench/cuda_gemm.cpp)\n", gpu.c_str());
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
