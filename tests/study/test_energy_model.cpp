// The energy estimate from counts: the cited table, its derivations, and a tiny model whose
// multiply-adds, bytes and joules are worked out by hand here.
#include <gtest/gtest.h>

#include "mixp/study/energy_model.h"

namespace mixp::study {
namespace {

constexpr double kPj = 1e-12;

TEST(EnergyModel, TableValuesFromHorowitz2014) {
  const EnergyTable& t = horowitz_45nm();
  auto mac = [&](MacKind k) { return t.mac_pj[static_cast<int>(k)]; };
  EXPECT_DOUBLE_EQ(mac(MacKind::fp32), 3.7 + 0.9);  // fp32 mult + fp32 add
  EXPECT_DOUBLE_EQ(mac(MacKind::fp16), 1.1 + 0.9);  // fp16 mult, fp32 accumulate
  EXPECT_DOUBLE_EQ(mac(MacKind::int8), 0.2 + 0.1);  // int8 mult, int32 accumulate
  EXPECT_DOUBLE_EQ(t.sram_pj_per_byte, 10.0 / 8);   // 64-bit read of an 8 KB SRAM
  EXPECT_DOUBLE_EQ(t.dram_pj_per_byte_low, 1300.0 / 8);
  EXPECT_DOUBLE_EQ(t.dram_pj_per_byte_high, 2600.0 / 8);
  EXPECT_DOUBLE_EQ(t.dram_pj_per_byte, 1950.0 / 8);
  EXPECT_NE(std::string(t.citation).find("ISSCC 2014"), std::string::npos);
}

TEST(EnergyModel, DerivationsGoThroughTheTablesPoints) {
  // The multiply fit passes exactly through fp16 (11-bit significand) and fp32 (24-bit).
  EXPECT_NEAR(float_multiply_pj(11), 1.1, 1e-12);
  EXPECT_NEAR(float_multiply_pj(24), 3.7, 1e-12);
  // bf16 (8-bit significand): 1.1 + (8^2 - 11^2) * (3.7 - 1.1) / (24^2 - 11^2).
  const double bf16_mult = 1.1 + (64.0 - 121.0) * 2.6 / 455.0;
  EXPECT_NEAR(float_multiply_pj(8), bf16_mult, 1e-12);
  EXPECT_NEAR(bf16_mult, 0.7743, 1e-4);
  EXPECT_NEAR(float_multiply_pj(53), 16.46, 0.01);  // fp64, extrapolated
  EXPECT_NEAR(float_add_pj(16), 0.4, 1e-12);
  EXPECT_NEAR(float_add_pj(32), 0.9, 1e-12);
  EXPECT_NEAR(float_add_pj(64), 1.9, 1e-12);
  // The table's own integer multiplies follow the square law: int8 0.2 -> int32 3.2 ~ 3.1.
  EXPECT_NEAR(int_multiply_pj(32), 3.1, 0.1 + 1e-12);
  EXPECT_DOUBLE_EQ(int_multiply_pj(4), 0.05);
  // Fewer bits never cost more.
  const EnergyTable& t = horowitz_45nm();
  for (auto [wide, narrow] :
       {std::pair{MacKind::fp64, MacKind::fp32}, std::pair{MacKind::fp32, MacKind::tf32},
        std::pair{MacKind::tf32, MacKind::bf16}, std::pair{MacKind::bf16, MacKind::fp8},
        std::pair{MacKind::fp8, MacKind::int8}, std::pair{MacKind::int8, MacKind::int4}}) {
    EXPECT_GT(t.mac_pj[int(wide)], t.mac_pj[int(narrow)]) << to_string(wide);
  }
}

TEST(EnergyModel, MacKindOfEachFormat) {
  EXPECT_EQ(mac_kind_for(DType::fp32), MacKind::fp32);
  EXPECT_EQ(mac_kind_for(DType::tf32), MacKind::tf32);
  EXPECT_EQ(mac_kind_for(DType::bf16), MacKind::bf16);
  EXPECT_EQ(mac_kind_for(DType::fp8_e5m2), MacKind::fp8);
  EXPECT_EQ(mac_kind_for(DType::fp4_e2m1), MacKind::fp8);
  EXPECT_EQ(mac_kind_for(DType::uint8), MacKind::int8);
  EXPECT_EQ(mac_kind_for(DType::int4), MacKind::int4);
  EXPECT_EQ(mac_kind_for(DType::nf4), MacKind::bf16);
  EXPECT_THROW(mac_kind_for(DType::boolean), std::invalid_argument);
  EXPECT_THROW(mac_kind_for(DType::int32), std::invalid_argument);
}

// One linear layer, 4 inputs -> 3 outputs, on a batch of 2: y[2x3] = x[2x4] W^T.
TEST(EnergyModel, TinyLinearByHandFp32) {
  OpCounts c = count_linear(/*batch=*/2, /*in=*/4, /*out=*/3, DType::fp32);
  EXPECT_EQ(c[MacKind::fp32], 24.0);  // 2 * 3 * 4
  EXPECT_EQ(c.total_macs(), 24.0);
  // x: 8 values, W: 12, y: 6, four bytes each, each moved once (tiles are larger than the GEMM).
  EXPECT_EQ(c.dram_bytes, (8 + 12 + 6) * 4.0);
  EXPECT_EQ(c.sram_bytes, (8 + 12 + 6) * 4.0);

  EnergyBreakdown b = estimate_energy(c);
  const double compute = 24 * 4.6 * kPj;   // 110.4 pJ
  const double sram = 104 * 1.25 * kPj;    // 130 pJ
  const double dram = 104 * 243.75 * kPj;  // 25,350 pJ
  EXPECT_NEAR(b.mac_joules[int(MacKind::fp32)], compute, 1e-24);
  EXPECT_NEAR(b.compute_joules, compute, 1e-24);
  EXPECT_NEAR(b.sram_joules, sram, 1e-24);
  EXPECT_NEAR(b.dram_joules, dram, 1e-22);
  EXPECT_NEAR(b.total_joules, 25590.4 * kPj, 1e-21);
  EXPECT_NEAR(estimate_joules(c), 25590.4 * kPj, 1e-21);
  EXPECT_NEAR(b.total_low_joules, (110.4 + 130 + 104 * 162.5) * kPj, 1e-21);
  EXPECT_NEAR(b.total_high_joules, (110.4 + 130 + 104 * 325) * kPj, 1e-21);
}

TEST(EnergyModel, TinyLinearByHandBf16) {
  OpCounts c = count_linear(2, 4, 3, DType::bf16);
  EXPECT_EQ(c[MacKind::bf16], 24.0);
  EXPECT_EQ(c[MacKind::fp32], 0.0);
  EXPECT_EQ(c.dram_bytes, 26 * 2.0);                                   // half the bytes of fp32
  const double bf16_mac = (1.1 + (64.0 - 121.0) * 2.6 / 455.0) + 0.9;  // derived mult + fp32 add
  const double expected = 24 * bf16_mac + 52 * 1.25 + 52 * 243.75;     // pJ
  EXPECT_NEAR(estimate_joules(c) / kPj, expected, 1e-9);
  EXPECT_NEAR(expected, 12780.18, 0.01);
  // bf16 costs about half of fp32 here: the bytes dominate at this size.
  EXPECT_LT(estimate_joules(c), 0.51 * estimate_joules(count_linear(2, 4, 3, DType::fp32)));
}

TEST(EnergyModel, TrainingStepCountsBackwardTwice) {
  OpCounts fwd = count_linear(2, 4, 3, DType::fp16);
  OpCounts step = count_linear(2, 4, 3, DType::fp16, /*backward=*/true);
  EXPECT_EQ(step[MacKind::fp16], 3 * fwd[MacKind::fp16]);  // y, dX and dW: 72 MACs
  // Per-step counts scale by the number of steps.
  OpCounts run = step * 100.0;
  EXPECT_EQ(run[MacKind::fp16], 7200.0);
  EXPECT_NEAR(estimate_joules(run), 100 * estimate_joules(step), 1e-18);
  OpCounts sum = fwd + fwd;
  EXPECT_EQ(sum.dram_bytes, 2 * fwd.dram_bytes);
}

TEST(EnergyModel, TilingRereadsOperandsFromSram) {
  // 128 x 128 x 10 with 64-wide tiles: A is read ceil(128/64) = 2 times, B 2 times.
  OpCounts c = count_matmul(128, 128, 10, DType::fp32, DType::fp32, GemmTraffic{64});
  const double a = 128 * 10 * 4, b = 10 * 128 * 4, out = 128 * 128 * 4;
  EXPECT_EQ(c.dram_bytes, a + b + out);
  EXPECT_EQ(c.sram_bytes, 2 * a + 2 * b + out);
  OpCounts untiled = count_matmul(128, 128, 10, DType::fp32, DType::fp32, GemmTraffic{0});
  EXPECT_EQ(untiled.sram_bytes, a + b + out);
  // int4 operands are packed two to a byte.
  OpCounts q = count_matmul(2, 2, 2, DType::int4, DType::int32, GemmTraffic{0});
  EXPECT_EQ(q.dram_bytes, 4 * 0.5 + 4 * 0.5 + 4 * 4.0);
  EXPECT_THROW(count_matmul(0, 1, 1, DType::fp32, DType::fp32), std::invalid_argument);
}

TEST(EnergyModel, Conv2dAsIm2colGemm) {
  // 1 -> 2 channels, 3x3, padding 1, on one 4x4 image: 16 output pixels x 2 channels x 9 taps.
  Conv2dShape s;
  s.in_channels = 1;
  s.out_channels = 2;
  s.in_h = s.in_w = 4;
  s.kernel_h = s.kernel_w = 3;
  s.padding = 1;
  OpCounts c = count_conv2d(s, DType::fp32);
  EXPECT_EQ(c[MacKind::fp32], 16 * 2 * 9);
  EXPECT_EQ(count_conv2d(s, DType::fp32, true)[MacKind::fp32], 3 * 288);
  s.groups = 2;
  s.in_channels = 2;
  EXPECT_EQ(count_conv2d(s, DType::fp32)[MacKind::fp32], 2 * (16 * 1 * 9));  // depthwise
}

}  // namespace
}  // namespace mixp::study
