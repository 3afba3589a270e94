// GEMM throughput on a CUDA device; see include/mixp/bench/cuda_gemm_bench.h. Compiled in every
// build: without the CUDA backend the entry points throw "no CUDA device: ... not built".
#include "mixp/bench/cuda_gemm_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mixp/backend/backend.h"
#include "mixp/backend/cuda.h"
#include "mixp/backend/cuda_gemm.h"
#include "mixp/backend/platform.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"

namespace mixp::bench {

namespace {
// NVIDIA datasheets, dense Tensor Core numbers (the sparse ones are twice these): "NVIDIA H100
// Tensor Core GPU" (SXM, PCIe, NVL), "NVIDIA H200" (SXM, NVL), "NVIDIA A100", "NVIDIA L4",
// "NVIDIA L40S". fp32 is the non-Tensor-Core fp32 rate.
constexpr CudaPeak kPeaks[] = {
    {"H100 PCIe", 51.2, 378.0, 756.0, 1513.0, 1513.0},
    {"H100 NVL", 60.0, 417.5, 835.5, 1670.5, 1670.5},
    {"H100", 66.9, 494.7, 989.4, 1978.9, 1978.9},  // SXM5 ("H100 80GB HBM3")
    {"H200 NVL", 60.0, 417.5, 835.5, 1670.5, 1670.5},
    {"H200", 66.9, 494.7, 989.4, 1978.9, 1978.9},  // SXM
    {"A100", 19.5, 156.0, 312.0, 0.0, 624.0},
    {"L40S", 91.6, 183.0, 362.1, 733.0, 733.0},
    {"L4", 30.3, 60.0, 121.0, 242.0, 242.0},
};

double best_seconds(int repeat, int iters, int device, const std::function<void()>& gemm) {
  gemm();  // warm-up: cuBLASLt's heuristic, the kernel load
  cuda_synchronize(device);
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) gemm();
    cuda_synchronize(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / iters);
  }
  return best;
}

Tensor host_operand(int64_t rows, int64_t cols, uint64_t seed) {
  Generator gen(seed);
  return randn(Shape{rows, cols}, gen);
}

}  // namespace

const CudaPeak* cuda_gemm_peak(const std::string& device_name) {
  for (const CudaPeak& p : kPeaks)
    if (device_name.find(p.name_contains) != std::string::npos) return &p;
  return nullptr;
}

CudaGemmReport run_cuda_gemm_bench(int64_t n, int repeat, int iters, int device) {
  if (n < 16 || repeat < 1 || iters < 1)
    throw std::invalid_argument("GEMM bench: n must be at least 16, repeat and iters at least 1");
  (void)cuda_allocator(device);  // throws "no CUDA device: ..." with the reason
  CudaGemmReport r;
  r.n = n;
  r.repeat = repeat;
  r.iters = iters;
  const GpuProbe& probe = probe_gpus();
  for (const GpuInfo& g : probe.gpus) {
    if (g.index != device) continue;
    r.gpu = g.name;
    r.cc_major = g.cc_major;
    r.cc_minor = g.cc_minor;
  }
  if (r.gpu.empty()) r.gpu = "unknown GPU";
  const CudaPeak* peak = cuda_gemm_peak(r.gpu);
  r.peak_known = peak != nullptr;
  const Device gpu = Device::cuda(device);
  Backend& be = backend_for(gpu);
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);

  auto add = [&](const std::string& name, const std::string& path, double peak_tflops,
                 double seconds) {
    CudaGemmRow row;
    row.name = name;
    row.path = path;
    row.tflops = flops / seconds / 1e12;
    row.peak_tflops = peak_tflops;
    row.fraction_of_peak = peak_tflops > 0 ? row.tflops / peak_tflops : 0;
    r.rows.push_back(row);
  };
  // The dense rows through Backend::matmul.
  struct Dense {
    const char* name;
    DType in, out;
    bool tf32;
    double peak;
  };
  const Dense dense[] = {
      {"fp32", DType::fp32, DType::fp32, false, peak ? peak->fp32 : 0},
      {"tf32", DType::fp32, DType::fp32, true, peak ? peak->tf32 : 0},
      {"bf16 -> fp32", DType::bf16, DType::fp32, false, peak ? peak->bf16 : 0},
      {"bf16", DType::bf16, DType::bf16, false, peak ? peak->bf16 : 0},
      {"fp16", DType::fp16, DType::fp16, false, peak ? peak->bf16 : 0},
  };
  for (const Dense& d : dense) {
    auto operand = [&](uint64_t seed) {
      Tensor x = host_operand(n, n, seed);
      if (d.tf32) x = x.to(DType::tf32, Round::nearest_even, Overflow::ieee, 0).to(DType::fp32);
      return x.to(d.in, Round::nearest_even, Overflow::ieee, 0).to(gpu);
    };
    Tensor a = operand(1), b = operand(2);
    Tensor c = Tensor::empty(Shape{n, n}, {.dtype = d.out, .device = gpu});
    MatmulConfig cfg;
    cfg.compute = d.in;
    cfg.tf32 = d.tf32;
    const double s =
        best_seconds(repeat, iters, device, [&] { be.matmul(c, a, b, Tensor(), cfg); });
    add(d.name, d.tf32 ? "cuBLASLt CUBLAS_COMPUTE_32F_FAST_TF32" : "cuBLASLt", d.peak, s);
  }
  // FP8: b as a linear weight [N, K] seen transposed (cuBLASLt's TN layout, no copy per call).
  {
    Tensor scale = from_vector(std::vector<float>{1.0f}, Shape{1}).to(gpu);
    for (auto [name, tb] :
         {std::pair{"fp8 e4m3", DType::fp8_e4m3}, std::pair{"fp8 e4m3 x e5m2", DType::fp8_e5m2}}) {
      Tensor a = host_operand(n, n, 3)
                     .to(DType::fp8_e4m3, Round::nearest_even, Overflow::saturate, 0)
                     .to(gpu);
      Tensor b = host_operand(n, n, 4)
                     .to(tb, Round::nearest_even, Overflow::saturate, 0)
                     .to(gpu)
                     .transpose(0, 1);
      Tensor c = Tensor::empty(Shape{n, n}, {.dtype = DType::bf16, .device = gpu});
      bool native = false;
      const double s = best_seconds(repeat, iters, device, [&] {
        native = cuda_fp8_matmul(c, a, b, scale, scale, /*fast_accum=*/true);
      });
      add(name,
          native ? "cuBLASLt FP8, per-tensor scale pointers, fast accumulation -> bf16"
                 : "emulated: fp8 values in bf16, bf16 GEMM, scales",
          peak ? peak->fp8 : 0, s);
    }
  }
  {
    Tensor a =
        host_operand(n, n, 5).to(DType::int8, Round::nearest_even, Overflow::saturate, 0).to(gpu);
    Tensor b = host_operand(n, n, 6)
                   .to(DType::int8, Round::nearest_even, Overflow::saturate, 0)
                   .to(gpu)
                   .transpose(0, 1);
    Tensor c = Tensor::empty(Shape{n, n}, {.dtype = DType::int32, .device = gpu});
    const double s =
        best_seconds(repeat, iters, device, [&] { cuda_int8_matmul(c, a, b); });
    add("int8", "cuBLASLt CUBLAS_COMPUTE_32I -> int32", peak ? peak->int8 : 0, s);
  }
  double fp32 = 0, bf16 = 0, tf32 = 0, bf16_frac = 0, fp8 = 0;
  for (const CudaGemmRow& row : r.rows) {
    if (row.name == "fp32") fp32 = row.tflops;
    if (row.name == "tf32") tf32 = row.tflops;
    if (row.name == "bf16 -> fp32") bf16 = row.tflops, bf16_frac = row.fraction_of_peak;
    if (row.name == "fp8 e4m3") fp8 = row.tflops;
  }
  for (CudaGemmRow& row : r.rows) {
    row.vs_fp32 = fp32 > 0 ? row.tflops / fp32 : 0;
    row.vs_bf16 = bf16 > 0 ? row.tflops / bf16 : 0;
  }
  auto target = [&](const char* what, double v, double want, const char* unit) {
    r.targets.push_back(fmt::format("{}: {:.2f}{} (target >= {:.2f}{}) {}", what, v, unit, want,
                                    unit, v >= want ? "PASS" : "FAIL"));
  };
  if (peak) target("bf16 of the dense bf16 peak", 100 * bf16_frac, 70.0, "%");
  target("fp8 / bf16", bf16 > 0 ? fp8 / bf16 : 0, 1.6, "x");
  target("tf32 / fp32", fp32 > 0 ? tf32 / fp32 : 0, 2.5, "x");
  return r;
}

std::string cuda_gemm_report_text(const CudaGemmReport& r) {
  std::string s = fmt::format(
      "GEMM n={} on {} (sm_{}{}), best of {} x {} (CUDA backend: untested "
      "on hardware until gpu-check.sh passes)\n",
      r.n, r.gpu, r.cc_major, r.cc_minor, r.repeat, r.iters);
  s += fmt::format("{:<16} {:>9} {:>8} {:>8} {:>8}  {}\n", "format", "TFLOP/s", "vs fp32",
                   "vs bf16", "of peak", "path");
  for (const CudaGemmRow& row : r.rows) {
    s += fmt::format("{:<16} {:>9.1f} {:>7.2f}x {:>7.2f}x {:>7}  {}\n", row.name, row.tflops,
                     row.vs_fp32, row.vs_bf16,
                     row.peak_tflops > 0 ? fmt::format("{:.0f}%", 100 * row.fraction_of_peak) : "-",
                     row.path);
  }
  if (!r.peak_known)
    s += fmt::format("(no datasheet peak for {} in src/bench/cuda_gemm_bench.cpp)\n", r.gpu);
  for (const std::string& t : r.targets) s += "target " + t + "\n";
  return s;
}

std::string cuda_gemm_report_json(const CudaGemmReport& r) {
  nlohmann::ordered_json j;
  j["device"] = "cuda";
  j["gpu"] = r.gpu;
  j["compute_capability"] = fmt::format("{}.{}", r.cc_major, r.cc_minor);
  j["n"] = r.n;
  j["repeat"] = r.repeat;
  j["iters"] = r.iters;
  j["tested_on_hardware"] = cuda_status().tested_on_hardware;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const CudaGemmRow& row : r.rows) {
    rows.push_back({{"format", row.name},
                    {"path", row.path},
                    {"tflops", row.tflops},
                    {"vs_fp32", row.vs_fp32},
                    {"vs_bf16", row.vs_bf16},
                    {"peak_tflops", row.peak_tflops},
                    {"fraction_of_peak", row.fraction_of_peak}});
  }
  j["results"] = rows;
  j["targets"] = r.targets;
  return j.dump(2);
}

}  // namespace mixp::bench
