// `mixp bench gemm` end to end: the JSON shape docs/architecture.md 4.3 relies on and the relations
// between its fields, the text table, and usage errors. Small n and --repeat 1 keep it fast; no
// timing is asserted.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/cli_runner.h"
#include "common/test_paths.h"

namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

CliRun mixp(const std::string& args) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mixp_bench_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cmd = std::string("'") + MIXP_CLI + "' " + args + " >'" +
                          (dir / "out").string() + "' 2>'" + (dir / "err").string() +
                          "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  std::filesystem::remove_all(dir);
  return r;
}

TEST(BenchGemmCli, JsonShapeAndRelations) {
  const CliRun r = mixp("bench gemm --n 128 --repeat 1 --threads 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("results"));
  const auto& rs = j["results"];
  ASSERT_TRUE(rs.is_array());
  // The default is every dtype that runs, fp32 first (the speed-ups are against it).
  ASSERT_EQ(rs.size(), 6u);
  const char* order[] = {"fp32", "bf16", "int8", "fp16", "fp8_e4m3", "fp8_e5m2"};
  const double fp32 = rs[0]["gflops"].get<double>();
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto& e = rs[i];
    SCOPED_TRACE(e.dump());
    // The names docs/architecture.md 4.3 relies on.
    for (const char* k : {"dtype", "n", "gflops", "peak_gflops", "fraction_of_peak"})
      ASSERT_TRUE(e.contains(k)) << k;
    EXPECT_EQ(e["dtype"], order[i]);
    EXPECT_EQ(e["n"], 128);
    const double g = e["gflops"], p = e["peak_gflops"], f = e["fraction_of_peak"];
    EXPECT_GT(g, 0);
    EXPECT_GT(p, 0);
    EXPECT_NEAR(f, g / p, 1e-12 * (1 + f));
    EXPECT_NEAR(e["speedup_vs_fp32"].get<double>(), g / fp32, 1e-12 * (1 + g / fp32));
    EXPECT_EQ(e["threads"], 1);
    EXPECT_FALSE(e["path"].get<std::string>().empty());
    EXPECT_NEAR(g, 2.0 * 128 * 128 * 128 / e["seconds"].get<double>() * 1e-9, 1e-9 * g);
  }
  EXPECT_EQ(rs[2]["unit"], "GOP/s");
  for (size_t i = 3; i < rs.size(); ++i) EXPECT_TRUE(rs[i]["emulated"].get<bool>()) << i;
  // "all" names the same list.
  const CliRun all = mixp("bench gemm --n 16 --repeat 1 --threads 1 --dtypes all --json");
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(nlohmann::json::parse(all.out)["results"].size(), 6u);
}

TEST(BenchGemmCli, EmulatedDtypesAreLabelled) {
  const CliRun r = mixp("bench gemm --n 32 --repeat 1 --threads 1 --dtypes fp16,fp8_e4m3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& e : j["results"]) {
    EXPECT_TRUE(e["emulated"].get<bool>());
    EXPECT_NE(e["path"].get<std::string>().find("emulated"), std::string::npos);
    EXPECT_TRUE(e["speedup_vs_fp32"].is_null());  // fp32 not in the run
  }
}

TEST(BenchGemmCli, TextTable) {
  const CliRun r = mixp("bench gemm --n 32 --repeat 1 --threads 1 --dtypes bf16,fp32");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"dtype", "GFLOP/s", "peak", "fraction", "vs fp32", "bf16", "fp32", "1.00x",
                        "path (what is timed):\n", "mixp::gemm bf16 x bf16 -> fp32"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(BenchGemmCli, UsageErrors) {
  CliRun r = mixp("bench gemm --n 32 --dtypes fp32,float7");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("float7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bf16"), std::string::npos) << r.err;  // lists the supported ones
  EXPECT_NE(r.err.find("int8"), std::string::npos) << r.err;

  r = mixp("bench gemm --n 32 --dtypes tf32");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("tf32"), std::string::npos) << r.err;

  r = mixp("bench gemm --n 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--n"), std::string::npos) << r.err;

  r = mixp("bench gemm --repeat 0");
  EXPECT_EQ(r.code, 2);

  r = mixp("bench");  // needs a sub-subcommand
  EXPECT_NE(r.code, 0);

  r = mixp("bench gemm --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--dtypes"), std::string::npos);
}

// MIXP_CPU_GEMM picks who runs the bf16 GEMMs (src/backend/cpu/gemm_bf16.h): "onednn" runs, a
// misspelling is an error that names the variable and the values it takes.
TEST(BenchGemmCli, CpuGemmVariable) {
  using mixp::test::run_cli;
  const auto ok =
      run_cli("bench gemm --n 512 --dtypes bf16 --repeat 1 --json", {{"MIXP_CPU_GEMM", "onednn"}});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.json()["results"][0]["implementation"].get<std::string>().rfind("mixp:", 0),
            std::string::npos);  // oneDNN's name, not mixp's kernel
  const auto bad =
      run_cli("bench gemm --n 512 --dtypes bf16 --repeat 1", {{"MIXP_CPU_GEMM", "onednnn"}});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("MIXP_CPU_GEMM"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("'onednn'"), std::string::npos) << bad.err;
}

}  // namespace
