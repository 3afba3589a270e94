// Integer thresholds to sign bits, the fused epilogue of the packed binary-act layers
// (internal; docs/architecture.md 6.6): row m of acc [M, O] s32 becomes CW = ceil(O / 64) words,
// bit o % 64 of word o / 64 = (acc[m * O + o] < t[o]) XOR (bit o of flip), the bits past O zero.
// The AVX-512 kernel compares 16 channels per instruction into a mask; the generic one is the
// reference.
#pragma once
#include <cstdint>

namespace mixp::cpu::bits {

using SignBitsFn = void (*)(uint64_t* out, const int32_t* acc, int64_t M, int64_t O,
                            const int32_t* t, const uint64_t* flip);

void sign_bits_generic(uint64_t* out, const int32_t* acc, int64_t M, int64_t O, const int32_t* t,
                       const uint64_t* flip);
void sign_bits_avx512(uint64_t* out, const int32_t* acc, int64_t M, int64_t O, const int32_t* t,
                      const uint64_t* flip);

}  // namespace mixp::cpu::bits
