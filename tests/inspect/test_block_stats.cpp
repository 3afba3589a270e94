// inspect::block_scaled_stats and `mixp inspect blocks` (issue 32; docs/inspect.md
// "Block-scaled formats"): counts on tensors built so that each case is known by hand.
#include <gtest/gtest.h>

#include <cstring>

#include "common/cli_runner.h"
#include "mixp/inspect/block_stats.h"
#include "mixp/io/convert_safetensors.h"
#include "mixp/io/safetensors.h"

namespace mixp::test {
namespace {

// 2 x 32 under nvfp4 1x16: four blocks. The tensor amax 1000 (block 1) gives the global encode
// scale 2688 / 1000 = 2.688. Block 0 holds 1e-6: its scale 1e-6 * 2.688 / 6 is below half the
// smallest E4M3 subnormal, so it flushes to 0 and all 16 values underflow. Block 2 is zeros.
// Block 3 holds 1.0 and 0.01: its scale 0.448 rounds down to the E4M3 0.4375, so 1.0 encodes as
// 1.0 * 6.144 > 6 and is clamped (saturated), and 0.01 * 6.144 < 0.25 rounds to 0 (underflow).
std::vector<float> hand_tensor() {
  std::vector<float> x(64, 0.0f);
  for (int c = 0; c < 16; ++c) x[static_cast<size_t>(c)] = 1e-6f;
  x[16] = 1000.0f;
  x[32 + 16] = 1.0f;
  x[32 + 17] = 0.01f;
  return x;
}

TEST(BlockStats, Nvfp4ByHand) {
  const inspect::BlockScaledStats s =
      inspect::block_scaled_stats(hand_tensor(), 2, 32, {BlockScheme::nvfp4, 1, false});
  EXPECT_EQ(s.blocks, 4);
  EXPECT_EQ(s.zeros, 64 - 19);
  EXPECT_EQ(s.underflow, 17);
  EXPECT_EQ(s.saturated, 1);
  EXPECT_EQ(s.blocks_with_underflow, 2);
  EXPECT_EQ(s.blocks_with_saturation, 1);
  EXPECT_EQ(s.scale_saturated, 1);
  EXPECT_DOUBLE_EQ(s.share_scale_saturated(), 0.25);
  EXPECT_EQ(s.block_underflow, (std::vector<int32_t>{16, 0, 0, 1}));
  EXPECT_EQ(s.block_saturated, (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(s.block_scale_saturated, (std::vector<uint8_t>{1, 0, 0, 0}));
  // 16x16 tiles: two tiles side by side. The left one holds only the 1e-6 values (flushed); the
  // right one 1000, 1.0 and 0.01, whose scale 448 puts 1.0 and 0.01 below E2M1's 0.25 step.
  const inspect::BlockScaledStats t =
      inspect::block_scaled_stats(hand_tensor(), 2, 32, {BlockScheme::nvfp4, 16, false});
  EXPECT_EQ(t.blocks, 2);
  EXPECT_EQ(t.scale_saturated, 1);
  EXPECT_EQ(t.underflow, 18);
  EXPECT_EQ(t.saturated, 0);
}

TEST(BlockStats, ScalesAtTheirFormatsLimits) {
  // A block whose amax is 1e-40 (an fp32 subnormal): mxfp4 needs 2^-137 < 2^-127, fp8-block a
  // scale 448 / 1e-40 > FLT_MAX. The other block is ordinary.
  std::vector<float> x(256, 0.0f);
  x[0] = 1e-40f;
  x[128] = 3.0f;
  const inspect::BlockScaledStats mx =
      inspect::block_scaled_stats(x, 1, 256, {BlockScheme::mxfp4, 1, false});
  EXPECT_EQ(mx.blocks, 8);
  EXPECT_EQ(mx.scale_saturated, 1);
  EXPECT_EQ(mx.block_scale_saturated[0], 1);
  EXPECT_EQ(mx.saturated, 0);  // the ceil rule never clamps an element
  const inspect::BlockScaledStats f8 =
      inspect::block_scaled_stats(x, 1, 256, {BlockScheme::fp8_block, 1, false});
  EXPECT_EQ(f8.blocks, 2);
  EXPECT_EQ(f8.scale_saturated, 1);
  EXPECT_EQ(f8.block_scale_saturated, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(f8.saturated, 0);
  EXPECT_THROW(inspect::block_scaled_stats(std::vector<float>{1.0f, NAN}, 1, 2,
                                           {BlockScheme::mxfp4, 1, false}),
               std::invalid_argument);
}

// From stored codes (a file in the nvfp4 layout): the flushed tile of 1e-6 values encodes as +-6
// with scale 0 (16 values at the top, the block's scale saturated), 1000 and the clamped 1.0 are
// at the top too, 0.01 is a zero code.
TEST(BlockStats, FromStoredCodes) {
  const BlockScaledTensor q =
      block_scaled_quantize(hand_tensor(), 2, 32, {BlockScheme::nvfp4, 1, false});
  const inspect::BlockScaledStats s = inspect::stored_block_stats(q);
  EXPECT_TRUE(s.from_codes);
  EXPECT_EQ(s.blocks, 4);
  EXPECT_EQ(s.at_max, 18);
  EXPECT_EQ(s.zeros, 64 - 18);
  EXPECT_EQ(s.underflow, -1);
  EXPECT_EQ(s.block_scale_saturated, (std::vector<uint8_t>{1, 0, 0, 0}));
  // fp8-block: a block of amax 1e-40 has its scale clamped to FLT_MAX (decoding scale 1/FLT_MAX).
  std::vector<float> x(256, 0.0f);
  x[0] = 1e-40f;
  x[128] = 3.0f;
  const inspect::BlockScaledStats f8 = inspect::stored_block_stats(
      block_scaled_quantize(x, 1, 256, {BlockScheme::fp8_block, 1, false}));
  EXPECT_EQ(f8.block_scale_saturated, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(f8.at_max, 1);  // 3.0 at scale 448 / 3
}

TEST(BlockStats, Cli) {
  TempDir dir;
  SafeTensorsFile f;
  const std::vector<float> x = hand_tensor();
  SafeTensor w{"w", DType::fp32, {2, 32}, std::vector<std::byte>(x.size() * 4)};
  std::memcpy(w.data.data(), x.data(), w.data.size());
  f.tensors.push_back(w);
  SafeTensor b{"b", DType::fp32, {2}, std::vector<std::byte>(8)};
  f.tensors.push_back(b);
  const std::string path = dir / "m.safetensors";
  write_safetensors(path, f);
  CliResult r =
      run_cli("inspect blocks '" + path + "' --format nvfp4 --tile 1x16 --per-block --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.json();
  EXPECT_EQ(j["tile"], "1x16");
  ASSERT_EQ(j["tensors"].size(), 1u);
  EXPECT_EQ(j["tensors"][0]["underflow"], 17);
  EXPECT_EQ(j["tensors"][0]["saturated"], 1);
  EXPECT_EQ(j["tensors"][0]["share_scale_saturated"], 0.25);
  EXPECT_EQ(j["tensors"][0]["per_block"]["underflow"], nlohmann::json({16, 0, 0, 1}));
  EXPECT_EQ(j["skipped"], nlohmann::json({"b"}));
  r = run_cli("inspect blocks '" + path + "' --format nvfp4 --tile 1x16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("17 (89.5%)"), std::string::npos) << r.out;  // of the 19 nonzero values
  // The same tensor stored as nvfp4 (1x16), reported from its codes without --format.
  FileConvertOptions to;
  to.to = "nvfp4";
  to.tile_rows = 1;
  const std::string q = dir / "q.safetensors";
  write_safetensors(q, convert_safetensors(f, to).file);
  r = run_cli("inspect blocks '" + q + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json k = r.json();
  ASSERT_EQ(k["tensors"].size(), 1u);
  EXPECT_EQ(k["tensors"][0]["source"], "codes");
  EXPECT_EQ(k["tensors"][0]["tile"], "1x16");
  EXPECT_EQ(k["tensors"][0]["at_max"], 18);
  EXPECT_EQ(k["tensors"][0]["scale_saturated"], 1);
  EXPECT_TRUE(k["tensors"][0]["underflow"].is_null());
  EXPECT_EQ(k["skipped"], nlohmann::json({"b"}));
  EXPECT_EQ(run_cli("inspect blocks '" + q + "' --tile 1x16").exit_code, 2);
  EXPECT_EQ(run_cli("inspect blocks '" + path + "' --format nvfp5").exit_code, 2);
  EXPECT_EQ(run_cli("inspect blocks '" + path + "' --format mxfp4 --tile 32x32").exit_code, 2);
  EXPECT_EQ(run_cli("inspect blocks '" + (dir / "no").string() + "' --format mxfp4").exit_code, 1);
}

}  // namespace
}  // namespace mixp::test
