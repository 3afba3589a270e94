// The low-bit QAT code loops; see lowbit_codes_kernel.h. Moved unchanged from
// src/quant/lowbit_codes.cpp (lowbit_weight_codes_raw, lowbit_act_codes and its STE gradient), so
// the golden runs keep their bits.
#include "backend/cpu/lowbit_codes_kernel.h"

#include <algorithm>
#include <cstddef>

#include "backend/cpu/cpu_parallel.h"
#include "mixp/backend/quant_kernels.h"

namespace mixp::cpu {

namespace {
constexpr float kMinScale = 0x1p-23f;  // block_int8.h's floor (torch.finfo(float32).eps)
}  // namespace

void lowbit_codes_loop(const LowBitCodesSpec& spec, const float* w, int64_t O, int64_t K,
                       float* codes, float* scales, uint8_t* mask) {
  using Kind = LowBitCodesSpec::Kind;
  const size_t n = static_cast<size_t>(O * K);
  switch (spec.kind) {
    case Kind::weight_int: {
      const float qmin = spec.qmin, qmax = spec.qmax;
      parallel_for(O, O * K, [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          const float* r = w + o * K;
          float mn = 0.0f, mx = 0.0f;  // min(min, 0), max(max, 0)
          for (int64_t k = 0; k < K; ++k) {
            mn = std::min(mn, r[k]);
            mx = std::max(mx, r[k]);
          }
          const float amax = std::max(-mn, mx);
          const float s = std::max(amax / ((qmax - qmin) / 2.0f), kMinScale);
          const float inv = 1.0f / s;
          scales[o] = s;
          for (int64_t k = 0; k < K; ++k) {
            const float q = round_even(r[k] * inv);
            const bool in = q >= qmin && q <= qmax;
            codes[o * K + k] = std::clamp(q, qmin, qmax);
            if (mask) mask[o * K + k] = in ? 1 : 0;
          }
        }
      });
      return;
    }
    case Kind::weight_ternary: {
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(w[i]));
      const float delta =
          static_cast<float>(0.7 * sum / static_cast<double>(std::max<size_t>(n, 1)));
      double above = 0;
      int64_t count = 0;
      for (size_t i = 0; i < n; ++i) {
        const float c = w[i] > delta ? 1.0f : w[i] < -delta ? -1.0f : 0.0f;
        codes[i] = c;
        if (mask) mask[i] = 1;
        if (c != 0.0f) {
          above += std::fabs(static_cast<double>(w[i]));
          ++count;
        }
      }
      const float alpha =
          count ? std::max(static_cast<float>(above / static_cast<double>(count)), kMinScale)
                : kMinScale;
      std::fill(scales, scales + O, alpha);
      return;
    }
    case Kind::weight_binary: {
      for (int64_t o = 0; o < O; ++o) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          const float v = w[o * K + k];
          sum += std::fabs(static_cast<double>(v));
          codes[o * K + k] = v >= 0.0f ? 1.0f : -1.0f;
          if (mask) mask[o * K + k] = std::fabs(v) <= 1.0f ? 1 : 0;
        }
        scales[o] =
            std::max(static_cast<float>(sum / static_cast<double>(std::max<int64_t>(K, 1))),
                     kMinScale);
      }
      return;
    }
    case Kind::act_int:
    case Kind::act_sign: {
      const int64_t m = O * K;
      const float inv = 1.0f / spec.scale;
      const float qmin = spec.qmin, qmax = spec.qmax;
      const bool sign = spec.kind == Kind::act_sign;
      parallel_for(m, m, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          const float v = w[i];
          if (sign) {
            codes[i] = v >= 0.0f ? 1.0f : -1.0f;
            if (mask) mask[i] = std::fabs(v) <= 1.0f ? 1 : 0;
          } else {
            const float q = round_even(v * inv);
            codes[i] = std::clamp(q, qmin, qmax);  // NaN stays NaN (the NaN guard reports it)
            if (mask) mask[i] = q >= qmin && q <= qmax ? 1 : 0;
          }
        }
      });
      return;
    }
  }
}

void lowbit_codes_backward_loop(float* d, const float* g, const uint8_t* m, const float* inv,
                                int64_t channels, int64_t inner, int64_t n) {
  parallel_for(n, n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float s = inv[(i / inner) % channels];
      d[i] = m[i] ? g[i] * s : 0.0f;
    }
  });
}

}  // namespace mixp::cpu

namespace mixp::qk {

// The quant packer's entry (mixp/backend/quant_kernels.h): the same loop as the backends'.
void lowbit_codes(const LowBitCodesSpec& spec, const float* src, int64_t O, int64_t K,
                  float* codes, float* scales, uint8_t* mask) {
  cpu::lowbit_codes_loop(spec, src, O, K, codes, scales, mask);
}

}  // namespace mixp::qk
