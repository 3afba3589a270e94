// Run-time choice of the peak loop and the threaded timing around it (see mixp/bench/peak.h).
// The baseline tier below is plain C++ (no arch code): GCC vectorizes it at the baseline width.
#include "mixp/bench/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "bench/peak_kernels.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/cpu_features.h"

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
// x and y the two halves of the accumulator, so nothing is loop-invariant.
double run_int8_generic(int64_t iters) {
  int32_t acc[8][8];
  for (int c = 0; c < 8; ++c)
    for (int l = 0; l < 8; ++l) acc[c][l] = c + l;
  for (int64_t it = 0; it < iters; ++it) {
    for (int c = 0; c < 8; ++c)
      for (int l = 0; l < 8; ++l) {
        const int32_t x = static_cast<int16_t>(acc[c][l]), y = static_cast<int16_t>(acc[c][l] >> 16);
        acc[c][l] += x * x + y * y;
      }
  }
  double r = 0;
  for (auto& c : acc)
    for (int32_t v : c) r += v;
  return r;
}

}  // namespace

PeakKernel fp32_generic() { return {"mulps+addps xmm (baseline)", "sse2", 64.0 * 2, run_fp32_generic}; }
PeakKernel int8_generic() { return {"pmaddwd-like int16 multiply-add (baseline)", "sse2", 64.0 * 4, run_int8_generic}; }

}  // namespace detail

const char* to_string(PeakPath p) {
  switch (p) {
    case PeakPath::fp32: return "fp32";
    case PeakPath::bf16: return "bf16";
    case PeakPath::int8: return "int8";
  }
  return "?";
}

namespace {

struct Choice {
  detail::PeakKernel kernel;
  bool native = true;
};

Choice choose(PeakPath path) {
  const CpuFeatures& f = cpu_features();
  const SimdTier tier = simd_tier();
  const auto fp32 = [&] {
    if (tier == SimdTier::avx512) return detail::fp32_fma_avx512();
    if (tier == SimdTier::avx2) return detail::fp32_fma_avx2();
    return detail::fp32_generic();
  };
  switch (path) {
    case PeakPath::fp32: return {fp32(), true};
    case PeakPath::bf16:
      if (tier == SimdTier::avx512 && f.avx512_bf16) return {detail::bf16_dot_avx512(), true};
      return {fp32(), false};
    case PeakPath::int8:
      if (tier == SimdTier::avx512 && f.avx512_vnni) return {detail::int8_dot_avx512(), true};
      if (tier == SimdTier::avx512) return {detail::int8_madd_avx512(), true};
      if (tier == SimdTier::avx2) return {detail::int8_madd_avx2(), true};
      return {detail::int8_generic(), true};
  }
  return {fp32(), true};
}

// Seconds for every thread to run `iters` iterations at once (the region ends at the last one).
double timed_run(const detail::PeakKernel& k, int threads, int64_t iters) {
  std::vector<double> sink(static_cast<size_t>(threads) * 8, 0.0);  // a cache line per thread
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
  sink[static_cast<size_t>(omp_get_thread_num()) * 8] = k.run(iters);
  const auto t1 = std::chrono::steady_clock::now();
  volatile double keep = 0;
  for (double v : sink) keep = keep + v;
  (void)keep;
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

PeakResult measure_peak(PeakPath path, int threads, double min_seconds, int repeat) {
  if (threads <= 0) threads = get_num_threads();
  min_seconds = std::max(min_seconds, 1e-3);
  repeat = std::max(repeat, 1);
  const Choice c = choose(path);
  // Calibrate: grow the count until one run takes a tenth of the target, then scale up to it.
  int64_t iters = 1 << 12;
  double t = timed_run(c.kernel, threads, iters);
  while (t < min_seconds / 10 && iters < (int64_t{1} << 40)) {
    iters *= 4;
    t = timed_run(c.kernel, threads, iters);
  }
  iters = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iters) * min_seconds / std::max(t, 1e-9)));
  double best = 1e300;
  for (int rep = 0; rep < repeat; ++rep) best = std::min(best, timed_run(c.kernel, threads, iters));

  PeakResult r;
  r.path = path;
  r.instruction = c.kernel.instruction;
  r.isa = c.kernel.isa;
  r.native = c.native;
  r.threads = threads;
  r.seconds = best;
  r.gflops = c.kernel.ops_per_iter * static_cast<double>(iters) * threads / best * 1e-9;
  return r;
}

}  // namespace mixp::bench
