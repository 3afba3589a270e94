// Bulk format conversion throughput vs memcpy of the same input bytes, single-threaded, measured
// in one run (docs/architecture.md 7: ratios, not absolute times). The speed targets of the
// "Foundation" issue: fp32 -> bf16 and fp32 -> fp16 at >= 0.5x memcpy, fp8 at >= 0.25x, on an
// AVX-512 machine. Results and the command line are recorded in docs/benchmarks.md.
//
// Every conversion reports bytes_per_second over its INPUT bytes (4 per element) and the counter
// x_memcpy = (time of memcpy of the same bytes, same size, this run) / (time of the conversion),
// i.e. the speed as a fraction of memcpy's. A summary table is printed at the end. Times are the
// thread's CPU time (Google Benchmark's default): on a shared machine wall time also counts the
// time other processes hold the core; single-threaded and undisturbed, the two agree.
//
//   build/release/mixp_bench_convert [--benchmark_filter=...] [--benchmark_repetitions=N]
//   MIXP_CPU_TIER=avx2|scalar caps the SIMD tier (simd_tier()).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mixp/format/convert.h"
#include "mixp/format/cpu_features.h"

namespace {

using mixp::DType;
using mixp::Round;

struct Size {
  size_t n;  // floats
  const char* label;
};
// 16 Mi floats = 64 MiB of input, far beyond the caches (DRAM-bound); 64 Ki floats = 256 KiB,
// which stays in L2 with its output (compute-bound).
const Size kSizes[] = {{size_t{16} << 20, "64MiB"}, {size_t{64} << 10, "256KiB"}};

// Inputs that look like activations/gradients: N(0, 1), a few outliers, some tiny values, so that
// the fp8 targets see normals, subnormals and overflow (e4m3 max 448) in realistic proportions.
const std::vector<float>& input(size_t n) {
  static std::map<size_t, std::vector<float>> cache;
  auto& v = cache[n];
  if (v.empty()) {
    std::mt19937 g(42);
    std::normal_distribution<float> d(0.0f, 1.0f);
    v.resize(n);
    for (size_t i = 0; i < n; ++i) {
      float x = d(g);
      if (i % 1000 == 0) x *= 1000.0f;
      if (i % 97 == 0) x *= 1e-4f;
      v[i] = x;
    }
  }
  return v;
}

// One output buffer per size, touched once so that page faults are not timed.
unsigned char* output(size_t bytes) {
  static std::map<size_t, std::vector<unsigned char>> cache;
  auto& v = cache[bytes];
  if (v.empty()) v.assign(bytes, 1);
  return v.data();
}

void bm_memcpy(benchmark::State& s, size_t n) {
  const auto& in = input(n);
  unsigned char* out = output(n * 4);
  for (auto _ : s) {
    std::memcpy(out, in.data(), n * 4);
    benchmark::ClobberMemory();
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * n * 4));
}

void bm_narrow(benchmark::State& s, DType dst, Round r, size_t n) {
  const auto& in = input(n);
  unsigned char* out = output(n * 4);
  const mixp::ConvertOptions opt{r, mixp::Overflow::ieee, 1234, 0};
  for (auto _ : s) {
    mixp::convert_f32_to(dst, in, out, opt);
    benchmark::ClobberMemory();
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * n * 4));
}

void bm_widen(benchmark::State& s, DType src, size_t n) {
  std::vector<unsigned char> bits(n * (mixp::traits(src).bits / 8));
  mixp::convert_f32_to(src, input(n), bits.data(), {Round::nearest_even, mixp::Overflow::ieee});
  auto* out = reinterpret_cast<float*>(output(n * 4));
  for (auto _ : s) {
    mixp::convert_to_f32(src, bits.data(), std::span<float>(out, n));
    benchmark::ClobberMemory();
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations() * n * 4));  // fp32 bytes, as memcpy's
}

// Adds x_memcpy to every run whose size's memcpy has already been measured, and prints at the
// end a summary from the medians of all repetitions (so that it also holds with
// --benchmark_enable_random_interleaving, where memcpy is not necessarily measured first).
// Runs are matched to the memcpy of the same size by the size label that ends every name.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> out = runs;
    for (Run& r : out) {
      // function_name is the registered name ("f32->bf16/rne/64MiB"), without an aggregate suffix.
      const std::string name = r.run_name.function_name;
      const std::string size = name.substr(name.rfind('/') + 1);
      const double t = r.GetAdjustedCPUTime();
      if (r.run_type != Run::RT_Iteration || t <= 0) continue;
      times_[name].push_back(t);
      const auto m = times_.find("memcpy/" + size);
      if (m != times_.end()) r.counters["x_memcpy"] = benchmark::Counter(median(m->second) / t);
    }
    ConsoleReporter::ReportRuns(out);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf(
        "\nSummary (tier %s; median CPU time over repetitions; speed as a fraction of memcpy "
        "of the same input bytes):\n",
        mixp::to_string(mixp::simd_tier()));
    std::printf("%-24s %10s %10s %8s\n", "benchmark", "GB/s in", "x memcpy", "target");
    for (const auto& [name, ts] : times_) {
      const std::string size = name.substr(name.rfind('/') + 1);
      const auto m = times_.find("memcpy/" + size);
      if (m == times_.end()) continue;
      const size_t n = size == "64MiB" ? kSizes[0].n : kSizes[1].n;
      const bool fp8 =
          name.find("e4m3") != std::string::npos || name.find("e5m2") != std::string::npos;
      const bool targeted = name.rfind("f32->", 0) == 0 && name.find("tf32") == std::string::npos;
      const char* target = !targeted ? "-" : (fp8 ? ">=0.25" : ">=0.5");
      std::printf("%-24s %10.2f %10.2f %8s\n", name.c_str(), 4.0 * n / median(ts),
                  median(m->second) / median(ts), target);
    }
  }

 private:
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
  std::map<std::string, std::vector<double>> times_;  // CPU ns per iteration, per repetition
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  struct Target {
    DType t;
    const char* name;
  };
  const Target targets[] = {{DType::bf16, "bf16"},
                            {DType::fp16, "fp16"},
                            {DType::fp8_e4m3, "e4m3"},
                            {DType::fp8_e5m2, "e5m2"},
                            {DType::tf32, "tf32"}};
  for (const Size& sz : kSizes) {
    // memcpy first: the ratios of the conversions below refer to it.
    benchmark::RegisterBenchmark((std::string("memcpy/") + sz.label).c_str(), bm_memcpy, sz.n);
    for (const Target& t : targets) {
      for (Round r : {Round::nearest_even, Round::stochastic}) {
        const std::string nm =
            std::string("f32->") + t.name + (r == Round::stochastic ? "/sr/" : "/rne/") + sz.label;
        benchmark::RegisterBenchmark(nm.c_str(), bm_narrow, t.t, r, sz.n);
      }
    }
    for (const Target& t : targets) {
      if (t.t == DType::tf32) continue;
      const std::string nm = std::string(t.name) + "->f32/" + sz.label;
      benchmark::RegisterBenchmark(nm.c_str(), bm_widen, t.t, sz.n);
    }
  }
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
