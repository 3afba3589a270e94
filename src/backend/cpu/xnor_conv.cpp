// The direct XNOR convolution's weights and its dispatch (xnor_conv.h); see
// include/mixp/backend/lowbit_gemm.h, xnor_conv_sign_bits.
#include "backend/cpu/xnor_conv.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_parallel.h"
#include "mixp/format/cpu_features.h"
#include "mixp/backend/lowbit_gemm.h"

namespace mixp {

XnorConvWeights pack_xnor_conv_weights(const int8_t* w, int64_t O, int64_t C, int64_t KS) {
  XnorConvWeights p;
  p.O = O;
  p.C = C;
  p.KS = KS;
  p.K = C * KS * KS;
  p.CW32 = (C + 31) / 32;
  const int64_t OB16 = (O + 15) / 16 * 16;
  p.data.assign(static_cast<size_t>(KS * KS * p.CW32 * OB16), 0);
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t kh = 0; kh < KS; ++kh) {
        for (int64_t kw = 0; kw < KS; ++kw) {
          if (w[((o * C + c) * KS + kh) * KS + kw] >= 0) continue;  // +1: bit 0
          const int64_t t = (kh * KS + kw) * p.CW32 + c / 32;
          p.data[static_cast<size_t>(t * OB16 + o)] |= uint32_t{1} << (c % 32);
        }
      }
    }
  }
  return p;
}

bool xnor_conv_sign_bits(uint64_t* out, const uint64_t* in, const XnorConvWeights& w, int64_t N,
                         int64_t H, int64_t W, int64_t stride, int64_t pad, int64_t OH, int64_t OW,
                         const int32_t* const* thr, const uint64_t* flip) {
  static const bool vpopcnt = simd_tier() == SimdTier::avx512 && cpu_features().avx512_vpopcntdq;
  if (!vpopcnt || w.KS * w.KS * w.CW32 > 64 || w.O <= 0 || N <= 0) return false;
  const int64_t CW = (w.C + 63) / 64, CW32 = w.CW32, OCW = (w.O + 63) / 64;
  const int64_t HP = H + 2 * pad, WP = W + 2 * pad;
  cpu::parallel_for(N, N * OH * OW * w.O * w.K / 32, [&](int64_t lo, int64_t hi) {
    // One padded image at a time, channels-last in 32-bit words (hot in L1 for its
    // convolution); the border stays zero (+1).
    std::vector<uint32_t> img(static_cast<size_t>(HP * WP * CW32), 0);
    for (int64_t n = lo; n < hi; ++n) {
      for (int64_t h = 0; h < H; ++h) {
        const uint64_t* src = in + (n * H + h) * W * CW;
        uint32_t* dst = img.data() + ((h + pad) * WP + pad) * CW32;
        for (int64_t x = 0; x < W; ++x) {
          for (int64_t j = 0; j < CW32; ++j) {
            dst[x * CW32 + j] = static_cast<uint32_t>(src[x * CW + j / 2] >> (32 * (j % 2)));
          }
        }
      }
      cpu::xnor::conv_sign_bits_image_avx512(reinterpret_cast<uint16_t*>(out + n * OH * OW * OCW),
                                             img.data(), WP, w, stride, OH, OW, thr, flip);
    }
  });
  return true;
}

}  // namespace mixp
