// run_gemm_bench, measure_peak and the dtype list parser (include/mixp/bench/). Small n, one
// repetition: these check shapes and relations between fields, never timings.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "mixp/backend/backend.h"
#include "mixp/bench/gemm_bench.h"
#include "mixp/bench/peak.h"
#include "mixp/format/cpu_features.h"

namespace mixp::bench {
namespace {

std::string message_of(std::string_view list) {
  try {
    parse_gemm_bench_dtypes(list);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(GemmBenchDtypes, ParsesNamesAndAliases) {
  EXPECT_EQ(parse_gemm_bench_dtypes("fp32,bf16,int8"),
            (std::vector<DType>{DType::fp32, DType::bf16, DType::int8}));
  EXPECT_EQ(parse_gemm_bench_dtypes(" bf16 , fp32 "),
            (std::vector<DType>{DType::bf16, DType::fp32}));
  EXPECT_EQ(parse_gemm_bench_dtypes("fp32,fp32"), (std::vector<DType>{DType::fp32}));
  EXPECT_EQ(parse_gemm_bench_dtypes("fp16,fp8_e4m3,fp8_e5m2"),
            (std::vector<DType>{DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2}));
}

TEST(GemmBenchDtypes, ErrorsSayWhatIsSupported) {
  const std::string unknown = message_of("fp32,float7");
  EXPECT_NE(unknown.find("float7"), std::string::npos) << unknown;
  for (const char* name : {"fp32", "bf16", "int8", "fp16", "fp8_e4m3"}) {
    EXPECT_NE(unknown.find(name), std::string::npos) << unknown;
  }
  EXPECT_NE(message_of("tf32").find("GPU"), std::string::npos);
  EXPECT_NE(message_of("nf4").find("quant"), std::string::npos);
  EXPECT_NE(message_of("fp4_e2m1").find("MX"), std::string::npos);
  EXPECT_FALSE(message_of("").empty());
}

TEST(GemmBenchDtypes, PeakPaths) {
  EXPECT_EQ(gemm_peak_path(DType::fp32), PeakPath::fp32);
  EXPECT_EQ(gemm_peak_path(DType::fp16), PeakPath::fp32);
  EXPECT_EQ(gemm_peak_path(DType::bf16), PeakPath::bf16);
  EXPECT_EQ(gemm_peak_path(DType::fp8_e5m2), PeakPath::bf16);
  EXPECT_EQ(gemm_peak_path(DType::int8), PeakPath::int8);
}

TEST(Peak, EveryPathMeasuresSomething) {
  for (PeakPath p : {PeakPath::fp32, PeakPath::bf16, PeakPath::int8}) {
    const PeakResult r = measure_peak(p, 1, 0.005);
    EXPECT_GT(r.gflops, 0) << to_string(p);
    EXPECT_TRUE(std::isfinite(r.gflops)) << to_string(p);
    EXPECT_FALSE(r.instruction.empty());
    EXPECT_EQ(r.threads, 1);
    EXPECT_EQ(r.path, p);
  }
}

// Every tier this CPU has, forced, runs the loops of that tier.
TEST(Peak, ForcedTiers) {
  const CpuFeatures& f = cpu_features();
  struct Case {
    PeakIsa isa;
    bool available;
    const char* marker;  // in the instruction name
  };
  const Case cases[] = {{PeakIsa::avx512, f.use_avx512(), "zmm"},
                        {PeakIsa::avx2, f.use_avx2(), "ymm"},
                        {PeakIsa::baseline, true, "baseline"}};
  for (const Case& c : cases) {
    for (PeakPath p : {PeakPath::fp32, PeakPath::bf16, PeakPath::int8}) {
      if (!c.available) {
        EXPECT_THROW(measure_peak(p, 1, 0.002, c.isa), std::invalid_argument);
        continue;
      }
      const PeakResult r = measure_peak(p, 1, 0.002, c.isa);
      EXPECT_GT(r.gflops, 0);
      EXPECT_NE(r.instruction.find(c.marker), std::string::npos) << r.instruction;
      if (p == PeakPath::bf16) {
        EXPECT_EQ(r.native, c.isa == PeakIsa::avx512 && f.avx512_bf16);
      }
    }
  }
}

TEST(Peak, TilePeakOnlyWhereAmxRuns) {
  // No fp32 tile instruction anywhere; bf16 / int8 tile peaks only with AMX and the XTILEDATA
  // permission. On a CPU without AMX (the AMD Zen 5 this was written on) there is none: the
  // tile loops (src/bench/peak_amx.cpp) cannot run there and must not be called.
  const CpuFeatures& f = cpu_features();
  EXPECT_FALSE(measure_tile_peak(PeakPath::fp32, 1, 0.002).has_value());
  if (!f.amx_tile || !f.os_amx) {
    EXPECT_FALSE(amx_tiles_permitted());
  }
  for (PeakPath p : {PeakPath::bf16, PeakPath::int8}) {
    const bool has = p == PeakPath::bf16 ? f.amx_bf16 : f.amx_int8;
    const std::optional<PeakResult> t = measure_tile_peak(p, 1, 0.002);
    EXPECT_EQ(t.has_value(), has && amx_tiles_permitted()) << to_string(p);
    if (t) {
      EXPECT_TRUE(t->tiles);
      EXPECT_GT(t->gflops, 0);
      EXPECT_NE(t->instruction.find("tile peak"), std::string::npos) << t->instruction;
      // Tiles outrun the vector unit (8x to 16x on Sapphire Rapids).
      EXPECT_GT(t->gflops, measure_peak(p, 1, 0.002).gflops);
    }
  }
}

TEST(Peak, PeakForImplementationPricesTileGemmsAgainstTiles) {
  PeakResult vec;
  vec.instruction = "vdpbf16ps zmm";
  vec.gflops = 200;
  PeakResult tile;
  tile.instruction = "TDPBF16PS tile peak";
  tile.tiles = true;
  tile.gflops = 7400;
  EXPECT_TRUE(runs_on_amx_tiles("brg_matmul:avx512_core_amx_bf16"));
  EXPECT_TRUE(runs_on_amx_tiles("bf16 (fp8 widened) brg_matmul:avx512_core_amx_bf16"));
  EXPECT_FALSE(runs_on_amx_tiles("brg_matmul:avx512_core_bf16"));
  EXPECT_FALSE(runs_on_amx_tiles("mixp:avx512_bf16 (8x48 VDPBF16PS, src/backend/cpu/gemm_bf16.h)"));
  EXPECT_EQ(peak_for_implementation("brg_matmul:avx512_core_amx_bf16", vec, tile).gflops, 7400);
  EXPECT_TRUE(peak_for_implementation("brg:avx512_core_amx_int8", vec, tile).tiles);
  EXPECT_EQ(peak_for_implementation("brg_matmul:avx512_core_bf16", vec, tile).gflops, 200);
  // A tile GEMM where no tile peak could be measured (permission refused): the vector peak.
  EXPECT_EQ(peak_for_implementation("brg_matmul:avx512_core_amx_bf16", vec, std::nullopt).gflops,
            200);
}

TEST(RunGemmBench, Bf16PeakIsTheTilePeakExactlyWhereTheGemmRunsOnTiles) {
  // On this repository's CI host (AVX512_BF16, no AMX) the bf16 row runs on mixp's VDPBF16PS
  // kernel or oneDNN's avx512_core_bf16 and is priced against the vdpbf16ps vector peak; on an
  // AMX host oneDNN names amx and the row gets the TDPBF16PS tile peak.
  GemmBenchConfig cfg;
  cfg.n = 64;
  cfg.repeat = 1;
  cfg.threads = 1;
  cfg.peak_seconds = 0.002;
  cfg.dtypes = {DType::bf16, DType::int8};
  for (const GemmBenchResult& r : run_gemm_bench(cfg)) {
    SCOPED_TRACE(r.implementation);
    const bool tiles = runs_on_amx_tiles(r.implementation) && amx_tiles_permitted();
    EXPECT_EQ(r.peak.tiles, tiles);
    if (!tiles && r.dtype == DType::bf16 && cpu_features().avx512_bf16) {
      EXPECT_EQ(r.peak.instruction, "vdpbf16ps zmm");
    }
  }
}

TEST(Peak, DefaultThreadsFollowSetNumThreads) {
  EXPECT_EQ(measure_peak(PeakPath::fp32, 0, 0.002).threads, get_num_threads());
}

TEST(RunGemmBench, FieldsAreConsistent) {
  GemmBenchConfig cfg;
  cfg.n = 64;
  cfg.repeat = 1;
  cfg.threads = 1;
  cfg.peak_seconds = 0.005;
  cfg.dtypes = gemm_bench_dtypes();
  const int before = get_num_threads();
  const std::vector<GemmBenchResult> rs = run_gemm_bench(cfg);
  EXPECT_EQ(get_num_threads(), before);  // restored
  ASSERT_EQ(rs.size(), cfg.dtypes.size());
  const double fp32 = rs[0].gflops;
  for (size_t i = 0; i < rs.size(); ++i) {
    const GemmBenchResult& r = rs[i];
    SCOPED_TRACE(std::string(name(r.dtype)));
    EXPECT_EQ(r.dtype, cfg.dtypes[i]);
    EXPECT_EQ(r.n, 64);
    EXPECT_EQ(r.threads, 1);
    EXPECT_GT(r.seconds, 0);
    EXPECT_DOUBLE_EQ(r.gflops, 2.0 * 64 * 64 * 64 / r.seconds * 1e-9);
    EXPECT_GT(r.peak_gflops, 0);
    EXPECT_DOUBLE_EQ(r.peak_gflops, r.peak.gflops);
    EXPECT_DOUBLE_EQ(r.fraction_of_peak, r.gflops / r.peak_gflops);
    ASSERT_TRUE(r.speedup_vs_fp32.has_value());
    EXPECT_DOUBLE_EQ(*r.speedup_vs_fp32, r.gflops / fp32);
    EXPECT_EQ(r.peak.path, gemm_peak_path(r.dtype));
    EXPECT_FALSE(r.path.empty());
    EXPECT_FALSE(r.implementation.empty());
    EXPECT_EQ(r.emulated,
              r.dtype != DType::fp32 && r.dtype != DType::bf16 && r.dtype != DType::int8);
  }
  EXPECT_DOUBLE_EQ(*rs[0].speedup_vs_fp32, 1.0);
}

TEST(RunGemmBench, NoSpeedupWithoutFp32) {
  GemmBenchConfig cfg;
  cfg.n = 32;
  cfg.repeat = 1;
  cfg.threads = 1;
  cfg.peak_seconds = 0.002;
  cfg.dtypes = {DType::int8};
  const std::vector<GemmBenchResult> rs = run_gemm_bench(cfg);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_FALSE(rs[0].speedup_vs_fp32.has_value());
}

TEST(RunGemmBench, RejectsBadConfig) {
  GemmBenchConfig cfg;
  cfg.n = 0;
  EXPECT_THROW(run_gemm_bench(cfg), std::invalid_argument);
  cfg.n = 8;
  cfg.repeat = 0;
  EXPECT_THROW(run_gemm_bench(cfg), std::invalid_argument);
  cfg.repeat = 1;
  cfg.dtypes = {DType::tf32};
  EXPECT_THROW(run_gemm_bench(cfg), std::invalid_argument);
}

}  // namespace
}  // namespace mixp::bench
