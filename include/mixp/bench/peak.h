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
// Each loop keeps enough independent accumulators in registers to run at the issue rate. The
// loops run on `threads` OpenMP threads at once; each thread times its chunks of about 1 ms and
// the peak is the sum over threads of each thread's fastest chunk (a chunk that lost its core to
// another process is not the fastest, so a busy machine does not lower the peak; a thread that
// ran while the other was off its core may run a little faster, by turbo). Values are GFLOP/s
// (GOP/s for int8).
#pragma once
#include <string>

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
  int threads = 1;
  double gflops = 0;  // GFLOP/s, or GOP/s for int8
};

// threads <= 0: mixp::get_num_threads(). seconds: how long the timed chunks run in all.
PeakResult measure_peak(PeakPath path, int threads = 0, double seconds = 0.05,
                        PeakIsa isa = PeakIsa::automatic);

}  // namespace mixp::bench
