// Measured instruction peaks: the throughput of the multiply-accumulate instruction each GEMM
// path is built on, on this machine, with `threads` threads (docs/architecture.md 7: GEMM
// throughput is reported as a fraction of this, not of a datasheet number).
//
//   PeakPath::fp32  vfmadd231ps zmm (AVX-512) / ymm (AVX2): 2 flops x 16 (8) lanes
//   PeakPath::bf16  vdpbf16ps zmm (AVX512_BF16): 2 flops x 32 bf16 pairs; without the
//                   instruction bf16 GEMMs run on fp32 FMAs, so the fp32 loop is the peak
//   PeakPath::int8  vpdpbusd zmm (AVX512_VNNI): 2 ops x 64 u8*s8 products; without VNNI the
//                   vpmaddubsw+vpmaddwd+vpaddd sequence oneDNN uses instead
//
// On a CPU with AMX (Sapphire Rapids and later) oneDNN runs bf16 and int8 GEMMs on tiles
// (its implementation name says "amx"), ten times the vector rate; measure_tile_peak times
// TDPBF16PS / TDPBSSD on register tiles for them, and peak_for_implementation picks which of the
// two peaks a GEMM is priced against.
//
// Each loop keeps enough independent accumulators in registers to run at the issue rate. The
// loops run on `threads` OpenMP threads at once; each thread times its chunks of about 1 ms and
// the peak is the sum over threads of each thread's fastest chunk (a chunk that lost its core to
// another process is not the fastest, so a busy machine does not lower the peak; a thread that
// ran while the other was off its core may run a little faster, by turbo). Values are GFLOP/s
// (GOP/s for int8).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace mixp::bench {

enum class PeakPath { fp32, bf16, int8 };
const char* to_string(PeakPath p);

// Which tier of loops to time. automatic: the one oneDNN's GEMMs run on (its effective ISA, which
// ONEDNN_MAX_CPU_ISA caps; MIXP_CPU_TIER does not apply, as it caps mixp's kernels, not
// oneDNN's). The others force a tier (std::invalid_argument when the CPU lacks it); with avx512,
// bf16 and int8 still fall back as above when AVX512_BF16 / AVX512_VNNI are missing.
enum class PeakIsa { automatic, avx512, avx2, baseline };

struct PeakResult {
  PeakPath path = PeakPath::fp32;
  std::string instruction;  // "vdpbf16ps zmm"
  std::string isa;          // "avx512_bf16"
  bool native = true;  // false when the dtype has no instruction of its own (bf16 on fp32 FMAs)
  bool tiles = false;  // an AMX tile peak (measure_tile_peak)
  int threads = 1;
  double gflops = 0;  // GFLOP/s, or GOP/s for int8
};

// threads <= 0: mixp::get_num_threads(). seconds: how long the timed chunks run in all.
PeakResult measure_peak(PeakPath path, int threads = 0, double seconds = 0.05,
                        PeakIsa isa = PeakIsa::automatic);

// The AMX tile peak of `path`: TDPBF16PS (bf16: 2 x 16 x 16 x 32 flops each) or TDPBSSD (int8:
// 2 x 16 x 16 x 64 ops) on four register tiles accumulating from four others (no memory
// traffic), timed as measure_peak times its loops. nullopt for fp32 (no fp32 tile instruction)
// and where the CPU lacks AMX-TILE with AMX-BF16 / AMX-INT8, the OS does not save the tile
// state (XCR0), or Linux refuses this process the XTILEDATA permission (amx_tiles_permitted).
// The loops (src/bench/peak_amx.cpp) have not run on the machine they were written on, which
// has no AMX; docs/benchmarks.md says so.
std::optional<PeakResult> measure_tile_peak(PeakPath path, int threads = 0, double seconds = 0.05);

// Whether this process may run AMX tile instructions: cpuid's AMX-TILE, XCR0's tile bits, and
// on Linux the XTILEDATA permission requested once (arch_prctl(ARCH_REQ_XCOMP_PERM, 18)).
bool amx_tiles_permitted();

// Whether a GEMM implementation name (mixp::gemm_implementation(), e.g. oneDNN's
// "brg_matmul:avx512_core_amx_bf16") runs on AMX tiles: it names "amx".
bool runs_on_amx_tiles(std::string_view implementation);

// The peak a GEMM of `implementation` is priced against: `tile` where the GEMM runs on AMX tiles
// and a tile peak was measured, else `vector` (a tile GEMM against the vector peak would read
// as several hundred percent of peak).
PeakResult peak_for_implementation(std::string_view implementation, const PeakResult& vector,
                                   const std::optional<PeakResult>& tile);

}  // namespace mixp::bench
