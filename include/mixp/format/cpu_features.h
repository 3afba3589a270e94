// What the CPU can do, read once with cpuid/xgetbv. Kernels in the arch tier are chosen from this
// at run time (docs/architecture.md 6.6); `mixp doctor` prints it.
#pragma once
#include <string>
#include <vector>

namespace mixp {

struct CpuFeatures {
  std::string vendor;
  std::string model;  // brand string, e.g. "AMD EPYC 9R14 96-Core Processor"
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool avx512_vnni = false;
  bool avx512_vpopcntdq = false;  // VPOPCNTQ (the XNOR-popcount GEMM of quant/lowbit_model.h)
  bool avx_vnni = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  // True when the OS saves the AVX-512 / AMX state (XCR0), so the instructions may be used.
  bool os_avx512 = false;
  bool os_amx = false;

  // The tier the SIMD kernels use: AVX-512 (F+BW+VL+DQ, OS-enabled), AVX2 (+FMA+F16C), scalar.
  bool use_avx512() const { return avx512f && avx512bw && avx512vl && avx512dq && os_avx512; }
  bool use_avx2() const { return avx2 && fma && f16c; }
  // Names of the features present, in a fixed order (for doctor and logs).
  std::vector<std::string> names() const;
};

// Detected once; thread-safe. MIXP_CPU_TIER=scalar|avx2|avx512 caps the tier (for
// tests/benchmarks).
const CpuFeatures& cpu_features();

enum class SimdTier { scalar, avx2, avx512 };
SimdTier simd_tier();
const char* to_string(SimdTier t);

// The CPU class: what decides the order in which this machine's GEMMs sum, hence the last bits
// of training results (tests/golden_runs keep one recording per class, docs/engine.md "Golden
// runs"). From the most capable down:
//   "amx"          AVX-512 and AMX-BF16 tiles enabled by the OS: oneDNN's brgemm runs bf16 and
//                  int8 GEMMs on TDPBF16PS / TDPBSSD tiles, and mixp's own bf16 GEMM steps aside
//                  (src/backend/cpu/gemm_bf16.h)
//   "avx512-bf16"  AVX-512 with AVX512_BF16, no AMX (AMD Zen 4/5, Cooper Lake): VDPBF16PS
//   "avx512"       AVX-512 without BF16 (Skylake-SP to Ice Lake)
//   "avx2"         the AVX2 tier (also an AVX-512 CPU capped with MIXP_CPU_TIER=avx2)
//   "scalar"       the baseline tier
// Follows simd_tier() (MIXP_CPU_TIER caps it); the AMX test reads cpuid and XCR0 only, the
// per-process permission Linux asks for (arch_prctl) is oneDNN's to request.
const char* cpu_class();
// Every class cpu_class() can return, most capable first (the order "nearest class" means).
const std::vector<std::string>& cpu_classes();

// The one way to pick a kernel (a function pointer, or a pointer to a kernel table) by the SIMD
// tier: the AVX-512 one, the AVX2 one, else the baseline one (docs/architecture.md 6.6). Call it
// once and keep the result: `static const auto k = by_tier(&f_avx512, &f_avx2, &f_generic);`.
// A kernel without an AVX2 version passes the baseline one twice.
template <class K>
K by_tier(K avx512, K avx2, K baseline) {
  switch (simd_tier()) {
    case SimdTier::avx512:
      return avx512;
    case SimdTier::avx2:
      return avx2;
    default:
      return baseline;
  }
}

}  // namespace mixp
