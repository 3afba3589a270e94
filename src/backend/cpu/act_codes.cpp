// act_codes_u8 and act_codes_f32: the tier dispatch and the portable loops; see
// include/mixp/backend/lowbit_gemm.h.
#include "backend/cpu/act_codes.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_parallel.h"
#include "mixp/format/cpu_features.h"
#include "mixp/backend/lowbit_gemm.h"

namespace mixp {

namespace {
void act_codes_u8_generic(uint8_t* dst, const float* src, int64_t n, float inv, float qmin,
                          float qmax, int32_t offset) {
  for (int64_t i = 0; i < n; ++i) {
    const float q = std::clamp(std::nearbyint(src[i] * inv), qmin, qmax);
    dst[i] = static_cast<uint8_t>(static_cast<int>(q) + offset);
  }
}
void act_codes_f32_generic(float* dst, const float* src, int64_t n, float inv, float qmin,
                           float qmax) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::clamp(std::nearbyint(src[i] * inv), qmin, qmax);
}
}  // namespace

void act_codes_f32(float* dst, const float* src, int64_t n, float inv, float qmin, float qmax) {
  static const auto f =
      by_tier(&cpu::codes::act_codes_f32_avx512, &act_codes_f32_generic, &act_codes_f32_generic);
  cpu::parallel_for(
      n, n, [&](int64_t lo, int64_t hi) { f(dst + lo, src + lo, hi - lo, inv, qmin, qmax); });
}

void act_codes_u8(uint8_t* dst, const float* src, int64_t n, float inv, float qmin, float qmax,
                  int32_t offset) {
  static const auto f =
      by_tier(&cpu::codes::act_codes_u8_avx512, &act_codes_u8_generic, &act_codes_u8_generic);
  f(dst, src, n, inv, qmin, qmax, offset);
}

}  // namespace mixp
