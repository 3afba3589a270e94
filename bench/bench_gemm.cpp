// GEMM throughput in one run (docs/architecture.md 7): mixp's kernels against oneDNN's matmul
// primitive called directly (same threads, same n, primitive and memory objects created once
// outside the timed loop), and both against the measured instruction peak.
//
//   build/release/mixp_bench_gemm [--n=2048] [--threads=N] [--pairs=10] [benchmark flags]
//
// Pairs: fp32 mixp::matmul (the op front end: cast policy, output allocation, cached primitive)
// vs oneDNN f32; bf16 mixp::gemm vs oneDNN bf16 x bf16 -> f32; int8 mixp::gemm vs oneDNN
// u8 x s8 -> s32. The Google Benchmark runs report each side alone. The summary after them
// measures the ratio mixp / oneDNN again with the two sides interleaved call by call (--pairs
// calls each, best of each side): on a shared machine the load drifts between two separate
// benchmarks, and the interleaved ratio is what stays put. Target: ratio >= 0.9 for every dtype.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "mixp/backend/gemm.h"
#include "mixp/bench/peak.h"
#include "mixp/mixp.h"

namespace {
using namespace mixp;

int64_t g_n = 2048;
int g_threads = 0;
int g_pairs = 10;

double flops() {
  return 2.0 * static_cast<double>(g_n) * static_cast<double>(g_n) * static_cast<double>(g_n);
}

template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Inputs {
  Tensor a, b;
};

Inputs inputs(DType d) {
  Generator g(1);
  const Shape s{g_n, g_n};
  if (d == DType::int8) {
    return {randint(0, 256, s, g, {.dtype = DType::uint8}),
            randint(-128, 128, s, g, {.dtype = DType::int8})};
  }
  return {randn(s, g).to(d, Round::nearest_even), randn(s, g).to(d, Round::nearest_even)};
}

// mixp's side: the op front end for fp32, the gemm kernel for bf16 and int8.
struct MixpSide {
  DType d;
  Inputs in;
  explicit MixpSide(DType dt) : d(dt), in(inputs(dt)) { run(); }  // warm-up builds the primitive
  void run() const {
    NoGradGuard ng;
    if (d == DType::fp32) {
      benchmark::DoNotOptimize(matmul(in.a, in.b).data_ptr());
    } else {
      benchmark::DoNotOptimize(gemm(in.a, in.b).data_ptr());
    }
  }
  std::string label() const {
    return gemm_implementation(d == DType::int8 ? DType::uint8 : d, d, g_n, g_n, g_n);
  }
};

// oneDNN called directly: engine, stream, primitive and memory objects made once.
struct OnednnSide {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  std::unique_ptr<dnnl::matmul> prim;
  std::unordered_map<int, dnnl::memory> args;
  Inputs in;
  Tensor c;
  std::string impl;
  explicit OnednnSide(DType d) : in(inputs(d)) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt src_t = d == DType::int8 ? dt::u8 : d == DType::bf16 ? dt::bf16 : dt::f32;
    const dt wei_t = d == DType::int8 ? dt::s8 : src_t;
    const dt dst_t = d == DType::int8 ? dt::s32 : dt::f32;
    const dnnl::memory::dims dims{g_n, g_n};
    const dnnl::memory::desc a_md(dims, src_t, tag::ab), b_md(dims, wei_t, tag::ab),
        c_md(dims, dst_t, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    prim = std::make_unique<dnnl::matmul>(pd);
    impl = pd.impl_info_str();
    c = empty({g_n, g_n}, {.dtype = d == DType::int8 ? DType::int32 : DType::fp32});
    args = {{DNNL_ARG_SRC, dnnl::memory(a_md, eng, in.a.data_ptr())},
            {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, eng, in.b.data_ptr())},
            {DNNL_ARG_DST, dnnl::memory(c_md, eng, c.data_ptr())}};
    run();  // warm-up
  }
  void run() {
    prim->execute(s, args);
    s.wait();
  }
};

// Reports the mean (GFLOP/s, Google Benchmark's) and the best iteration (best_GFLOP/s).
template <class F>
void timed_loop(benchmark::State& st, F&& body) {
  double best = 1e300;
  for (auto _ : st) best = std::min(best, seconds_of(body));
  st.counters["GFLOP/s"] = benchmark::Counter(
      flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.counters["best_GFLOP/s"] = flops() / best * 1e-9;
}

void BM_Mixp(benchmark::State& st, DType d) {
  const MixpSide m(d);
  timed_loop(st, [&] { m.run(); });
  st.SetLabel(m.label());
}

void BM_Onednn(benchmark::State& st, DType d) {
  OnednnSide o(d);
  timed_loop(st, [&] { o.run(); });
  st.SetLabel(o.impl);
}

void BM_Peak(benchmark::State& st, bench::PeakPath p) {
  bench::PeakResult r;
  for (auto _ : st) r = bench::measure_peak(p, g_threads);
  st.counters["best_GFLOP/s"] = r.gflops;
  st.SetLabel(r.instruction + (r.native ? "" : " (no native instruction)"));
}

// Console output as usual, plus the best GFLOP/s of every run kept for the summary.
class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      const auto it = r.counters.find("best_GFLOP/s");
      if (it == r.counters.end()) continue;
      double& v = best[r.run_name.function_name];
      v = std::max(v, static_cast<double>(it->second.value));
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> best;
};

// Takes --n=N, --threads=N and --pairs=N out of argv before Google Benchmark sees it.
void take_flags(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--n=", 4) == 0) {
      g_n = std::atoll(argv[i] + 4);
    } else if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      g_threads = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--pairs=", 8) == 0) {
      g_pairs = std::atoi(argv[i] + 8);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
}

struct Pair {
  const char* dtype;
  DType d;
  bench::PeakPath peak;
  std::string mixp_name() const {
    return std::string(d == DType::fp32 ? "mixp_matmul/" : "mixp_gemm/") + dtype + "/" +
           std::to_string(g_n);
  }
  std::string onednn_name() const {
    return std::string(d == DType::int8 ? "onednn_u8s8/" : "onednn/") + dtype + "/" +
           std::to_string(g_n);
  }
  std::string peak_name() const { return std::string("peak/") + dtype; }
};

}  // namespace

int main(int argc, char** argv) {
  take_flags(argc, argv);
  if (g_n < 1 || g_pairs < 1) {
    std::fprintf(stderr, "mixp_bench_gemm: --n and --pairs must be at least 1\n");
    return 2;
  }
  if (g_threads > 0) set_num_threads(g_threads);
  g_threads = get_num_threads();

  const Pair pairs[] = {{"fp32", DType::fp32, bench::PeakPath::fp32},
                        {"bf16", DType::bf16, bench::PeakPath::bf16},
                        {"int8", DType::int8, bench::PeakPath::int8}};
  for (const Pair& p : pairs) {
    benchmark::RegisterBenchmark(p.mixp_name().c_str(), BM_Mixp, p.d)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(p.onednn_name().c_str(), BM_Onednn, p.d)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const Pair& p : pairs) {
    benchmark::RegisterBenchmark(p.peak_name().c_str(), BM_Peak, p.peak)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Collector rep;
  benchmark::RunSpecifiedBenchmarks(&rep);

  std::printf(
      "\nGEMM %lld x %lld x %lld, %d threads (%s): mixp vs oneDNN interleaved call by call, best "
      "of %d "
      "each; GFLOP/s (GOP/s for int8)\n",
      static_cast<long long>(g_n), static_cast<long long>(g_n), static_cast<long long>(g_n),
      g_threads, cpu_features().model.c_str(), g_pairs);
  std::printf("  %-5s %10s %10s %12s %10s %10s %12s  %s\n", "dtype", "mixp", "oneDNN",
              "mixp/oneDNN", "peak", "mixp/peak", "oneDNN/peak", "separate runs: mixp/oneDNN");
  for (const Pair& p : pairs) {
    if (!rep.best.count(p.mixp_name()) && !rep.best.count(p.onednn_name())) continue;  // filtered
    const MixpSide m(p.d);
    OnednnSide o(p.d);
    double bm = 1e300, bo = 1e300;
    for (int i = 0; i < g_pairs; ++i) {
      bm = std::min(bm, seconds_of([&] { m.run(); }));
      bo = std::min(bo, seconds_of([&] { o.run(); }));
    }
    const double gm = flops() / bm * 1e-9, go = flops() / bo * 1e-9;
    const auto get = [&](const std::string& k) { return rep.best.count(k) ? rep.best[k] : 0.0; };
    const double pk = get(p.peak_name()), sm = get(p.mixp_name()), so = get(p.onednn_name());
    const auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
    std::printf("  %-5s %10.1f %10.1f %11.3fx %10.1f %9.1f%% %11.1f%%  %.3fx\n", p.dtype, gm, go,
                ratio(gm, go), pk, 100 * ratio(gm, pk), 100 * ratio(go, pk), ratio(sm, so));
  }
  std::printf("target: mixp/oneDNN >= 0.9 for every dtype\n");
  benchmark::Shutdown();
  return 0;
}
