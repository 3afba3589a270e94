// Instruction-throughput loops behind mixp::bench::measure_peak (internal). Each loop keeps
// kAccumulators independent accumulator registers, so the loop runs at the issue rate of the
// instruction, not its latency (latency 4-6 cycles x up to 2 pipes needs at least 12 chains in
// flight; 16 zmm / 12 ymm leave room for the operands). The arch tiers live in peak_avx512.cpp
// and peak_avx2.cpp; peak.cpp has the baseline tier and picks one at run time
// (docs/architecture.md 6.6).
#pragma once
#include <cstdint>

namespace mixp::bench::detail {

struct PeakKernel {
  const char* instruction = "";  // e.g. "vfmadd231ps zmm"
  const char* isa = "";          // the ISA extension it needs, e.g. "avx512f"
  double ops_per_iter = 0;       // flops (int8: integer multiply-adds x 2) per loop iteration
  // Runs `iters` iterations and returns a value folded from every accumulator, so that the
  // compiler must keep all of them.
  double (*run)(int64_t iters) = nullptr;
};

PeakKernel fp32_fma_avx512();   // vfmadd231ps zmm: 16 lanes x 2 flops
PeakKernel bf16_dot_avx512();   // vdpbf16ps zmm (AVX512_BF16): 32 bf16 pairs x 2 flops
PeakKernel int8_dot_avx512();   // vpdpbusd zmm (AVX512_VNNI): 64 u8*s8 products x 2 ops
PeakKernel int8_madd_avx512();  // vpmaddubsw + vpmaddwd + vpaddd zmm (AVX512BW, no VNNI)
PeakKernel fp32_fma_avx2();     // vfmadd231ps ymm: 8 lanes x 2 flops
PeakKernel int8_madd_avx2();    // vpmaddubsw + vpmaddwd + vpaddd ymm
// peak_amx.cpp: only after amx_tiles_permitted() (peak.cpp) said yes.
PeakKernel bf16_tiles_amx();    // TDPBF16PS: 16 x 16 x 32 bf16 pairs x 2 flops
PeakKernel int8_tiles_amx();    // TDPBSSD: 16 x 16 x 64 s8 products x 2 ops

}  // namespace mixp::bench::detail
