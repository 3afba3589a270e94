// The inspector's block statistics during training (docs/inspect.md "fp8-operand", issue 32):
// under a block recipe every operand a layer quantizes gets an fp8-operand record whose `block`
// object holds the counts `mixp inspect blocks` reports for the same tensor (checked through the
// CLI on the record's dumped values), on operands built to underflow, clamp and saturate scales.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <set>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/inspect/inspect_spec.h"
#include "mixp/inspect/tensor_inspector.h"
#include "mixp/io/safetensors.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::inspect {
namespace {

class OneLayer : public nn::Module {
 public:
  OneLayer(int64_t in, int64_t out, Generator& gen, const amp::Fp8Recipe& r) : Module("net") {
    fc_ = register_module("fc", std::make_shared<amp::Fp8Linear>(in, out, gen, r));
  }
  Tensor forward(const Tensor& x) override { return (*fc_)(x); }
  amp::Fp8Linear& fc() { return *fc_; }

 private:
  std::shared_ptr<amp::Fp8Linear> fc_;
};

// The record's dumped values as a one-tensor safetensors file, through `mixp inspect blocks`.
nlohmann::json cli_blocks(const test::TempDir& dir, const StatRecord& r, const std::string& format,
                          const std::string& tile) {
  std::ifstream in(dir / "dump" / r.dump, std::ios::binary);
  const int64_t n = r.shape[0] * r.shape[1];
  SafeTensor t{"t", DType::fp32, {r.shape[0], r.shape[1]}, std::vector<std::byte>(static_cast<size_t>(n) * 4)};
  in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  EXPECT_TRUE(in.good()) << r.dump;
  SafeTensorsFile f;
  f.tensors.push_back(t);
  const std::string path = dir / (r.tensor + ".safetensors");
  write_safetensors(path, f);
  const test::CliResult c =
      test::run_cli("inspect blocks '" + path + "' --format " + format + " --tile " + tile + " --json");
  EXPECT_EQ(c.exit_code, 0) << c.err;
  return c.json()["tensors"][0];
}

// Trains one step of a layer under `recipe` with the inspector on; returns its block records.
std::vector<StatRecord> one_step(const test::TempDir& dir, const amp::Fp8Recipe& recipe,
                                 const Tensor& w_values, const Tensor& x) {
  Generator gen(3);
  OneLayer net(w_values.size(1), w_values.size(0), gen, recipe);
  {
    NoGradGuard ng;
    Tensor wt = net.fc().weight();
    wt.copy_(w_values);
  }
  TensorInspector ins(parse_inspect_spec("roles=fp8-operand,out=" + (dir / "s.jsonl").string() +
                                         ",dump=" + (dir / "dump").string()));
  ins.attach(net);
  ins.begin_step(1, 1.0);
  Tensor y;
  {
    amp::Fp8Autocast fp8;
    y = net(x);
  }
  sum(y * 1e-3).backward();
  ins.detach();
  std::vector<StatRecord> out;
  for (const StatRecord& r : ins.records())
    if (r.role == Role::fp8_operand) out.push_back(r);
  return out;
}

void expect_as_cli(const test::TempDir& dir, const StatRecord& r, const std::string& format) {
  ASSERT_TRUE(r.block.has_value()) << r.tensor;
  const BlockScaledStats& b = *r.block;
  const std::string tile = std::to_string(b.options.tile_rows) + "x" + std::to_string(b.tile_cols);
  const nlohmann::json c = cli_blocks(dir, r, format, tile);
  SCOPED_TRACE(r.tensor + " " + tile);
  EXPECT_EQ(c["blocks"], b.blocks);
  EXPECT_EQ(c["zeros"], b.zeros);
  EXPECT_EQ(c["underflow"], b.underflow);
  EXPECT_EQ(c["saturated"], b.saturated);
  EXPECT_EQ(c["blocks_with_underflow"], b.blocks_with_underflow);
  EXPECT_EQ(c["blocks_with_saturation"], b.blocks_with_saturation);
  EXPECT_EQ(c["scale_saturated"], b.scale_saturated);
  EXPECT_DOUBLE_EQ(c["share_scale_saturated"].get<double>(), b.share_scale_saturated());
  // The JSON line carries the same numbers.
  const nlohmann::json j = nlohmann::json::parse(to_json_line(r));
  EXPECT_EQ(j["block"]["underflow"], b.underflow);
  EXPECT_EQ(j["block"]["saturated"], b.saturated);
  EXPECT_EQ(j["block"]["scale_saturated"], b.scale_saturated);
  EXPECT_EQ(j["block"]["format"], format);
  EXPECT_EQ(j["block"]["tile"], tile);
}

TEST(BlockOperand, Nvfp4RecordsMatchInspectBlocks) {
  test::TempDir dir;
  // W [16, 32]: row 0 holds 1000 next to 1e-6 values (one 16x16 tile: they underflow); tile
  // (0, 1) holds 1.0 and 0.01 as in tests/inspect/test_block_stats.cpp (a clamped 1.0).
  Tensor w = full({16, 32}, 0.0f);
  for (int64_t c = 0; c < 16; ++c) w.set_at({3, c}, 1e-6);
  w.set_at({0, 0}, 1000.0);
  w.set_at({5, 16}, 1.0);
  w.set_at({5, 17}, 0.01);
  Generator gen(7);
  Tensor x = randn({8, 32}, gen);
  x.set_at({0, 0}, 1e-9);
  x.requires_grad_();  // so that the input-gradient GEMM runs (its grad_output operand)
  const std::vector<StatRecord> recs = one_step(dir, amp::Fp8Recipe::nvfp4(), w, x);
  std::set<std::string> names;
  for (const StatRecord& r : recs) {
    names.insert(r.tensor);
    expect_as_cli(dir, r, "nvfp4");
  }
  EXPECT_EQ(names, (std::set<std::string>{"input", "weight", "grad_output", "input.columns",
                                          "grad_output.columns"}));
  for (const StatRecord& r : recs) {
    if (r.tensor != "weight") continue;
    EXPECT_EQ(r.block->options.tile_rows, 16);
    EXPECT_GE(r.block->underflow, 16);  // the 1e-6 values beside 1000
    EXPECT_GE(r.block->saturated, 1);
  }
}

TEST(BlockOperand, Fp8BlockRecordsMatchInspectBlocks) {
  test::TempDir dir;
  // K = 256: two 128-wide tiles per row. x row 1's second tile holds only 1e-37: 448 / vmax is
  // above FLT_MAX, so that tile's scale saturates; W's first 128x128 block mixes 1e4 and 1e-7.
  Tensor w = full({8, 256}, 0.5f);
  w.set_at({0, 0}, 1e4);
  w.set_at({1, 1}, 1e-7);
  Generator gen(9);
  Tensor x = randn({4, 256}, gen);
  for (int64_t c = 128; c < 256; ++c) x.set_at({1, c}, 1e-37);
  x.requires_grad_();
  const std::vector<StatRecord> recs = one_step(dir, amp::Fp8Recipe::fp8_block(), w, x);
  ASSERT_EQ(recs.size(), 5u);  // input, weight, grad_output and the two column-wise operands
  bool scale_saturated = false;
  for (const StatRecord& r : recs) {
    expect_as_cli(dir, r, "fp8-block");
    if (r.tensor == "input") {
      EXPECT_EQ(r.block->scale_saturated, 1);
      scale_saturated = true;
    }
    if (r.tensor == "weight") {
      EXPECT_EQ(r.block->underflow, 1);
    }
  }
  EXPECT_TRUE(scale_saturated);
}

}  // namespace
}  // namespace mixp::inspect
