// Delayed-scaling state machine (TE's amax_and_scale_update) on crafted amax sequences, the scale
// formula, current scaling, and loading the state back with checks.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "mixp/amp/fp8_scaling.h"
#include "mixp/tensor/factories.h"

using namespace mixp;
using namespace mixp::amp;

namespace {

// TE's python reference (_default_get_amax_and_update_history + _default_sf_compute), in double
// where it does not matter and in fp32 for the scale, step by step.
struct TeModel {
  std::vector<float> h;
  float scale = 1.0f;
  bool most_recent = false;
  float fp8max = 448.0f;
  int margin = 0;
  void record(float a) { h[0] = std::fmax(h[0], a); }
  void update() {
    float amax = 0;
    for (float v : h) amax = std::fmax(amax, v);
    if (most_recent) amax = h[0];
    // torch.roll(h, -1); h[0] = 0
    std::vector<float> r(h.size());
    for (size_t i = 0; i < h.size(); ++i) r[i] = h[(i + 1) % h.size()];
    r[0] = 0.0f;
    h = r;
    if (amax > 0 && std::isfinite(amax)) {
      const float sf = (fp8max * std::ldexp(1.0f, -margin)) / amax;
      scale = std::isinf(sf) ? FLT_MAX : sf;
    }
  }
};

}  // namespace

TEST(Fp8Scaling, InitialStateIsTeDefaultsExceptTheHistoryLength) {
  Fp8ScalingState s(DType::fp8_e4m3);
  EXPECT_EQ(s.history_len(), 16);  // mixp's default (docs/fp8.md); TE's 1024 is te_delayed()
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.scale_inv(), 1.0f);
  for (float v : s.history()) EXPECT_EQ(v, 0.0f);
  Fp8Recipe r;
  EXPECT_EQ(r.amax_history_len, 16);
  EXPECT_EQ(r.amax_compute_algo, AmaxComputeAlgo::max);
  EXPECT_EQ(r.margin, 0);
  // TE's DelayedScaling defaults, by name: HYBRID, history 1024, max, margin 0.
  const Fp8Recipe te = Fp8Recipe::te_delayed();
  EXPECT_EQ(te.scaling, Fp8Scaling::delayed);
  EXPECT_EQ(te.format, Fp8Format::hybrid);
  EXPECT_EQ(te.amax_history_len, 1024);
  EXPECT_EQ(te.amax_compute_algo, AmaxComputeAlgo::max);
  EXPECT_EQ(te.margin, 0);
  EXPECT_EQ(r.dtype(Fp8Role::input), DType::fp8_e4m3);
  EXPECT_EQ(r.dtype(Fp8Role::weight), DType::fp8_e4m3);
  EXPECT_EQ(r.dtype(Fp8Role::grad_output), DType::fp8_e5m2);  // HYBRID
  EXPECT_EQ(Fp8Recipe::mxfp8().dtype(Fp8Role::grad_output), DType::fp8_e4m3);  // TE's MXFP8 default
}

TEST(Fp8Scaling, HistoryRollsLikeTransformerEngine) {
  Fp8ScalingState s(DType::fp8_e4m3, 4);
  // Step 0 records 2: after the update slot 0 moved to the end, slot 0 is zero again.
  s.record_amax(2.0f);
  EXPECT_EQ(s.history(0), 2.0f);
  s.update();
  EXPECT_EQ(s.history(), (std::vector<float>{0, 0, 0, 2}));
  s.record_amax(3.0f);
  s.update();
  EXPECT_EQ(s.history(), (std::vector<float>{0, 0, 2, 3}));
  s.record_amax(1.0f);
  s.update();
  EXPECT_EQ(s.history(), (std::vector<float>{0, 2, 3, 1}));
  s.record_amax(5.0f);
  s.update();
  // Slot 1 (the oldest, 2) became slot 0 and was zeroed: the window holds the last L-1 passes
  // plus the current one.
  EXPECT_EQ(s.history(), (std::vector<float>{0, 3, 1, 5}));
  s.record_amax(0.5f);
  s.update();
  EXPECT_EQ(s.history(), (std::vector<float>{0, 1, 5, 0.5f}));
}

TEST(Fp8Scaling, ScaleComesFromPreviousStepsOnly) {
  Fp8ScalingState s(DType::fp8_e4m3, 8);
  // The scale a step quantizes with is the one before that step's amax is recorded.
  const float amaxes[] = {4.0f, 8.0f, 2.0f, 1.0f};
  std::vector<float> used;
  for (float a : amaxes) {
    used.push_back(s.scale());  // what the cast of this step multiplies by
    s.record_amax(a);
    s.update();
  }
  EXPECT_EQ(used[0], 1.0f);           // step 0: nothing seen yet
  EXPECT_EQ(used[1], 448.0f / 4.0f);  // from step 0's amax
  EXPECT_EQ(used[2], 448.0f / 8.0f);  // max of {4, 8}
  EXPECT_EQ(used[3], 448.0f / 8.0f);  // max of {4, 8, 2}
  EXPECT_EQ(s.scale(), 448.0f / 8.0f);
  EXPECT_EQ(s.scale_inv(), 1.0f / (448.0f / 8.0f));
}

TEST(Fp8Scaling, MaxVersusMostRecent) {
  Fp8ScalingState mx(DType::fp8_e4m3, 16, AmaxComputeAlgo::max);
  Fp8ScalingState mr(DType::fp8_e4m3, 16, AmaxComputeAlgo::most_recent);
  for (float a : {10.0f, 1.0f}) {
    mx.record_amax(a);
    mx.update();
    mr.record_amax(a);
    mr.update();
  }
  EXPECT_EQ(mx.scale(), 44.8f);         // 448 / 10
  EXPECT_EQ(mr.scale(), 448.0f / 1.0f);  // only the last pass
}

TEST(Fp8Scaling, WindowForgetsAfterHistoryLength) {
  Fp8ScalingState s(DType::fp8_e4m3, 3);
  s.record_amax(100.0f);
  s.update();
  EXPECT_EQ(s.scale(), 4.48f);
  s.record_amax(1.0f);
  s.update();
  s.record_amax(1.0f);
  s.update();
  EXPECT_EQ(s.scale(), 4.48f);  // 100 is still in the window of 3
  s.record_amax(1.0f);
  s.update();
  EXPECT_EQ(s.scale(), 448.0f);  // now it has left
}

TEST(Fp8Scaling, Margin) {
  Fp8ScalingState s(DType::fp8_e4m3, 4, AmaxComputeAlgo::max, 2);
  s.record_amax(7.0f);
  s.update();
  EXPECT_EQ(s.scale(), (448.0f * 0.25f) / 7.0f);  // fp8_max / amax / 2^margin
  Fp8ScalingState g(DType::fp8_e5m2, 4, AmaxComputeAlgo::max, 1);
  g.record_amax(3.0f);
  g.update();
  EXPECT_EQ(g.scale(), (57344.0f * 0.5f) / 3.0f);
}

TEST(Fp8Scaling, ZeroInfAndNanAmaxKeepThePreviousScale) {
  Fp8ScalingState s(DType::fp8_e4m3, 1);  // length 1: the window is the current pass only
  s.record_amax(2.0f);
  s.update();
  EXPECT_EQ(s.scale(), 224.0f);
  s.update();  // nothing recorded: amax 0
  EXPECT_EQ(s.scale(), 224.0f);
  s.record_amax(std::numeric_limits<float>::infinity());
  s.update();
  EXPECT_EQ(s.scale(), 224.0f);
  EXPECT_EQ(s.history(0), 0.0f);
  s.record_amax(std::nanf(""));  // ignored by the max
  EXPECT_EQ(s.history(0), 0.0f);
  s.update();
  EXPECT_EQ(s.scale(), 224.0f);
  // An amax so small that 448 / amax overflows fp32: FLT_MAX.
  s.record_amax(1e-39f);
  s.update();
  EXPECT_EQ(s.scale(), FLT_MAX);
  EXPECT_EQ(s.scale_inv(), 1.0f / FLT_MAX);
}

TEST(Fp8Scaling, MatchesTheTeReferenceOnALongSequence) {
  for (bool most_recent : {false, true}) {
    for (int margin : {0, 3}) {
      Fp8ScalingState s(DType::fp8_e5m2, 7,
                        most_recent ? AmaxComputeAlgo::most_recent : AmaxComputeAlgo::max, margin);
      TeModel ref;
      ref.h.assign(7, 0.0f);
      ref.most_recent = most_recent;
      ref.fp8max = 57344.0f;
      ref.margin = margin;
      uint32_t st = 12345;
      for (int step = 0; step < 60; ++step) {
        ASSERT_EQ(s.scale(), ref.scale) << "step " << step;
        const int k = step % 3;  // 0..2 casts per pass (e.g. grad accumulation)
        for (int c = 0; c < k; ++c) {
          st = st * 1664525u + 1013904223u;
          const float a = (step % 11 == 5) ? 0.0f : std::ldexp(float(st % 1000) + 1, int(st % 17) - 8);
          s.record_amax(a);
          ref.record(a);
        }
        s.update();
        ref.update();
        ASSERT_EQ(s.history(), ref.h) << "step " << step;
      }
    }
  }
}

TEST(Fp8Scaling, ScaleFormulaAndCurrentScaling) {
  EXPECT_EQ(fp8_max(DType::fp8_e4m3), 448.0f);
  EXPECT_EQ(fp8_max(DType::fp8_e5m2), 57344.0f);
  EXPECT_THROW(fp8_max(DType::bf16), std::invalid_argument);
  EXPECT_EQ(fp8_current_scale(2.0f, 448.0f, 0), 224.0f);
  EXPECT_EQ(fp8_current_scale(0.0f, 448.0f, 0), 1.0f);  // TE: no information -> 1
  EXPECT_EQ(fp8_current_scale(INFINITY, 448.0f, 0), 1.0f);
  EXPECT_EQ(fp8_current_scale(NAN, 448.0f, 0), 1.0f);
  EXPECT_EQ(fp8_current_scale(2.0f, 448.0f, 1), 112.0f);
  EXPECT_EQ(fp8_scale_from_amax(0.0f, 448.0f, 0, 3.0f), 3.0f);
}

TEST(Fp8Scaling, TensorsAreTheStateAndLoadChecksShapes) {
  Fp8ScalingState s(DType::fp8_e4m3, 4);
  auto t = s.tensors();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].first, "amax_history");
  EXPECT_EQ(t[1].first, "scale");
  EXPECT_EQ(t[2].first, "scale_inv");
  s.record_amax(8.0f);
  s.update();
  EXPECT_EQ(t[1].second.item(), 56.0);  // the handles see the state

  Fp8ScalingState d(DType::fp8_e4m3, 4);
  std::vector<std::pair<std::string, Tensor>> entries;
  for (auto& [n, x] : s.tensors()) entries.emplace_back("fc1.fp8_input_" + n, x.clone());
  d.load(entries, "fc1.fp8_input_");
  EXPECT_EQ(d.scale(), 56.0f);
  EXPECT_EQ(d.history(), s.history());

  Fp8ScalingState longer(DType::fp8_e4m3, 1024);
  try {
    longer.load(entries, "fc1.fp8_input_");
    FAIL() << "expected a shape error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'fc1.fp8_input_amax_history' has shape [4]"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[1024]"), std::string::npos) << e.what();
  }
  entries.pop_back();
  try {
    d.load(entries, "fc1.fp8_input_");
    FAIL() << "expected a missing-tensor error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'fc1.fp8_input_scale_inv' is missing"),
              std::string::npos)
        << e.what();
  }
}

TEST(Fp8Scaling, BadArguments) {
  EXPECT_THROW(Fp8ScalingState(DType::fp8_e4m3, 0), std::invalid_argument);
  EXPECT_THROW(Fp8ScalingState(DType::fp16, 4), std::invalid_argument);
  Fp8Recipe r;
  r.amax_history_len = 0;
  EXPECT_THROW(r.validate(), std::invalid_argument);
  r = Fp8Recipe::mxfp8();
  r.mx_block = 0;
  EXPECT_THROW(r.validate(), std::invalid_argument);
}
