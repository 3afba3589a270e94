// Whether the cpu backend runs bf16 GEMMs/convolutions natively (internal). Native means oneDNN
// can take bf16 here and the CPU has bf16 dot products (AVX512_BF16 or AMX-BF16); on AVX-512
// without them oneDNN would emulate bf16 more slowly than fp32, so mixp emulates exactly instead:
// bf16 values and their products are exact in fp32, so widening the operands and running the
// fp32 primitive gives the same products with fp32 accumulation.
#pragma once
#include "backend/cpu/onednn_util.h"
#include "mixp/format/cpu_features.h"

namespace mixp::cpu {

inline bool native_bf16() {
  // The ISA oneDNN will use (ONEDNN_MAX_CPU_ISA can cap it below what the CPU has); the ISA
  // values are bit sets, a superset ISA containing every bit of a subset.
  static const bool isa_bf16 = [] {
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const unsigned need = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & need) == need;
  }();
  const CpuFeatures& f = cpu_features();
  return isa_bf16 && onednn::supports(DType::bf16) && (f.avx512_bf16 || f.amx_bf16);
}

// A 16-bit compute dtype the cpu backend emulates on its fp32 primitives.
inline bool emulated_16(DType compute) {
  return compute == DType::fp16 || (compute == DType::bf16 && !native_bf16());
}

}  // namespace mixp::cpu
