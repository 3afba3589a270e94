// tensor_stats (mixp/inspect/tensor_stats.h) on values chosen at each format's edges: overflow,
// the round-to-even tie at the top (E4M3 464 stays 448, E5M2 61440 overflows), flushing below
// half the smallest subnormal, subnormal results, and non-finite inputs. The run-sized check
// against numpy is test_inspect_cli.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <vector>

#include "mixp/inspect/inspect_spec.h"
#include "mixp/inspect/tensor_stats.h"
#include "mixp/tensor/factories.h"

namespace mixp::inspect {
namespace {

const FormatStats& of(const TensorStats& s, StatFormat f) {
  for (const FormatStats& x : s.formats)
    if (x.format == f) return x;
  throw std::out_of_range("format not computed");
}

// A format's overflow, underflow and subnormal counts, compared in one EXPECT_EQ.
struct Counts {
  int64_t overflow, underflow, subnormal;
  bool operator==(const Counts&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << "{overflow " << c.overflow << ", underflow " << c.underflow << ", subnormal "
            << c.subnormal << "}";
}
Counts counts(const TensorStats& s, StatFormat f) {
  const FormatStats& x = of(s, f);
  return {x.overflow, x.underflow, x.subnormal};
}

TEST(TensorStats, EdgeValuesOfEachFormat) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.0f,  1.0f,     -3.0f,  70000.0f, 1e-8f, 1e-5f,  465.0f,
                                464.0f, 61440.0f, 61439.0f, nan,   inf,   1e-40f, std::ldexp(1.0f, -140),
                                3.4e38f};
  const TensorStats s = tensor_stats(x, int64_t(x.size()), all_stat_formats());
  EXPECT_EQ(s.numel, 15);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.inf, 1);
  EXPECT_EQ(s.zeros, 1);
  EXPECT_EQ(s.amax, double(3.4e38f));
  EXPECT_EQ(s.amin_nz, std::ldexp(1.0, -140));
  EXPECT_DOUBLE_EQ(s.dynamic_range, std::log2(double(3.4e38f)) + 140);

  // fp16: 70000 and 3.4e38 overflow; 1e-8, 1e-40, 2^-140 flush; 1e-5 is subnormal.
  EXPECT_EQ(counts(s, StatFormat::fp16), (Counts{2, 3, 1}));
  // bf16: only 3.4e38 overflows (max 3.3895e38); 2^-140 flushes (min subnormal 2^-133); 1e-40
  // is a bf16 subnormal.
  EXPECT_EQ(counts(s, StatFormat::bf16), (Counts{1, 1, 1}));
  // E4M3 (max 448): 464 is the tie between 448 and the NaN code and goes to 448; 465, 61439,
  // 61440, 70000, 3.4e38 overflow. Everything below 2^-10 flushes.
  EXPECT_EQ(counts(s, StatFormat::fp8_e4m3), (Counts{5, 4, 0}));
  // E5M2 (max 57344): 61440 is the tie with inf and goes to inf (the even code); 61439 does not.
  // 1e-5 rounds to the subnormal 2^-16.
  EXPECT_EQ(counts(s, StatFormat::fp8_e5m2), (Counts{3, 3, 1}));
  // The MSE of a saturating cast is finite even with overflows.
  for (const FormatStats& f : s.formats) EXPECT_TRUE(std::isfinite(f.mse)) << to_string(f.format);
}

TEST(TensorStats, Int8AtItsOwnScaleAndMxBlocks) {
  // int8 scale = 127.5 / 127.5 = 1: 127.5 rounds to 128 (even) and clamps to 127: an overflow
  // (-127.5 goes to -128, in range); 0.4 rounds to 0: an underflow.
  const std::vector<float> x = {127.5f, -127.5f, 1.0f, 0.4f};
  const StatFormat fmts[] = {StatFormat::int8, StatFormat::mxfp8};
  const TensorStats s = tensor_stats(x, 4, fmts);
  EXPECT_EQ(counts(s, StatFormat::int8), (Counts{1, 1, 0}));
  // MXFP8: shared exponent floor(log2 127.5) - 8 = -2, so +-127.5 -> +-510, beyond E4M3's 464
  // rounding limit: both saturate to 448 (overflow); 0.4 -> 1.6 and 1 -> 4 are normal.
  EXPECT_EQ(counts(s, StatFormat::mxfp8), (Counts{2, 0, 0}));
  // Their error: (112 - 127.5)^2 twice, over 4 values (1.6 -> 1.625 is 0.025 * 0.25 off).
  EXPECT_NEAR(of(s, StatFormat::mxfp8).mse, (2 * 15.5 * 15.5 + 0.00625 * 0.00625) / 4, 1e-9);
}

TEST(TensorStats, TensorOverloadScalesAndWidens) {
  const Tensor t = from_vector(std::vector<float>{1.0f, 2.0f, 1000.0f}, {3});
  const StatFormat f16[] = {StatFormat::fp16};
  // Times 100 (a loss scale): 100000 overflows fp16.
  const TensorStats s = tensor_stats(t, f16, 100.0);
  EXPECT_EQ(s.amax, 100000.0);
  EXPECT_EQ(of(s, StatFormat::fp16).overflow, 1);
  EXPECT_THROW(tensor_stats(from_vector(std::vector<int64_t>{1}, {1}), f16), std::invalid_argument);
}

TEST(InspectSpec, ParsesAndSelects) {
  const InspectSpec s = parse_inspect_spec(
      "every=10,start=5,end=40,modules=blocks.*.attn+head,roles=weight+activation-grad,"
      "formats=fp16+mxfp8,out=x.jsonl");
  EXPECT_TRUE(s.step_selected(5));
  EXPECT_TRUE(s.step_selected(35));
  EXPECT_FALSE(s.step_selected(6));
  EXPECT_FALSE(s.step_selected(45));
  EXPECT_TRUE(s.module_selected("blocks.3.attn"));
  EXPECT_TRUE(s.module_selected("head"));
  EXPECT_FALSE(s.module_selected("blocks.3.mlp"));
  EXPECT_TRUE(s.wants(Role::weight));
  EXPECT_FALSE(s.wants(Role::activation));
  ASSERT_EQ(s.formats.size(), 2u);
  EXPECT_EQ(s.out, "x.jsonl");
  EXPECT_THROW(parse_inspect_spec("every=0"), InspectError);
  EXPECT_THROW(parse_inspect_spec("roles=weights"), InspectError);
  EXPECT_THROW(parse_inspect_spec("formats=fp4"), InspectError);
  EXPECT_THROW(parse_inspect_spec("start=9,end=3"), InspectError);
  EXPECT_THROW(parse_inspect_spec("often=3"), InspectError);
  EXPECT_TRUE(glob_match("*", "a.b"));
  EXPECT_TRUE(glob_match("blocks.*.mlp.*", "blocks.1.mlp.fc"));
  EXPECT_FALSE(glob_match("blocks.*.mlp", "blocks.1.mlp.fc"));
}

}  // namespace
}  // namespace mixp::inspect
