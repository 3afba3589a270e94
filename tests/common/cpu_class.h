// For tests that compare two kernels bit for bit where that holds only on some CPU classes
// (mixp::cpu_class(), issue 29): on an AMX host oneDNN runs bf16 GEMMs on tiles (TDPBF16PS),
// which sum a dot product in another order than mixp's AVX512_BF16 kernels (VDPBF16PS) do, so
// a oneDNN path and one of mixp's own kernels agree there within a bf16 tolerance only.
#pragma once
#include "mixp/backend/gemm.h"
#include "mixp/bench/peak.h"

namespace mixp::test {

// Whether oneDNN's bf16 matmul runs on AMX tiles on this host: the implementation it picks for
// a 256 x 64 x 256 product names "amx" (mixp::gemm_implementation, what `mixp bench gemm` and
// `mixp doctor` print). mixp's own bf16 GEMM steps aside on AMX (src/backend/cpu/gemm_bf16.h),
// so the name is oneDNN's there.
inline bool onednn_bf16_on_amx_tiles() {
  static const bool on =
      bench::runs_on_amx_tiles(gemm_implementation(DType::bf16, DType::bf16, 256, 256, 64));
  return on;
}

}  // namespace mixp::test
