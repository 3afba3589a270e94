// The direct XNOR-popcount convolution with AVX-512 VPOPCNTD; see xnor_conv.h and
// backend/lowbit_gemm.h (xnor_conv_sign_bits).
//
// No bit rows: the sign map is channels-last in 32-bit words, so the C bits of one input position
// are CW32 whole words and a window is KS * KS * CW32 words at fixed offsets from its corner. Each
// word is broadcast and XORed with the same word of 16 output channels (one zmm of the packed
// weights), and VPOPCNTD counts the differing bits per lane: R positions x J blocks of 16
// channels of 32-bit counts stay in registers, every lane ends with one output's count, and the
// counts are compared with the thresholds into 16-bit masks, never stored.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/xnor_conv.h"

namespace mixp::cpu::xnor {

namespace {

struct Image {
  const uint32_t* img;
  const int64_t* off;  // each window word's offset from the window's corner
  int64_t T;           // words per window
  const uint32_t* wp;  // XnorConvWeights::data
  int64_t OB;          // blocks of 16 output channels
  int32_t K;
  int64_t O;
  const int32_t* const* thr;  // per output position
  const uint64_t* flip;
  uint16_t* out;
  int64_t ldb;
};

template <int R, int J>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vpopcntdq"))) void block(
    const Image& im, const int64_t* corner, const int64_t* pos, int64_t jb) {
  __m512i acc[R][J];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  for (int64_t t = 0; t < im.T; ++t) {
    __m512i w[J];
    for (int j = 0; j < J; ++j) w[j] = _mm512_loadu_si512(im.wp + (t * im.OB + jb + j) * 16);
    const int64_t o = im.off[t];
    for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int>(im.img[corner[r] + o]));
      for (int j = 0; j < J; ++j) {
        acc[r][j] = _mm512_add_epi32(acc[r][j], _mm512_popcnt_epi32(_mm512_xor_si512(a, w[j])));
      }
    }
  }
  const __m512i kk = _mm512_set1_epi32(im.K);
  for (int j = 0; j < J; ++j) {
    const int64_t c0 = (jb + j) * 16;
    const __mmask16 live = im.O - c0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (im.O - c0)) - 1);
    const auto f = static_cast<uint16_t>(im.flip[c0 / 64] >> (c0 % 64));
    for (int r = 0; r < R; ++r) {
      // The +-1 dot product is K - 2 * (differing bits); -1 (bit 1) iff it is below thr, XOR flip.
      const __m512i v = _mm512_sub_epi32(kk, _mm512_add_epi32(acc[r][j], acc[r][j]));
      const __m512i th = _mm512_maskz_loadu_epi32(live, im.thr[pos[r]] + c0);
      const auto m = static_cast<uint16_t>(_mm512_mask_cmplt_epi32_mask(live, v, th));
      im.out[pos[r] * im.ldb + jb + j] = static_cast<uint16_t>((m ^ f) & live);
    }
  }
}

using BlockFn = void (*)(const Image&, const int64_t*, const int64_t*, int64_t);

template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vpopcntdq"))) void positions(
    const Image& im, const int64_t* corner, const int64_t* pos) {
  constexpr BlockFn kJ[5] = {nullptr, block<R, 1>, block<R, 2>, block<R, 3>, block<R, 4>};
  for (int64_t jb = 0; jb < im.OB;) {
    const int J = static_cast<int>(std::min<int64_t>(4, im.OB - jb));
    kJ[J](im, corner, pos, jb);
    jb += J;
  }
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vpopcntdq"))) void
conv_sign_bits_image_avx512(uint16_t* out, const uint32_t* img, int64_t WP,
                            const XnorConvWeights& w, int64_t stride, int64_t OH, int64_t OW,
                            const int32_t* const* thr, const uint64_t* flip) {
  const int64_t KS = w.KS, CW32 = w.CW32, T = KS * KS * CW32;
  int64_t off[64];  // KS * KS * CW32 <= 64 words (xnor_conv_sign_bits checks)
  for (int64_t kh = 0; kh < KS; ++kh) {
    for (int64_t kw = 0; kw < KS; ++kw) {
      for (int64_t j = 0; j < CW32; ++j) off[(kh * KS + kw) * CW32 + j] = (kh * WP + kw) * CW32 + j;
    }
  }
  const int64_t OB = (w.O + 15) / 16, ldb = (w.O + 63) / 64 * 4;
  const Image im{img, off, T,    w.data.data(), OB, static_cast<int32_t>(w.K),
                 w.O, thr, flip, out,           ldb};
  constexpr void (*kR[5])(const Image&, const int64_t*, const int64_t*) = {
      nullptr, positions<1>, positions<2>, positions<3>, positions<4>};
  const int64_t P = OH * OW;
  // Output positions in blocks of 4 over the whole map (a block may span two rows).
  for (int64_t p = 0; p < P; p += 4) {
    const int R = static_cast<int>(std::min<int64_t>(4, P - p));
    int64_t corner[4], pos[4];
    for (int r = 0; r < R; ++r) {
      pos[r] = p + r;
      corner[r] = ((pos[r] / OW) * stride * WP + (pos[r] % OW) * stride) * CW32;
    }
    kR[R](im, corner, pos);
  }
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t q = OB; q < ldb; ++q) out[p * ldb + q] = 0;  // past O
  }
}

}  // namespace mixp::cpu::xnor
