// Observers: hand-computed cases and torch 1.13's observers (tests/golden/quant).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/qkernels.h"
#include "mixp/mixp.h"
#include "mixp/quant/observer.h"
#include "quant_test_util.h"

namespace mixp::quant {
namespace {

using testing::fixture;
using testing::floats;

Tensor vec(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector(v, Shape{n});
}

TEST(Observer, MinMaxHandComputed) {
  MinMaxObserver o;  // quint8 affine
  EXPECT_FALSE(o.has_data());
  EXPECT_EQ(o.qparams()[0].scale, 1.0f);  // PyTorch's default before any data
  o.observe(vec({-1.0f, 2.0f, 0.5f}));
  o.observe(vec({3.0f, -0.5f}));
  EXPECT_EQ(o.min_vals()[0], -1.0f);
  EXPECT_EQ(o.max_vals()[0], 3.0f);
  const QParams q = o.qparams()[0];
  // scale = (3 - -1) / 255; zp = 0 - round(-1 / scale) = round(63.75) = 64
  EXPECT_EQ(q.scale, 4.0f / 255.0f);
  EXPECT_EQ(q.zero_point, 64);
  EXPECT_EQ(q.qmin, 0);
  EXPECT_EQ(q.qmax, 255);
}

TEST(Observer, PositiveRangeKeepsZeroExact) {
  MinMaxObserver o;
  o.observe(vec({0.5f, 2.0f}));  // min_neg = min(0.5, 0) = 0
  const QParams q = o.qparams()[0];
  EXPECT_EQ(q.zero_point, 0);
  EXPECT_EQ(q.scale, 2.0f / 255.0f);
}

TEST(Observer, MovingAverageHandComputed) {
  MovingAverageMinMaxObserver o;  // c = 0.01
  o.observe(vec({-1.0f, 2.0f}));  // first batch: taken as is
  EXPECT_EQ(o.min_vals()[0], -1.0f);
  EXPECT_EQ(o.max_vals()[0], 2.0f);
  o.observe(vec({-3.0f, 4.0f}));
  const float c = 0.01f;
  EXPECT_EQ(o.min_vals()[0], -1.0f + c * (-3.0f - -1.0f));  // -1.02 in fp32
  EXPECT_EQ(o.max_vals()[0], 2.0f + c * (4.0f - 2.0f));
}

TEST(Observer, PerChannelSymmetricHandComputed) {
  PerChannelMinMaxObserver o(2);  // qint8 symmetric, axis 0
  o.observe(from_vector(std::vector<float>{1.0f, -2.0f, 3.0f, 4.0f}, Shape{2, 2}));
  const auto q = o.qparams();
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].scale, 2.0f / 127.5f);  // max(|-2|, 1) / ((127 - -128) / 2)
  EXPECT_EQ(q[1].scale, 4.0f / 127.5f);
  EXPECT_EQ(q[0].zero_point, 0);
  EXPECT_THROW(o.observe(from_vector(std::vector<float>{1, 2, 3}, Shape{3, 1})),
               std::invalid_argument);  // 3 channels for an observer of 2
}

TEST(Observer, NonFiniteBatchesLeaveStatisticsUnchanged) {
  MovingAverageMinMaxObserver o;
  o.observe(vec({-1.0f, 1.0f}));
  o.observe(vec({std::nanf(""), 100.0f}));
  o.observe(vec({std::numeric_limits<float>::infinity(), 0.0f}));
  EXPECT_EQ(o.min_vals()[0], -1.0f);
  EXPECT_EQ(o.max_vals()[0], 1.0f);
  PerChannelMinMaxObserver pc(2);
  pc.observe(from_vector(std::vector<float>{std::nanf(""), -1.0f, 0.5f, 2.0f}, Shape{2, 2}));
  EXPECT_FALSE(pc.has_data());  // channel 0 saw only a NaN batch
  EXPECT_EQ(pc.min_vals()[1], 0.5f);
}

TEST(Observer, RefusesWhatPyTorchRefuses) {
  EXPECT_THROW(MinMaxObserver({QDType::quint8, QScheme::symmetric, true}), std::invalid_argument);
  EXPECT_THROW(MovingAverageMinMaxObserver({}, 0.0f), std::invalid_argument);
}

TEST(Observer, MinMaxKernelTiersMatchScalar) {
  Generator g(9);
  const std::vector<float> base = randn({1000}, g).to_vector<float>();
  for (int64_t n : {0, 1, 15, 16, 17, 999, 1000}) {
    for (int poison = 0; poison < 3; ++poison) {
      std::vector<float> x(base.begin(), base.begin() + n);
      if (poison == 1 && n > 3) x[size_t(n) / 2] = std::nanf("");
      if (poison == 2 && n > 3) x[size_t(n) - 1] = -std::numeric_limits<float>::infinity();
      float mn = std::numeric_limits<float>::infinity(), mx = -mn;
      bool bad = false;
      for (float v : x) {
        bad = bad || !std::isfinite(v);
        if (std::isfinite(v)) mn = std::min(mn, v), mx = std::max(mx, v);
      }
      for (const cpu::qk::Kernels* k :
           {&cpu::qk::kernels_generic(), &cpu::qk::kernels_avx2(), &cpu::qk::kernels_avx512()}) {
        if (k == &cpu::qk::kernels_avx512() && simd_tier() != SimdTier::avx512) continue;
        if (k == &cpu::qk::kernels_avx2() && simd_tier() == SimdTier::scalar) continue;
        float a, b;
        bool nf;
        k->minmax(x.data(), n, &a, &b, &nf);
        EXPECT_EQ(nf, bad) << k->tier << " n=" << n;
        if (!bad) {
          EXPECT_EQ(a, mn) << k->tier << " n=" << n;
          EXPECT_EQ(b, mx) << k->tier << " n=" << n;
        }
      }
    }
  }
}

TEST(Observer, MatchesTorchFixture) {
  for (const auto& c : fixture()["observers"]) {
    ObserverSpec spec;
    spec.kind =
        c["kind"] == "moving_average" ? ObserverKind::moving_average : ObserverKind::min_max;
    spec.per_channel = c["per_channel"].get<bool>();
    spec.axis = c["axis"].get<int>();
    spec.averaging_constant = static_cast<float>(c["averaging_constant"].get<double>());
    spec.config.dtype = c["dtype"] == "qint8" ? QDType::qint8 : QDType::quint8;
    spec.config.scheme = c["scheme"] == "symmetric" ? QScheme::symmetric : QScheme::affine;
    spec.config.reduce_range = c["reduce_range"].get<bool>();
    const auto& b0 = c["batches"][0]["shape"];
    const int64_t channels = spec.per_channel ? b0[spec.axis].get<int64_t>() : 1;
    Observer o(spec, channels);
    for (size_t i = 0; i < c["batches"].size(); ++i) {
      const auto& b = c["batches"][i];
      Shape shape;
      for (const auto& d : b["shape"]) shape.push_back(d.get<int64_t>());
      o.observe(from_vector(floats(b["x"]), shape));
      const auto& a = c["after"][i];
      const std::vector<float> mn = floats(a["min"]), mx = floats(a["max"]),
                               sc = floats(a["scale"]);
      const auto q = o.qparams();
      ASSERT_EQ(q.size(), mn.size()) << c["name"];
      for (size_t k = 0; k < mn.size(); ++k) {
        EXPECT_EQ(o.min_vals()[k], mn[k]) << c["name"] << " batch " << i << " channel " << k;
        EXPECT_EQ(o.max_vals()[k], mx[k]) << c["name"] << " batch " << i << " channel " << k;
        EXPECT_EQ(q[k].scale, sc[k]) << c["name"] << " batch " << i << " channel " << k;
        EXPECT_EQ(q[k].zero_point, a["zero_point"][k].get<int32_t>())
            << c["name"] << " batch " << i << " channel " << k;
      }
    }
  }
}

}  // namespace
}  // namespace mixp::quant
