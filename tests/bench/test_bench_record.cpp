// The saved `mixp bench gemm` result that `mixp doctor` cites: where it lives, the round trip,
// and what is refused (another CPU, a foreign file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "mixp/backend/cpu_features.h"
#include "mixp/bench/bench_record.h"

namespace mixp::bench {
namespace {

struct ScratchDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("mixp_bench_record_" + std::to_string(::getpid()));
  ScratchDir() { std::filesystem::remove_all(path); }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

SavedGemmBench sample() {
  SavedGemmBench s;
  s.date = "2025-11-21T10:31:07Z";
  const CpuFeatures& f = cpu_features();
  s.cpu = f.model.empty() ? f.vendor : f.model;
  s.threads = 2;
  s.n = 2048;
  s.repeat = 5;
  s.results.push_back({.dtype = "fp32", .gflops = 400, .peak_gflops = 500});
  s.results.push_back({.dtype = "bf16", .gflops = 800, .peak_gflops = 1000, .speedup_vs_fp32 = 2.0});
  s.results.push_back({.dtype = "fp16", .gflops = 300, .emulated = true});
  return s;
}

TEST(BenchRecord, PathFollowsTheEnvironment) {
  const char* old_own = std::getenv("MIXP_CACHE_DIR");
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string own = old_own ? old_own : "", xdg = old_xdg ? old_xdg : "";
  ::unsetenv("MIXP_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(gemm_bench_record_path(), "/tmp/xdg/mixp/bench-gemm.json");
  ::setenv("MIXP_CACHE_DIR", "/tmp/own", 1);
  EXPECT_EQ(gemm_bench_record_path(), "/tmp/own/bench-gemm.json");
  ::unsetenv("MIXP_CACHE_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(gemm_bench_record_path(), std::filesystem::path(home) / ".cache/mixp/bench-gemm.json");
  }
  if (old_own) ::setenv("MIXP_CACHE_DIR", own.c_str(), 1);
  if (old_xdg) ::setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
}

TEST(BenchRecord, SaveLoadAndCite) {
  ScratchDir d;
  const auto file = d.path / "sub" / "bench-gemm.json";
  EXPECT_FALSE(load_gemm_bench_record(file).has_value());
  save_gemm_bench_record(sample(), file);
  const auto back = load_gemm_bench_record(file);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->n, 2048);
  ASSERT_EQ(back->results.size(), 3u);
  EXPECT_EQ(back->results[1].speedup_vs_fp32, 2.0);
  EXPECT_FALSE(back->results[0].speedup_vs_fp32.has_value());
  EXPECT_EQ(cite_gemm_speedup(*back, "bf16"),
            "bf16 GEMM measured 2.0x fp32 on this machine (mixp bench gemm, n=2048, 2 threads, "
            "2025-11-21)");
  EXPECT_EQ(cite_gemm_speedup(*back, "fp16"),
            "fp16 GEMM measured 0.8x fp32 on this machine, emulated (mixp bench gemm, n=2048, 2 "
            "threads, 2025-11-21)");
  EXPECT_FALSE(cite_gemm_speedup(*back, "int8").has_value());
}

TEST(BenchRecord, AnotherCpuOrAForeignFileIsIgnored) {
  ScratchDir d;
  std::filesystem::create_directories(d.path);
  SavedGemmBench other = sample();
  other.cpu = "Some Other CPU";
  save_gemm_bench_record(other, d.path / "a.json");
  EXPECT_FALSE(load_gemm_bench_record(d.path / "a.json").has_value());
  std::ofstream(d.path / "b.json") << R"({"results": []})";
  EXPECT_FALSE(load_gemm_bench_record(d.path / "b.json").has_value());
  EXPECT_THROW(gemm_bench_record_from_json("{"), std::invalid_argument);
}

}  // namespace
}  // namespace mixp::bench
