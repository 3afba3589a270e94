// Scaled dot-product attention for one query row, forward and backward, as the CUDA fallback
// kernel (cuda_attention.cu) runs it: one GPU thread per (batch x head, query) row, fp32
// arithmetic. The forward is the one-pass "online softmax" (Milakov and Gimelshein 2018, as
// FlashAttention): a running max m, running sum l and running output, so no T-long scratch row is
// needed; lse = m + log(l) is saved for the backward, which recomputes each probability from it.
// Query i sees keys [0, key_end(i)): all, or causally aligned to the end of the keys (the ref
// backend's AttnGeom, src/backend/ref/ref_linalg.cpp). tests/cuda/test_cuda_math.cpp runs these on
// the CPU against the ref backend's attention (fp32 here, double there: within 1e-5).
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/math/host_device.h"

namespace mixp::cuda_math {

inline constexpr int kAttnMaxHeadDim = 256;  // the local accumulators' size

struct AttnShape {
  int64_t Tq, Tk, D;
  bool causal;
  float scale;
  MIXP_HD int64_t key_end(int64_t i) const {
    if (!causal) return Tk;
    const int64_t e = i + 1 + (Tk - Tq);
    return e < Tk ? e : Tk;
  }
};

// q [D], K/V [Tk, D] of one head (element loads through `ld(ptr, index)`); out [D] stored
// through `st(ptr, index, value)`; returns lse.
template <class Load, class Store, class Q, class KV, class O>
MIXP_HD float attention_row_forward(const AttnShape& a, int64_t i, const Q* q, const KV* K,
                                    const KV* V, O* out, Load ld, Store st) {
  float acc[kAttnMaxHeadDim];
  for (int64_t d = 0; d < a.D; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t jend = a.key_end(i);
  for (int64_t j = 0; j < jend; ++j) {
    float s = 0.0f;
    for (int64_t d = 0; d < a.D; ++d) s += ld(q, d) * ld(K, j * a.D + d);
    s *= a.scale;
    const float m_new = s > m ? s : m;
    const float corr = std::exp(m - m_new);  // 0 on the first key (m = -inf)
    const float p = std::exp(s - m_new);
    l = l * corr + p;
    for (int64_t d = 0; d < a.D; ++d) acc[d] = acc[d] * corr + p * ld(V, j * a.D + d);
    m = m_new;
  }
  for (int64_t d = 0; d < a.D; ++d) st(out, d, acc[d] / l);
  return m + std::log(l);
}

// The gradient of one query row: dq [D] written, dk/dv [Tk, D] accumulated through
// `add(ptr, index, value)` (atomics on the GPU: every query row adds to the keys it saw).
template <class Load, class Add, class Store, class Q, class KV, class G>
MIXP_HD void attention_row_backward(const AttnShape& a, int64_t i, const Q* q, const KV* K,
                                    const KV* V, const G* dout, const G* out, float lse,
                                    float* dq, float* dK, float* dV, Load ld, Add add,
                                    Store st) {
  float dqa[kAttnMaxHeadDim];
  float delta = 0.0f;  // dout . out = sum_j p_j dp_j
  for (int64_t d = 0; d < a.D; ++d) {
    dqa[d] = 0.0f;
    delta += ld(dout, d) * ld(out, d);
  }
  const int64_t jend = a.key_end(i);
  for (int64_t j = 0; j < jend; ++j) {
    float s = 0.0f, dp = 0.0f;
    for (int64_t d = 0; d < a.D; ++d) {
      s += ld(q, d) * ld(K, j * a.D + d);
      dp += ld(dout, d) * ld(V, j * a.D + d);
    }
    const float p = std::exp(s * a.scale - lse);
    const float ds = p * (dp - delta) * a.scale;
    for (int64_t d = 0; d < a.D; ++d) {
      dqa[d] += ds * ld(K, j * a.D + d);
      add(dK, j * a.D + d, ds * ld(q, d));
      add(dV, j * a.D + d, p * ld(dout, d));
    }
  }
  for (int64_t d = 0; d < a.D; ++d) st(dq, d, dqa[d]);
}

}  // namespace mixp::cuda_math
