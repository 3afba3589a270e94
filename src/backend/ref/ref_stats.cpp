// The ref backend's small step kernels that the cpu backend inherits as they are: the FP8
// delayed-scaling state update (moved unchanged from src/amp/fp8_scaling.cpp) and the NaN/inf
// count of the anomaly detector (moved from src/inspect/anomaly.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"

namespace mixp {

namespace {

float* state_f32(const Tensor& t) {
  if (t.dtype() != DType::fp32 || !t.is_contiguous()) {
    throw std::logic_error(
        "mixp::amp::Fp8ScalingState: the state tensors must stay contiguous fp32 (got " +
        std::string(name(t.dtype())) + "); do not convert FP8 scaling buffers");
  }
  return kern::ptr<float>(t);
}

// NaN and inf among the n elements at p (stride `stride` elements) by their exponent and
// mantissa bits.
template <class Bits>
void count_bits(int64_t* out, const Tensor& t, Bits exp_mask, Bits man_mask) {
  const Bits* p = kern::ptr<const Bits>(t);
  const bool flat = t.is_contiguous();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const Bits b = p[flat ? i : kern::offset_of(t, i)];
    if ((b & exp_mask) == exp_mask) out[(b & man_mask) ? 0 : 1] += 1;
  }
}

}  // namespace

void RefBackend::fp8_scale_update(Tensor& history, Tensor& scale, Tensor& scale_inv,
                                  const Fp8ScaleUpdate& u) {
  float* h = state_f32(history);
  if (!u.roll) {
    h[0] = std::fmax(h[0], u.amax);  // fmaxf: a NaN amax leaves the slot as it was
    return;
  }
  const int64_t n = history.numel();
  const float last = h[0];
  float amax = 0.0f;
  // TE's kernel: a_i = history[i+1] for i < L-1, a_{L-1} = history[0]; amax = max a_i;
  // history[i] = a_i for i > 0 and history[0] = 0.
  for (int64_t i = 0; i < n; ++i) {
    const float a = i < n - 1 ? h[i + 1] : last;
    amax = std::fmax(amax, a);
    h[i] = i > 0 ? a : 0.0f;
  }
  if (u.most_recent) amax = last;
  float* s = state_f32(scale);
  s[0] = fp8_scale_from_amax(amax, u.fp8_max, u.margin, s[0]);
  state_f32(scale_inv)[0] = 1.0f / s[0];
}

void RefBackend::count_nonfinite(Tensor& dst, const Tensor& src) {
  int64_t* out = kern::ptr<int64_t>(dst);
  out[0] = out[1] = 0;
  switch (src.dtype()) {
    case DType::fp32:
      count_bits<uint32_t>(out, src, 0x7F800000u, 0x007FFFFFu);
      break;
    case DType::fp64:
      count_bits<uint64_t>(out, src, 0x7FF0000000000000ull, 0x000FFFFFFFFFFFFFull);
      break;
    case DType::bf16:
      count_bits<uint16_t>(out, src, uint16_t(0x7F80), uint16_t(0x007F));
      break;
    case DType::fp16:
      count_bits<uint16_t>(out, src, uint16_t(0x7C00), uint16_t(0x03FF));
      break;
    default:
      throw std::logic_error(std::string("mixp ref backend: count_nonfinite takes fp32, fp64, "
                                         "bf16 or fp16, got ") +
                             std::string(mixp::name(src.dtype())));
  }
}

}  // namespace mixp
