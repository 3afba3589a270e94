// Portable thresholds to sign bits (the reference of sign_bits_avx512.cpp); see sign_bits.h.
#include "backend/cpu/sign_bits.h"

namespace mixp::cpu::bits {

void sign_bits_generic(uint64_t* out, const int32_t* acc, int64_t M, int64_t O, const int32_t* t,
                       const uint64_t* flip) {
  const int64_t CW = (O + 63) / 64;
  for (int64_t m = 0; m < M; ++m) {
    const int32_t* a = acc + m * O;
    uint64_t* w = out + m * CW;
    for (int64_t j = 0; j < CW; ++j) {
      uint64_t v = 0;
      const int64_t o0 = 64 * j, n = O - o0 < 64 ? O - o0 : 64;
      for (int64_t i = 0; i < n; ++i) v |= uint64_t{a[o0 + i] < t[o0 + i]} << i;
      w[j] = v ^ flip[j];
    }
  }
}

}  // namespace mixp::cpu::bits
