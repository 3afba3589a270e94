// The packed binary-act model's fused sign epilogue: integer thresholds found by evaluating the
// unfused fp32 ops, sign bits straight from the s32 sums, max pooling and flattening on bits; see
// lowbit_runtime.h.
//
// Why the thresholds are exact: between a layer and the sign that feeds the next binary-act
// layer, the unfused path computes sign(bn(float(acc) * mult[o] + bias[o])), each step a
// rounded fp32 multiply or add by a per-channel constant. Rounding is monotone, so each step is
// monotone in its input (non-decreasing, or non-increasing for a negative multiplier), and so is
// the chain: per channel, the set of sums whose sign is +1 is a half-line of the integers (or
// empty, or all). A binary search over the reachable sums, asking the same ops (lowbit_rescale,
// batch_norm, lowbit_act_codes: the model's own, on whatever backend runs) at each probe, finds
// its end; comparing a sum with it then gives the unfused path's sign bit for bit.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "mixp/backend/host_parallel.h"
#include "mixp/backend/lowbit_gemm.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/tensor/factories.h"
#include "quant/lowbit_runtime.h"

namespace mixp::quant::fused {

namespace {

// The range of a layer's s32 sums per output channel: [-K, K] for XNOR, else the weight codes
// against the input codes' range (padding reads 0, inside it).
void sum_range(const PackedStep& s, const PackedModel::Runtime& rt, std::vector<int64_t>* lo,
               std::vector<int64_t>* hi) {
  const int64_t K = s.in * s.kernel * s.kernel;
  lo->assign(static_cast<size_t>(s.out), -K);
  hi->assign(static_cast<size_t>(s.out), K);
  if (s.scheme == LowBitScheme::binary_act) return;
  const int64_t qmin = s.input_kind == ActCodeKind::signed8 ? -128 : 0;
  const int64_t qmax = s.input_kind == ActCodeKind::signed8 ? 127 : 255;  // 8 bits bound fewer
  for (int64_t o = 0; o < s.out; ++o) {
    int64_t l = 0, h = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t w = rt.w8[static_cast<size_t>(o * K + k)];
      l += std::min(w * qmin, w * qmax);
      h += std::max(w * qmin, w * qmax);
    }
    (*lo)[static_cast<size_t>(o)] = l;
    (*hi)[static_cast<size_t>(o)] = h;
  }
}

// Whether the unfused ops give +1 for the sums c[o] (one per channel, as a [1, O, 1, 1] or
// [1, O] tensor: every op is elementwise per channel).
std::vector<uint8_t> positive(const std::vector<int64_t>& c, const PackedStep& layer,
                              const PackedModel::Runtime& rt, const PackedStep* bn,
                              const PackedStep& act) {
  const int64_t O = layer.out;
  Tensor acc = empty(layer.conv ? Shape{1, O, 1, 1} : Shape{1, O}, {.dtype = DType::fp32});
  float* a = acc.data<float>();
  // The unfused path's conversion: the int32 sum to fp32 (lowbit_model.cpp, LayerRun).
  for (int64_t o = 0; o < O; ++o) a[o] = static_cast<float>(static_cast<int32_t>(c[size_t(o)]));
  Tensor y = lowbit_rescale(acc, rt.mult, layer.bias);
  if (bn) {
    y = batch_norm(y, bn->running_mean, bn->running_var, bn->gamma, bn->beta, false,
                   bn->momentum, bn->eps);
  }
  y = lowbit_act_codes(act.relu ? relu(y) : y, act.act).contiguous();
  std::vector<uint8_t> p(static_cast<size_t>(O));
  for (int64_t o = 0; o < O; ++o) p[size_t(o)] = y.data<float>()[o] > 0.0f ? 1 : 0;
  return p;
}

void thresholds(const PackedStep& layer, PackedModel::Runtime& rt, const PackedStep* bn,
                const PackedStep& act) {
  const int64_t O = layer.out;
  std::vector<int64_t> lo, hi;
  sum_range(layer, rt, &lo, &hi);
  const std::vector<uint8_t> plo = positive(lo, layer, rt, bn, act);
  const std::vector<uint8_t> phi = positive(hi, layer, rt, bn, act);
  // Binary search on every channel at once: positive(L) = plo, positive(H) = phi, H - L > 1.
  std::vector<int64_t> L = lo, H = hi, mid(static_cast<size_t>(O));
  for (;;) {
    bool more = false;
    for (size_t o = 0; o < size_t(O); ++o) {
      more = more || (plo[o] != phi[o] && H[o] - L[o] > 1);
      mid[o] = L[o] + (H[o] - L[o]) / 2;
    }
    if (!more) break;
    const std::vector<uint8_t> pm = positive(mid, layer, rt, bn, act);
    for (size_t o = 0; o < size_t(O); ++o) {
      if (plo[o] == phi[o] || H[o] - L[o] <= 1) continue;
      (pm[o] == phi[o] ? H[o] : L[o]) = mid[o];
    }
  }
  // Sums at or past H[o] give phi[o]; below it plo[o]. Sign bit (-1) = (acc < t) XOR flip.
  const int64_t CW = (O + 63) / 64;
  rt.thr.assign(static_cast<size_t>(O), 0);
  rt.flip.assign(static_cast<size_t>(CW), 0);
  // The int-path conv on oneDNN sums s8 codes shifted by +128 (lowbit_model.cpp, conv_onednn):
  // its thresholds move with the sums instead.
  const bool shifted = !rt.wsum.empty() && layer.input_kind != ActCodeKind::unsigned_bits;
  rt.thr_shifted.assign(shifted ? static_cast<size_t>(O) : 0, 0);
  auto clamp32 = [](int64_t v) {
    return static_cast<int32_t>(std::clamp<int64_t>(v, std::numeric_limits<int32_t>::min(),
                                                    std::numeric_limits<int32_t>::max()));
  };
  for (size_t o = 0; o < size_t(O); ++o) {
    int64_t t;
    bool flip;
    if (plo[o] == phi[o]) {
      t = std::numeric_limits<int32_t>::min();  // acc < t never: the bit is flip
      flip = !phi[o];
    } else {
      // Increasing (phi = +1): -1 iff acc < H. Decreasing: -1 iff acc >= H.
      t = H[o];
      flip = !phi[o];
    }
    rt.thr[o] = clamp32(t);
    if (shifted)
      rt.thr_shifted[o] = plo[o] == phi[o] ? rt.thr[o] : clamp32(t + 128 * int64_t{rt.wsum[o]});
    if (flip) rt.flip[o / 64] |= uint64_t{1} << (o % 64);
  }
}

}  // namespace

void plan_sign_epilogue(const std::vector<PackedStep>& steps,
                        std::vector<std::unique_ptr<PackedModel::Runtime>>& rt, size_t last) {
  const PackedStep& nxt = steps[last];
  if (nxt.kind != "layer" || nxt.scheme != LowBitScheme::binary_act ||
      nxt.input_kind != ActCodeKind::sign || last == 0) {
    return;
  }
  size_t j = last - 1;
  while (j > 0 && (steps[j].kind == "max_pool2d" || steps[j].kind == "flatten")) --j;
  if (steps[j].kind != "act" || steps[j].act.kind != ActCodeKind::sign || steps[j].relu || j == 0) {
    return;
  }
  const PackedStep& act = steps[j];
  const size_t next = j + 1;
  --j;
  const PackedStep* bn = nullptr;
  if (steps[j].kind == "batch_norm") {
    bn = &steps[j];
    if (j == 0) return;
    --j;
  }
  if (steps[j].kind != "layer" || rt[j]->fuse_sign) return;
  if (bn && !steps[j].conv) return;  // batch norm follows convolutions only
  thresholds(steps[j], *rt[j], bn, act);
  rt[j]->fuse_sign = true;
  rt[j]->next = next;
}

BitMap sign_bits(const Tensor& acc, int64_t N, int64_t OH, int64_t OW,
                 const PackedModel::Runtime& rt, bool shifted) {
  const int64_t O = static_cast<int64_t>(rt.thr.size());
  BitMap b;
  b.N = N;
  b.H = OH;
  b.W = OW;
  b.C = O;
  b.CW = (O + 63) / 64;
  b.words = empty(Shape{N * OH * OW * b.CW}, {.dtype = DType::int64});
  sign_bits_s32(reinterpret_cast<uint64_t*>(b.words.data_ptr()), acc.data<int32_t>(),
                N * OH * OW, O, (shifted ? rt.thr_shifted : rt.thr).data(), rt.flip.data());
  return b;
}

const int32_t* corrected_thresholds(PackedModel::Runtime& rt, const int32_t* c) {
  auto it = rt.thr_corr.find(c);
  if (it != rt.thr_corr.end()) return it->second.data();
  std::vector<int32_t> t(rt.thr.size());
  for (size_t o = 0; o < t.size(); ++o) {
    // A constant channel's INT32_MIN stays below every sum after the move.
    t[o] = static_cast<int32_t>(std::clamp<int64_t>(int64_t{rt.thr[o]} + c[o],
                                                    std::numeric_limits<int32_t>::min(),
                                                    std::numeric_limits<int32_t>::max()));
  }
  return rt.thr_corr.emplace(c, std::move(t)).first->second.data();
}

BitMap max_pool(const BitMap& x, const PackedStep& s) {
  const int64_t k = s.pool_kernel, st = s.pool_stride, p = s.pool_padding;
  BitMap y = x;
  y.H = (x.H + 2 * p - k) / st + 1;
  y.W = (x.W + 2 * p - k) / st + 1;
  if (x.flat || y.H <= 0 || y.W <= 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::PackedModel: max pooling '{}' of a {}x{} map", s.name, x.H, x.W));
  }
  const int64_t CW = x.CW;
  y.words = empty(Shape{x.N * y.H * y.W * CW}, {.dtype = DType::int64});
  const uint64_t* src = x.data();
  auto* dst = reinterpret_cast<uint64_t*>(y.words.data_ptr());
  if (k == 2 && st == 2 && p == 0) {
    // The common 2 x 2 window: four rows of words ANDed, without the general bounds.
    host_parallel_for(x.N * y.H, x.N * y.H * y.W * CW * 4, [&](int64_t lo, int64_t hi) {
      for (int64_t nh = lo; nh < hi; ++nh) {
        const int64_t n = nh / y.H, oh = nh % y.H;
        const uint64_t* r0 = src + (n * x.H + 2 * oh) * x.W * CW;
        const uint64_t* r1 = r0 + x.W * CW;
        uint64_t* d = dst + nh * y.W * CW;
        for (int64_t ow = 0; ow < y.W; ++ow) {
          for (int64_t c = 0; c < CW; ++c) {
            const int64_t a = 2 * ow * CW + c;
            d[ow * CW + c] = r0[a] & r0[a + CW] & r1[a] & r1[a + CW];
          }
        }
      }
    });
    return y;
  }
  host_parallel_for(x.N * y.H, x.N * y.H * y.W * CW * k * k, [&](int64_t lo, int64_t hi) {
    for (int64_t nh = lo; nh < hi; ++nh) {
      const int64_t n = nh / y.H, oh = nh % y.H;
      for (int64_t ow = 0; ow < y.W; ++ow) {
        uint64_t* d = dst + (nh * y.W + ow) * CW;
        for (int64_t c = 0; c < CW; ++c) d[c] = ~uint64_t{0};
        for (int64_t kh = 0; kh < k; ++kh) {
          const int64_t h = oh * st - p + kh;
          if (h < 0 || h >= x.H) continue;
          for (int64_t kw = 0; kw < k; ++kw) {
            const int64_t w = ow * st - p + kw;
            if (w < 0 || w >= x.W) continue;
            const uint64_t* v = src + ((n * x.H + h) * x.W + w) * CW;
            for (int64_t c = 0; c < CW; ++c) d[c] &= v[c];  // max of +-1: -1 only if all are
          }
        }
      }
    }
  });
  return y;
}

void linear_rows(const BitMap& x, uint64_t* rows, int64_t words) {
  const int64_t P = x.H * x.W, C = x.C, CW = x.CW;
  const uint64_t* src = x.data();
  host_parallel_for(x.N, x.N * P * CW, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      uint64_t* r = rows + n * words;
      const uint64_t* in = src + n * P * CW;
      if (C % 64 == 0) {
        std::memcpy(r, in, static_cast<size_t>(P * CW) * sizeof(uint64_t));
        for (int64_t w = P * CW; w < words; ++w) r[w] = 0;
        continue;
      }
      // C bits per position appended in turn (the bits past C are zero in every word).
      for (int64_t w = 0; w < words; ++w) r[w] = 0;
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t j = 0; j < CW; ++j) {
          const uint64_t v = in[p * CW + j];
          const int64_t at = p * C + 64 * j, sh = at % 64;
          r[at / 64] |= v << sh;
          if (sh != 0 && at / 64 + 1 < words) r[at / 64 + 1] |= v >> (64 - sh);
        }
      }
    }
  });
}

const std::vector<uint64_t>& linear_weight_bits(const BitMap& x, const PackedStep& s,
                                                PackedModel::Runtime& rt) {
  const int64_t K = s.in, P = x.H * x.W, C = x.C;
  if (C * P != K) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::PackedModel: layer '{}' expects {} inputs, got [{}, {}, {}]", s.name, K, C,
        x.H, x.W));
  }
  if (P == 1) return rt.bits;  // the order is c already
  const std::array<int64_t, 3> key{C, x.H, x.W};
  auto it = rt.hwc_bits.find(key);
  if (it != rt.hwc_bits.end()) return it->second;
  // The flatten's index k = c * P + p (NCHW) goes to bit p * C + c.
  std::vector<uint64_t> b(static_cast<size_t>(s.out * rt.words), 0);
  for (int64_t o = 0; o < s.out; ++o) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t bit = (k % P) * C + k / P;
      if (rt.w8[static_cast<size_t>(o * K + k)] < 0) {
        b[static_cast<size_t>(o * rt.words + bit / 64)] |= uint64_t{1} << (bit % 64);
      }
    }
  }
  return rt.hwc_bits.emplace(key, std::move(b)).first->second;
}

}  // namespace mixp::quant::fused
