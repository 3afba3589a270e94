// The low-bit weight and activation quantizers (autograd ops); see include/mixp/quant/lowbit.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend/cpu/cpu_parallel.h"
#include "mixp/quant/lowbit.h"
#include "quant/lowbit_round.h"
#include "ops/dispatch.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {
constexpr float kMinScale = 0x1p-23f;  // block_int8.h's floor (torch.finfo(float32).eps)

}  // namespace

std::string_view name(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return "int8";
    case LowBitScheme::int4:
      return "int4";
    case LowBitScheme::int2:
      return "int2";
    case LowBitScheme::ternary:
      return "ternary";
    case LowBitScheme::binary:
      return "binary";
    case LowBitScheme::binary_act:
      return "binary-act";
  }
  return "?";
}

LowBitScheme parse_lowbit_scheme(std::string_view s) {
  for (LowBitScheme x : {LowBitScheme::int8, LowBitScheme::int4, LowBitScheme::int2,
                         LowBitScheme::ternary, LowBitScheme::binary, LowBitScheme::binary_act}) {
    if (name(x) == s) return x;
  }
  throw std::invalid_argument(fmt::format(
      "unknown low-bit layer format '{}'; choose int8, int4, int2, ternary, binary or binary-act",
      s));
}

int weight_bits(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return 8;
    case LowBitScheme::int4:
      return 4;
    case LowBitScheme::int2:
    case LowBitScheme::ternary:
      return 2;
    case LowBitScheme::binary:
    case LowBitScheme::binary_act:
      return 1;
  }
  return 8;
}

int32_t weight_qmin(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return -128;
    case LowBitScheme::int4:
      return -8;
    case LowBitScheme::int2:
      return -2;
    default:
      return -1;
  }
}

int32_t weight_qmax(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return 127;
    case LowBitScheme::int4:
      return 7;
    default:
      return 1;
  }
}

void lowbit_weight_codes_raw(const float* w, int64_t O, int64_t K, LowBitScheme scheme,
                             float* codes, float* scales, uint8_t* mask) {
  const size_t n = static_cast<size_t>(O * K);
  switch (scheme) {
    case LowBitScheme::int8:
    case LowBitScheme::int4:
    case LowBitScheme::int2: {
      const float qmin = static_cast<float>(weight_qmin(scheme));
      const float qmax = static_cast<float>(weight_qmax(scheme));
      cpu::parallel_for(O, O * K, [&](int64_t lo, int64_t hi) {
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
    case LowBitScheme::ternary: {
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(w[i]));
      const float delta = static_cast<float>(0.7 * sum / static_cast<double>(std::max<size_t>(n, 1)));
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
    case LowBitScheme::binary:
    case LowBitScheme::binary_act: {
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
  }
}

namespace {

// Records dx = dcodes * inv[row % channels] * mask for rows of `inner` values.
void record_ste(const Tensor& x, Tensor& out, Tensor mask, std::vector<float> inv,
                int64_t channels, int64_t inner) {
  mixp::detail::record(
      OpId::fake_quantize, DType::fp32, {&x}, {&out},
      [mask, inv = std::move(inv), channels, inner](BackwardContext& ctx) {
        const Tensor gr = mixp::detail::raw_contiguous(
            mixp::detail::as_compute(ctx.grad(), DType::fp32));
        Tensor gx = Tensor::empty(gr.shape(), {.dtype = DType::fp32});
        const int64_t n = gr.numel();
        const float* g = gr.data<float>();
        const uint8_t* m = mask.data<uint8_t>();
        float* d = gx.data<float>();
        cpu::parallel_for(n, n, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) {
            const float s = inv[static_cast<size_t>((i / inner) % channels)];
            d[i] = m[i] ? g[i] * s : 0.0f;
          }
        });
        ctx.grad_inputs[0] = gx;
      });
}

}  // namespace

Tensor lowbit_weight_codes(const Tensor& w0, LowBitScheme scheme, std::vector<float>* scales) {
  mixp::detail::check_defined(w0, "lowbit_weight_codes", "w");
  mixp::detail::check_float(w0, "lowbit_weight_codes", "w");
  if (w0.dim() < 1 || w0.numel() == 0) {
    throw std::invalid_argument("mixp::quant::lowbit_weight_codes: expected a non-empty weight");
  }
  const Tensor wc = mixp::detail::raw_contiguous(mixp::detail::as_compute(w0, DType::fp32));
  const int64_t O = w0.size(0), K = w0.numel() / O;
  const bool rec = mixp::detail::should_record({&w0});
  Tensor codes = Tensor::empty(w0.shape(), {.dtype = DType::fp32});
  Tensor mask = Tensor::empty(w0.shape(), {.dtype = DType::uint8});
  std::vector<float> s(static_cast<size_t>(O));
  lowbit_weight_codes_raw(wc.data<float>(), O, K, scheme, codes.data<float>(), s.data(),
                          mask.data<uint8_t>());
  if (rec) {
    std::vector<float> inv(s.size());
    for (size_t o = 0; o < s.size(); ++o) inv[o] = 1.0f / s[o];
    record_ste(w0, codes, mask, std::move(inv), O, K);
  }
  if (scales) *scales = std::move(s);
  return codes;
}

int32_t ActCodeParams::qmin() const {
  switch (kind) {
    case ActCodeKind::unsigned_bits:
      return 0;
    case ActCodeKind::signed8:
      return -128;
    case ActCodeKind::sign:
      return -1;
  }
  return 0;
}

int32_t ActCodeParams::qmax() const {
  switch (kind) {
    case ActCodeKind::unsigned_bits:
      return (1 << bits) - 1;
    case ActCodeKind::signed8:
      return 127;
    case ActCodeKind::sign:
      return 1;
  }
  return 0;
}

float lowbit_act_scale(ActCodeKind kind, int bits, float min_val, float max_val) {
  if (!(min_val <= max_val) || !std::isfinite(min_val) || !std::isfinite(max_val)) return 1.0f;
  const float mn = std::min(min_val, 0.0f), mx = std::max(max_val, 0.0f);
  switch (kind) {
    case ActCodeKind::unsigned_bits:
      return std::max(mx / static_cast<float>((1 << bits) - 1), kMinScale);
    case ActCodeKind::signed8:
      return std::max(std::max(-mn, mx) / 127.5f, kMinScale);
    case ActCodeKind::sign:
      return 1.0f;
  }
  return 1.0f;
}

Tensor lowbit_act_codes(const Tensor& x0, const ActCodeParams& p) {
  mixp::detail::check_defined(x0, "lowbit_act_codes", "x");
  mixp::detail::check_float(x0, "lowbit_act_codes", "x");
  if (p.kind == ActCodeKind::unsigned_bits && (p.bits < 1 || p.bits > 8)) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::lowbit_act_codes: {} bits; unsigned codes take 1 to 8", p.bits));
  }
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale)) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::lowbit_act_codes: the scale must be positive and finite, got {}", p.scale));
  }
  const Tensor xc = mixp::detail::raw_contiguous(mixp::detail::as_compute(x0, DType::fp32));
  const bool rec = mixp::detail::should_record({&x0});
  Tensor y = Tensor::empty(x0.shape(), {.dtype = DType::fp32});
  Tensor mask = rec ? Tensor::empty(x0.shape(), {.dtype = DType::uint8}) : Tensor();
  const int64_t n = x0.numel();
  const float* src = xc.data<float>();
  float* dst = y.data<float>();
  uint8_t* m = rec ? mask.data<uint8_t>() : nullptr;
  const float inv = 1.0f / p.scale;
  const float qmin = static_cast<float>(p.qmin()), qmax = static_cast<float>(p.qmax());
  const bool sign = p.kind == ActCodeKind::sign;
  cpu::parallel_for(n, n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float v = src[i];
      if (sign) {
        dst[i] = v >= 0.0f ? 1.0f : -1.0f;
        if (m) m[i] = std::fabs(v) <= 1.0f ? 1 : 0;
      } else {
        const float q = round_even(v * inv);
        dst[i] = std::clamp(q, qmin, qmax);  // NaN stays NaN (the NaN guard reports it)
        if (m) m[i] = q >= qmin && q <= qmax ? 1 : 0;
      }
    }
  });
  if (rec) record_ste(x0, y, mask, {sign ? 1.0f : inv}, 1, n);
  return y;
}

}  // namespace mixp::quant
