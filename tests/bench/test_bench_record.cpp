// The saved `mixp bench gemm` result that `mixp doctor` cites: where it lives, the round trip,
// and what is refused (another CPU, a foreign file).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mixp/bench/bench_record.h"
#include "mixp/format/cpu_features.h"
#include "common/test_paths.h"

namespace mixp::bench {
namespace {

struct ScratchDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("mixp_bench_record_" + std::to_string(::getpid()));
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
  auto result = [](const char* dtype, double gflops, std::optional<double> speedup, bool emulated) {
    SavedGemmResult r;
    r.dtype = dtype;
    r.gflops = gflops;
    r.peak_gflops = 2 * gflops;
    r.speedup_vs_fp32 = speedup;
    r.emulated = emulated;
    return r;
  };
  s.results.push_back(result("fp32", 400, std::nullopt, false));
  s.results.push_back(result("bf16", 800, 2.0, false));
  s.results.push_back(result("fp16", 300, std::nullopt, true));
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
    EXPECT_EQ(gemm_bench_record_path(),
              std::filesystem::path(home) / ".cache/mixp/bench-gemm.json");
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

TEST(BenchRecord, EvidenceForTheRecommendation) {
  const auto none = gemm_evidence(std::nullopt, "bf16");
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("`mixp bench gemm`"), std::string::npos);
  const auto bf16 = gemm_evidence(sample(), "bf16");
  ASSERT_EQ(bf16.size(), 2u);
  EXPECT_EQ(bf16[0].rfind("bf16 GEMM measured 2.0x fp32 on this machine", 0), 0u) << bf16[0];
  EXPECT_EQ(bf16[1], "Also measured against fp32 (2025-11-21): fp16 0.8x (emulated).");
  // An fp32 recommendation cites bf16: the format it turned down.
  EXPECT_EQ(gemm_evidence(sample(), "fp32")[0].rfind("bf16 GEMM measured", 0), 0u);
}

// `mixp <args>` with MIXP_CACHE_DIR set; stdout.
std::string run_with_cache(const std::filesystem::path& cache, const std::string& args,
                           int* code = nullptr) {
  const auto out = cache / "stdout.txt";
  const std::string cmd = "MIXP_CACHE_DIR='" + cache.string() + "' '" + MIXP_CLI + "' " + args +
                          " >'" + out.string() + "' 2>/dev/null </dev/null";
  const int status = std::system(cmd.c_str());
  if (code) *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(BenchRecord, BenchSavesAndDoctorCites) {
  ScratchDir d;
  std::filesystem::create_directories(d.path);
  int code = -1;
  std::string out = run_with_cache(d.path, "doctor", &code);
  ASSERT_EQ(code, 0);
  EXPECT_NE(out.find("Not measured on this machine yet"), std::string::npos) << out;
  auto j = nlohmann::json::parse(run_with_cache(d.path, "doctor --json"));
  EXPECT_TRUE(j.at("measured").is_null());

  // Small products are not saved (they time call overhead, not throughput).
  run_with_cache(d.path, "bench gemm --n 64 --repeat 1 --threads 1 --dtypes fp32,bf16", &code);
  ASSERT_EQ(code, 0);
  EXPECT_FALSE(std::filesystem::exists(d.path / "bench-gemm.json"));
  out = run_with_cache(
      d.path, "bench gemm --n 1024 --repeat 1 --threads 1 --dtypes fp32,bf16,int8,fp8_e4m3", &code);
  ASSERT_EQ(code, 0);
  EXPECT_NE(out.find("mixp doctor"), std::string::npos) << out;
  const auto saved = load_gemm_bench_record(d.path / "bench-gemm.json");
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->n, 1024);
  EXPECT_EQ(saved->threads, 1);
  ASSERT_NE(saved->find("bf16"), nullptr);
  ASSERT_NE(saved->find("fp8_e4m3"), nullptr);

  // Doctor cites what this bench measured, end to end: the record, then the sentences.
  j = nlohmann::json::parse(run_with_cache(d.path, "doctor --json"));
  EXPECT_EQ(j.at("measured").at("n"), 1024);
  EXPECT_EQ(j.at("measured").at("results").size(), 4u);
  ASSERT_FALSE(j.at("measured_notes").empty());
  std::string notes;
  for (const auto& n : j["measured_notes"]) notes += n.get<std::string>() + "\n";
  EXPECT_NE(notes.find("n=1024, 1 thread"), std::string::npos) << notes;
  for (const char* dt : {"int8", "fp8_e4m3"}) {
    EXPECT_NE(notes.find(dt), std::string::npos) << dt << " missing from\n" << notes;
  }
  out = run_with_cache(d.path, "doctor", &code);
  ASSERT_EQ(code, 0);
  EXPECT_NE(out.find("(mixp bench gemm, n=1024, 1 thread"), std::string::npos) << out;

  // Doctor cites a known record word for word.
  save_gemm_bench_record(sample(), d.path / "bench-gemm.json");
  out = run_with_cache(d.path, "doctor", &code);
  ASSERT_EQ(code, 0);
  const std::string subject =
      out.find("Recommended precision: fp16") != std::string::npos ? "fp16" : "bf16";
  if (subject == "bf16") {
    EXPECT_NE(out.find("bf16 GEMM measured 2.0x fp32 on this machine (mixp bench gemm, n=2048, 2 "
                       "threads, 2025-11-21)."),
              std::string::npos)
        << out;
  }
  j = nlohmann::json::parse(run_with_cache(d.path, "doctor --json"));
  EXPECT_EQ(j.at("measured").at("n"), 2048);
  EXPECT_EQ(j.at("measured").at("date"), "2025-11-21T10:31:07Z");
  EXPECT_FALSE(j.at("measured_notes").empty());
}

}  // namespace
}  // namespace mixp::bench
