// Host facts, per-device format support and the precision recommendation; see
// include/mixp/backend/platform.h. The support tables follow the vendors' documents: Intel SDM
// (AVX512_BF16 VDPBF16PS, AVX512_FP16, VNNI VPDPBUSD, AMX), NVIDIA's compute-capability tables
// (tensor-core types per architecture); the recommendation follows the seeds' decision tree
// (seeds 001 section 11.10.1, 002 section 8.1).
#include "mixp/backend/platform.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "mixp/backend/cuda_block.h"
#include "mixp/format/describe.h"

namespace mixp {

HostInfo host_info() {
  HostInfo h;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  h.online_cpus = online > 0 ? static_cast<int>(online) : 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  h.cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : h.online_cpus;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0)
    h.memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream in(line.substr(13));
      uint64_t kib = 0;
      in >> kib;
      h.available_bytes = kib * 1024;
    }
  }
  return h;
}

std::string gpu_architecture(int major, int minor) {
  const int cc = major * 10 + minor;
  if (cc >= 120) return "Blackwell (consumer)";
  if (cc >= 100) return "Blackwell";
  if (cc >= 90) return "Hopper";
  if (cc == 89) return "Ada Lovelace";
  if (cc >= 80) return "Ampere";
  if (cc == 75) return "Turing";
  if (cc >= 70) return "Volta";
  if (cc >= 60) return "Pascal";
  if (cc >= 50) return "Maxwell";
  if (cc >= 30) return "Kepler";
  return "unknown";
}

std::string_view to_string(Support s) {
  return s == Support::native ? "native" : "emulated";
}

namespace {

FormatSupport native(DType t, std::string how) {
  return {t, Support::native, std::move(how)};
}
FormatSupport emulated(DType t, std::string how) {
  return {t, Support::emulated, std::move(how)};
}

bool cpu_bf16(const CpuFeatures& c) {
  return (c.avx512_bf16 && c.os_avx512) || (c.amx_bf16 && c.os_amx);
}

std::string sm(int major, int minor) {
  return "sm" + std::to_string(major * 10 + minor);
}

}  // namespace

std::vector<FormatSupport> cpu_format_support(const CpuFeatures& c) {
  const bool avx512 = c.avx512f && c.os_avx512;
  const bool bf16 = cpu_bf16(c);
  const std::string fma = avx512 ? "AVX-512 FMA" : (c.avx2 && c.fma ? "AVX2 FMA" : "scalar SSE2");
  const std::string narrow_path =
      bf16 ? "decoded exactly to bf16, then native bf16 dot products (fp32 accumulation)"
           : "decoded exactly to fp32, then " + fma;
  std::vector<FormatSupport> out;
  for (DType t : describe_default_formats()) {
    switch (t) {
      case DType::fp64:
        out.push_back(native(t, fma + " on doubles"));
        break;
      case DType::fp32:
        out.push_back(native(t, fma + " (oneDNN GEMM/conv)"));
        break;
      case DType::tf32:
        out.push_back(emulated(t, "inputs rounded to 10 mantissa bits, products exact in fp32, " +
                                      fma + " (CPUs have no TF32 units)"));
        break;
      case DType::bf16:
        if (bf16) {
          std::string how =
              c.avx512_bf16 && c.os_avx512 ? "AVX512_BF16 VDPBF16PS dot products" : "";
          if (c.amx_bf16 && c.os_amx)
            how += std::string(how.empty() ? "" : " and ") + "AMX-BF16 tiles";
          out.push_back(native(t, how + ", fp32 accumulation"));
        } else {
          out.push_back(emulated(t, "widened to fp32 (exact), " + fma));
        }
        break;
      case DType::fp16:
        // Emulated even with AVX512_FP16: mixp's fp16 GEMMs widen to fp32 (storage and
        // rounding in fp16, arithmetic in fp32; src/backend/cpu/cpu_matmul.cpp), and fp16 has no
        // dot-product instruction with fp32 accumulation there, while bf16 has VDPBF16PS and
        // AMX tiles: bf16 is the CPU's 16-bit format (docs/precision-guide.md).
        out.push_back(emulated(
            t, std::string("widened to fp32 (") + (c.f16c ? "F16C" : "software") +
                   " conversion, exact): storage and rounding in fp16, arithmetic in fp32 (" +
                   fma + ")" +
                   (c.avx512_fp16 && c.os_avx512
                        ? "; AVX512_FP16 is not used: its FMAs accumulate in fp16"
                        : "") +
                   (bf16 ? "; bf16 is this CPU's 16-bit format (native dot products with fp32 "
                           "accumulation)"
                         : "")));
        break;
      case DType::fp8_e4m3:
      case DType::fp8_e5m2:
      case DType::fp6_e2m3:
      case DType::fp6_e3m2:
      case DType::fp4_e2m1:
        out.push_back(emulated(t, narrow_path));
        break;
      case DType::int8:
        if (c.avx512_vnni && c.os_avx512) {
          out.push_back(native(t, std::string("AVX512_VNNI VPDPBUSD (u8 x s8 -> s32)") +
                                      (c.amx_int8 && c.os_amx ? " and AMX-INT8 tiles" : "")));
        } else if (c.avx_vnni) {
          out.push_back(native(t, "AVX-VNNI VPDPBUSD (u8 x s8 -> s32)"));
        } else if (c.avx2) {
          out.push_back(
              native(t, "AVX2 VPMADDUBSW + VPMADDWD (s16 intermediate, s32 accumulation)"));
        } else {
          out.push_back(emulated(t, "widened to int32"));
        }
        break;
      case DType::int4:
      case DType::nf4:
        out.push_back(emulated(
            t, std::string(t == DType::nf4 ? "16-entry table lookup" : "sign-extended codes") +
                   " x block scale, dequantized to " + (bf16 ? "bf16" : "fp32") +
                   " before the GEMM"));
        break;
      default:
        break;
    }
  }
  return out;
}

std::vector<FormatSupport> gpu_format_support(int major, int minor) {
  const int cc = major * 10 + minor;
  const std::string half_path =
      cc >= 80 ? "bf16/fp16 tensor cores" : (cc >= 70 ? "fp16 tensor cores" : "fp32 CUDA cores");
  const std::string narrow = "decoded exactly to 16 bits, then " + half_path;
  std::vector<FormatSupport> out;
  for (DType t : describe_default_formats()) {
    switch (t) {
      case DType::fp64:
        out.push_back(native(
            t, cc >= 80 ? "FP64 units (tensor-core DMMA on data-centre parts)" : "FP64 units"));
        break;
      case DType::fp32:
        out.push_back(native(t, "CUDA cores (FFMA)"));
        break;
      case DType::tf32:
        out.push_back(cc >= 80
                          ? native(t, "TF32 tensor cores (sm80+)")
                          : emulated(t, "inputs rounded to 10 mantissa bits, fp32 CUDA cores"));
        break;
      case DType::bf16:
        out.push_back(cc >= 80 ? native(t, "BF16 tensor cores (sm80+), fp32 accumulation")
                               : emulated(t, "widened to fp32 (no bf16 tensor cores before sm80)"));
        break;
      case DType::fp16:
        if (cc >= 70)
          out.push_back(native(t, "FP16 tensor cores (sm70+), fp32 accumulation"));
        else if (cc >= 53)
          out.push_back(native(t, "half2 arithmetic (sm53+), no tensor cores"));
        else
          out.push_back(emulated(t, "widened to fp32"));
        break;
      case DType::fp8_e4m3:
      case DType::fp8_e5m2:
        out.push_back(cc >= 89 ? native(t, "FP8 tensor cores (sm89 Ada, sm90 Hopper and newer)")
                               : emulated(t, narrow));
        break;
      case DType::fp6_e2m3:
      case DType::fp6_e3m2:
      case DType::fp4_e2m1:
        out.push_back(cc >= 100 ? native(t, "FP6/FP4 tensor cores with MX block scales (sm100+)")
                                : emulated(t, narrow));
        break;
      case DType::int8:
        if (cc >= 75)
          out.push_back(native(t, "INT8 tensor cores (IMMA, sm75+), s32 accumulation"));
        else if (cc >= 61)
          out.push_back(native(t, "DP4A dot products (sm61+)"));
        else
          out.push_back(emulated(t, "widened to int32"));
        break;
      case DType::int4:
      case DType::nf4:
        out.push_back(emulated(t, "weight-only: dequantized per block, then " + half_path));
        break;
      default:
        break;
    }
  }
  return out;
}

std::vector<RecipeSupport> cpu_recipe_support() {
  const std::string how =
      "exact: the published quantizers bit for bit; bf16 GEMMs of exact operands "
      "(codes, times their block scales where that is exact) with fp32 accumulation, other scales "
      "applied in fp32 (docs/fp4.md)";
  return {{"nvfp4", Support::emulated, how, ""},
          {"mxfp4", Support::emulated, how, ""},
          {"fp8-block", Support::emulated, how, ""}};
}

std::vector<RecipeSupport> gpu_recipe_support(int cc_major, int cc_minor) {
  const int cc = cc_major * 10 + cc_minor;
  const std::string emulated_how =
      "quantized on the device (the CPU's bits), dequantized to bf16 (exact) for a bf16 GEMM "
      "with fp32 accumulation: ";
  const auto one = [&](BlockScheme s, const char* native_how) {
    const BlockGemmPath p = block_gemm_path(s, cc_major, cc_minor);
    std::string how;
    if (p == BlockGemmPath::cublaslt) {
      how = native_how;
    } else if (s == BlockScheme::fp8_block) {
      how = emulated_how + (cc >= 100 ? std::string("cuBLASLt's fp32 128-block scales are Hopper's "
                                                    "only (Blackwell's block-scaled GEMMs take "
                                                    "E8M0 per 32)")
                                      : std::string("no FP8 block-scaled GEMM before Hopper "
                                                    "(sm90)"));
    } else {
      how = emulated_how + "no FP4 tensor cores before Blackwell (sm100)";
    }
    return RecipeSupport{std::string(to_string(s)),
                         p == BlockGemmPath::cublaslt ? Support::native : Support::emulated, how,
                         std::string(to_string(p))};
  };
  return {one(BlockScheme::nvfp4,
              "cuBLASLt's block-scaled FP4 GEMM: E2M1 with E4M3 scales per 16 (VEC16_UE4M3), the "
              "fp32 tensor scales after it (sm100+)"),
          one(BlockScheme::mxfp4,
              "cuBLASLt's block-scaled FP4 GEMM: E2M1 with E8M0 scales per 32 (VEC32_UE8M0, "
              "sm100+)"),
          one(BlockScheme::fp8_block,
              "cuBLASLt's FP8 GEMM with fp32 scales per 1x128 (VEC128_32F) and 128x128 "
              "(BLK128x128_32F) blocks (sm90)")};
}

PrecisionAdvice recommend_precision(const CpuFeatures& cpu, std::span<const GpuInfo> gpus) {
  if (!gpus.empty()) {
    const GpuInfo& g =
        *std::max_element(gpus.begin(), gpus.end(), [](const GpuInfo& a, const GpuInfo& b) {
          return a.cc_major * 10 + a.cc_minor < b.cc_major * 10 + b.cc_minor;
        });
    const std::string who = (g.name.empty() ? "GPU" : g.name) + " (" + sm(g.cc_major, g.cc_minor) +
                            ", " + gpu_architecture(g.cc_major, g.cc_minor) + ")";
    const std::string device = "cuda:" + std::to_string(g.index);
    const int cc = g.cc_major * 10 + g.cc_minor;
    if (cc >= 89) {  // Ada, Hopper and later: FP8 Tensor Cores as well (the seeds' matrix)
      return {"bf16", device,
              who +
                  " has bf16 and FP8 tensor cores: train in bf16 (fp32's exponent range, no loss "
                  "scaling), and try fp8 (--precision fp8: E4M3/E5M2 with delayed scaling) where "
                  "the large GEMMs dominate; TF32 speeds up what stays in fp32"};
    }
    if (cc >= 80) {
      return {"bf16", device,
              who +
                  " has bf16 and TF32 tensor cores (no FP8): train in bf16 (fp32's exponent range, "
                  "no loss scaling), with TF32 (--precision tf32) for what stays in fp32"};
    }
    if (cc >= 70) {
      return {"fp16", device,
              who +
                  " has fp16 tensor cores but no bf16; use fp16 with dynamic loss scaling and keep "
                  "norms and losses in fp32"};
    }
    return {"fp32", device,
            who + " has no tensor cores; 16-bit training would not be faster, so use fp32"};
  }
  if (cpu_bf16(cpu)) {
    return {
        "bf16", "cpu",
        std::string("no GPU; this CPU has ") + (cpu.avx512_bf16 ? "AVX512_BF16" : "AMX-BF16") +
            " (native bf16 dot products, fp32 accumulation): bf16 halves memory traffic and keeps "
            "fp32's range"};
  }
  return {"fp32", "cpu",
          "no GPU, and this CPU has no native bf16 arithmetic: 16-bit formats would be emulated "
          "(slower), so train in fp32"};
}

}  // namespace mixp
