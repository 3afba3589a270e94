// The element rules of the cnn's kernels on cuda (cuda_nn.cu): 2-D max/avg pooling and their
// gradients, the im2col / col2im index maps of the GEMM convolution, batch norm's per-element
// formulas, and reduce_max_backward's split; the same operations in the same order as the ref
// backend (src/backend/ref/ref_nn.cpp, ref_linalg.cpp, ref_reduce.cpp). Every gradient that the
// ref scatters (+=) in output order is gathered here per input element in that same order, so
// that the GPU's sums are the ref's, without atomics. tests/cuda/test_cuda_nn_math.cpp runs these
// on the CPU against the ref backend.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/math/host_device.h"

namespace mixp::cuda_math {

struct PoolShape {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw;
};

// max_pool2d of output (n, c, oh, ow); x(h, w) loads the input plane's element. NaN wins.
template <class X>
MIXP_HD float max_pool_at(const PoolShape& p, int64_t oh, int64_t ow, X x) {
  float best = -INFINITY;
  for (int64_t a = 0; a < p.kh; ++a)
    for (int64_t b = 0; b < p.kw; ++b) {
      const int64_t h = oh * p.sh - p.ph + a, w = ow * p.sw - p.pw + b;
      if (h < 0 || h >= p.H || w < 0 || w >= p.W) continue;
      const float v = x(h, w);
      if (v > best || std::isnan(v)) best = v;
    }
  return best;
}
// The input position (h * W + w) whose gradient output (oh, ow) feeds, or -1 (the ref's
// argmax rule: the first maximum, a NaN over a number).
template <class X>
MIXP_HD int64_t max_pool_arg(const PoolShape& p, int64_t oh, int64_t ow, X x) {
  float best = -INFINITY;
  int64_t arg = -1;
  for (int64_t a = 0; a < p.kh; ++a)
    for (int64_t b = 0; b < p.kw; ++b) {
      const int64_t h = oh * p.sh - p.ph + a, w = ow * p.sw - p.pw + b;
      if (h < 0 || h >= p.H || w < 0 || w >= p.W) continue;
      const float v = x(h, w);
      if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
        best = v;
        arg = h * p.W + w;
      }
    }
  return arg;
}
// The outputs whose window holds input row h: oh in [lo, hi] (possibly empty), for any stride.
MIXP_HD void pool_outputs_of(int64_t h, int64_t k, int64_t s, int64_t pad, int64_t out, int64_t& lo,
                             int64_t& hi) {
  // oh * s - pad <= h <= oh * s - pad + k - 1
  const int64_t num = h + pad - (k - 1);
  lo = num <= 0 ? 0 : (num + s - 1) / s;
  hi = (h + pad) / s;
  if (hi > out - 1) hi = out - 1;
}
// max_pool2d_backward at input (h, w): the sum, in (oh, ow) order, of the gradients of the
// outputs whose argmax is this element. g(oh, ow) loads ddst, x(h, w) the input.
template <class G, class X>
MIXP_HD float max_pool_grad_at(const PoolShape& p, int64_t h, int64_t w, G g, X x) {
  int64_t oh0, oh1, ow0, ow1;
  pool_outputs_of(h, p.kh, p.sh, p.ph, p.OH, oh0, oh1);
  pool_outputs_of(w, p.kw, p.sw, p.pw, p.OW, ow0, ow1);
  float acc = 0.0f;
  for (int64_t oh = oh0; oh <= oh1; ++oh)
    for (int64_t ow = ow0; ow <= ow1; ++ow)
      if (max_pool_arg(p, oh, ow, x) == h * p.W + w) acc += g(oh, ow);
  return acc;
}
// avg_pool2d of output (oh, ow): the double sum over the window inside the input, / kh * kw.
template <class X>
MIXP_HD double avg_pool_at(const PoolShape& p, int64_t oh, int64_t ow, X x) {
  double s = 0;
  for (int64_t a = 0; a < p.kh; ++a)
    for (int64_t b = 0; b < p.kw; ++b) {
      const int64_t h = oh * p.sh - p.ph + a, w = ow * p.sw - p.pw + b;
      if (h < 0 || h >= p.H || w < 0 || w >= p.W) continue;
      s += static_cast<double>(x(h, w));
    }
  return s / static_cast<double>(p.kh * p.kw);
}
// avg_pool2d_backward at input (h, w): the sum in (oh, ow) order of (float)(g / area).
template <class G>
MIXP_HD float avg_pool_grad_at(const PoolShape& p, int64_t h, int64_t w, G g) {
  int64_t oh0, oh1, ow0, ow1;
  pool_outputs_of(h, p.kh, p.sh, p.ph, p.OH, oh0, oh1);
  pool_outputs_of(w, p.kw, p.sw, p.pw, p.OW, ow0, ow1);
  const double area = static_cast<double>(p.kh * p.kw);
  float acc = 0.0f;
  for (int64_t oh = oh0; oh <= oh1; ++oh)
    for (int64_t ow = ow0; ow <= ow1; ++ow)
      acc += static_cast<float>(static_cast<double>(g(oh, ow)) / area);
  return acc;
}

// The convolution as a GEMM: col [C * KH * KW, OH * OW] per image, row r = (c * KH + kh) * KW +
// kw, column s = oh * OW + ow; 0 where the tap falls in the padding.
struct ConvShape {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw;
};
// The input (h, w) that col element (r, s) reads, false in the padding.
MIXP_HD bool im2col_source(const ConvShape& g, int64_t r, int64_t s, int64_t& c, int64_t& h,
                           int64_t& w) {
  const int64_t kw = r % g.KW, kh = (r / g.KW) % g.KH;
  c = r / (g.KW * g.KH);
  const int64_t ow = s % g.OW, oh = s / g.OW;
  h = oh * g.sh - g.ph + kh * g.dh;
  w = ow * g.sw - g.pw + kw * g.dw;
  return h >= 0 && h < g.H && w >= 0 && w < g.W;
}
// col2im at input (c, h, w): the sum over the taps (kh, kw) that read it of dcol(r, s).
template <class D>
MIXP_HD float col2im_at(const ConvShape& g, int64_t c, int64_t h, int64_t w, D dcol) {
  float acc = 0.0f;
  for (int64_t kh = 0; kh < g.KH; ++kh) {
    const int64_t th = h + g.ph - kh * g.dh;  // = oh * sh
    if (th < 0 || th % g.sh) continue;
    const int64_t oh = th / g.sh;
    if (oh >= g.OH) continue;
    for (int64_t kw = 0; kw < g.KW; ++kw) {
      const int64_t tw = w + g.pw - kw * g.dw;
      if (tw < 0 || tw % g.sw) continue;
      const int64_t ow = tw / g.sw;
      if (ow >= g.OW) continue;
      acc += dcol((c * g.KH + kh) * g.KW + kw, oh * g.OW + ow);
    }
  }
  return acc;
}

// Batch norm (ref_reduce.cpp), in double: the statistics of one channel from its sum and the
// sum of squared deviations over cnt elements.
struct BnStats {
  double mean, invstd, var, unbiased;
};
MIXP_HD BnStats bn_stats(double sum, double sq, double cnt, double eps) {
  BnStats s;
  s.mean = sum / cnt;
  s.var = sq / cnt;
  s.invstd = 1.0 / std::sqrt(s.var + eps);
  s.unbiased = cnt > 1 ? sq / (cnt - 1) : s.var;
  return s;
}
MIXP_HD double bn_running(double old, double momentum, double stat) {
  return (1 - momentum) * old + momentum * stat;
}
MIXP_HD double bn_forward(double x, double mean, double invstd, double w, double b) {
  return (x - mean) * invstd * w + b;
}
MIXP_HD double bn_backward(double x, double g, double mean, double invstd, double w, double cnt,
                           double sum_g, double sum_g_xhat) {
  const double xhat = (x - mean) * invstd;
  return w * invstd * (g - sum_g / cnt - xhat * sum_g_xhat / cnt);
}

// reduce_max_backward's element: g / (the number of maxima) where src equals the max, else 0.
MIXP_HD float max_split(float s, float m, float g, float count) {
  return s == m ? static_cast<float>(static_cast<double>(g) / static_cast<double>(count)) : 0.0f;
}

}  // namespace mixp::cuda_math
