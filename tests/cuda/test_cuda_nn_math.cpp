// The arithmetic of the cnn's kernels on cuda (src/backend/cuda/math/nn_math.h, launched by
// cuda_nn.cu and cuda_backend_nn.cpp), run on the CPU the way the kernels run it and compared
// with the ref backend: pooling and its gradients bit for bit (the gradients gathered per input
// element in the ref's order), the convolution's im2col map through a double GEMM and col2im
// within fp32 rounding, batch norm's formulas bit for bit with the ref's summation order
// (the GPU sums in a tree: within 1e-6 on a GPU, test_cuda_nn_device.cpp), reduce_max_backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/math/nn_math.h"
#include "mixp/backend/backend.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"

namespace mixp {
namespace {

namespace cm = cuda_math;

Backend& ref() {
  return get_backend(BackendKind::ref);
}
Tensor randn_t(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, g).contiguous();
}
void expect_bits(const Tensor& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(want.numel()), got.size()) << what;
  const float* w = want.data<float>();
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (std::memcmp(&w[i], &got[i], 4) != 0 && !(std::isnan(w[i]) && std::isnan(got[i]))) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": ref " << w[i] << " cuda math " << got[i];
    }
  }
}

TEST(CudaNnMath, PoolingAndItsGradientsEqualTheRefBackend) {
  Tensor x = randn_t(Shape{2, 3, 9, 11}, 1);
  x.data<float>()[17] = NAN;
  x.data<float>()[40] = x.data<float>()[41];  // a tie inside a window
  const Pool2dParams params[] = {{2, 2, 2, 2, 0, 0}, {3, 3, 2, 2, 1, 1}, {3, 2, 1, 2, 1, 0}};
  for (const Pool2dParams& p : params) {
    const int64_t OH = (9 + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
    const int64_t OW = (11 + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
    const cm::PoolShape s{2,          3,          9,          11,         OH,      OW,
                          p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
    const std::string what = "pool k" + std::to_string(p.kernel_h) + "x" +
                             std::to_string(p.kernel_w) + " s" + std::to_string(p.stride_h) + " p" +
                             std::to_string(p.pad_h);
    const float* xv = x.data<float>();
    Tensor ymax = Tensor::empty(Shape{2, 3, OH, OW}), yavg = Tensor::empty(Shape{2, 3, OH, OW});
    ref().max_pool2d(ymax, x, p);
    ref().avg_pool2d(yavg, x, p);
    std::vector<float> gmax, gavg;
    for (int64_t plane = 0; plane < 6; ++plane) {
      auto ld = [&](int64_t h, int64_t w) { return xv[plane * 99 + h * 11 + w]; };
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          gmax.push_back(cm::max_pool_at(s, oh, ow, ld));
          gavg.push_back(static_cast<float>(cm::avg_pool_at(s, oh, ow, ld)));
        }
    }
    expect_bits(ymax, gmax, what + " max");
    expect_bits(yavg, gavg, what + " avg");
    Tensor g = randn_t(Shape{2, 3, OH, OW}, 2);
    Tensor dmax = Tensor::empty(x.shape()), davg = Tensor::empty(x.shape());
    ref().max_pool2d_backward(dmax, g, x, p);
    ref().avg_pool2d_backward(davg, g, p);
    std::vector<float> gdmax, gdavg;
    const float* gv = g.data<float>();
    for (int64_t plane = 0; plane < 6; ++plane) {
      auto ld = [&](int64_t h, int64_t w) { return xv[plane * 99 + h * 11 + w]; };
      auto lg = [&](int64_t oh, int64_t ow) { return gv[plane * OH * OW + oh * OW + ow]; };
      for (int64_t h = 0; h < 9; ++h)
        for (int64_t w = 0; w < 11; ++w) {
          gdmax.push_back(cm::max_pool_grad_at(s, h, w, lg, ld));
          gdavg.push_back(cm::avg_pool_grad_at(s, h, w, lg));
        }
    }
    expect_bits(dmax, gdmax, what + " max backward");
    expect_bits(davg, gdavg, what + " avg backward");
  }
}

TEST(CudaNnMath, ConvolutionAsIm2colGemmEqualsTheRefBackend) {
  for (const Conv2dParams& p : {Conv2dParams{1, 1, 1, 1, 1, 1}, Conv2dParams{2, 1, 0, 2, 1, 2}}) {
    const int64_t N = 2, C = 3, H = 8, W = 7, O = 4, KH = 3, KW = 2;
    const int64_t OH = (H + 2 * p.pad_h - p.dilation_h * (KH - 1) - 1) / p.stride_h + 1;
    const int64_t OW = (W + 2 * p.pad_w - p.dilation_w * (KW - 1) - 1) / p.stride_w + 1;
    Tensor x = randn_t(Shape{N, C, H, W}, 3), w = randn_t(Shape{O, C, KH, KW}, 4);
    Tensor b = randn_t(Shape{O}, 5), y = Tensor::empty(Shape{N, O, OH, OW});
    ref().conv2d(y, x, w, b, p);
    const cm::ConvShape g{N,           C,  H,          W,          O,       KH,      KW,
                          OH,          OW, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                          p.dilation_w};
    const int64_t R = C * KH * KW, S = OH * OW;
    // im2col, then the GEMM in double in the col's row order (the ref's tap order).
    std::vector<double> col(static_cast<size_t>(N * R * S));
    const float* xv = x.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s) {
          int64_t c, h, ww;
          col[static_cast<size_t>((n * R + r) * S + s)] =
              cm::im2col_source(g, r, s, c, h, ww) ? xv[((n * C + c) * H + h) * W + ww] : 0.0;
        }
    std::vector<float> got;
    const float *wv = w.data<float>(), *bv = b.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t s = 0; s < S; ++s) {
          double acc = bv[o];
          for (int64_t r = 0; r < R; ++r) {
            acc += col[static_cast<size_t>((n * R + r) * S + s)] * wv[o * R + r];
          }
          got.push_back(static_cast<float>(acc));
        }
    // A padded tap adds 0 * w here and nothing in the ref: the same sums up to the order of
    // those zeros, so within one fp32 rounding.
    const float* yv = y.data<float>();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], yv[i], 1e-6 * (1 + std::fabs(yv[i]))) << i;

    // col2im of dcol = W^T dy (double, then fp32 as the GEMM's output) against the ref's data
    // gradient (double sums, one rounding): within fp32 rounding.
    Tensor dy = randn_t(Shape{N, O, OH, OW}, 6), dx = Tensor::empty(x.shape());
    ref().conv2d_backward_data(dx, dy, w, p);
    const float* dyv = dy.data<float>();
    std::vector<float> dcol(static_cast<size_t>(N * R * S));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s) {
          double acc = 0;
          for (int64_t o = 0; o < O; ++o)
            acc += static_cast<double>(wv[o * R + r]) * dyv[(n * O + o) * S + s];
          dcol[static_cast<size_t>((n * R + r) * S + s)] = static_cast<float>(acc);
        }
    const float* dxv = dx.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t ww = 0; ww < W; ++ww) {
            const float v = cm::col2im_at(g, c, h, ww, [&](int64_t r, int64_t s) {
              return dcol[static_cast<size_t>((n * R + r) * S + s)];
            });
            const float want = dxv[((n * C + c) * H + h) * W + ww];
            EXPECT_NEAR(v, want, 1e-5 * (1 + std::fabs(want)))
                << n << " " << c << " " << h << " " << ww;
          }
  }
}

TEST(CudaNnMath, BatchNormFormulasEqualTheRefBackend) {
  const int64_t N = 4, C = 3, S = 10;
  Tensor x = randn_t(Shape{N, C, 2, 5}, 7), w = randn_t(Shape{C}, 8), b = randn_t(Shape{C}, 9);
  Tensor rm = randn_t(Shape{C}, 10), rv = add(mul(randn_t(Shape{C}, 11), 0.1), 1.0).contiguous();
  Tensor rm0 = rm.clone(), rv0 = rv.clone();
  Tensor y = Tensor::empty(x.shape()), sm = Tensor::empty(Shape{C}), si = Tensor::empty(Shape{C});
  ref().batch_norm(y, sm, si, rm, rv, x, w, b, true, 0.1, 1e-5);
  const float* xv = x.data<float>();
  auto at = [&](int64_t n, int64_t c, int64_t s) {
    return static_cast<double>(xv[(n * C + c) * S + s]);
  };
  std::vector<float> gy(static_cast<size_t>(N * C * S)), gm, gi, grm, grv;
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) sum += at(n, c, s);
    const double m = sum / static_cast<double>(N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) sq += (at(n, c, s) - m) * (at(n, c, s) - m);
    const cm::BnStats st = cm::bn_stats(sum, sq, static_cast<double>(N * S), 1e-5);
    gm.push_back(static_cast<float>(st.mean));
    gi.push_back(static_cast<float>(st.invstd));
    grm.push_back(static_cast<float>(cm::bn_running(rm0.data<float>()[c], 0.1, st.mean)));
    grv.push_back(static_cast<float>(cm::bn_running(rv0.data<float>()[c], 0.1, st.unbiased)));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        gy[static_cast<size_t>((n * C + c) * S + s)] = static_cast<float>(cm::bn_forward(
            at(n, c, s), st.mean, st.invstd, w.data<float>()[c], b.data<float>()[c]));
  }
  expect_bits(y, gy, "batch_norm");
  expect_bits(sm, gm, "save_mean");
  expect_bits(si, gi, "save_invstd");
  expect_bits(rm, grm, "running_mean");
  expect_bits(rv, grv, "running_var");

  Tensor g = randn_t(x.shape(), 12), dx = Tensor::empty(x.shape()), dw = Tensor::empty(Shape{C}),
         db = Tensor::empty(Shape{C});
  ref().batch_norm_backward(dx, dw, db, g, x, w, sm, si);
  const float* gv = g.data<float>();
  std::vector<float> gdx(gy.size()), gdw, gdb;
  for (int64_t c = 0; c < C; ++c) {
    const double m = sm.data<float>()[c], inv = si.data<float>()[c], wc = w.data<float>()[c];
    double sg = 0, sgx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double gg = gv[(n * C + c) * S + s];
        sg += gg;
        sgx += gg * (at(n, c, s) - m) * inv;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        gdx[static_cast<size_t>((n * C + c) * S + s)] = static_cast<float>(cm::bn_backward(
            at(n, c, s), gv[(n * C + c) * S + s], m, inv, wc, static_cast<double>(N * S), sg, sgx));
    gdw.push_back(static_cast<float>(sgx));
    gdb.push_back(static_cast<float>(sg));
  }
  expect_bits(dx, gdx, "batch_norm dsrc");
  expect_bits(dw, gdw, "batch_norm dweight");
  expect_bits(db, gdb, "batch_norm dbias");
}

TEST(CudaNnMath, ReduceMaxBackwardSplitsLikeTheRefBackend) {
  std::vector<float> xs = {1, 3, 3, 2, 5, 5, 5, 0, -1, -1, -2, -1};
  Tensor x = from_vector(xs, Shape{3, 4});
  Tensor m = from_vector(std::vector<float>{3, 5, -1}, Shape{3, 1});
  Tensor g = from_vector(std::vector<float>{0.7f, 1.0f, -0.3f}, Shape{3, 1});
  Tensor d = Tensor::empty(x.shape());
  ref().reduce_max_backward(d, g, x, m);
  std::vector<float> got;
  for (int r = 0; r < 3; ++r) {
    float count = 0;
    for (int c = 0; c < 4; ++c)
      count += xs[static_cast<size_t>(r * 4 + c)] == m.data<float>()[r] ? 1.0f : 0.0f;
    for (int c = 0; c < 4; ++c)
      got.push_back(cm::max_split(xs[static_cast<size_t>(r * 4 + c)], m.data<float>()[r],
                                  g.data<float>()[r], count));
  }
  expect_bits(d, got, "reduce_max_backward");
}

}  // namespace
}  // namespace mixp
