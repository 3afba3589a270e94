// The rows below 8 bits of `mixp bench gemm` (bench/gemm_bench.h): parsing, the fields of a
// small run, the ratio to the int8 row, and the CLI's table and JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/cli_runner.h"
#include "mixp/bench/gemm_bench.h"

namespace mixp::bench {
namespace {

TEST(GemmBenchLowBit, ParsesRowsBelow8Bits) {
  std::vector<std::string> lowbit;
  EXPECT_EQ(parse_gemm_bench_list("int8, int4,binary", &lowbit), (std::vector<DType>{DType::int8}));
  EXPECT_EQ(lowbit, (std::vector<std::string>{"int4", "binary"}));
  lowbit.clear();
  EXPECT_TRUE(parse_gemm_bench_list("lowbit,int2", &lowbit).empty());
  EXPECT_EQ(lowbit, (std::vector<std::string>{"int4", "int2", "binary"}));
  lowbit.clear();
  EXPECT_EQ(parse_gemm_bench_list("all", &lowbit), gemm_bench_dtypes());  // all: dtypes only
  EXPECT_TRUE(lowbit.empty());
  EXPECT_THROW(parse_gemm_bench_list("int3", &lowbit), std::invalid_argument);
}

TEST(GemmBenchLowBit, RowsAreTimedAgainstTheInt8Row) {
  GemmBenchConfig cfg;
  cfg.n = 100;  // not a multiple of 64: the binary rows carry zero padding bits
  cfg.repeat = 1;
  cfg.threads = 1;
  cfg.peak_seconds = 0.002;
  cfg.dtypes = {DType::int8};
  cfg.lowbit = {"int4", "int2", "binary"};
  const std::vector<GemmBenchResult> rs = run_gemm_bench(cfg);
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs[0].format, "int8");
  EXPECT_FALSE(rs[0].lowbit);
  for (size_t i = 1; i < rs.size(); ++i) {
    const GemmBenchResult& r = rs[i];
    EXPECT_EQ(r.format, cfg.lowbit[i - 1]);
    EXPECT_TRUE(r.lowbit);
    EXPECT_EQ(r.dtype, DType::int8);
    EXPECT_GT(r.seconds, 0);
    EXPECT_DOUBLE_EQ(r.gflops, 2.0 * 100 * 100 * 100 / r.seconds * 1e-9);
    ASSERT_TRUE(r.speedup_vs_int8.has_value());
    EXPECT_DOUBLE_EQ(*r.speedup_vs_int8, r.gflops / rs[0].gflops);
    EXPECT_FALSE(r.implementation.empty());
  }
}

TEST(GemmBenchLowBit, CliPrintsTheRows) {
  const auto r = test::run_cli("bench gemm --n 64 --repeat 1 --dtypes int8,lowbit --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 4u);
  EXPECT_EQ(j["results"][3]["dtype"], "binary");
  EXPECT_TRUE(j["results"][3]["speedup_vs_int8"].is_number());
  const auto bad = test::run_cli("bench gemm --n 64 --dtypes int3");
  EXPECT_EQ(bad.exit_code, 2);
}

}  // namespace
}  // namespace mixp::bench
