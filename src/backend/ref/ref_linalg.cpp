// Ref backend: matmul, conv2d and attention as textbook loops, accumulating in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/kernel_util.h"
#include "backend/narrow.h"
#include "backend/ref/ref_backend.h"

namespace mixp {
using namespace kern;

namespace {
template <class T>
T activate(Activation act, double x) {
  switch (act) {
    case Activation::none:
      return static_cast<T>(x);
    case Activation::relu:
      return static_cast<T>(x > 0 ? x : 0.0);
    case Activation::gelu:
      return static_cast<T>(gelu_fwd(x));
  }
  return static_cast<T>(x);
}
}  // namespace

namespace {
bool narrow_compute(DType c) {
  return is_narrow(c);
}

// Attention over q [B, H, Tq, D] and k, v [B, H, Tk, D], contiguous.
struct AttnGeom {
  int64_t BH, Tq, Tk, D;
  bool causal;
  // Query i sees keys [0, key_end(i)): all of them, or with a causal mask aligned to the end of
  // the key sequence, as PyTorch's is_causal does when Tq < Tk.
  int64_t key_end(int64_t i) const { return causal ? std::min(Tk, i + 1 + (Tk - Tq)) : Tk; }
};
AttnGeom attn_geom(const Tensor& q, const Tensor& k, bool causal) {
  return {q.shape()[0] * q.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3], causal};
}

// Unscaled score q_i . k_j of head bh, in double.
template <class T>
double qk_dot(const AttnGeom& a, const T* Q, const T* K, int64_t bh, int64_t i, int64_t j) {
  double acc = 0;
  for (int64_t d = 0; d < a.D; ++d)
    acc += static_cast<double>(Q[(bh * a.Tq + i) * a.D + d]) *
           static_cast<double>(K[(bh * a.Tk + j) * a.D + d]);
  return acc;
}
}  // namespace

// bf16/fp16 GEMMs (MatmulConfig::compute bf16 or fp16, operands in that dtype, dst and bias in it
// or fp32): every operand widened exactly to fp64, products exact, double accumulation, one
// rounding into dst. The oracle of the cpu paths (native bf16, emulated fp16).
void RefBackend::matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
                        const MatmulConfig& cfg) {
  count_ref_kernel(__func__);
  if (narrow_compute(cfg.compute) || any_narrow({&dst, &a, &b, &bias})) {
    const Tensor a64 = convert_view(*this, a, DType::fp64),
                 b64 = convert_view(*this, b, DType::fp64),
                 bias64 = convert_view(*this, bias, DType::fp64);
    MatmulConfig c64 = cfg;
    c64.compute = DType::fp64;
    with_dst_as(*this, dst, DType::fp64, cfg.accumulate,
                [&](Tensor& d) { RefBackend::matmul(d, a64, b64, bias64, c64); });
    return;
  }
  if (cfg.compute != DType::fp32 && cfg.compute != DType::fp64) {
    throw std::invalid_argument("ref matmul: compute dtype " +
                                std::string(mixp::name(cfg.compute)) +
                                " is not implemented (fp32 and fp64 are)");
  }
  dispatch_float(dst.dtype(), "matmul", [&](auto t) {
    using T = decltype(t);
    const bool batched = dst.dim() == 3;
    const int64_t B = batched ? dst.shape()[0] : 1;
    const int64_t M = dst.shape()[dst.dim() - 2], N = dst.shape()[dst.dim() - 1];
    const int64_t K = a.shape()[a.dim() - 1];
    const int ad = a.dim(), bd = b.dim();
    const int64_t asb = ad == 3 ? a.strides()[0] : 0, bsb = bd == 3 ? b.strides()[0] : 0;
    const int64_t asm_ = a.strides()[ad - 2], ask = a.strides()[ad - 1];
    const int64_t bsk = b.strides()[bd - 2], bsn = b.strides()[bd - 1];
    const T* A = ptr<T>(a);
    const T* Bp = ptr<T>(b);
    T* D = ptr<T>(dst);
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += static_cast<double>(A[bb * asb + m * asm_ + k * ask]) *
                   static_cast<double>(Bp[bb * bsb + k * bsk + n * bsn]);
          if (bias.defined())
            acc += static_cast<double>(ptr<T>(bias)[n * (bias.dim() ? bias.strides()[0] : 0)]);
          T& out = D[(bb * M + m) * N + n];
          if (cfg.accumulate) acc += static_cast<double>(out);
          out = activate<T>(cfg.activation, acc);
        }
  });
}

namespace {
struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
};
ConvGeom conv_geom(const Tensor& src, const Tensor& weight, const Tensor& dst) {
  return {src.shape()[0],    src.shape()[1],    src.shape()[2], src.shape()[3], weight.shape()[0],
          weight.shape()[2], weight.shape()[3], dst.shape()[2], dst.shape()[3]};
}

// Calls f(c, kh, kw, h, w) for every input tap of output position (oh, ow): channel c, kernel
// offset (kh, kw), input row h and column w; taps that fall in the padding are skipped.
template <class F>
void for_each_tap(const ConvGeom& g, const Conv2dParams& p, int64_t oh, int64_t ow, F&& f) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t h = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
        const int64_t w = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
        if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
        f(c, kh, kw, h, w);
      }
}

// Element `lin` (row-major index) of t, which may be strided.
template <class T>
double element_at(const Tensor& t, int64_t lin) {
  return static_cast<double>(ptr<T>(t)[t.is_contiguous() ? lin : offset_of(t, lin)]);
}

// Rounds the double accumulators into the contiguous dst, once each.
template <class T>
void store_rounded(Tensor& dst, const std::vector<double>& acc) {
  for (int64_t i = 0; i < dst.numel(); ++i)
    ptr<T>(dst)[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
}
}  // namespace

void RefBackend::conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& p) {
  count_ref_kernel(__func__);
  if (narrow_compute(p.compute) || any_narrow({&dst, &src, &weight, &bias})) {
    Conv2dParams p64 = p;
    p64.compute = DType::fp64;
    const Tensor x = convert_view(*this, src, DType::fp64),
                 w = convert_view(*this, weight, DType::fp64),
                 b = convert_view(*this, bias, DType::fp64);
    with_dst_as(*this, dst, DType::fp64, false,
                [&](Tensor& d) { RefBackend::conv2d(d, x, w, b, p64); });
    return;
  }
  dispatch_float(dst.dtype(), "conv2d", [&](auto t) {
    using T = decltype(t);
    const ConvGeom g = conv_geom(src, weight, dst);
    const auto& ss = src.strides();
    const auto& ws = weight.strides();
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            double acc =
                bias.defined() ? static_cast<double>(ptr<T>(bias)[o * bias.strides()[0]]) : 0.0;
            for_each_tap(
                g, p, oh, ow, [&](int64_t c, int64_t kh, int64_t kw, int64_t h, int64_t w) {
                  acc += static_cast<double>(
                             ptr<T>(src)[n * ss[0] + c * ss[1] + h * ss[2] + w * ss[3]]) *
                         static_cast<double>(
                             ptr<T>(weight)[o * ws[0] + c * ws[1] + kh * ws[2] + kw * ws[3]]);
                });
            ptr<T>(dst)[((n * g.O + o) * g.OH + oh) * g.OW + ow] = static_cast<T>(acc);
          }
  });
}

void RefBackend::conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                                      const Conv2dParams& p) {
  count_ref_kernel(__func__);
  if (narrow_compute(p.compute) || any_narrow({&dsrc, &ddst, &weight})) {
    Conv2dParams p64 = p;
    p64.compute = DType::fp64;
    const Tensor g = convert_view(*this, ddst, DType::fp64),
                 w = convert_view(*this, weight, DType::fp64);
    with_dst_as(*this, dsrc, DType::fp64, false,
                [&](Tensor& d) { RefBackend::conv2d_backward_data(d, g, w, p64); });
    return;
  }
  dispatch_float(dsrc.dtype(), "conv2d backward data", [&](auto t) {
    using T = decltype(t);
    const ConvGeom g = conv_geom(dsrc, weight, ddst);
    std::vector<double> acc(static_cast<size_t>(dsrc.numel()), 0.0);
    const auto& ws = weight.strides();
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const double gv = element_at<T>(ddst, ((n * g.O + o) * g.OH + oh) * g.OW + ow);
            for_each_tap(
                g, p, oh, ow, [&](int64_t c, int64_t kh, int64_t kw, int64_t h, int64_t w) {
                  acc[static_cast<size_t>(((n * g.C + c) * g.H + h) * g.W + w)] +=
                      gv * static_cast<double>(
                               ptr<T>(weight)[o * ws[0] + c * ws[1] + kh * ws[2] + kw * ws[3]]);
                });
          }
    store_rounded<T>(dsrc, acc);
  });
}

void RefBackend::conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                         const Tensor& src, const Conv2dParams& p) {
  count_ref_kernel(__func__);
  if (narrow_compute(p.compute) || any_narrow({&dweight, &dbias, &ddst, &src})) {
    Conv2dParams p64 = p;
    p64.compute = DType::fp64;
    const Tensor g = convert_view(*this, ddst, DType::fp64),
                 x = convert_view(*this, src, DType::fp64);
    with_dst_as(*this, dweight, DType::fp64, false, [&](Tensor& dw) {
      with_dst_as(*this, dbias, DType::fp64, false,
                  [&](Tensor& db) { RefBackend::conv2d_backward_weights(dw, db, g, x, p64); });
    });
    return;
  }
  dispatch_float(dweight.dtype(), "conv2d backward weights", [&](auto t) {
    using T = decltype(t);
    const ConvGeom g = conv_geom(src, dweight, ddst);
    std::vector<double> acc(static_cast<size_t>(dweight.numel()), 0.0),
        bacc(static_cast<size_t>(g.O), 0.0);
    const auto& ss = src.strides();
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const double gv = element_at<T>(ddst, ((n * g.O + o) * g.OH + oh) * g.OW + ow);
            bacc[static_cast<size_t>(o)] += gv;
            for_each_tap(g, p, oh, ow,
                         [&](int64_t c, int64_t kh, int64_t kw, int64_t h, int64_t w) {
                           acc[static_cast<size_t>(((o * g.C + c) * g.KH + kh) * g.KW + kw)] +=
                               gv * static_cast<double>(
                                        ptr<T>(src)[n * ss[0] + c * ss[1] + h * ss[2] + w * ss[3]]);
                         });
          }
    store_rounded<T>(dweight, acc);
    if (dbias.defined()) store_rounded<T>(dbias, bacc);
  });
}

// 16-bit q, k, v (dst in their dtype, lse fp32): widened exactly to fp32, computed in fp32 with
// double accumulation, dst rounded once.
void RefBackend::attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, bool causal, double scale) {
  count_ref_kernel(__func__);
  if (any_narrow({&dst, &q, &k, &v})) {
    const Tensor q32 = widen(*this, q, DType::fp32), k32 = widen(*this, k, DType::fp32),
                 v32 = widen(*this, v, DType::fp32);
    with_dst_as(*this, dst, DType::fp32, false,
                [&](Tensor& d) { attention(d, lse, q32, k32, v32, causal, scale); });
    return;
  }
  dispatch_float(dst.dtype(), "attention", [&](auto t) {
    using T = decltype(t);
    const AttnGeom a = attn_geom(q, k, causal);
    const int64_t BH = a.BH, Tq = a.Tq, Tk = a.Tk, D = a.D;
    const T* Q = ptr<T>(q);
    const T* K = ptr<T>(k);
    const T* V = ptr<T>(v);
    std::vector<double> s(static_cast<size_t>(Tk));
    for (int64_t bh = 0; bh < BH; ++bh)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t jmax = a.key_end(i);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < jmax; ++j) {
          s[static_cast<size_t>(j)] = qk_dot(a, Q, K, bh, i, j) * scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < jmax; ++j) sum += std::exp(s[static_cast<size_t>(j)] - mx);
        const double l = mx + std::log(sum);
        ptr<T>(lse)[bh * Tq + i] = static_cast<T>(l);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < jmax; ++j)
            acc += std::exp(s[static_cast<size_t>(j)] - l) *
                   static_cast<double>(V[(bh * Tk + j) * D + d]);
          ptr<T>(dst)[(bh * Tq + i) * D + d] = static_cast<T>(acc);
        }
      }
  });
}

void RefBackend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst,
                                    const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& dst, const Tensor& lse, bool causal,
                                    double scale) {
  count_ref_kernel(__func__);
  if (any_narrow({&dq, &dk, &dv, &ddst, &q, &k, &v, &dst})) {
    auto w = [&](const Tensor& t) { return widen(*this, t, DType::fp32); };
    const Tensor g = w(ddst), q32 = w(q), k32 = w(k), v32 = w(v), y32 = w(dst);
    with_dst_as(*this, dq, DType::fp32, false, [&](Tensor& a) {
      with_dst_as(*this, dk, DType::fp32, false, [&](Tensor& b) {
        with_dst_as(*this, dv, DType::fp32, false, [&](Tensor& c) {
          attention_backward(a, b, c, g, q32, k32, v32, y32, lse, causal, scale);
        });
      });
    });
    return;
  }
  dispatch_float(dq.dtype(), "attention backward", [&](auto t) {
    using T = decltype(t);
    const AttnGeom a = attn_geom(q, k, causal);
    const int64_t BH = a.BH, Tq = a.Tq, Tk = a.Tk, D = a.D;
    const T* Q = ptr<T>(q);
    const T* K = ptr<T>(k);
    const T* V = ptr<T>(v);
    const T* O = ptr<T>(dst);
    const T* G = ptr<T>(ddst);
    std::vector<double> gq(static_cast<size_t>(dq.numel()), 0.0),
        gk(static_cast<size_t>(dk.numel()), 0.0), gv(static_cast<size_t>(dv.numel()), 0.0);
    for (int64_t bh = 0; bh < BH; ++bh)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t jmax = a.key_end(i);
        const double l = static_cast<double>(ptr<T>(lse)[bh * Tq + i]);
        // delta_i = sum_d dO[i,d] O[i,d]  (= sum_j P_ij dP_ij)
        double delta = 0;
        for (int64_t d = 0; d < D; ++d)
          delta += static_cast<double>(G[(bh * Tq + i) * D + d]) *
                   static_cast<double>(O[(bh * Tq + i) * D + d]);
        for (int64_t j = 0; j < jmax; ++j) {
          const double p = std::exp(qk_dot(a, Q, K, bh, i, j) * scale - l);
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double g = static_cast<double>(G[(bh * Tq + i) * D + d]);
            gv[static_cast<size_t>((bh * Tk + j) * D + d)] += p * g;
            dp += g * static_cast<double>(V[(bh * Tk + j) * D + d]);
          }
          const double ds = p * (dp - delta) * scale;
          for (int64_t d = 0; d < D; ++d) {
            gq[static_cast<size_t>((bh * Tq + i) * D + d)] +=
                ds * static_cast<double>(K[(bh * Tk + j) * D + d]);
            gk[static_cast<size_t>((bh * Tk + j) * D + d)] +=
                ds * static_cast<double>(Q[(bh * Tq + i) * D + d]);
          }
        }
      }
    store_rounded<T>(dq, gq);
    store_rounded<T>(dk, gk);
    store_rounded<T>(dv, gv);
  });
}

}  // namespace mixp
