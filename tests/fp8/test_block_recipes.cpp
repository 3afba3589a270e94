// The block-scaled recipes fp8-block, nvfp4 and mxfp4 (docs/fp4.md, docs/fp8.md "fp8-block"):
// fp8_linear's three GEMMs against references built from the quantizers of
// mixp/format/block_scaled.h (each switch changes exactly the operand it names, and a test fails
// if it does not), options and their errors, --layer-precision and bf16_last, and the small gpt
// training a few steps with finite, decreasing loss under each recipe.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/format/block_scaled.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/fp8_recipe.h"
#include "mixp/train/trainer.h"
#include "train/resume_check.h"
#include "train/train_test_util.h"

namespace mixp {
namespace {

using amp::Fp8Recipe;
using Vec = std::vector<float>;

Vec fq(Vec x, int64_t r, int64_t c, BlockScheme s, int tile_rows, bool pow2 = false) {
  BlockScaledOptions o{.scheme = s, .tile_rows = tile_rows, .pow2_scales = pow2};
  block_scaled_fake_quantize(x, r, c, o);
  return x;
}
Vec transpose(const Vec& a, int64_t r, int64_t c) {
  Vec t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[static_cast<size_t>(j * r + i)] = a[static_cast<size_t>(i * c + j)];
  return t;
}
// a [m, k] @ b [n, k]^T in double.
std::vector<double> nt(const Vec& a, const Vec& b, int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        c[static_cast<size_t>(i * n + j)] += double(a[static_cast<size_t>(i * k + p)]) * b[static_cast<size_t>(j * k + p)];
  return c;
}
// max |got - want| relative to max |want|.
double rel(const Vec& got, const std::vector<double>& want) {
  double e = 0, m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    e = std::max(e, std::fabs(got[i] - want[i]));
    m = std::max(m, std::fabs(want[i]));
  }
  return e / m;
}

struct Grads {
  Vec y, dx, dw;
};
constexpr int64_t M = 32, K = 64, N = 48;

Tensor randn_t(Shape s, uint64_t seed) {
  Generator g(seed);
  return randn(s, g);
}

Grads run(const Fp8Recipe& r) {
  amp::Fp8LinearMeta meta(r);
  Tensor x = randn_t({M, K}, 1).requires_grad_();
  x.set_at({3, 5}, 40.0);  // an outlier, so that the RHT matters
  Tensor w = (randn_t({N, K}, 2) * 0.1).requires_grad_();
  Tensor g = randn_t({M, N}, 3) * 0.01;
  Tensor y = amp::fp8_linear(x, w, Tensor(), Activation::none, meta);
  sum(y * g).backward();
  return {y.to_vector<float>(), x.grad().to_vector<float>(), w.grad().to_vector<float>()};
}
Vec xv() { Tensor x = randn_t({M, K}, 1); x.set_at({3, 5}, 40.0); return x.to_vector<float>(); }
Vec wv() { return (randn_t({N, K}, 2) * 0.1).to_vector<float>(); }
Vec gv() { return (randn_t({M, N}, 3) * 0.01).to_vector<float>(); }

constexpr double kTol = 1e-5;  // fp32 accumulation order (oneDNN vs double)

TEST(BlockRecipes, Nvfp4GemmsUseTheDocumentedOperands) {
  Fp8Recipe r = Fp8Recipe::nvfp4();
  r.sr = false;  // deterministic, so the reference can be exact
  const Grads got = run(r);
  const Vec x = xv(), w = wv(), g = gv();
  // fprop: x 1x16 along K, w 16x16.
  const Vec wq16 = fq(w, N, K, BlockScheme::nvfp4, 16);
  EXPECT_LT(rel(got.y, nt(fq(x, M, K, BlockScheme::nvfp4, 1), wq16, M, N, K)), kTol);
  // 2d=0 changes the forward weights to 1x16 blocks.
  Fp8Recipe r1 = r;
  r1.weight_2d = false;
  const Grads g1 = run(r1);
  const auto y1 = nt(fq(x, M, K, BlockScheme::nvfp4, 1), fq(w, N, K, BlockScheme::nvfp4, 1), M, N, K);
  EXPECT_LT(rel(g1.y, y1), kTol);
  EXPECT_GT(rel(got.y, y1), 1e-3) << "2d must change the forward";
  // dgrad: g 1x16 along N, w^T with the same 16x16 values.
  const Vec wt16 = transpose(wq16, N, K);  // [K, N]
  EXPECT_LT(rel(got.dx, nt(fq(g, M, N, BlockScheme::nvfp4, 1), wt16, M, K, N)), kTol);
  // ... and with 2d=0 w is quantized column-wise (1x16 along N).
  EXPECT_LT(rel(g1.dx, nt(fq(g, M, N, BlockScheme::nvfp4, 1),
                          fq(transpose(w, N, K), K, N, BlockScheme::nvfp4, 1), M, K, N)),
            kTol);
  // wgrad: RHT along M on g^T and x^T, then 1x16.
  Vec gt = transpose(g, M, N), xt = transpose(x, M, K);
  rht16_rows(gt, N, M);
  rht16_rows(xt, K, M);
  const auto dw_rht = nt(fq(gt, N, M, BlockScheme::nvfp4, 1), fq(xt, K, M, BlockScheme::nvfp4, 1), N, K, M);
  EXPECT_LT(rel(got.dw, dw_rht), kTol);
  Fp8Recipe r2 = r;
  r2.rht = false;
  const Grads g2 = run(r2);
  const auto dw_plain = nt(fq(transpose(g, M, N), N, M, BlockScheme::nvfp4, 1),
                           fq(transpose(x, M, K), K, M, BlockScheme::nvfp4, 1), N, K, M);
  EXPECT_LT(rel(g2.dw, dw_plain), kTol);
  EXPECT_GT(rel(got.dw, dw_plain), 1e-3) << "rht must change the wgrad operands";
  EXPECT_EQ(g2.y, got.y) << "rht touches only the wgrad";
  // The RHT'd wgrad still estimates the true g^T x.
  EXPECT_LT(rel(got.dw, nt(transpose(g, M, N), transpose(x, M, K), N, K, M)), 0.3);
}

TEST(BlockRecipes, StochasticRoundingOnlyInTheGradients) {
  Fp8Recipe on = Fp8Recipe::nvfp4(), off = on;
  off.sr = false;
  const Grads a = run(on), b = run(off);
  EXPECT_EQ(a.y, b.y) << "the forward rounds to nearest";
  EXPECT_NE(a.dx, b.dx);
  EXPECT_NE(a.dw, b.dw);
  EXPECT_EQ(run(on).dx, a.dx) << "reproducible";
  // Unbiased on average: SR's dgrad is closer to the unquantized g @ wq over many seeds than a
  // single draw's error would suggest -- here just as good an estimate as round-to-nearest.
  const Vec wt16 = transpose(fq(wv(), N, K, BlockScheme::nvfp4, 16), N, K);
  const auto exact = nt(gv(), wt16, M, K, N);
  EXPECT_LT(rel(a.dx, exact), 0.5);
}

TEST(BlockRecipes, Mxfp4AndFp8BlockOperands) {
  Fp8Recipe m = Fp8Recipe::mxfp4();
  m.sr = false;
  m.rht = false;
  const Grads gm = run(m);
  const Vec x = xv(), w = wv(), g = gv();
  EXPECT_LT(rel(gm.y, nt(fq(x, M, K, BlockScheme::mxfp4, 1), fq(w, N, K, BlockScheme::mxfp4, 1), M, N, K)), kTol);
  EXPECT_LT(rel(gm.dx, nt(fq(g, M, N, BlockScheme::mxfp4, 1),
                          fq(transpose(w, N, K), K, N, BlockScheme::mxfp4, 1), M, K, N)),
            kTol);
  for (bool pow2 : {false, true}) {
    Fp8Recipe f = Fp8Recipe::fp8_block();
    f.pow2 = pow2;
    const Grads gf = run(f);
    const auto y = nt(fq(x, M, K, BlockScheme::fp8_block, 1, pow2),
                      fq(w, N, K, BlockScheme::fp8_block, 128, pow2), M, N, K);
    EXPECT_LT(rel(gf.y, y), kTol) << pow2;
    const auto y_other = nt(fq(x, M, K, BlockScheme::fp8_block, 1, !pow2),
                            fq(w, N, K, BlockScheme::fp8_block, 128, !pow2), M, N, K);
    EXPECT_GT(rel(gf.y, y_other), 1e-4) << "pow2 must change the scales";
    const auto dw = nt(fq(transpose(g, M, N), N, M, BlockScheme::fp8_block, 1, pow2),
                       fq(transpose(x, M, K), K, M, BlockScheme::fp8_block, 1, pow2), N, K, M);
    EXPECT_LT(rel(gf.dw, dw), kTol);
  }
}

// fp8-block's GEMMs run per 128-wide chunk of the reduction dimension (block_linear.cpp gemm_nt:
// a bf16 GEMM per chunk, times the chunk's scales of the row and the column): on ragged shapes
// spanning several chunks, with magnitudes that differ from chunk to chunk (so that a scale of the
// wrong chunk, row block or column block shows), all three GEMMs equal the products of the
// dequantized operands up to fp32 summation order.
TEST(BlockRecipes, Fp8BlockChunkedGemmsOnRaggedShapes) {
  const int64_t m = 40, k = 300, n = 260;
  Vec xs(static_cast<size_t>(m * k)), ws(static_cast<size_t>(n * k)), gs(static_cast<size_t>(m * n));
  Generator gen(11);
  const Vec rx = randn(Shape{m, k}, gen).to_vector<float>(), rw = randn(Shape{n, k}, gen).to_vector<float>(),
            rg = randn(Shape{m, n}, gen).to_vector<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j)
      xs[static_cast<size_t>(i * k + j)] = rx[static_cast<size_t>(i * k + j)] * std::ldexp(1.0f, static_cast<int>((j / 128) * 3 + i % 5));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      ws[static_cast<size_t>(i * k + j)] = rw[static_cast<size_t>(i * k + j)] * std::ldexp(0.01f, static_cast<int>((i / 128) * 2 - (j / 128)));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      gs[static_cast<size_t>(i * n + j)] = rg[static_cast<size_t>(i * n + j)] * std::ldexp(1e-3f, static_cast<int>(j / 128 + i % 3));
  amp::Fp8LinearMeta meta(Fp8Recipe::fp8_block());
  Tensor x = from_vector(xs, Shape{m, k}).requires_grad_();
  Tensor w = from_vector(ws, Shape{n, k}).requires_grad_();
  Tensor y = amp::fp8_linear(x, w, Tensor(), Activation::none, meta);
  sum(y * from_vector(gs, Shape{m, n})).backward();
  EXPECT_LT(rel(y.to_vector<float>(), nt(fq(xs, m, k, BlockScheme::fp8_block, 1),
                                         fq(ws, n, k, BlockScheme::fp8_block, 128), m, n, k)), kTol);
  EXPECT_LT(rel(x.grad().to_vector<float>(),
                nt(fq(gs, m, n, BlockScheme::fp8_block, 1),
                   transpose(fq(ws, n, k, BlockScheme::fp8_block, 128), n, k), m, k, n)), kTol);
  EXPECT_LT(rel(w.grad().to_vector<float>(),
                nt(fq(transpose(gs, m, n), n, m, BlockScheme::fp8_block, 1),
                   fq(transpose(xs, m, k), k, m, BlockScheme::fp8_block, 1), n, k, m)), kTol);
}

// promote: a 14-bit accumulator loses the small addends of a long sum; promoting every 128
// products keeps most of them.
TEST(BlockRecipes, Fp8BlockPromotionEmulatesTheLimitedAccumulator) {
  const int64_t k = 4096;
  // Power-of-two scales keep 1 and 1.125 exact (scale 256: codes 256 and 288).
  Fp8Recipe base = Fp8Recipe::fp8_block();
  base.pow2 = true;
  amp::Fp8LinearMeta exact(base);
  Fp8Recipe p128 = base, pnone = base;
  p128.promote = 128;
  pnone.promote = 1 << 20;
  amp::Fp8LinearMeta m128(p128), mnone(pnone);
  Tensor x = full({1, k}, 1.0f);
  Tensor w = full({1, k}, 1.0f);
  for (int64_t i = 0; i < k; i += 2) x.set_at({0, i}, 1.125);
  NoGradGuard ng;
  const double want = 4096 + 2048 * 0.125;
  const double y0 = amp::fp8_linear(x, w, Tensor(), Activation::none, exact).item();
  const double y128 = amp::fp8_linear(x, w, Tensor(), Activation::none, m128).item();
  const double yn = amp::fp8_linear(x, w, Tensor(), Activation::none, mnone).item();
  EXPECT_EQ(y0, want);
  EXPECT_EQ(y128, want) << "chunks of 128 stay below 2^14 ulps";
  EXPECT_LT(yn, want - 100) << "one 14-bit accumulator drops the 0.125s once the sum passes 2^11";
}

TEST(BlockRecipes, OptionsAndErrors) {
  using train::make_recipe;
  auto fp8 = [](const std::string& s) {
    auto r = make_recipe(s);
    return dynamic_cast<train::Fp8TrainingRecipe&>(*r).fp8();
  };
  const Fp8Recipe n = fp8("nvfp4:rht=0,2d=off,sr=false,bf16_last=2");
  EXPECT_EQ(n.scaling, amp::Fp8Scaling::nvfp4);
  EXPECT_FALSE(n.rht);
  EXPECT_FALSE(n.weight_2d);
  EXPECT_FALSE(n.sr);
  EXPECT_EQ(n.bf16_last, 2);
  const Fp8Recipe d = fp8("nvfp4");
  EXPECT_TRUE(d.rht && d.weight_2d && d.sr);
  EXPECT_EQ(d.bf16_last, 0);
  const Fp8Recipe f = fp8("fp8-block:pow2=1,promote=128");
  EXPECT_TRUE(f.pow2);
  EXPECT_EQ(f.promote, 128);
  EXPECT_EQ(fp8("mxfp4:sr=0").sr, false);
  EXPECT_EQ(make_recipe("nvfp4")->dtypes().compute, DType::fp4_e2m1);
  EXPECT_EQ(make_recipe("fp8-block")->dtypes().compute, DType::fp8_e4m3);
  auto err = [](const std::string& s, const std::string& lp = "") {
    train::RecipeOptions o;
    o.layer_precision = lp;
    return ::mixp::test::error_of<std::exception>([&] { make_recipe(s, o); });
  };
  EXPECT_NE(err("mxfp4:2d=0").find("'2d' does not apply to mxfp4 (its options: rht, sr, bf16_last)"),
            std::string::npos)
      << err("mxfp4:2d=0");
  EXPECT_NE(err("fp8-block:rht=1").find("its options: pow2, promote"), std::string::npos);
  EXPECT_NE(err("nvfp4:margin=1").find("does not apply to nvfp4"), std::string::npos);
  EXPECT_NE(err("fp8:pow2=1").find("does not apply to fp8"), std::string::npos);
  EXPECT_NE(err("nvfp4:sr=maybe").find("sr"), std::string::npos);
  EXPECT_NE(err("nvfp4", "*=mxfp4").find("one run has one quantized recipe"), std::string::npos);
  train::RecipeOptions lp;
  lp.layer_precision = "head=bf16,*=nvfp4";
  EXPECT_NO_THROW(make_recipe("nvfp4", lp));
}

TEST(BlockRecipes, Bf16LastKeepsTheLastBlocksOutAndRulesOverrideIt) {
  auto layers = [](const std::string& p, const std::string& lp = "") {
    train::TrainConfig c = train::testing::small_gpt(p, 3);
    c.layer_precision = lp;
    train::Trainer t(c);
    return dynamic_cast<const train::Fp8TrainingRecipe&>(t.recipe()).fp8_layers();
  };
  const auto all = layers("nvfp4");
  const auto some = layers("nvfp4:bf16_last=1");
  ASSERT_FALSE(all.empty());
  EXPECT_LT(some.size(), all.size());
  for (const std::string& n : some) EXPECT_EQ(n.find("blocks.2."), std::string::npos) << n;
  for (const std::string& n : all) {
    if (n.find("blocks.2.") == 0) {
      EXPECT_EQ(std::count(some.begin(), some.end(), n), 0) << n;
    }
  }
  // An explicit rule for a layer wins over bf16_last; `*` does not.
  const auto ruled = layers("mxfp4:bf16_last=1", "blocks.2.mlp.fc=mxfp4");
  EXPECT_EQ(std::count(ruled.begin(), ruled.end(), "blocks.2.mlp.fc"), 1);
  // `*` covers the head too (as `*=fp8` does), but not the blocks bf16_last keeps out.
  const auto star = layers("mxfp4:bf16_last=1", "*=mxfp4");
  EXPECT_EQ(star.size(), some.size() + 1);
  EXPECT_EQ(std::count(star.begin(), star.end(), "head"), 1);
  for (const std::string& n : star) EXPECT_NE(n.find("blocks.2."), 0u) << n;
}

// The stochastic-rounding seeds are hashed from the gradients' values (block_linear.cpp
// value_seed, per-block hashes combined), so a resumed run draws the same bits: the losses and
// weights of 2 + 2 steps equal those of 4 uninterrupted steps, bit for bit.
TEST(BlockRecipes, ResumeIsBitIdentical) {
  for (const char* p : {"nvfp4", "mxfp4", "fp8-block"}) {
    SCOPED_TRACE(p);
    train::TrainConfig c = train::testing::small_gpt(p);
    c.batch = 4;
    train::testing::expect_resume_identical(c, 2);
  }
}

class BlockRecipeTrains : public ::testing::TestWithParam<const char*> {};

TEST_P(BlockRecipeTrains, SmallGptLossIsFiniteAndDecreases) {
  train::TrainConfig c = train::testing::small_gpt(GetParam());
  c.steps = 24;
  c.evaluate = false;
  train::Trainer t(c);
  const train::TrainResult res = t.fit();
  ASSERT_EQ(res.losses.size(), 24u);
  for (double l : res.losses) ASSERT_TRUE(std::isfinite(l));
  double first = 0, last = 0;
  for (int i = 0; i < 4; ++i) first += res.losses[size_t(i)], last += res.losses[size_t(20 + i)];
  EXPECT_LT(last, first * 0.9) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Recipes, BlockRecipeTrains,
                         ::testing::Values("fp8-block", "nvfp4", "mxfp4",
                                           "nvfp4:rht=0,2d=0,sr=0,bf16_last=1",
                                           "fp8-block:pow2=1,promote=128"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace mixp
