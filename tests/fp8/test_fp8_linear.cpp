// fp8_linear against explicit references (quantize with the reference encoder, multiply in
// double, scale), E5M2 gradients, MXFP8 GEMMs, the Fp8Autocast update points, the layer and
// model transforms, and a small model that trains under each FP8 scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "mixp/amp/fp8_linear.h"
#include "mixp/amp/fp8_quantize.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/format/block_mx.h"
#include "mixp/format/float_codec.h"
#include "mixp/nn/activation.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/tensor/factories.h"

using namespace mixp;
using namespace mixp::amp;

namespace {

using Mat = std::vector<double>;  // row-major

double q8(double x, float scale, DType d) {
  const FloatFormat& f = d == DType::fp8_e4m3 ? kFp8E4M3 : kFp8E5M2;
  const float v = static_cast<float>(x) * scale;
  return decode_float(f, encode_float(f, v, Round::nearest_even, Overflow::saturate, 0, nullptr));
}

Mat quant(const std::vector<float>& x, float scale, DType d) {
  Mat out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = q8(x[i], scale, d);
  return out;
}

// MX along rows of length `cols` (mx_fake_quantize, the scalar reference).
Mat mx(std::vector<float> x, int64_t cols, DType d) {
  mx_fake_quantize(x, cols, d == DType::fp8_e4m3 ? MxElement::fp8_e4m3 : MxElement::fp8_e5m2,
                   {});
  return Mat(x.begin(), x.end());
}

std::vector<float> transpose(const std::vector<float>& a, int64_t r, int64_t c) {
  std::vector<float> t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = a[i * c + j];
  return t;
}
Mat transpose(const Mat& a, int64_t r, int64_t c) {
  Mat t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = a[i * c + j];
  return t;
}

// c [m, n] = a [m, k] @ b^T (b [n, k]), in double; also sum |a||b| per entry for tolerances.
void gemm_nt(const Mat& a, const Mat& b, int64_t m, int64_t n, int64_t k, Mat& c, Mat& mag) {
  c.assign(m * n, 0.0);
  mag.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        c[i * n + j] += a[i * k + p] * b[j * k + p];
        mag[i * n + j] += std::abs(a[i * k + p] * b[j * k + p]);
      }
}

// |got - want| <= 1e-5 * (sum of |terms| * scale) + 1e-30: fp32 accumulation of <= 100 exact
// products (each error of the sum is at most k * 2^-24 of the magnitudes, k <= 100 here).
void expect_close(const std::vector<float>& got, const Mat& want, const Mat& mag, double scale,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] * scale + 1e-30) << what << " at " << i;
  }
}

Tensor rand_t(Shape s, uint64_t seed, double scale) {
  Generator g(seed);
  return randn(s, g) * scale;
}

// Gives a delayed state a non-trivial scale: one pass with this amax.
void prime(Fp8ScalingState* s, float amax) {
  s->record_amax(amax);
  s->update();
}

}  // namespace

TEST(Fp8Linear, DelayedForwardAndBackwardMatchTheReference) {
  const int64_t M = 6, K = 40, N = 5;
  Fp8Recipe r;
  r.amax_history_len = 8;
  Fp8LinearMeta meta(r);
  prime(meta.state(Fp8Role::input), 3.0f);
  prime(meta.state(Fp8Role::weight), 0.4f);
  prime(meta.state(Fp8Role::grad_output), 0.02f);
  const float sx = meta.state(Fp8Role::input)->scale(), sw = meta.state(Fp8Role::weight)->scale();
  const float sg = meta.state(Fp8Role::grad_output)->scale();
  ASSERT_EQ(sx, 448.0f / 3.0f);
  ASSERT_EQ(sg, 57344.0f / 0.02f);

  Tensor x = rand_t({M, K}, 1, 1.0).requires_grad_();
  Tensor w = rand_t({N, K}, 2, 0.1).requires_grad_();
  Tensor b = rand_t({N}, 3, 0.5).requires_grad_();
  x.set_at({0, 0}, 5.0);  // above the recorded amax: saturates at 448 / sx
  Tensor y = fp8_linear(x, w, b, Activation::none, meta);
  ASSERT_EQ(y.shape(), Shape({M, N}));
  EXPECT_EQ(y.dtype(), DType::fp32);

  const Mat qx = quant(x.to_vector<float>(), sx, DType::fp8_e4m3);
  const Mat qw = quant(w.to_vector<float>(), sw, DType::fp8_e4m3);
  EXPECT_EQ(qx[0], 448.0);
  Mat acc, mag;
  gemm_nt(qx, qw, M, N, K, acc, mag);
  const double alpha = static_cast<double>((1.0f / sx) * (1.0f / sw));
  const auto bv = b.to_vector<double>();
  Mat want(M * N);
  for (int64_t i = 0; i < M * N; ++i) want[i] = acc[i] * alpha + bv[i % N];
  expect_close(y.to_vector<float>(), want, mag, alpha, "forward");

  // Backward with dL/dy = G.
  Tensor G = rand_t({M, N}, 4, 0.01);
  sum(y * G).backward();
  const auto gv = G.to_vector<float>();
  const Mat qg = quant(gv, sg, DType::fp8_e5m2);
  // dx [M, K] = qg [M, N] @ qw [N, K]
  Mat dx, dxm;
  gemm_nt(qg, transpose(qw, N, K), M, K, N, dx, dxm);
  const double adx = static_cast<double>((1.0f / sg) * (1.0f / sw));
  for (auto& v : dx) v *= adx;
  expect_close(x.grad().to_vector<float>(), dx, dxm, adx, "dgrad");
  // dw [N, K] = qg^T [N, M] @ qx [M, K]
  Mat dw, dwm;
  gemm_nt(transpose(qg, M, N), transpose(qx, M, K), N, K, M, dw, dwm);
  const double adw = static_cast<double>((1.0f / sg) * (1.0f / sx));
  for (auto& v : dw) v *= adw;
  expect_close(w.grad().to_vector<float>(), dw, dwm, adw, "wgrad");
  // db: the unquantized gradient summed over rows.
  const auto db = b.grad().to_vector<double>();
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t i = 0; i < M; ++i) s += gv[i * N + n];
    EXPECT_NEAR(db[n], s, 1e-7);
  }
  // The gradient was quantized to E5M2: with E4M3 codes the result would differ.
  const Mat qg4 = quant(gv, sg / 128.0f, DType::fp8_e4m3);
  bool differs = false;
  for (size_t i = 0; i < qg.size(); ++i) differs |= qg4[i] * 128.0 != qg[i];
  EXPECT_TRUE(differs);
  // The backward recorded the gradient's amax in its state (slot 0, pending its update).
  double gmax = 0;
  for (float v : gv) gmax = std::max(gmax, std::abs(double(v)));
  EXPECT_EQ(meta.state(Fp8Role::grad_output)->history(0), static_cast<float>(gmax));
  // ... and the forward recorded x's and w's.
  EXPECT_EQ(meta.state(Fp8Role::input)->history(0), 5.0f);
  fp8_update_backward_states();
  EXPECT_EQ(meta.state(Fp8Role::grad_output)->history(0), 0.0f);
  EXPECT_EQ(meta.state(Fp8Role::grad_output)->history(7), static_cast<float>(gmax));
}

TEST(Fp8Linear, CurrentScalingAndFusedRelu) {
  const int64_t M = 4, K = 33, N = 7;
  Fp8LinearMeta meta(Fp8Recipe::current());
  EXPECT_EQ(meta.state(Fp8Role::input), nullptr);
  EXPECT_TRUE(meta.buffers().empty());
  Tensor x = rand_t({2, 2, K}, 5, 2.0).requires_grad_();  // leading dims are flattened
  Tensor w = rand_t({N, K}, 6, 0.05).requires_grad_();
  Tensor y = fp8_linear(x, w, Tensor(), Activation::relu, meta);
  ASSERT_EQ(y.shape(), Shape({2, 2, N}));
  const auto xv = x.to_vector<float>(), wv = w.to_vector<float>();
  auto amax = [](const std::vector<float>& v) {
    float m = 0;
    for (float a : v) m = std::max(m, std::abs(a));
    return m;
  };
  const float sx = fp8_current_scale(amax(xv), 448.0f, 0), sw = fp8_current_scale(amax(wv), 448.0f, 0);
  Mat acc, mag;
  gemm_nt(quant(xv, sx, DType::fp8_e4m3), quant(wv, sw, DType::fp8_e4m3), M, N, K, acc, mag);
  const double alpha = static_cast<double>((1.0f / sx) * (1.0f / sw));
  Mat want(M * N);
  for (int64_t i = 0; i < M * N; ++i) want[i] = std::max(0.0, acc[i] * alpha);
  expect_close(y.to_vector<float>(), want, mag, alpha, "relu forward");

  Tensor G = rand_t({2, 2, N}, 7, 1.0);
  sum(y * G).backward();
  auto gv = G.to_vector<float>();
  for (int64_t i = 0; i < M * N; ++i)
    if (!(want[i] > 0)) gv[i] = 0.0f;  // relu masks the gradient before it is quantized
  const float sg = fp8_current_scale(amax(gv), 57344.0f, 0);
  const Mat qg = quant(gv, sg, DType::fp8_e5m2), qw = quant(wv, sw, DType::fp8_e4m3);
  Mat dx, dxm;
  gemm_nt(qg, transpose(qw, N, K), M, K, N, dx, dxm);
  const double adx = static_cast<double>((1.0f / sg) * (1.0f / sw));
  for (auto& v : dx) v *= adx;
  expect_close(x.grad().to_vector<float>(), dx, dxm, adx, "relu dgrad");
}

TEST(Fp8Linear, MxFp8ForwardAndBackwardMatchTheReference) {
  const int64_t M = 40, K = 70, N = 36;  // none a multiple of 32: partial blocks everywhere
  Fp8LinearMeta meta(Fp8Recipe::mxfp8());
  Tensor x = rand_t({M, K}, 8, 1.0).requires_grad_();
  Tensor w = rand_t({N, K}, 9, 0.1).requires_grad_();
  Tensor b = rand_t({N}, 10, 0.1).requires_grad_();
  Tensor y = fp8_linear(x, w, b, Activation::none, meta);
  const auto xv = x.to_vector<float>(), wv = w.to_vector<float>();
  const auto bv = b.to_vector<double>();
  Mat acc, mag;
  gemm_nt(mx(xv, K, DType::fp8_e4m3), mx(wv, K, DType::fp8_e4m3), M, N, K, acc, mag);
  for (int64_t i = 0; i < M * N; ++i) acc[i] += bv[i % N];
  expect_close(y.to_vector<float>(), acc, mag, 1.0, "mx forward");

  Tensor G = rand_t({M, N}, 11, 1e-3);
  sum(y * G).backward();
  const auto gv = G.to_vector<float>();
  // dx [M, K] = g [M, N] @ w [N, K], both blocked along N; TE's MXFP8 default is E4M3 here too.
  const Mat qg_rows = mx(gv, N, DType::fp8_e4m3);
  const Mat qwt = mx(transpose(wv, N, K), N, DType::fp8_e4m3);  // [K, N], blocks along N
  Mat dx, dxm;
  gemm_nt(qg_rows, qwt, M, K, N, dx, dxm);
  expect_close(x.grad().to_vector<float>(), dx, dxm, 1.0, "mx dgrad");
  // dw [N, K] = g^T [N, M] @ x [M, K], blocked along M.
  const Mat qgt = mx(transpose(gv, M, N), M, DType::fp8_e4m3);  // [N, M]
  const Mat qxt = mx(transpose(xv, M, K), M, DType::fp8_e4m3);  // [K, M]
  Mat dw, dwm;
  gemm_nt(qgt, qxt, N, K, M, dw, dwm);
  expect_close(w.grad().to_vector<float>(), dw, dwm, 1.0, "mx wgrad");
}

TEST(Fp8Linear, AutocastUpdatesForwardAtExitAndBackwardAfterward) {
  Generator gen(1);
  Fp8Recipe r;
  r.amax_history_len = 4;
  Fp8Linear layer(16, 8, gen, r);
  Fp8LinearMeta& meta = layer.meta();
  Tensor x = rand_t({3, 16}, 12, 1.0);
  x.set_at({1, 2}, -6.0);
  const float wmax = [&] {
    float m = 0;
    for (float v : layer.weight().to_vector<float>()) m = std::max(m, std::abs(v));
    return m;
  }();

  // Outside a region: the layer's usual (fp32) computation, nothing recorded.
  Tensor plain = layer(x);
  EXPECT_EQ(plain.to_vector<float>(), linear(x, layer.weight(), layer.bias()).to_vector<float>());
  EXPECT_EQ(meta.state(Fp8Role::input)->history(0), 0.0f);

  // Evaluation (no grad): FP8, but the state is left untouched.
  {
    NoGradGuard ng;
    Fp8Autocast ac;
    const Tensor e = layer(x);
    EXPECT_NE(e.to_vector<float>(), plain.to_vector<float>());  // quantized
  }
  EXPECT_EQ(meta.state(Fp8Role::input)->history(0), 0.0f);
  EXPECT_EQ(meta.state(Fp8Role::input)->scale(), 1.0f);

  // Training pass: the forward roles update when the region exits.
  Tensor y;
  {
    Fp8Autocast ac;
    EXPECT_TRUE(Fp8Autocast::is_enabled());
    {
      Fp8Autocast off(false);  // nested, disabled: the usual computation
      EXPECT_FALSE(Fp8Autocast::is_enabled());
    }
    y = layer(x);
    EXPECT_EQ(meta.state(Fp8Role::input)->scale(), 1.0f);  // still step 0's scale inside
  }
  EXPECT_FALSE(Fp8Autocast::is_enabled());
  EXPECT_EQ(meta.state(Fp8Role::input)->scale(), 448.0f / 6.0f);
  EXPECT_EQ(meta.state(Fp8Role::weight)->scale(), 448.0f / wmax);
  EXPECT_EQ(meta.state(Fp8Role::input)->history(3), 6.0f);
  EXPECT_EQ(meta.state(Fp8Role::input)->previous_scale(), 1.0f);  // what the forward used
  EXPECT_EQ(meta.state(Fp8Role::grad_output)->scale(), 1.0f);

  sum(y).backward();  // dL/dy = 1 everywhere
  EXPECT_EQ(meta.state(Fp8Role::grad_output)->history(0), 1.0f);
  EXPECT_EQ(meta.state(Fp8Role::grad_output)->scale(), 1.0f);  // pending until the next pass
  {
    Fp8Autocast ac;  // entering the next pass applies the backward update
    EXPECT_EQ(meta.state(Fp8Role::grad_output)->scale(), 57344.0f);
  }
  // A recomputation quantizes with the scales from before the last update and records nothing.
  const auto before = meta.state(Fp8Role::input)->history();
  Tensor r1, r2;
  {
    Fp8Autocast rc(true, /*recompute=*/true);
    EXPECT_TRUE(Fp8Autocast::is_recompute());
    r1 = layer(x);
  }
  EXPECT_EQ(meta.state(Fp8Role::input)->history(), before);
  {
    NoGradGuard ng;
    Fp8LinearMeta fresh(r);  // scale 1 everywhere, as the first forward had
    r2 = fp8_linear(x, layer.weight(), layer.bias(), Activation::none, fresh);
  }
  EXPECT_EQ(r1.to_vector<float>(), r2.to_vector<float>());
}

TEST(Fp8Linear, ModelTransformKeepsTheHeadAndRegistersTheState) {
  Generator gen(2);
  nn::Sequential m;
  m.add("fc1", std::make_shared<nn::Linear>(8, 16, gen, nn::LinearOptions{.activation = Activation::relu}));
  m.add("fc2", std::make_shared<nn::Linear>(16, 16, gen));
  auto head = std::make_shared<nn::Linear>(16, 3, gen);
  head->set_kind("head");
  m.add("head", head);
  const size_t params = m.named_parameters().size();
  const auto enabled = enable_fp8(m, Fp8Recipe{});
  EXPECT_EQ(enabled, (std::vector<std::string>{"fc1", "fc2"}));
  EXPECT_EQ(m.named_parameters().size(), params);
  std::vector<std::string> names;
  for (auto& [n, t] : m.named_buffers()) names.push_back(n);
  ASSERT_EQ(names.size(), 18u);
  EXPECT_EQ(names[0], "fc1.fp8_input_amax_history");
  EXPECT_EQ(names[1], "fc1.fp8_input_scale");
  EXPECT_EQ(names[2], "fc1.fp8_input_scale_inv");
  EXPECT_EQ(names[8], "fc1.fp8_grad_output_scale_inv");
  EXPECT_EQ(m.buffer("fc2.fp8_weight_amax_history").shape(), Shape({16}));
  EXPECT_NE(fp8_meta(static_cast<nn::Linear&>(m.module("fc1"))), nullptr);
  EXPECT_EQ(fp8_meta(*head), nullptr);
  EXPECT_THROW(enable_fp8(static_cast<nn::Linear&>(m.module("fc1")), Fp8Recipe{}),
               std::logic_error);
  // The buffers are the state: a write through the module is seen by the layer's meta.
  m.buffer("fc2.fp8_input_scale").fill_(4.0);
  EXPECT_EQ(fp8_meta(static_cast<nn::Linear&>(m.module("fc2")))->state(Fp8Role::input)->scale(),
            4.0f);
  // Current scaling and MXFP8 keep no state.
  nn::Sequential m2;
  m2.add("fc", std::make_shared<nn::Linear>(8, 8, gen));
  enable_fp8(m2, Fp8Recipe::mxfp8());
  EXPECT_TRUE(m2.named_buffers().empty());
}

namespace {

// Four Gaussian blobs in 20 dimensions; returns train accuracy after `steps` Adam steps.
double train_blobs(const Fp8Recipe* recipe, int steps, double* first_loss, double* last_loss) {
  Generator gen(3);
  nn::Sequential m;
  m.add("fc1", std::make_shared<nn::Linear>(20, 64, gen, nn::LinearOptions{.activation = Activation::relu}));
  m.add("fc2", std::make_shared<nn::Linear>(64, 64, gen, nn::LinearOptions{.activation = Activation::relu}));
  auto head = std::make_shared<nn::Linear>(64, 4, gen);
  head->set_kind("head");
  m.add("head", head);
  if (recipe) enable_fp8(m, *recipe);
  const int64_t n = 512;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> centers(4 * 20);
  for (auto& c : centers) c = 2.0f * nd(rng);
  std::vector<float> xs(n * 20);
  std::vector<int64_t> ys(n);
  for (int64_t i = 0; i < n; ++i) {
    ys[i] = i % 4;
    for (int j = 0; j < 20; ++j) xs[i * 20 + j] = centers[ys[i] * 20 + j] + 1.5f * nd(rng);
  }
  const Tensor X = from_vector(xs, {n, 20});
  const Tensor Y = from_vector(ys, {n});
  optim::Adam opt(m.named_parameters(), {.lr = 3e-3});
  for (int s = 0; s < steps; ++s) {
    const int64_t lo = (s * 64) % n;
    Tensor xb = X.slice(0, lo, lo + 64), yb = Y.slice(0, lo, lo + 64);
    opt.zero_grad();
    Tensor loss;
    {
      Fp8Autocast ac(recipe != nullptr);
      loss = cross_entropy(m(xb), yb);
    }
    loss.backward();
    opt.step();
    fp8_update_backward_states();
    if (s == 0) *first_loss = loss.item();
    *last_loss = loss.item();
  }
  NoGradGuard ng;
  Fp8Autocast ac(recipe != nullptr);
  const auto logits = m(X).to_vector<float>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < 4; ++c)
      if (logits[i * 4 + c] > logits[i * 4 + best]) best = c;
    correct += best == ys[i];
  }
  return double(correct) / double(n);
}

}  // namespace

TEST(Fp8Linear, SmallModelTrainsUnderEveryScaling) {
  double f0 = 0, l0 = 0;
  const double base = train_blobs(nullptr, 120, &f0, &l0);
  EXPECT_GT(base, 0.9);
  Fp8Recipe delayed_short;
  delayed_short.amax_history_len = 16;
  for (const Fp8Recipe& r : {Fp8Recipe::delayed(), delayed_short, Fp8Recipe::current(),
                             Fp8Recipe::mxfp8()}) {
    double first = 0, last = 0;
    const double acc = train_blobs(&r, 120, &first, &last);
    EXPECT_LT(last, first * 0.5) << r.describe();
    EXPECT_GT(acc, base - 0.05) << r.describe() << ": fp8 " << acc << " vs fp32 " << base;
  }
}

#include "mixp/bench/gemm_bench.h"

TEST(Fp8Bench, GemmBenchTimesTheQuantizePath) {
  bench::GemmBenchConfig c;
  c.n = 64;
  c.repeat = 1;
  c.threads = 1;
  c.peak_seconds = 0.005;
  c.dtypes = {DType::fp8_e4m3, DType::fp8_e5m2};
  const auto r = bench::run_gemm_bench(c);
  ASSERT_EQ(r.size(), 2u);
  for (const auto& x : r) {
    EXPECT_TRUE(x.emulated);
    EXPECT_NE(x.path.find("quantize"), std::string::npos) << x.path;
    EXPECT_NE(x.path.find("mixp::gemm bf16"), std::string::npos) << x.path;
    EXPECT_GT(x.gflops, 0);
  }
}
