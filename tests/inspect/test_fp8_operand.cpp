// The inspector's fp8-operand records (tensor_inspector.h): each operand of an FP8 layer's
// per-tensor cast, at the scale the cast used, in the format it is cast to; its underflow counts
// the nonzero values the cast flushes to zero. Checked on constructed operands whose flushed
// values are known.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "common/temp_dir.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/inspect/inspect_spec.h"
#include "mixp/inspect/tensor_inspector.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::inspect {
namespace {

class OneLayer : public nn::Module {
 public:
  explicit OneLayer(Generator& gen) : Module("net") {
    fc_ = register_module("fc", std::make_shared<amp::Fp8Linear>(8, 2, gen, amp::Fp8Recipe{}));
  }
  Tensor forward(const Tensor& x) override { return (*fc_)(x); }
  amp::Fp8Linear& fc() { return *fc_; }

 private:
  std::shared_ptr<amp::Fp8Linear> fc_;
};

void set_scale(amp::Fp8ScalingState& s, float scale) {
  NoGradGuard ng;
  for (auto& [name, t] : s.tensors()) {
    if (name == "scale") t.fill_(scale);
    if (name == "scale_inv") t.fill_(1.0 / scale);
  }
}

const FormatStats& only_format(const StatRecord& r, StatFormat f) {
  EXPECT_EQ(r.stats.formats.size(), 1u);
  EXPECT_EQ(r.stats.formats.at(0).format, f);
  return r.stats.formats.at(0);
}

}  // namespace

TEST(Fp8Operand, RecordsTheValuesEachCastFlushesToZero) {
  test::TempDir dir;
  Generator gen(1);
  OneLayer net(gen);
  {
    NoGradGuard ng;
    Tensor w = net.fc().weight();
    w.fill_(0.25);
  }
  set_scale(*net.fc().meta().state(amp::Fp8Role::input), 4.0f);
  // x * 4 against E4M3's smallest subnormal 2^-9 (half of it, 2^-10, rounds to even: 0):
  //   1, 0.5 kept; 2^-13 -> 2^-11 and 2^-14 -> 2^-12 flushed; 0 is not counted; 2^-11 -> 2^-9
  //   kept; 2^-12 -> 2^-10 (the tie) flushed; 3 x 2^-13 -> 1.5 x 2^-10 rounds up to 2^-9: kept.
  const float e = std::ldexp(1.0f, -13);
  const Tensor x = from_vector(std::vector<float>{1.0f, 0.5f, e, e / 2, 0.0f, 4 * e, 2 * e, 3 * e},
                               Shape{1, 8});
  InspectSpec spec = parse_inspect_spec("roles=fp8-operand,formats=bf16");
  spec.out = dir / "s.jsonl";
  TensorInspector ins(spec);
  ins.attach(net);
  ins.begin_step(1, 1.0);
  Tensor y;
  {
    amp::Fp8Autocast fp8;
    y = net(x);
  }
  // The gradient of y is c: E5M2 at the initial scale 1 flushes 2^-18 (below 2^-17, half of
  // its smallest subnormal 2^-16) and keeps 1.
  const Tensor c = from_vector(std::vector<float>{1.0f, std::ldexp(1.0f, -18)}, Shape{1, 2});
  sum(mul(y, c)).backward();
  ins.detach();

  const auto& recs = ins.records();
  ASSERT_EQ(recs.size(), 3u);  // input, weight (forward), grad_output (backward)
  EXPECT_EQ(recs[0].tensor, "input");
  EXPECT_EQ(recs[0].role, Role::fp8_operand);
  EXPECT_EQ(recs[0].module, "fc");
  EXPECT_EQ(recs[0].loss_scale, 4.0);  // the scale the cast used
  EXPECT_EQ(recs[0].stats.zeros, 1);
  EXPECT_EQ(only_format(recs[0], StatFormat::fp8_e4m3).underflow, 3);  // formats= does not apply
  EXPECT_EQ(recs[1].tensor, "weight");
  EXPECT_EQ(only_format(recs[1], StatFormat::fp8_e4m3).underflow, 0);
  EXPECT_EQ(recs[2].tensor, "grad_output");
  EXPECT_EQ(recs[2].loss_scale, 1.0);
  EXPECT_EQ(only_format(recs[2], StatFormat::fp8_e5m2).underflow, 1);

  // Not inspected: nothing recorded; detached: the observer is gone.
  ins.end_steps();
  {
    amp::Fp8Autocast fp8;
    y = net(x);
  }
  EXPECT_EQ(ins.records().size(), 3u);
}

}  // namespace mixp::inspect
