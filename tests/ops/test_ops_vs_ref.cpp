// Every op on the cpu backend against the ref oracle: shapes, broadcasting, non-contiguous views,
// forward and backward (docs/architecture.md 6.3).
#include "ops/op_test_util.h"

namespace mixp {
namespace {
using namespace mixp::testing;
using V = std::vector<Tensor>;

TEST(CpuVsRef, BinaryBroadcasting) {
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {{{7}, {7}},       {{3, 5}, {3, 5}},       {{3, 5}, {5}},
                        {{3, 5}, {3, 1}}, {{4, 1, 6}, {1, 5, 1}}, {{2, 3, 4}, {}},
                        {{}, {2, 3}},     {{64, 300}, {300}},     {{300, 200}, {300, 200}}};
  for (const auto& c : cases) {
    const Tensor a = rnd(c.a, 1), b = rnd(c.b, 2);
    const Tensor bpos = add(mul(b, b), 0.5).detach();  // away from 0 for div
    expect_cpu_matches_ref("add " + c.a.str() + c.b.str(),
                           [](const V& v) { return add(v[0], v[1]); }, {a, b});
    expect_cpu_matches_ref("sub", [](const V& v) { return sub(v[0], v[1]); }, {a, b});
    expect_cpu_matches_ref("mul", [](const V& v) { return mul(v[0], v[1]); }, {a, b});
    expect_cpu_matches_ref("div", [](const V& v) { return div(v[0], v[1]); }, {a, bpos});
  }
}

TEST(CpuVsRef, NonContiguousOperands) {
  const Tensor a = rnd({6, 4}, 3).t();                  // [4, 6] transposed view
  const Tensor b = rnd({4, 12}, 4).slice(1, 0, 12, 2);  // [4, 6] with stride 2
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  expect_cpu_matches_ref("add views", [](const V& v) { return add(v[0], v[1]); }, {a, b});
  expect_cpu_matches_ref("mul views", [](const V& v) { return mul(v[0], v[1]); }, {a, b});
  expect_cpu_matches_ref("relu view", [](const V& v) { return relu(v[0]); }, {a});
  expect_cpu_matches_ref("gelu view", [](const V& v) { return gelu(v[0]); }, {b});
  expect_cpu_matches_ref("gelu tanh view", [](const V& v) { return gelu(v[0], GeluApprox::tanh); },
                         {b});
  expect_cpu_matches_ref("sin view", [](const V& v) { return sin(v[0]); }, {a});
  expect_cpu_matches_ref(
      "argmax view", [](const V& v) { return argmax(v[0], 1); }, {a}, 0.0);
  expect_cpu_matches_ref("sum view", [](const V& v) { return sum(v[0], {0}); }, {a});
  expect_cpu_matches_ref("softmax view", [](const V& v) { return softmax(v[0], -1); }, {a});
  expect_cpu_matches_ref("matmul views", [](const V& v) { return matmul(v[0], v[1].t()); }, {a, b});
}

TEST(CpuVsRef, ScalarOps) {
  const Tensor a = rnd({5, 33}, 5);
  const Tensor pos = add(mul(a, a), 0.1).detach();
  expect_cpu_matches_ref("add_scalar", [](const V& v) { return add(v[0], 2.5); }, {a});
  expect_cpu_matches_ref("mul_scalar", [](const V& v) { return mul(v[0], -1.5); }, {a});
  expect_cpu_matches_ref("pow", [](const V& v) { return pow(v[0], 1.7); }, {pos});
  expect_cpu_matches_ref("rsub", [](const V& v) { return rsub(3.0, v[0]); }, {a});
  expect_cpu_matches_ref("rdiv", [](const V& v) { return rdiv(2.0, v[0]); }, {pos});
}

TEST(CpuVsRef, Unary) {
  for (const Shape& s : {Shape{17}, Shape{8, 129}, Shape{3, 100, 120}}) {
    const Tensor a = rnd(s, 6, DType::fp32, 3.0);
    const Tensor pos = add(mul(a, a), 0.1).detach();
    expect_cpu_matches_ref("neg", [](const V& v) { return neg(v[0]); }, {a});
    expect_cpu_matches_ref("exp", [](const V& v) { return exp(v[0]); }, {a});
    expect_cpu_matches_ref("log", [](const V& v) { return log(v[0]); }, {pos});
    expect_cpu_matches_ref("sqrt", [](const V& v) { return sqrt(v[0]); }, {pos});
    expect_cpu_matches_ref("relu", [](const V& v) { return relu(v[0]); }, {a});
    expect_cpu_matches_ref("gelu", [](const V& v) { return gelu(v[0]); }, {a});
    expect_cpu_matches_ref("gelu tanh", [](const V& v) { return gelu(v[0], GeluApprox::tanh); },
                           {a});
    expect_cpu_matches_ref("tanh", [](const V& v) { return tanh(v[0]); }, {a});
    expect_cpu_matches_ref("sigmoid", [](const V& v) { return sigmoid(v[0]); }, {a});
    expect_cpu_matches_ref("sin", [](const V& v) { return sin(v[0]); }, {a});
    expect_cpu_matches_ref("cos", [](const V& v) { return cos(v[0]); }, {a});
  }
}

// gelu(x) is the exact GELU (PyTorch's default); GeluApprox::tanh the approximation, which is
// what Activation::gelu fuses and what the built-in models use.
TEST(CpuVsRef, GeluDefaultIsExact) {
  const Tensor x = from_vector(std::vector<double>{-3, -1, -0.5, 0, 0.5, 1, 3}, {7});
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    BackendGuard g(kind);
    const std::vector<double> exact = gelu(x).to_double_vector(),
                              none = gelu(x, GeluApprox::none).to_double_vector(),
                              approx = gelu(x, GeluApprox::tanh).to_double_vector(),
                              xs = x.to_double_vector();
    for (size_t i = 0; i < xs.size(); ++i) {
      const double v = xs[i];
      EXPECT_EQ(exact[i], none[i]);
      EXPECT_NEAR(exact[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-7) << v;
      EXPECT_NEAR(approx[i],
                  0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))), 1e-7)
          << v;
    }
    // the two differ by up to ~5e-4 around |x| = 2: the test above tells them apart
    EXPECT_GT(
        std::fabs(gelu(full({1}, -2.0)).item() - gelu(full({1}, -2.0), GeluApprox::tanh).item()),
        1e-5);
  }
}

// sin and cos: the vectorized path (|x| <= 2^19) and the libm fallback beyond, in one tensor so
// that some 256-element chunks mix both.
TEST(CpuVsRef, SinCosRanges) {
  std::vector<double> v;
  Generator g(71);
  for (int i = 0; i < 3000; ++i) v.push_back(g.normal() * (i < 1000 ? 3.0 : i < 2000 ? 1e3 : 3e5));
  for (double e : {0.0, -0.0, 1e-30, 1e-8, 1.5707963267948966, 3.141592653589793, 524287.9,
                   524288.0, 524289.0, -6e5, 1e7, -3e9, 1e30})
    v.push_back(e);
  const Tensor x = from_vector(v, {static_cast<int64_t>(v.size())});
  expect_cpu_matches_ref("sin range", [](const V& t) { return sin(t[0]); }, {x});
  expect_cpu_matches_ref("cos range", [](const V& t) { return cos(t[0]); }, {x});
  const Tensor special = from_vector(std::vector<double>{INFINITY, -INFINITY, NAN, 0.0, 1.0}, {5});
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    BackendGuard bg(kind);
    for (const Tensor& y : {sin(special), cos(special)}) {
      EXPECT_TRUE(std::isnan(y.at({0})));
      EXPECT_TRUE(std::isnan(y.at({1})));
      EXPECT_TRUE(std::isnan(y.at({2})));
    }
    EXPECT_EQ(sin(special).at({3}), 0.0);
    EXPECT_EQ(cos(special).at({3}), 1.0);
  }
}

TEST(CpuVsRef, UnaryExtremes) {
  const Tensor x = from_vector(std::vector<double>{-100, -30, -10, -1e-3, -1e-7, 0, 1e-7, 1e-3,
                                                   0.05, 0.07, 1, 10, 30, 80, 100},
                               {15});
  for (auto* f : {+[](const V& v) { return tanh(v[0]); }, +[](const V& v) { return sigmoid(v[0]); },
                  +[](const V& v) { return gelu(v[0]); },
                  +[](const V& v) { return gelu(v[0], GeluApprox::tanh); },
                  +[](const V& v) { return sin(v[0]); }, +[](const V& v) { return cos(v[0]); }}) {
    expect_cpu_matches_ref("extremes", f, {x});
  }
  // exp over its whole range, including overflow to inf and underflow to 0
  const Tensor e = from_vector(std::vector<double>{-200, -87, -50, -1, 0, 1, 50, 88}, {8});
  expect_cpu_matches_ref(
      "exp range", [](const V& v) { return exp(v[0]); }, {e}, kTolFp32, false);
  Tensor big = exp(from_vector(std::vector<double>{100.0}, {1}));
  EXPECT_TRUE(std::isinf(big.item()));
}

TEST(CpuVsRef, Reductions) {
  const Tensor a = rnd({4, 5, 6}, 7);
  for (const Shape& dims :
       {Shape{}, Shape{0}, Shape{1}, Shape{2}, Shape{0, 1}, Shape{1, 2}, Shape{0, 2}, Shape{-1}}) {
    for (bool keep : {false, true}) {
      expect_cpu_matches_ref("sum " + dims.str(),
                             [dims, keep](const V& v) { return sum(v[0], dims, keep); }, {a});
      expect_cpu_matches_ref("mean " + dims.str(),
                             [dims, keep](const V& v) { return mean(v[0], dims, keep); }, {a});
      expect_cpu_matches_ref("max " + dims.str(),
                             [dims, keep](const V& v) { return max(v[0], dims, keep); }, {a});
    }
  }
  const Tensor big = rnd({64, 4096}, 8);
  expect_cpu_matches_ref("sum rows", [](const V& v) { return sum(v[0], {1}); }, {big});
  expect_cpu_matches_ref("sum cols", [](const V& v) { return sum(v[0], {0}); }, {big});
  expect_cpu_matches_ref("mean all", [](const V& v) { return mean(v[0]); }, {big});
}

TEST(CpuVsRef, Softmax) {
  for (const Shape& s : {Shape{5, 7}, Shape{3, 4, 65}, Shape{128, 1000}}) {
    const Tensor a = rnd(s, 9, DType::fp32, 4.0);
    for (int64_t d : {int64_t{-1}, int64_t{0}}) {
      expect_cpu_matches_ref("softmax", [d](const V& v) { return softmax(v[0], d); }, {a});
      expect_cpu_matches_ref("log_softmax", [d](const V& v) { return log_softmax(v[0], d); }, {a});
    }
  }
}

TEST(CpuVsRef, LayerNorm) {
  for (const Shape& s : {Shape{4, 16}, Shape{2, 3, 256}, Shape{64, 768}}) {
    const Shape ns{s.back()};
    const Tensor x = rnd(s, 10, DType::fp32, 2.0), w = rnd(ns, 11), b = rnd(ns, 12);
    expect_cpu_matches_ref(
        "layer_norm", [ns](const V& v) { return layer_norm(v[0], ns, v[1], v[2]); }, {x, w, b});
    expect_cpu_matches_ref("layer_norm no affine",
                           [ns](const V& v) { return layer_norm(v[0], ns); }, {x});
  }
  const Tensor x = rnd({3, 4, 5}, 13);
  expect_cpu_matches_ref("layer_norm 2 dims",
                         [](const V& v) {
                           return layer_norm(v[0], {4, 5}, v[1], v[2]);
                         },
                         {x, rnd({4, 5}, 14), rnd({4, 5}, 15)});
}

TEST(CpuVsRef, BatchNorm) {
  for (const Shape& s : {Shape{8, 3}, Shape{4, 3, 5, 5}, Shape{16, 32, 14, 14}}) {
    const int64_t C = s[1];
    const Tensor x = rnd(s, 16, DType::fp32, 2.0), w = rnd({C}, 17), b = rnd({C}, 18);
    expect_cpu_matches_ref(
        "batch_norm train",
        [C](const V& v) { return batch_norm(v[0], zeros({C}), ones({C}), v[1], v[2], true); },
        {x, w, b});
    const Tensor rm = rnd({C}, 19), rv = add(mul(rnd({C}, 20), rnd({C}, 20)), 0.5).detach();
    expect_cpu_matches_ref("batch_norm eval",
                           [C, rm, rv](const V& v) {
                             return batch_norm(v[0], rm.clone(), rv.clone(), v[1], v[2], false);
                           },
                           {x, w, b});
  }
}

TEST(CpuVsRef, BatchNormRunningStats) {
  const Tensor x = rnd({6, 4, 3, 3}, 21, DType::fp32, 3.0);
  Tensor rm[2], rv[2];
  for (int k = 0; k < 2; ++k) {
    BackendGuard g(k == 0 ? BackendKind::cpu : BackendKind::ref);
    rm[k] = zeros({4});
    rv[k] = ones({4});
    batch_norm(x, rm[k], rv[k], Tensor(), Tensor(), true);
  }
  EXPECT_LE(normalized_error(rm[0], rm[1]), kTolFp32);
  EXPECT_LE(normalized_error(rv[0], rv[1]), kTolFp32);
}

TEST(CpuVsRef, Matmul) {
  struct Case {
    Shape a, b;
  };
  for (const auto& c : {Case{{1, 1}, {1, 1}}, Case{{5, 7}, {7, 3}}, Case{{64, 128}, {128, 96}},
                        Case{{2, 3, 16}, {16, 8}}, Case{{3, 17, 9}, {3, 9, 11}}}) {
    const Tensor a = rnd(c.a, 22), b = rnd(c.b, 23);
    expect_cpu_matches_ref("matmul " + c.a.str() + c.b.str(),
                           [](const V& v) { return matmul(v[0], v[1]); }, {a, b});
  }
  const Tensor a = rnd({4, 6, 5}, 24), b = rnd({4, 5, 7}, 25);
  expect_cpu_matches_ref("bmm", [](const V& v) { return bmm(v[0], v[1]); }, {a, b});
  expect_cpu_matches_ref("bmm transposed views",
                         [](const V& v) { return bmm(v[0].transpose(1, 2), v[1].transpose(1, 2)); },
                         {rnd({4, 5, 6}, 26), rnd({4, 7, 5}, 27)});
}

TEST(CpuVsRef, Linear) {
  const Tensor x = rnd({32, 20}, 28), w = rnd({12, 20}, 29), b = rnd({12}, 30);
  expect_cpu_matches_ref("linear", [](const V& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  expect_cpu_matches_ref("linear no bias", [](const V& v) { return linear(v[0], v[1]); }, {x, w});
  expect_cpu_matches_ref("linear relu",
                         [](const V& v) { return linear(v[0], v[1], v[2], Activation::relu); },
                         {x, w, b});
  expect_cpu_matches_ref("linear gelu",
                         [](const V& v) { return linear(v[0], v[1], v[2], Activation::gelu); },
                         {x, w, b});
  expect_cpu_matches_ref("linear 3d", [](const V& v) { return linear(v[0], v[1], v[2]); },
                         {rnd({2, 5, 20}, 31), w, b});
  {
    NoGradGuard ng;  // fused gelu epilogue (no gradient recorded)
    expect_cpu_matches_ref(
        "linear gelu fused", [](const V& v) { return linear(v[0], v[1], v[2], Activation::gelu); },
        {x, w, b}, kTolFp32, false);
  }
}

TEST(CpuVsRef, Conv2d) {
  struct Case {
    Shape x, w;
    int64_t stride, pad;
  };
  for (const auto& c :
       {Case{{2, 3, 8, 8}, {4, 3, 3, 3}, 1, 1}, Case{{1, 1, 7, 9}, {2, 1, 3, 3}, 2, 0},
        Case{{2, 4, 10, 10}, {3, 4, 5, 5}, 1, 2}, Case{{4, 1, 28, 28}, {8, 1, 3, 3}, 1, 1}}) {
    const Tensor x = rnd(c.x, 32), w = rnd(c.w, 33), b = rnd({c.w[0]}, 34);
    const int64_t s = c.stride, p = c.pad;
    expect_cpu_matches_ref("conv2d " + c.x.str() + c.w.str(),
                           [s, p](const V& v) { return conv2d(v[0], v[1], v[2], s, p); },
                           {x, w, b});
    expect_cpu_matches_ref("conv2d no bias",
                           [s, p](const V& v) { return conv2d(v[0], v[1], Tensor(), s, p); },
                           {x, w});
  }
  Conv2dParams p;
  p.dilation_h = p.dilation_w = 2;
  p.pad_h = 1;
  expect_cpu_matches_ref("conv2d dilated", [p](const V& v) { return conv2d(v[0], v[1], v[2], p); },
                         {rnd({1, 2, 9, 9}, 35), rnd({3, 2, 3, 3}, 36), rnd({3}, 37)});
}

// conv1d against a direct loop in double (forward), and cpu against ref (forward and backward).
Tensor conv1d_direct(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t pad,
                     int64_t dil) {
  const int64_t N = x.size(0), C = x.size(1), L = x.size(2), O = w.size(0), K = w.size(2);
  const int64_t LO = (L + 2 * pad - dil * (K - 1) - 1) / stride + 1;
  const std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector();
  const std::vector<double> bv = b.defined() ? b.to_double_vector() : std::vector<double>(O, 0.0);
  std::vector<double> y(static_cast<size_t>(N * O * LO));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t l = 0; l < LO; ++l) {
        double acc = bv[o];
        for (int64_t c = 0; c < C; ++c)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t pos = l * stride - pad + k * dil;
            if (pos < 0 || pos >= L) continue;
            acc += xv[(n * C + c) * L + pos] * wv[(o * C + c) * K + k];
          }
        y[(n * O + o) * LO + l] = acc;
      }
  return from_vector(y, {N, O, LO});
}

TEST(CpuVsRef, Conv1d) {
  struct Case {
    Shape x, w;
    int64_t stride, pad, dil;
  };
  for (const auto& c : {Case{{2, 3, 16}, {4, 3, 3}, 1, 1, 1}, Case{{1, 1, 9}, {2, 1, 3}, 2, 0, 1},
                        Case{{2, 4, 20}, {3, 4, 5}, 1, 2, 1}, Case{{3, 2, 17}, {5, 2, 3}, 2, 3, 2},
                        Case{{1, 8, 64}, {16, 8, 7}, 3, 3, 1}}) {
    const Tensor x = rnd(c.x, 72), w = rnd(c.w, 73), b = rnd({c.w[0]}, 74);
    const int64_t s = c.stride, p = c.pad, d = c.dil;
    const std::string nm = "conv1d " + c.x.str() + c.w.str();
    expect_cpu_matches_ref(nm, [s, p, d](const V& v) { return conv1d(v[0], v[1], v[2], s, p, d); },
                           {x, w, b});
    expect_cpu_matches_ref(nm + " no bias",
                           [s, p, d](const V& v) { return conv1d(v[0], v[1], Tensor(), s, p, d); },
                           {x, w});
    for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
      BackendGuard g(kind);
      const Tensor y = conv1d(x, w, b, s, p, d);
      const Tensor want = conv1d_direct(x, w, b, s, p, d);
      ASSERT_EQ(y.shape(), want.shape()) << nm;
      EXPECT_LE(normalized_error(y, want), kTolFp32) << nm << " on " << to_string(kind);
    }
  }
  EXPECT_THROW(conv1d(rnd({2, 3, 8}, 1), rnd({4, 2, 3}, 2)), std::invalid_argument);  // channels
  EXPECT_THROW(conv1d(rnd({2, 3, 2}, 1), rnd({4, 3, 5}, 2)), std::invalid_argument);  // too long
  EXPECT_THROW(conv1d(rnd({2, 3, 8, 1}, 1), rnd({4, 3, 3}, 2)), std::invalid_argument);
  EXPECT_THROW(conv1d(rnd({2, 3, 8}, 1), rnd({4, 3, 3}, 2), Tensor(), 0), std::invalid_argument);
}

TEST(CpuVsRef, Argmax) {
  const Tensor a = rnd({4, 5, 6}, 75);
  for (int64_t d : {0, 1, 2, -1}) {
    for (bool keep : {false, true}) {
      expect_cpu_matches_ref(
          "argmax " + std::to_string(d), [d, keep](const V& v) { return argmax(v[0], d, keep); },
          {a}, 0.0);
    }
  }
  expect_cpu_matches_ref(
      "argmax all", [](const V& v) { return argmax(v[0]); }, {a}, 0.0);
  // wide rows (parallel, vectorized columns) and the dtypes the cpu kernel reads
  const Tensor big = rnd({37, 1500}, 76);
  for (int64_t d : {0, 1}) {
    expect_cpu_matches_ref(
        "argmax big", [d](const V& v) { return argmax(v[0], d); }, {big}, 0.0);
    for (DType dt : {DType::fp64, DType::bf16, DType::fp16, DType::fp8_e4m3}) {
      const Tensor t = big.to(dt, Round::nearest_even);
      expect_cpu_matches_ref(
          std::string("argmax ") + std::string(name(dt)),
          [d](const V& v) { return argmax(v[0], d); }, {t}, 0.0);
    }
  }
  Generator g(77);
  for (DType dt : {DType::int64, DType::int32}) {
    const Tensor ints = randint(-50, 50, {9, 33}, g).to(dt, Round::nearest_even);
    expect_cpu_matches_ref(
        "argmax int", [](const V& v) { return argmax(v[0], 1); }, {ints}, 0.0);
    expect_cpu_matches_ref(
        "argmax int dim 0", [](const V& v) { return argmax(v[0], 0); }, {ints}, 0.0);
  }
}

// Ties go to the first index and NaN is the maximum (the first NaN), as torch.argmax; int64
// result, never differentiable.
TEST(Ops, ArgmaxTiesAndNaN) {
  const Tensor x = from_vector(std::vector<double>{1, 3, 3, 2,      //
                                                   5, 5, 5, 5,      //
                                                   1, NAN, 7, NAN,  //
                                                   -INFINITY, -INFINITY, 0, INFINITY},
                               {4, 4});
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    BackendGuard bg(kind);
    for (DType dt : {DType::fp32, DType::bf16, DType::fp64}) {
      const Tensor t = x.to(dt, Round::nearest_even);
      const Tensor rows = argmax(t, 1);
      EXPECT_EQ(rows.dtype(), DType::int64);
      EXPECT_EQ(rows.shape(), (Shape{4}));
      EXPECT_EQ(rows.to_double_vector(), (std::vector<double>{1, 0, 1, 3})) << to_string(kind);
      // columns: col 0: 5 (row 1); col 1: NaN (row 2); col 2: 7 (row 2); col 3: NaN (row 2)
      EXPECT_EQ(argmax(t, 0, true).to_double_vector(), (std::vector<double>{1, 2, 2, 2}));
      EXPECT_EQ(argmax(t, 0, true).shape(), (Shape{1, 4}));
      EXPECT_EQ(argmax(t).item(), 9.0);  // the first NaN of the flattened tensor
    }
    Tensor w = from_vector(std::vector<double>{0.5, 2.0, -1.0}, {3}).requires_grad_();
    const Tensor i = argmax(w, 0);
    EXPECT_FALSE(i.requires_grad());
    EXPECT_EQ(i.dim(), 0);
    EXPECT_EQ(i.item(), 1.0);
    EXPECT_EQ(argmax(full(Shape{}, 3.0), 0).item(), 0.0);  // 0-dim: dim 0 or -1, index 0
    EXPECT_THROW(argmax(zeros({3, 0}), 1), std::invalid_argument);
    EXPECT_EQ(argmax(zeros({0, 3}), 1).shape(), (Shape{0}));
    EXPECT_THROW(argmax(zeros({3, 2}), 2), std::invalid_argument);
  }
}

TEST(CpuVsRef, Pooling) {
  const Tensor x = rnd({2, 3, 8, 9}, 38);
  expect_cpu_matches_ref("max_pool2d k2", [](const V& v) { return max_pool2d(v[0], 2); }, {x});
  expect_cpu_matches_ref("max_pool2d k3 s2 p1",
                         [](const V& v) { return max_pool2d(v[0], 3, 2, 1); }, {x});
  expect_cpu_matches_ref("avg_pool2d k2", [](const V& v) { return avg_pool2d(v[0], 2); }, {x});
  // ties go to the first maximum of the window (row-major) on both backends
  const Tensor ties = from_vector(
      std::vector<double>{1, 1, 1, 1, 2, 3, 3, 0, 5, 5, 7, 7, 4, 5, 7, 6}, {1, 1, 4, 4});
  expect_cpu_matches_ref(
      "max_pool2d ties", [](const V& v) { return max_pool2d(v[0], 2); }, {ties}, 0.0);
  expect_cpu_matches_ref("max_pool2d odd", [](const V& v) { return max_pool2d(v[0], 2); },
                         {rnd({2, 2, 5, 7}, 65)});
  expect_cpu_matches_ref("avg_pool2d k3 s1 p1",
                         [](const V& v) { return avg_pool2d(v[0], 3, 1, 1); }, {x});
}

TEST(CpuVsRef, EmbeddingAndLosses) {
  const Tensor w = rnd({10, 6}, 39);
  const Tensor idx = from_vector(std::vector<int64_t>{1, 3, 3, 9, 0, 1}, {2, 3});
  expect_cpu_matches_ref("embedding", [idx](const V& v) { return embedding(idx, v[0]); }, {w});
  const Tensor logits = rnd({16, 10}, 40, DType::fp32, 3.0);
  Generator g(41);
  const Tensor tgt = randint(0, 10, {16}, g);
  expect_cpu_matches_ref("cross_entropy", [tgt](const V& v) { return cross_entropy(v[0], tgt); },
                         {logits});
  const Tensor tgt32 = tgt.to(DType::int32, Round::nearest_even);  // outside: not the op tested
  expect_cpu_matches_ref("cross_entropy int32",
                         [tgt32](const V& v) { return cross_entropy(v[0], tgt32); }, {logits});
  expect_cpu_matches_ref("mse", [](const V& v) { return mse_loss(v[0], v[1]); },
                         {rnd({4, 5}, 42), rnd({4, 5}, 43)});
}

TEST(CpuVsRef, Dropout) {
  const Tensor x = rnd({64, 300}, 44);
  expect_cpu_matches_ref(
      "dropout", [](const V& v) { return dropout(v[0], 0.3, true, uint64_t{7}); }, {x}, 0.0);
}

TEST(CpuVsRef, TransposedCopiesAreExact) {
  // Contiguous copies of transposed views (the cpu backend copies them in 32 x 32 tiles): every
  // element where the ref backend puts it, for 2-D and batched views, tile-aligned or not, in
  // fp32 and bf16, with one and two threads.
  const int prev_threads = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType dt : {DType::fp32, DType::bf16}) {
      for (const Shape& sh : {Shape{37, 45}, Shape{64, 96}, Shape{300, 129}, Shape{3, 40, 33}}) {
        const Tensor x = rnd(sh, 61, dt);
        const Tensor v = x.transpose(-1, -2);
        Tensor c, r;
        {
          BackendGuard g(BackendKind::cpu);
          c = v.contiguous();
        }
        {
          BackendGuard g(BackendKind::ref);
          r = v.contiguous();
        }
        ASSERT_TRUE(c.is_contiguous());
        EXPECT_EQ(c.shape(), r.shape());
        EXPECT_EQ(c.to_double_vector(), r.to_double_vector()) << sh.str() << " " << name(dt);
      }
    }
  }
  set_num_threads(prev_threads);
}

TEST(CpuVsRef, Bf16ReluOnEveryBitPattern) {
  // The cpu backend applies ReLU and its backward to bf16 bits directly (no widening): every one
  // of the 2^16 patterns as x (forward) and as y with a fixed g, and as g with y > 0 (backward),
  // bit for bit against the ref backend (widen, relu, round back); NaN results compare as NaN.
  const int64_t n = 1 << 16;
  Tensor x = Tensor::empty({n}, {.dtype = DType::bf16});
  Tensor g = Tensor::empty({n}, {.dtype = DType::bf16});
  Tensor ypos = Tensor::empty({n}, {.dtype = DType::bf16});
  for (int64_t i = 0; i < n; ++i) {
    static_cast<uint16_t*>(x.data_ptr())[i] = static_cast<uint16_t>(i);
    static_cast<uint16_t*>(g.data_ptr())[i] = static_cast<uint16_t>((i * 40503) & 0xFFFF);
    static_cast<uint16_t*>(ypos.data_ptr())[i] = 0x3F80;  // 1.0
  }
  auto run = [&](BackendKind kind) {
    BackendGuard bg(kind);
    std::vector<Tensor> out;
    Tensor y = Tensor::empty({n}, {.dtype = DType::bf16});
    backend().unary(UnaryOp::relu, y, x);
    out.push_back(y);
    Tensor gi = Tensor::empty({n}, {.dtype = DType::bf16});
    backend().unary_backward(UnaryOp::relu, gi, g, x, x);  // y = x: every pattern as y
    out.push_back(gi);
    Tensor gi2 = Tensor::empty({n}, {.dtype = DType::bf16});
    backend().unary_backward(UnaryOp::relu, gi2, x, Tensor(), ypos);  // every pattern as g
    out.push_back(gi2);
    return out;
  };
  const std::vector<Tensor> c = run(BackendKind::cpu), r = run(BackendKind::ref);
  for (size_t t = 0; t < c.size(); ++t) {
    const auto* a = static_cast<const uint16_t*>(c[t].data_ptr());
    const auto* b = static_cast<const uint16_t*>(r[t].data_ptr());
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool a_nan = (a[i] & 0x7FFF) > 0x7F80, b_nan = (b[i] & 0x7FFF) > 0x7F80;
      if (a_nan != b_nan || (!a_nan && a[i] != b[i])) ++bad;
    }
    EXPECT_EQ(bad, 0) << "output " << t;
  }
}

TEST(CpuVsRef, LayoutOps) {
  const Tensor a = rnd({3, 4, 5}, 52);
  expect_cpu_matches_ref("reshape",
                         [](const V& v) {
                           return mul(v[0].reshape({4, 15}), 2.0);
                         },
                         {a});
  expect_cpu_matches_ref("permute",
                         [](const V& v) {
                           return mul(v[0].permute({2, 0, 1}).contiguous(), 2.0);
                         },
                         {a});
  expect_cpu_matches_ref("slice", [](const V& v) { return mul(v[0].slice(2, 1, 5, 2), 2.0); }, {a});
  expect_cpu_matches_ref("cat",
                         [](const V& v) {
                           return cat({v[0], v[1]}, 1);
                         },
                         {a, rnd({3, 2, 5}, 53)});
  expect_cpu_matches_ref("stack",
                         [](const V& v) {
                           return stack({v[0], v[1]}, 0);
                         },
                         {a, rnd({3, 4, 5}, 54)});
  expect_cpu_matches_ref("expand",
                         [](const V& v) {
                           return mul(v[0].expand({2, 4, 3}), 1.0);
                         },
                         {rnd({4, 1}, 55)});
}

TEST(CpuVsRef, LstmCell) {
  const Tensor x = rnd({3, 5}, 56), h = rnd({3, 4}, 57), c = rnd({3, 4}, 58);
  const Tensor wih = rnd({16, 5}, 59), whh = rnd({16, 4}, 60), bih = rnd({16}, 61),
               bhh = rnd({16}, 62);
  expect_cpu_matches_ref(
      "lstm h",
      [](const V& v) { return lstm_cell(v[0], v[1], v[2], v[3], v[4], v[5], v[6]).first; },
      {x, h, c, wih, whh, bih, bhh});
  expect_cpu_matches_ref(
      "lstm c",
      [](const V& v) { return lstm_cell(v[0], v[1], v[2], v[3], v[4], v[5], v[6]).second; },
      {x, h, c, wih, whh, bih, bhh});
}

TEST(CpuVsRef, Bf16ColumnSums) {
  // Sums over leading/middle dims of bf16 tensors (the bias gradients of bf16 linears) widen the
  // bf16 rows inline on the cpu backend; inner sizes below and above its 1024-column pieces.
  const Tensor a = rnd({300, 1500}, 91, DType::bf16), b = rnd({3, 50, 40}, 92, DType::bf16);
  expect_cpu_matches_ref(
      "bf16 sum cols", [](const V& v) { return sum(v[0], {0}); }, {a}, kTolBf16);
  expect_cpu_matches_ref(
      "bf16 mean cols", [](const V& v) { return mean(v[0], {0}, true); }, {a}, kTolBf16);
  expect_cpu_matches_ref(
      "bf16 sum middle", [](const V& v) { return sum(v[0], {1}); }, {b}, kTolBf16);
}

TEST(CpuVsRef, Bf16Storage) {
  // bf16 inputs compute in fp32 and round the result to bf16 on both backends.
  const Tensor a = rnd({16, 32}, 63, DType::bf16), b = rnd({32, 8}, 64, DType::bf16);
  expect_cpu_matches_ref(
      "bf16 matmul", [](const V& v) { return matmul(v[0], v[1]); }, {a, b}, kTolBf16);
  expect_cpu_matches_ref(
      "bf16 gelu tanh", [](const V& v) { return gelu(v[0], GeluApprox::tanh); }, {a}, kTolBf16);
  expect_cpu_matches_ref(
      "bf16 gelu", [](const V& v) { return gelu(v[0]); }, {a}, kTolBf16);
  expect_cpu_matches_ref(
      "bf16 sin", [](const V& v) { return sin(v[0]); }, {a}, kTolBf16);
  expect_cpu_matches_ref(
      "bf16 cos", [](const V& v) { return cos(v[0]); }, {a}, kTolBf16);
  expect_cpu_matches_ref(
      "bf16 softmax", [](const V& v) { return softmax(v[0], -1); }, {a}, kTolBf16);
  const Tensor y = matmul(a, b);
  EXPECT_EQ(y.dtype(), DType::bf16);
}

}  // namespace
}  // namespace mixp
