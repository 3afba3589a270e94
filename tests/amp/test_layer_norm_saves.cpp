// LayerNorm's 16-bit saves under Autocast (AutocastOptions::low_precision_norm_saves, policy key
// ln_save): the forward is unchanged, the backward from the saved xhat equals the fp32 backward
// bit for bit when xhat is exact and is within 16-bit rounding of it otherwise, the saved bytes
// halve, and the recipes turn it on by default.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mixp/mixp.h"
#include "ops/dispatch.h"
#include "ops/layer_norm_saved.h"

namespace mixp::amp {
namespace {

Tensor rnd(const Shape& s, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(seed);
  return add(mul(randn(s, gen), scale), shift);
}

double rel_error(const Tensor& got, const Tensor& ref) {
  const std::vector<double> a = got.to_double_vector(), r = ref.to_double_vector();
  double num = 0, den = 0;
  for (size_t j = 0; j < a.size(); ++j) {
    num += (a[j] - r[j]) * (a[j] - r[j]);
    den += r[j] * r[j];
  }
  return std::sqrt(num / den);
}

struct LnGrads {
  Tensor y, dx, dw, db;
};

// One layer_norm forward and backward on fp32 leaves, inside a region with the given options.
LnGrads run_ln(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& dy,
               const AutocastOptions& opt) {
  Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(),
         b = b0.detach().requires_grad_();
  Tensor y;
  {
    Autocast ac(opt);
    y = layer_norm(x, Shape{x.shape()[1]}, w, b);
  }
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

AutocastOptions opts(DType dt, bool low) {
  return AutocastOptions{.dtype = dt, .enabled = true, .cache_enabled = true,
                         .low_precision_norm_saves = low};
}

TEST(LayerNormSaves, BackwardFromExactXhatMatchesTheFp32Backward) {
  // The trick of layer_norm_backward_from_xhat (mean 0 and rstd 1 into the fp32 kernels, then
  // dx scaled by rstd) must reproduce the kernels' own result when xhat is exact: give it the
  // fp32 xhat the kernels compute, (x - mean) * rstd. 1500 rows take several row blocks.
  for (const int64_t rows : {37, 1500}) {
    const int64_t n = 96;
    const Tensor x = rnd({rows, n}, 1, 3.0, 0.5), w = rnd({n}, 2), dy = rnd({rows, n}, 3);
    Tensor y = empty({rows, n}), mean = empty({rows}), rstd = empty({rows});
    backend().layer_norm(y, mean, rstd, x, w, Tensor(), 1e-5);
    Tensor xhat = empty({rows, n});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        xhat.data<float>()[r * n + i] =
            (x.data<float>()[r * n + i] - mean.data<float>()[r]) * rstd.data<float>()[r];
      }
    }
    Tensor dx0 = empty({rows, n}), dw0 = empty({n}), db0 = empty({n});
    backend().layer_norm_backward(dx0, dw0, db0, dy, x, w, mean, rstd);
    Tensor dx1 = empty({rows, n}), dw1 = empty({n}), db1 = empty({n});
    detail::layer_norm_backward_from_xhat(dx1, dw1, db1, dy, xhat, w, rstd);
    EXPECT_EQ(dx1.to_double_vector(), dx0.to_double_vector()) << rows;
    // The kernel forms dw's terms as (dy * (x - mean)) * rstd; from xhat they are dy * xhat, a
    // different order of the same two roundings; the row blocks add their partial sums.
    EXPECT_LT(rel_error(dw1, dw0), 1e-6) << rows;
    EXPECT_LT(rel_error(db1, db0), 1e-6) << rows;
  }
}

TEST(LayerNormSaves, FusedBackwardFromXhatIsTheBlockedBackwardBitForBit) {
  // The cpu backend's one-pass layer_norm_backward_xhat against the Backend default it replaces
  // (blocks of rows through layer_norm_backward, partial dw/db added block by block, dx scaled
  // by rstd): the same bits for one and two threads, bf16 and fp16 xhat, with and without the
  // weight and the dw/db outputs, for rows that fill several blocks, end in a short one (of
  // fewer rows than are worth two threads) or fit in one.
  Backend& be = backend();
  const int prev_threads = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType low : {DType::bf16, DType::fp16}) {
      for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{37, 96}, {1500, 96},
                                    {2048, 768}, {170 + 3, 768}, {1, 64}}) {
        for (const bool affine : {true, false}) {
          SCOPED_TRACE(::testing::Message() << name(low) << " rows " << rows << " n " << n
                                            << " threads " << threads << " affine " << affine);
          const Tensor xhat = rnd({rows, n}, 11).to(low, Round::nearest_even);
          const Tensor dy = rnd({rows, n}, 12), rstd = add(mul(rnd({rows}, 13), 0.1), 2.0);
          const Tensor w = affine ? rnd({n}, 14) : Tensor();
          Tensor dx0 = empty({rows, n}), dw0 = empty({n}), db0 = empty({n});
          be.Backend::layer_norm_backward_xhat(dx0, dw0, db0, dy, xhat, w, rstd);
          Tensor dx1 = empty({rows, n}), dw1 = empty({n}), db1 = empty({n});
          be.layer_norm_backward_xhat(dx1, dw1, db1, dy, xhat, w, rstd);
          EXPECT_EQ(dx1.to_double_vector(), dx0.to_double_vector());
          EXPECT_EQ(dw1.to_double_vector(), dw0.to_double_vector());
          EXPECT_EQ(db1.to_double_vector(), db0.to_double_vector());
          Tensor dx2 = empty({rows, n}), none;
          be.layer_norm_backward_xhat(dx2, none, none, dy, xhat, w, rstd);
          EXPECT_EQ(dx2.to_double_vector(), dx0.to_double_vector());
        }
      }
    }
  }
  set_num_threads(prev_threads);
}

TEST(LayerNormSaves, SavedXhatIsTheFp32XhatRoundedToNearest) {
  const int64_t rows = 5, n = 64;
  const Tensor x = rnd({rows, n}, 4, 2.0, -1.0);
  Tensor y = empty({rows, n}), mean = empty({rows}), rstd = empty({rows});
  backend().layer_norm(y, mean, rstd, x, Tensor(), Tensor(), 1e-5);
  for (DType dt : {DType::bf16, DType::fp16}) {
    const Tensor got = detail::layer_norm_xhat(x, mean, rstd, dt);
    ASSERT_EQ(got.dtype(), dt);
    Tensor ref = empty({rows, n});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i)
        ref.data<float>()[r * n + i] =
            (x.data<float>()[r * n + i] - mean.data<float>()[r]) * rstd.data<float>()[r];
    EXPECT_EQ(got.to_double_vector(), ref.to(dt, Round::nearest_even).to_double_vector())
        << name(dt);
  }
}

TEST(LayerNormSaves, ForwardUnchangedGradientsWithinSixteenBitRounding) {
  // A residual-stream-like input: mean far from 0 relative to the spread, where rounding x
  // itself to bf16 would lose the row's detail; xhat does not.
  const int64_t rows = 64, n = 128;
  const Tensor x = rnd({rows, n}, 5, 0.5, 40.0), w = rnd({n}, 6, 0.3, 1.0), b = rnd({n}, 7),
               dy = rnd({rows, n}, 8);
  const LnGrads ref = run_ln(x, w, b, dy, opts(DType::bf16, false));
  for (DType dt : {DType::bf16, DType::fp16}) {
    const LnGrads got = run_ln(x, w, b, dy, opts(dt, true));
    EXPECT_EQ(got.y.to_double_vector(), ref.y.to_double_vector()) << "forward must not change";
    EXPECT_EQ(got.dx.dtype(), DType::fp32);
    EXPECT_EQ(got.db.to_double_vector(), ref.db.to_double_vector()) << "db does not read xhat";
    // One rounding of xhat: 2^-9 relative (bf16), 2^-12 (fp16), averaged over the row.
    const double tol = dt == DType::bf16 ? 4e-3 : 5e-4;
    EXPECT_LT(rel_error(got.dx, ref.dx), tol) << name(dt);
    EXPECT_LT(rel_error(got.dw, ref.dw), tol) << name(dt);
    EXPECT_GT(rel_error(got.dx, ref.dx), 0.0) << name(dt) << ": the 16-bit path did not run";
  }
}

TEST(LayerNormSaves, SavedBytesHalve) {
  // What the graph keeps alive after the forward, with the input itself dropped by the caller
  // (as the residual stream is after the next add).
  const int64_t rows = 512, n = 256;
  const Tensor w = rnd({n}, 9).requires_grad_();
  auto kept = [&](bool low) {
    const int64_t before = allocator_stats().requested_bytes;
    Tensor y;
    {
      Tensor x = rnd({rows, n}, 10).requires_grad_();
      Autocast ac(opts(DType::bf16, low));
      y = layer_norm(mul(x, 1.0), Shape{n}, w, Tensor());
    }
    return allocator_stats().requested_bytes - before - static_cast<int64_t>(y.nbytes());
  };
  const int64_t fp32_saves = kept(false), low_saves = kept(true);
  const int64_t x_bytes = rows * n * 4;
  EXPECT_GE(fp32_saves, x_bytes);
  EXPECT_LE(low_saves, fp32_saves - x_bytes / 2 + rows * 4) << fp32_saves << " vs " << low_saves;
}

TEST(LayerNormSaves, OffByDefaultInTheGuardInheritedByNestedGuardsOnInTheRecipes) {
  EXPECT_FALSE(AutocastOptions{}.low_precision_norm_saves) << "the guard's default is PyTorch's";
  EXPECT_EQ(saved_activation_dtype(OpId::layer_norm), DType::fp32);
  {
    Autocast outer(opts(DType::bf16, true));
    EXPECT_EQ(saved_activation_dtype(OpId::layer_norm), DType::bf16);
    EXPECT_EQ(saved_activation_dtype(OpId::linear), DType::fp32);
    {
      Autocast inner(DType::fp16);
      EXPECT_EQ(saved_activation_dtype(OpId::layer_norm), DType::fp16);
      Autocast off(DType::bf16, false);
      EXPECT_EQ(saved_activation_dtype(OpId::layer_norm), DType::fp32);
    }
  }
  {
    Autocast plain(DType::bf16);
    EXPECT_EQ(saved_activation_dtype(OpId::layer_norm), DType::fp32);
  }
  for (const char* preset : {"bf16", "fp16", "fp16-o2"}) {
    EXPECT_TRUE(parse_policy(preset).norm_saves_low) << preset;
  }
  EXPECT_FALSE(parse_policy("bf16:ln_save=fp32").norm_saves_low);
  EXPECT_TRUE(parse_policy("bf16:ln_save=compute").norm_saves_low);
  try {
    (void)parse_policy("bf16:ln_save=bf16");
    FAIL() << "ln_save=bf16 accepted";
  } catch (const PolicyError& e) {
    EXPECT_NE(std::string(e.what()).find("'ln_save' takes compute or fp32"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mixp::amp
