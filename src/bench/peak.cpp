// Run-time choice of the peak loop and the threaded timing around it (see mixp/bench/peak.h).
// The baseline tier below is plain C++ (no arch code): GCC vectorizes it at the baseline width.
#include "mixp/bench/peak.h"

#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <vector>

#include "bench/peak_kernels.h"
#include "mixp/backend/backend.h"
#include "mixp/format/cpu_features.h"
#include "util/enum_names.h"

namespace mixp::bench {
namespace detail {
namespace {

// 8 independent chains of 8 lanes: acc = acc * 0.5 + 0.5 (two flops per lane; GCC emits a
// mulps+addps pair, there is no FMA in the baseline ISA).
double run_fp32_generic(int64_t iters) {
  float acc[8][8];
  for (int c = 0; c < 8; ++c)
    for (int l = 0; l < 8; ++l) acc[c][l] = static_cast<float>(c + l);
  for (int64_t it = 0; it < iters; ++it) {
    for (int c = 0; c < 8; ++c)
      for (int l = 0; l < 8; ++l) acc[c][l] = acc[c][l] * 0.5f + 0.5f;
  }
  double r = 0;
  for (auto& c : acc)
    for (float f : c) r += f;
  return r;
}

// 16-bit multiply-add pairs into 32-bit (what pmaddwd does at the baseline): acc += x*x + y*y with
// x and y the two halves of the accumulator, so nothing is loop-invariant. The sums wrap, as the
// instruction's do: they are kept in uint32_t, where wrapping is defined (x*x + y*y reaches 2^31,
// one past int32_t).
double run_int8_generic(int64_t iters) {
  uint32_t acc[8][8];
  for (int c = 0; c < 8; ++c)
    for (int l = 0; l < 8; ++l) acc[c][l] = static_cast<uint32_t>(c + l);
  for (int64_t it = 0; it < iters; ++it) {
    for (int c = 0; c < 8; ++c)
      for (int l = 0; l < 8; ++l) {
        const int32_t x = static_cast<int16_t>(acc[c][l]),
                      y = static_cast<int16_t>(acc[c][l] >> 16);
        acc[c][l] += static_cast<uint32_t>(x * x) + static_cast<uint32_t>(y * y);
      }
  }
  double r = 0;
  for (auto& c : acc)
    for (uint32_t v : c) r += v;
  return r;
}

}  // namespace

PeakKernel fp32_generic() {
  return {"mulps+addps xmm (baseline)", "sse2", 64.0 * 2, run_fp32_generic};
}
PeakKernel int8_generic() {
  return {"pmaddwd-like int16 multiply-add (baseline)", "sse2", 64.0 * 4, run_int8_generic};
}

}  // namespace detail

namespace {
constexpr mixp::detail::EnumName<PeakPath> kPathNames[] = {
    {PeakPath::fp32, "fp32"}, {PeakPath::bf16, "bf16"}, {PeakPath::int8, "int8"}};
}  // namespace

const char* to_string(PeakPath p) {
  return mixp::detail::name_of(kPathNames, p);
}

namespace {

struct Choice {
  detail::PeakKernel kernel;
  bool native = true;
};

// The tier oneDNN's GEMMs run on: its effective ISA (ONEDNN_MAX_CPU_ISA caps it), within what
// the hardware and the OS allow for our own loops. MIXP_CPU_TIER does not apply: it caps mixp's
// kernels, not oneDNN's, and the peak describes the instruction the GEMM runs on.
struct Tier {
  PeakIsa isa;
  bool bf16 = false;  // AVX512_BF16 usable
  bool vnni = false;  // AVX512_VNNI usable
};

Tier resolve(PeakIsa want) {
  const CpuFeatures& f = cpu_features();
  const auto has = [](dnnl::cpu_isa isa, dnnl::cpu_isa need) {
    return (static_cast<unsigned>(isa) & static_cast<unsigned>(need)) ==
           static_cast<unsigned>(need);
  };
  switch (want) {
    case PeakIsa::automatic: {
      const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
      if (f.use_avx512() && has(isa, dnnl::cpu_isa::avx512_core)) {
        return {PeakIsa::avx512, f.avx512_bf16 && has(isa, dnnl::cpu_isa::avx512_core_bf16),
                f.avx512_vnni && has(isa, dnnl::cpu_isa::avx512_core_vnni)};
      }
      if (f.use_avx2() && has(isa, dnnl::cpu_isa::avx2)) return {PeakIsa::avx2};
      return {PeakIsa::baseline};
    }
    case PeakIsa::avx512:
      if (!f.use_avx512())
        throw std::invalid_argument("measure_peak: this CPU (or OS) has no AVX-512");
      return {PeakIsa::avx512, f.avx512_bf16, f.avx512_vnni};
    case PeakIsa::avx2:
      if (!f.use_avx2()) throw std::invalid_argument("measure_peak: this CPU has no AVX2+FMA+F16C");
      return {PeakIsa::avx2};
    case PeakIsa::baseline:
      return {PeakIsa::baseline};
  }
  return {PeakIsa::baseline};
}

Choice choose(PeakPath path, PeakIsa want) {
  const Tier t = resolve(want);
  const auto fp32 = [&] {
    if (t.isa == PeakIsa::avx512) return detail::fp32_fma_avx512();
    if (t.isa == PeakIsa::avx2) return detail::fp32_fma_avx2();
    return detail::fp32_generic();
  };
  switch (path) {
    case PeakPath::fp32:
      return {fp32(), true};
    case PeakPath::bf16:
      // Without the instruction oneDNN widens bf16 to fp32 and runs FMAs.
      if (t.isa == PeakIsa::avx512 && t.bf16) return {detail::bf16_dot_avx512(), true};
      return {fp32(), false};
    case PeakPath::int8:
      if (t.isa == PeakIsa::avx512 && t.vnni) return {detail::int8_dot_avx512(), true};
      if (t.isa == PeakIsa::avx512) return {detail::int8_madd_avx512(), true};
      if (t.isa == PeakIsa::avx2) return {detail::int8_madd_avx2(), true};
      return {detail::int8_generic(), true};
  }
  return {fp32(), true};
}

// Every thread runs `chunks` back-to-back chunks of `iters` iterations at once and times each
// chunk; returns the sum over threads of iters / (that thread's fastest chunk). Timing chunks
// rather than the whole region keeps the measure of a busy machine honest: a chunk that lost its
// core to another process is simply not the fastest one.
double iterations_per_second(const detail::PeakKernel& k, int threads, int64_t iters, int chunks) {
  std::vector<double> best(static_cast<size_t>(threads) * 8, 1e300);  // a cache line per thread
  std::vector<double> sink(static_cast<size_t>(threads) * 8, 0.0);
#pragma omp parallel num_threads(threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num()) * 8;
    for (int c = 0; c < chunks; ++c) {
      const auto t0 = std::chrono::steady_clock::now();
      sink[t] += k.run(iters);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[t] = std::min(best[t], s);
    }
  }
  volatile double keep = 0;
  for (double v : sink) keep = keep + v;
  (void)keep;
  double rate = 0;
  for (int t = 0; t < threads; ++t)
    rate += static_cast<double>(iters) / std::max(best[static_cast<size_t>(t) * 8], 1e-12);
  return rate;
}

// Times kernel k on `threads` threads for about `seconds` (chunks of about 1 ms).
PeakResult time_kernel(const detail::PeakKernel& k, PeakPath path, int threads, double seconds) {
  if (threads <= 0) threads = get_num_threads();
  constexpr double kChunk = 1e-3;  // seconds per timed chunk
  // Calibrate the chunk: grow the count until one chunk takes at least kChunk / 4, then scale.
  int64_t iters = 1 << 8;
  double rate = iterations_per_second(k, threads, iters, 3) / threads;
  while (static_cast<double>(iters) / rate < kChunk / 4 && iters < (int64_t{1} << 40)) {
    iters *= 4;
    rate = iterations_per_second(k, threads, iters, 3) / threads;
  }
  iters = std::max<int64_t>(1, static_cast<int64_t>(rate * kChunk));
  const int chunks = std::max(1, static_cast<int>(seconds / kChunk));

  PeakResult r;
  r.path = path;
  r.instruction = k.instruction;
  r.isa = k.isa;
  r.threads = threads;
  r.gflops = k.ops_per_iter * iterations_per_second(k, threads, iters, chunks) * 1e-9;
  return r;
}

}  // namespace

PeakResult measure_peak(PeakPath path, int threads, double seconds, PeakIsa isa) {
  const Choice c = choose(path, isa);
  PeakResult r = time_kernel(c.kernel, path, threads, seconds);
  r.native = c.native;
  return r;
}

bool amx_tiles_permitted() {
  static const bool ok = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_tile || !f.os_amx) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    // Linux (5.16+) keeps the tile data state off until a process asks for it; a tile
    // instruction before that raises SIGILL. Granted once, for every thread of the process.
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

std::optional<PeakResult> measure_tile_peak(PeakPath path, int threads, double seconds) {
  const CpuFeatures& f = cpu_features();
  const bool has = (path == PeakPath::bf16 && f.amx_bf16) || (path == PeakPath::int8 && f.amx_int8);
  if (!has || !amx_tiles_permitted()) return std::nullopt;
  const detail::PeakKernel k =
      path == PeakPath::bf16 ? detail::bf16_tiles_amx() : detail::int8_tiles_amx();
  PeakResult r = time_kernel(k, path, threads, seconds);
  r.tiles = true;
  return r;
}

bool runs_on_amx_tiles(std::string_view implementation) {
  return implementation.find("amx") != std::string_view::npos;
}

PeakResult peak_for_implementation(std::string_view implementation, const PeakResult& vector,
                                   const std::optional<PeakResult>& tile) {
  if (tile && runs_on_amx_tiles(implementation)) return *tile;
  return vector;
}

}  // namespace mixp::bench
