// The direct XNOR-popcount convolution of the packed binary-act layers, ending in sign bits
// (internal; backend/lowbit_gemm.h, xnor_conv_sign_bits; docs/architecture.md 6.6). Only an
// AVX-512 VPOPCNTDQ kernel: elsewhere the caller builds bit rows and takes xnor_sign_bits.
#pragma once
#include <cstdint>

#include "mixp/backend/lowbit_gemm.h"

namespace mixp::cpu::xnor {

// One image's padded sign map img [HP, WP, w.CW32] (32-bit words, the border zero) against the
// weights; out is the image's [OH * OW] rows of ldb 16-bit masks (ldb = 4 * ceil(O / 64)).
void conv_sign_bits_image_avx512(uint16_t* out, const uint32_t* img, int64_t WP,
                                 const XnorConvWeights& w, int64_t stride, int64_t OH, int64_t OW,
                                 const int32_t* const* thr, const uint64_t* flip);

}  // namespace mixp::cpu::xnor
