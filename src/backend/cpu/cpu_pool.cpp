// CpuBackend pooling: max and average pooling over NCHW planes in parallel, fp32 contiguous;
// other dtypes and layouts fall through to the ref kernels (ref_nn.cpp). The CNN's 2x2/stride-2
// max pooling has branch-free vector kernels (pool_kernels.h).
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/pool_kernels.h"
#include "backend/cpu/vec_kernels.h"
#include "backend/kernel_util.h"
#include "mixp/format/cpu_features.h"

namespace mixp {
using cpu::f32c;
using cpu::fp;
using cpu::parallel_for;

// ---- max pooling (NCHW planes in parallel)
namespace {
bool is_2x2_s2(const Pool2dParams& p) {
  return p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
         p.pad_w == 0;
}
}  // namespace

void CpuBackend::max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) {
  if (!(f32c(dst) && f32c(src))) return RefBackend::max_pool2d(dst, src, p);
  const int64_t NC = src.shape()[0] * src.shape()[1], H = src.shape()[2], W = src.shape()[3];
  const int64_t OH = dst.shape()[2], OW = dst.shape()[3];
  if (is_2x2_s2(p)) {  // the CNN's pooling: branch-free rows in the vector tier
    const auto kern = by_tier(&pool::maxpool2x2_avx512, vec::kernels().maxpool2x2,
                              vec::kernels().maxpool2x2);
    parallel_for(NC, src.numel(), [&](int64_t lo, int64_t hi) {
      for (int64_t pl = lo; pl < hi; ++pl)
        kern(fp(dst) + pl * OH * OW, fp(src) + pl * H * W, W, OH, OW);
    });
    return;
  }
  parallel_for(NC, src.numel(), [&](int64_t lo, int64_t hi) {
    for (int64_t pl = lo; pl < hi; ++pl) {
      const float* x = fp(src) + pl * H * W;
      float* y = fp(dst) + pl * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          kern::for_each_in_window(p, oh, ow, H, W, [&](int64_t h, int64_t w) {
            const float v = x[h * W + w];
            if (v > best || std::isnan(v)) best = v;
          });
          y[oh * OW + ow] = best;
        }
    }
  });
}

void CpuBackend::max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                     const Pool2dParams& p) {
  if (!(f32c(dsrc) && f32c(ddst) && f32c(src)))
    return RefBackend::max_pool2d_backward(dsrc, ddst, src, p);
  const int64_t NC = src.shape()[0] * src.shape()[1], H = src.shape()[2], W = src.shape()[3];
  const int64_t OH = ddst.shape()[2], OW = ddst.shape()[3];
  if (is_2x2_s2(p)) {
    const auto kern = by_tier(&pool::maxpool2x2_bwd_avx512, vec::kernels().maxpool2x2_bwd,
                              vec::kernels().maxpool2x2_bwd);
    parallel_for(NC, src.numel(), [&](int64_t lo, int64_t hi) {
      for (int64_t pl = lo; pl < hi; ++pl) {
        float* gi = fp(dsrc) + pl * H * W;
        if (H != 2 * OH || W != 2 * OW)
          std::memset(gi, 0, sizeof(float) * static_cast<size_t>(H * W));
        kern(gi, fp(ddst) + pl * OH * OW, fp(src) + pl * H * W, W, OH, OW);
      }
    });
    return;
  }
  parallel_for(NC, src.numel(), [&](int64_t lo, int64_t hi) {
    for (int64_t pl = lo; pl < hi; ++pl) {
      const float* x = fp(src) + pl * H * W;
      const float* g = fp(ddst) + pl * OH * OW;
      float* gi = fp(dsrc) + pl * H * W;
      std::memset(gi, 0, sizeof(float) * static_cast<size_t>(H * W));
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t arg = -1;
          kern::for_each_in_window(p, oh, ow, H, W, [&](int64_t h, int64_t w) {
            const float v = x[h * W + w];
            if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              arg = h * W + w;
            }
          });
          if (arg >= 0) gi[arg] += g[oh * OW + ow];
        }
    }
  });
}

// ---- average pooling. As PyTorch's default (count_include_pad=True) and the ref kernel, every
// window divides by kernel_h * kernel_w, also where padding cuts it. Sums in fp32 (the ref kernel
// sums in fp64; the window has at most a few dozen terms).
namespace {
// f(plane, output index, h0, h1, w0, w1) for every output element, planes in parallel: the
// window's rows [h0, h1) and columns [w0, w1) inside the (unpadded) input.
template <class F>
void for_each_avg_window(const Pool2dParams& p, int64_t NC, int64_t H, int64_t W, int64_t OH,
                         int64_t OW, F&& f) {
  parallel_for(NC, NC * H * W, [&](int64_t lo, int64_t hi) {
    for (int64_t pl = lo; pl < hi; ++pl)
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = std::max<int64_t>(0, oh * p.stride_h - p.pad_h);
        const int64_t h1 = std::min<int64_t>(H, oh * p.stride_h - p.pad_h + p.kernel_h);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = std::max<int64_t>(0, ow * p.stride_w - p.pad_w);
          const int64_t w1 = std::min<int64_t>(W, ow * p.stride_w - p.pad_w + p.kernel_w);
          f(pl, oh * OW + ow, h0, h1, w0, w1);
        }
      }
  });
}
}  // namespace

void CpuBackend::avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) {
  if (!(f32c(dst) && f32c(src))) return RefBackend::avg_pool2d(dst, src, p);
  const int64_t NC = src.shape()[0] * src.shape()[1], H = src.shape()[2], W = src.shape()[3];
  const int64_t OH = dst.shape()[2], OW = dst.shape()[3];
  const float inv_area = 1.0f / static_cast<float>(p.kernel_h * p.kernel_w);
  for_each_avg_window(p, NC, H, W, OH, OW,
                      [&](int64_t pl, int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
                        const float* x = fp(src) + pl * H * W;
                        float s = 0.0f;
                        for (int64_t h = h0; h < h1; ++h)
                          for (int64_t w = w0; w < w1; ++w) s += x[h * W + w];
                        fp(dst)[pl * OH * OW + o] = s * inv_area;
                      });
}

void CpuBackend::avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) {
  if (!(f32c(dsrc) && f32c(ddst))) return RefBackend::avg_pool2d_backward(dsrc, ddst, p);
  const int64_t NC = dsrc.shape()[0] * dsrc.shape()[1], H = dsrc.shape()[2], W = dsrc.shape()[3];
  const int64_t OH = ddst.shape()[2], OW = ddst.shape()[3];
  const float inv_area = 1.0f / static_cast<float>(p.kernel_h * p.kernel_w);
  std::memset(fp(dsrc), 0, sizeof(float) * static_cast<size_t>(dsrc.numel()));
  for_each_avg_window(p, NC, H, W, OH, OW,
                      [&](int64_t pl, int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
                        float* gi = fp(dsrc) + pl * H * W;
                        const float gv = fp(ddst)[pl * OH * OW + o] * inv_area;
                        for (int64_t h = h0; h < h1; ++h)
                          for (int64_t w = w0; w < w1; ++w) gi[h * W + w] += gv;
                      });
}

}  // namespace mixp
