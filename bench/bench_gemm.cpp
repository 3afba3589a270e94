// GEMM throughput in one run (DESIGN.md 7): mixp's kernels against oneDNN's matmul primitive called
// directly (same threads, same n, primitive and memory objects created once outside the timed
// loop), and both against the measured instruction peak.
//
//   build/release/mixp_bench_gemm [--n=2048] [--threads=N] [benchmark flags]
//
// Pairs: fp32 mixp::matmul (the op front end: cast policy, output allocation, cached primitive)
// vs oneDNN f32; bf16 mixp::gemm vs oneDNN bf16 x bf16 -> f32; int8 mixp::gemm vs oneDNN
// u8 x s8 -> s32. After the benchmarks a summary prints, per dtype, the best GFLOP/s of each side,
// the ratio mixp / oneDNN (target >= 0.9) and the fraction of the instruction peak.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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

double flops() {
  return 2.0 * static_cast<double>(g_n) * static_cast<double>(g_n) * static_cast<double>(g_n);
}

// Times every iteration; reports the mean (GB's GFLOP/s) and the best (best_GFLOP/s), the latter
// being what the summary compares, as a busy machine only ever makes a run slower.
template <class F>
void timed_loop(benchmark::State& st, F&& body) {
  double best = 1e300;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(
      flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.counters["best_GFLOP/s"] = flops() / best * 1e-9;
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

void BM_Mixp(benchmark::State& st, DType d) {
  const Inputs in = inputs(d);
  NoGradGuard ng;
  if (d == DType::fp32) {
    (void)matmul(in.a, in.b);  // warm-up: builds the cached primitive
    timed_loop(st, [&] { benchmark::DoNotOptimize(matmul(in.a, in.b).data_ptr()); });
  } else {
    (void)gemm(in.a, in.b);
    timed_loop(st, [&] { benchmark::DoNotOptimize(gemm(in.a, in.b).data_ptr()); });
  }
  st.SetLabel(gemm_implementation(d == DType::int8 ? DType::uint8 : d, d, g_n, g_n, g_n));
}

void BM_Onednn(benchmark::State& st, DType d) {
  using namespace dnnl;
  using dt = memory::data_type;
  const dt src_t = d == DType::int8 ? dt::u8 : d == DType::bf16 ? dt::bf16 : dt::f32;
  const dt wei_t = d == DType::int8 ? dt::s8 : src_t;
  const dt dst_t = d == DType::int8 ? dt::s32 : dt::f32;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::dims dims{g_n, g_n};
  memory::desc a_md(dims, src_t, memory::format_tag::ab), b_md(dims, wei_t, memory::format_tag::ab),
      c_md(dims, dst_t, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  const dnnl::matmul prim(pd);
  const Inputs in = inputs(d);
  Tensor c = empty({g_n, g_n}, {.dtype = d == DType::int8 ? DType::int32 : DType::fp32});
  memory ma(a_md, eng, in.a.data_ptr()), mb(b_md, eng, in.b.data_ptr()),
      mc(c_md, eng, c.data_ptr());
  const std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  prim.execute(s, args);  // warm-up
  s.wait();
  timed_loop(st, [&] {
    prim.execute(s, args);
    s.wait();
  });
  st.SetLabel(pd.impl_info_str());
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
      label[r.run_name.function_name] = r.report_label;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> best;
  std::map<std::string, std::string> label;
};

// Takes --n=N and --threads=N out of argv before Google Benchmark sees it.
void take_flags(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--n=", 4) == 0)
      g_n = std::atoll(argv[i] + 4);
    else if (std::strncmp(argv[i], "--threads=", 10) == 0)
      g_threads = std::atoi(argv[i] + 10);
    else
      argv[out++] = argv[i];
  }
  argc = out;
}

}  // namespace

int main(int argc, char** argv) {
  take_flags(argc, argv);
  if (g_n < 1) {
    std::fprintf(stderr, "mixp_bench_gemm: --n must be at least 1\n");
    return 2;
  }
  if (g_threads > 0) set_num_threads(g_threads);
  g_threads = get_num_threads();

  const std::string n = std::to_string(g_n);
  struct Pair {
    const char* dtype;
    DType d;
    bench::PeakPath peak;
  };
  const Pair pairs[] = {{"fp32", DType::fp32, bench::PeakPath::fp32},
                        {"bf16", DType::bf16, bench::PeakPath::bf16},
                        {"int8", DType::int8, bench::PeakPath::int8}};
  for (const Pair& p : pairs) {
    const std::string mixp_name =
        std::string(p.d == DType::fp32 ? "mixp_matmul/" : "mixp_gemm/") + p.dtype;
    const std::string dnnl_name =
        std::string(p.d == DType::int8 ? "onednn_u8s8/" : "onednn/") + p.dtype;
    benchmark::RegisterBenchmark((mixp_name + "/" + n).c_str(), BM_Mixp, p.d)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((dnnl_name + "/" + n).c_str(), BM_Onednn, p.d)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const Pair& p : pairs) {
    benchmark::RegisterBenchmark((std::string("peak/") + p.dtype).c_str(), BM_Peak, p.peak)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Collector rep;
  benchmark::RunSpecifiedBenchmarks(&rep);

  std::printf(
      "\nGEMM %lld x %lld x %lld, %d threads (%s); best GFLOP/s (GOP/s for int8) per benchmark\n",
      static_cast<long long>(g_n), static_cast<long long>(g_n), static_cast<long long>(g_n),
      g_threads, cpu_features().model.c_str());
  std::printf("  %-5s %10s %10s %12s %10s %14s %14s\n", "dtype", "mixp", "oneDNN", "mixp/oneDNN",
              "peak", "mixp/peak", "oneDNN/peak");
  for (const Pair& p : pairs) {
    const std::string mixp_name =
        std::string(p.d == DType::fp32 ? "mixp_matmul/" : "mixp_gemm/") + p.dtype + "/" + n;
    const std::string dnnl_name =
        std::string(p.d == DType::int8 ? "onednn_u8s8/" : "onednn/") + p.dtype + "/" + n;
    const std::string peak_name = std::string("peak/") + p.dtype;
    const auto get = [&](const std::string& k) { return rep.best.count(k) ? rep.best[k] : 0.0; };
    const double m = get(mixp_name), o = get(dnnl_name), pk = get(peak_name);
    if (m == 0 && o == 0) continue;  // filtered out
    const auto ratio = [](double x, double y) { return y > 0 ? x / y : 0.0; };
    std::printf("  %-5s %10.1f %10.1f %11.3fx %10.1f %13.1f%% %13.1f%%\n", p.dtype, m, o,
                ratio(m, o), pk, 100 * ratio(m, pk), 100 * ratio(o, pk));
  }
  std::printf("target: mixp/oneDNN >= 0.9 for every dtype\n");
  benchmark::Shutdown();
  return 0;
}
