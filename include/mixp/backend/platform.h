// What this machine is and what it should train in: host facts (CPU, cores, memory), NVIDIA GPUs
// found through the CUDA driver at run time, which formats each device runs natively and which
// mixp emulates, and the recommended precision (the seeds' decision tree: Ampere+ -> bf16,
// Volta/Turing -> fp16, else fp32; a CPU with AVX512_BF16 -> bf16). `mixp doctor` prints this;
// the `auto` recipe uses recommend_precision.
//
// Every decision function takes its inputs as plain values, so tests feed it any CPU or GPU.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mixp/format/cpu_features.h"
#include "mixp/format/dtype.h"

namespace mixp {

struct HostInfo {
  int cores = 1;                 // logical CPUs this process may run on (sched_getaffinity)
  int online_cpus = 1;           // logical CPUs online in the machine
  uint64_t memory_bytes = 0;     // physical memory
  uint64_t available_bytes = 0;  // MemAvailable from /proc/meminfo (0 where unknown)
};
HostInfo host_info();

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;  // compute capability, e.g. 8.0 for A100, 9.0 for H100
  int cc_minor = 0;
  uint64_t memory_bytes = 0;
  int multiprocessors = 0;
};

struct GpuProbe {
  bool driver_found = false;  // libcuda.so.1 loaded and cuInit succeeded
  int driver_version = 0;     // CUDA driver API version, e.g. 12040 for 12.4
  std::string status;         // one line: "no NVIDIA driver found (...)", "1 GPU", ...
  std::vector<GpuInfo> gpus;
};
// Loads libcuda.so.1 with dlopen (no build dependency on CUDA) and asks the driver API for each
// device's name, compute capability and memory. Never throws: failures are described in status.
// The result is computed once per process (the driver is initialised once anyway).
const GpuProbe& probe_gpus();

// Architecture name for a compute capability ("Ampere" for 8.0/8.6, "Hopper" for 9.0...).
std::string gpu_architecture(int cc_major, int cc_minor);

enum class Support : uint8_t { native, emulated };
std::string_view to_string(Support s);

struct FormatSupport {
  DType format;
  Support support;
  std::string how;  // one line: which instructions or which emulation path
};
// For each format of describe_default_formats(): how this CPU computes with it.
std::vector<FormatSupport> cpu_format_support(const CpuFeatures& cpu);
// The same for an NVIDIA GPU of the given compute capability.
std::vector<FormatSupport> gpu_format_support(int cc_major, int cc_minor);

// The block-scaled training recipes (docs/fp4.md): "nvfp4", "mxfp4", "fp8-block", in that order.
struct RecipeSupport {
  std::string recipe;
  Support support;
  std::string how;
  std::string gemm;  // on a GPU: the CUDA backend's GEMM path ("cublaslt", "dequantize"); CPU: ""
};
// On a CPU: always emulated, bit-exact to the published quantizers (format/block_scaled.h).
std::vector<RecipeSupport> cpu_recipe_support();
// How mixp's CUDA backend runs each recipe on an NVIDIA GPU (block_gemm_path,
// mixp/backend/cuda_block.h; docs/cuda.md "Block-scaled recipes"): native where cuBLASLt has the
// block-scaled GEMM (fp8-block on Hopper sm_90; nvfp4 and mxfp4 on Blackwell sm_100+), else
// emulated (quantized on the device with the CPU's bits, then the bf16 GEMM of the dequantized
// operands).
std::vector<RecipeSupport> gpu_recipe_support(int cc_major, int cc_minor);

struct PrecisionAdvice {
  std::string precision;  // a recipe name: "bf16", "fp16" or "fp32"
  std::string device;     // "cuda:N" or "cpu"
  std::string reason;     // one line
};
// The seeds' decision tree. With GPUs, the one of highest compute capability decides:
// sm80+ (Ampere, Ada, Hopper, Blackwell) -> bf16; sm70-sm75 (Volta, Turing) -> fp16 with dynamic
// loss scaling; older -> fp32. Without GPUs: AVX512_BF16 or AMX-BF16 -> bf16, else fp32 (16-bit
// formats would be emulated, so slower, not faster).
PrecisionAdvice recommend_precision(const CpuFeatures& cpu, std::span<const GpuInfo> gpus);

}  // namespace mixp
