// A direct int8 convolution that ends in sign bits, with AVX-512 VNNI: the first layer of a packed
// binary-act cnn (few input channels), where oneDNN's convolution would write 32-bit sums that
// are 32 times the size of the bits they become; see backend/lowbit_gemm.h, int8_conv_sign_bits.
//
// The weights are regrouped by (ci, kh, four kw): one VPDPBUSD lane sums four consecutive bytes of
// an image row (one 32-bit load, broadcast) against the four weights of that row of the window,
// the ones past KS zero, so the bytes they meet in the row's slack do not count. 16 output
// channels per register; the sums are compared with the thresholds into a 16-bit mask.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "backend/cpu/conv_sign.h"

namespace mixp::cpu::bits {

namespace {

struct SignRows {
  const int8_t* wg;     // the regrouped weights
  const int64_t* goff;  // each group's offset in the image
  int64_t G, OB, WPS, stride;
  const int32_t* thr;
  const uint64_t* flip;
  int64_t ldb;  // 16-bit masks per output position
};

// P output positions of one image row at once (independent VPDPBUSD chains) against up to 4
// blocks of 16 channels, each image dword broadcast once for all of them.
template <int P, int J>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void positions_j(
    const SignRows& r, const uint8_t* row, int64_t ow, uint16_t* dst, int64_t j0) {
  __m512i acc[P][J];
  for (int p = 0; p < P; ++p) {
    for (int j = 0; j < J; ++j) acc[p][j] = _mm512_setzero_si512();
  }
  for (int64_t g = 0; g < r.G; ++g) {
    const int8_t* wg = r.wg + (g * r.OB + j0) * 64;
    __m512i wv[J];
    for (int j = 0; j < J; ++j) wv[j] = _mm512_loadu_si512(wg + j * 64);
    const uint8_t* src = row + r.goff[g] + ow * r.stride;
    for (int p = 0; p < P; ++p) {
      int32_t a;
      std::memcpy(&a, src + p * r.stride, 4);
      const __m512i av = _mm512_set1_epi32(a);
      for (int j = 0; j < J; ++j) acc[p][j] = _mm512_dpbusd_epi32(acc[p][j], av, wv[j]);
    }
  }
  for (int j = 0; j < J; ++j) {
    const int64_t jj = j0 + j;
    const __m512i t = _mm512_loadu_si512(r.thr + 16 * jj);
    const auto f = static_cast<uint16_t>(r.flip[jj / 4] >> (16 * (jj % 4)));
    for (int p = 0; p < P; ++p) {
      dst[(ow + p) * r.ldb + jj] = static_cast<uint16_t>(_mm512_cmplt_epi32_mask(acc[p][j], t) ^ f);
    }
  }
}

template <int P>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) inline void positions(
    const SignRows& r, const uint8_t* row, int64_t ow, uint16_t* dst) {
  int64_t j = 0;
  for (; j + 2 <= r.OB; j += 2) positions_j<P, 2>(r, row, ow, dst, j);
  if (j < r.OB) positions_j<P, 1>(r, row, ow, dst, j);
  for (int p = 0; p < P; ++p) {
    for (int64_t q = r.OB; q < r.ldb; ++q) dst[(ow + p) * r.ldb + q] = 0;  // past O
  }
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void conv_sign_bits_avx512(
    uint64_t* out, const uint8_t* img, const int8_t* w, int64_t N, int64_t C, int64_t HP,
    int64_t WPS, int64_t KS, int64_t stride, int64_t OH, int64_t OW, int64_t O, const int32_t* thr,
    const uint64_t* flip) {
  const int64_t KB = (KS + 3) / 4, G = C * KS * KB, OB = O / 16, CW = (O + 63) / 64;
  // wg[(g * OB + j) * 64 + l * 4 + b]: group g = (ci * KS + kh) * KB + kb, channel 16 j + l,
  // byte b = the weight at kw = 4 kb + b (0 past KS).
  std::vector<int8_t> wg(static_cast<size_t>(G * OB * 64), 0);
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t ci = 0; ci < C; ++ci) {
      for (int64_t kh = 0; kh < KS; ++kh) {
        for (int64_t kw = 0; kw < KS; ++kw) {
          const int64_t g = (ci * KS + kh) * KB + kw / 4;
          wg[static_cast<size_t>((g * OB + o / 16) * 64 + (o % 16) * 4 + kw % 4)] =
              w[((o * C + ci) * KS + kh) * KS + kw];
        }
      }
    }
  }
  auto* bits = reinterpret_cast<uint16_t*>(out);
  const int64_t ldb = CW * 4;
  std::vector<int64_t> goff(static_cast<size_t>(G));  // each group's offset in the image
  for (int64_t ci = 0; ci < C; ++ci) {
    for (int64_t kh = 0; kh < KS; ++kh) {
      for (int64_t kb = 0; kb < KB; ++kb) {
        goff[static_cast<size_t>((ci * KS + kh) * KB + kb)] = (ci * HP + kh) * WPS + 4 * kb;
      }
    }
  }
  const SignRows r{wg.data(), goff.data(), G, OB, WPS, stride, thr, flip, ldb};
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* im = img + n * C * HP * WPS;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const uint8_t* at = im + oh * stride * WPS;
      uint16_t* dst = bits + (n * OH + oh) * OW * ldb;
      int64_t ow = 0;
      for (; ow + 7 <= OW; ow += 7) positions<7>(r, at, ow, dst);
      for (; ow + 4 <= OW; ow += 4) positions<4>(r, at, ow, dst);
      for (; ow < OW; ++ow) positions<1>(r, at, ow, dst);
    }
  }
}

}  // namespace mixp::cpu::bits
