// The scalar math of the block-scaled training quantizers (nvfp4, mxfp4, fp8_block; definitions
// and the Transformer Engine references they equal: include/mixp/format/block_scaled.h), in ONE
// header compiled by both compilers (MIXP_BQ below): the CPU fast path
// (src/format/block_scaled_kernels.inc, block_scaled.cpp's tile scales) and the CUDA kernels
// (src/backend/cuda/cuda_block_quant.cu) call these same functions, so the CPU exactness tests
// (tests/block/test_block_scaled*.cpp, against the scalar reference and TE's definitions) cover
// the arithmetic the GPU runs; tests/cuda/test_cuda_block_math.cpp checks that the CPU path
// is this header's and runs the kernels' per-element/per-tile structure on the host.
//
// Branch-free where the CPU loops need it (integer compares and mask selects that the compiler
// vectorises, block_scaled_kernels.inc); no host-only library calls, no CUDA intrinsics. Every
// operation is one IEEE fp32 or integer operation, so nvcc (--fmad=false) and the host compiler
// (fp-contract off in the .inc) give the same bits.
//
// It also holds the scale layouts cuBLASLt's block-scaled GEMMs read (docs/cuda.md "Block-scaled
// recipes"): pure index functions, tested on the CPU.
#pragma once
#include <cstdint>
#include <cstring>

// It lives with the formats it defines (format is the lowest layer; the CUDA backend includes it
// from above, tests/lint/layering.py SHARED_INTERNAL), so it cannot use backend's MIXP_HD
// (src/backend/math/host_device.h) and spells the same two cases out itself.
// Internal linkage (static): the CPU compiles this header into translation units with different
// target flags (block_scaled_kernels_generic.cpp, _avx512.cpp); an inline function with external
// linkage could be emitted by both and the linker would keep one, possibly the AVX-512 one.
#if defined(__CUDACC__)
#define MIXP_BQ static __host__ __device__ inline
#else
#define MIXP_BQ static inline
#endif

namespace mixp::block_math {

// The schemes, in include/mixp/format/block_scaled.h's BlockScheme order (static_assert there's
// user, block_scaled.cpp).
enum Kind : int { kNvfp4 = 0, kMxfp4 = 1, kFp8Block = 2 };

MIXP_BQ uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
MIXP_BQ float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// fp32 bit patterns of the constants the comparisons use.
inline constexpr uint32_t kB0p25 = 0x3E800000u, kB0p75 = 0x3F400000u, kB1p25 = 0x3FA00000u,
                          kB1p75 = 0x3FE00000u, kB2 = 0x40000000u, kB2p5 = 0x40200000u,
                          kB3p5 = 0x40600000u, kB4 = 0x40800000u, kB5 = 0x40A00000u,
                          kB6 = 0x40C00000u, kB448 = 0x43E00000u, kB2m6 = 0x3C800000u,
                          kInfBits = 0x7F800000u;
inline constexpr float kE2M1Max = 6.0f, kE4M3Max = 448.0f;
inline constexpr float kFltMax = 3.402823466e38f;

MIXP_BQ uint32_t ge(uint32_t a, uint32_t b) { return static_cast<uint32_t>(a >= b); }
MIXP_BQ uint32_t gt(uint32_t a, uint32_t b) { return static_cast<uint32_t>(a > b); }
// c ? a : b by masks: both operands computed (a ?: on floats can keep a branch on the CPU).
MIXP_BQ float select(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return bitsf((fbits(a) & m) | (fbits(b) & ~m));
}

// |x| as its fp32 bits, NaN as 0: for non-negative floats the bits order as the values, so an
// unsigned max (vector max on the CPU, atomicMax on the GPU) is the reference's max that skips NaN.
MIXP_BQ uint32_t abs_key(float x) {
  const uint32_t a = fbits(x) & 0x7FFFFFFFu;
  return a & (0u - static_cast<uint32_t>(a <= kInfBits));
}

// --- E2M1 -------------------------------------------------------------------------------------
// Magnitude index of |v| (bits ab, not NaN) rounded to nearest even (TE's cast_to_fp4x2
// thresholds, block_scaled_ref.cpp e2m1_rne), or of a grid value.
MIXP_BQ uint32_t e2m1_rne_index(uint32_t ab) {
  return gt(ab, kB0p25) + ge(ab, kB0p75) + gt(ab, kB1p25) + ge(ab, kB1p75) + gt(ab, kB2p5) +
         ge(ab, kB3p5) + gt(ab, kB5);
}
// Magnitude of index m: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (exact).
MIXP_BQ float e2m1_index_value(uint32_t m) {
  const float f = static_cast<float>(static_cast<int32_t>(m));
  const float lo = f * 0.5f, hi = f - 2.0f;
  return select(m <= 4, lo, select(m == 7, 6.0f, hi));
}
// The E2M1 code (sign bit 3) of v, scaled, not yet clamped, nearest even. -0.0 and NaN: code 0
// (TE's quirk: -0.0 is not < 0); a negative value rounding to zero: code 8.
MIXP_BQ uint32_t e2m1_code_rne(float v) {
  const uint32_t vb = fbits(v), ab = vb & 0x7FFFFFFFu;
  const uint32_t m = e2m1_rne_index(ab);
  const uint32_t neg = (vb >> 28) & 8u & (0u - gt(ab, 0u));
  return ab > kInfBits ? 0u : (m | neg);
}
// Stochastic: encode_float(kFp4E2M1, clamp(v, -6, 6), stochastic, bits) (float_codec.cpp) on the
// E2M1 grid: t = |v| / ulp (exact), n = floor(t), the dropped fraction as 32 bits rounds up when
// frac32 + bits >= 2^32. A zero result keeps the sign. NaN: code 0.
MIXP_BQ uint32_t e2m1_code_sr(float v, uint32_t rbits) {
  const uint32_t vb = fbits(v);
  uint32_t ab = vb & 0x7FFFFFFFu;
  const bool nan = ab > kInfBits;
  ab = ab < kB6 ? ab : kB6;  // clamp to 6 (inf too); NaN is masked below
  const float a = bitsf(ab);
  const float ulp = select(ab < kB2, 0.5f, select(ab < kB4, 1.0f, 2.0f));
  const float t = a * select(ab < kB2, 2.0f, select(ab < kB4, 1.0f, 0.5f));  // exact
  const int32_t ni = static_cast<int32_t>(t);  // t in [0, 8): truncation is floor
  const float f = t - static_cast<float>(ni);  // exact
  // floor(f * 2^32) in two 16-bit halves (each step exact: f * 2^16 < 2^16 has 24 bits).
  const float f16 = f * 65536.0f;
  const int32_t hi = static_cast<int32_t>(f16);
  const int32_t lo = static_cast<int32_t>((f16 - static_cast<float>(hi)) * 65536.0f);
  const uint32_t f32 = (static_cast<uint32_t>(hi) << 16) | static_cast<uint32_t>(lo);
  const int32_t up = static_cast<int32_t>(rbits > ~f32);  // frac32 + bits >= 2^32
  const float r = static_cast<float>(ni + up) * ulp;
  return (e2m1_rne_index(fbits(r)) | ((vb >> 28) & 8u)) & (0u - static_cast<uint32_t>(!nan));
}
// (e2m1 value of c * s) * g: the dequantized value (g = nvfp4's amax / 2688, or 1).
MIXP_BQ float e2m1_deq(uint32_t c, float s, float g) {
  const float mag = e2m1_index_value(c & 7u);
  return (bitsf(fbits(mag) | ((c & 8u) << 28)) * s) * g;
}

// --- E4M3 (OCP E4M3FN) --------------------------------------------------------------------------
// The code of clamp(v, -448, 448), nearest even; NaN -> 0x7F with v's sign.
MIXP_BQ uint32_t e4m3_code(float v) {
  const uint32_t vb = fbits(v);
  const bool nan = (vb & 0x7FFFFFFFu) > kInfBits;
  const uint32_t sign = vb & 0x80000000u;
  const uint32_t ab = (vb & 0x7FFFFFFFu) < kB448 ? (vb & 0x7FFFFFFFu) : kB448;
  // Subnormal (a < 2^-6): steps of 2^-9, nearest even by the 1.5 * 2^23 trick.
  const float nsub = (bitsf(ab) * 512.0f + 12582912.0f) - 12582912.0f;
  // Normal: the significand rounded to 3 bits (nearest even).
  const uint32_t u = (ab + 0x7FFFFu + ((ab >> 20) & 1u)) & ~0xFFFFFu;
  const uint32_t mag = ab < kB2m6 ? static_cast<uint32_t>(static_cast<int32_t>(nsub))
                                  : ((((u >> 23) - 120u) << 3) | ((u >> 20) & 7u));
  return (sign >> 24) | (nan ? 0x7Fu : mag);
}
// The value of an E4M3 code (exact), NaN for 0x7F / 0xFF.
MIXP_BQ float e4m3_value(uint32_t c) {
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  const float sub = static_cast<float>(static_cast<int32_t>(m)) * (1.0f / 512.0f);
  const float nrm = bitsf(((e + 120u) << 23) | (m << 20));
  const float mag = select((c & 0x7Fu) == 0x7Fu, bitsf(0x7FC00000u), select(e == 0, sub, nrm));
  return bitsf(fbits(mag) | ((c & 0x80u) << 24));
}
// The code of a in [0, 448] (a block scale), nearest even, and its value in *value.
MIXP_BQ uint8_t e4m3_rne_mag(float a, float* value) {
  if (a < 0.015625f) {
    const float n = (a * 512.0f + 12582912.0f) - 12582912.0f;
    *value = n * (1.0f / 512.0f);
    return static_cast<uint8_t>(n);
  }
  uint32_t u = fbits(a);
  u = (u + 0x7FFFFu + ((u >> 20) & 1u)) & ~0xFFFFFu;
  *value = bitsf(u);
  return static_cast<uint8_t>((((u >> 23) - 120u) << 3) | ((u >> 20) & 7u));
}

// --- Scales -------------------------------------------------------------------------------------
MIXP_BQ float fminf_(float a, float b) { return b < a ? b : a; }  // std::min(a, b)
MIXP_BQ float fmaxf_(float a, float b) { return a < b ? b : a; }  // std::max(a, b)

// Exact ceil(log2(v)) for finite v > 0 (std::frexp's exponent, less one at a power of two).
MIXP_BQ int ceil_log2(float v) {
  const uint32_t u = fbits(v);
  const int e = static_cast<int>(u >> 23);
  uint32_t m = u & 0x7FFFFFu;
  if (e != 0) return e - 127 + (m != 0 ? 1 : 0);
  int fl = 31;  // subnormal: v = m * 2^-149, ceil(log2 m) - 149
  while (!(m & 0x80000000u)) {
    m <<= 1;
    --fl;
  }
  return fl - 149 + ((u & 0x7FFFFFu) != (1u << fl) ? 1 : 0);
}
// 2^e for e in [-149, 127] (std::ldexp(1.0f, e)).
MIXP_BQ float pow2f(int e) {
  return e >= -126 ? bitsf(static_cast<uint32_t>(e + 127) << 23) : bitsf(1u << (e + 149));
}

// nvfp4's per-tensor scales from the global amax (TE reference_nvfp4.py): the encoding scale's
// reciprocal gdec, the block-scale multiplier gmult = genc * rcp(6), and the dequantization
// factor g = amax / 2688.
struct TensorScales {
  float gdec = 1.0f, gmult = 1.0f, g = 1.0f;
};
MIXP_BQ TensorScales nvfp4_tensor_scales(float amax) {
  TensorScales t;
  float genc = fminf_((kE4M3Max * kE2M1Max) / amax, kFltMax);
  if (genc == 0.0f) genc = 1.0f;
  t.gdec = 1.0f / genc;
  t.gmult = genc * (1.0f / kE2M1Max);
  t.g = amax / (kE4M3Max * kE2M1Max);
  return t;
}

struct TileScale {
  float enc = 1.0f;  // what the elements are multiplied by before rounding
  float s = 1.0f;    // the decoding scale (BlockScaledTensor::scales; fp8_block's scale_inv)
  uint8_t code = 0;  // E4M3 (nvfp4) / E8M0 (mxfp4) byte
};
// One tile's scale from its amax vmax (block_scaled_ref.cpp's arithmetic, per scheme); gdec and
// gmult: nvfp4_tensor_scales (nvfp4 only). pow2: fp8_block's power-of-two scales.
MIXP_BQ TileScale tile_scale(int kind, bool pow2, float vmax, float gdec, float gmult) {
  TileScale t;
  if (kind == kNvfp4) {
    const float p = fminf_(vmax * gmult, kFltMax);
    const float ds = fminf_(fmaxf_(p, -kE4M3Max), kE4M3Max);
    t.code = e4m3_rne_mag(ds, &t.s);  // ds >= 0: vmax >= 0, gmult > 0
    t.enc = fminf_(1.0f / (t.s * gdec), kFltMax);
  } else if (kind == kMxfp4) {
    const float ds = vmax / kE2M1Max;
    int e = ds == 0.0f ? -127 : ceil_log2(ds);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    t.s = pow2f(e);
    t.code = static_cast<uint8_t>(e + 127);
    t.enc = 1.0f / t.s;
  } else {
    float scale = kE4M3Max / vmax;
    if ((fbits(scale) & 0x7FFFFFFFu) == kInfBits) scale = kFltMax;
    if (pow2) {
      // 2^(frexp exponent - 1): scale's own exponent (scale is normal: >= 448 / FLT_MAX), 0.5
      // for scale 0 (frexp(0) = 0 * 2^0); 0 when vmax is inf.
      scale = scale == 0.0f ? 0.5f : bitsf(fbits(scale) & 0x7F800000u);
      if ((fbits(vmax) & 0x7FFFFFFFu) == kInfBits) scale = 0.0f;
    }
    if (vmax == 0.0f) scale = 1.0f;
    t.s = 1.0f / scale;
    t.enc = scale;
  }
  return t;
}

// --- The 16-point random Hadamard transform (TE reference_nvfp4.py _apply_rht) ---------------------
// TE's get_wgrad_sign_vector(): +1 or -1.
MIXP_BQ float rht16_sign(int i) {
  // Bit i set: -1. {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1}
  return ((0xD7E8u >> (i & 15)) & 1u) ? -1.0f : 1.0f;
}
// T[i][j] = sign(i) * H16[i][j] / 4, H16[i][j] = (-1)^popcount(i & j).
MIXP_BQ float rht16_entry(int i, int j) {
  uint32_t p = static_cast<uint32_t>(i & j);
  p ^= p >> 2;
  p ^= p >> 1;
  return rht16_sign(i) * ((p & 1u) ? -0.25f : 0.25f);
}
// Output j of one group of 16: sum over i = 0..15 in order of v[i] * T[i][j] (products exact).
MIXP_BQ float rht16_output(const float* v, int j) {
  float acc = 0.0f;
  for (int i = 0; i < 16; ++i) acc = acc + v[i] * rht16_entry(i, j);
  return acc;
}

// --- cuBLASLt's scale layouts (docs/cuda.md "Block-scaled recipes") --------------------------------
MIXP_BQ int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 / VEC32_UE8M0 (cublasLt.h lines 926-929): one byte per
// block of 16 / 32 along K, for an operand of `rows` rows (M or N) and `sc` = ceil(K / block)
// scale columns, in cuBLAS's 128x4 tiles: rows padded to 128, scale columns to 4; tile (r / 128,
// c / 4) row-major, 512 bytes each; inside, row r % 128 = 32 * q + p and column c % 4 at
// p * 16 + q * 4 + c % 4. Padding bytes are 0.
MIXP_BQ int64_t vec_scale_bytes(int64_t rows, int64_t sc) {
  return round_up(rows, 128) * round_up(sc, 4);
}
MIXP_BQ int64_t vec_scale_offset(int64_t r, int64_t c, int64_t sc) {
  const int64_t tiles_per_row = round_up(sc, 4) / 4;
  const int64_t tile = (r / 128) * tiles_per_row + c / 4;
  const int64_t rr = r % 128;
  return tile * 512 + (rr % 32) * 16 + (rr / 32) * 4 + c % 4;
}
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (cublasLt.h line 936): one fp32 per 1x128 block along
// K; for rows x ceil(K / 128) scales, stored K-block-major with the rows contiguous and padded to
// a multiple of 4 (16 bytes; Transformer Engine's GEMM_READY [ceil(K/128), roundup(M, 4)]).
MIXP_BQ int64_t vec128_scale_count(int64_t rows, int64_t kb) { return kb * round_up(rows, 4); }
MIXP_BQ int64_t vec128_scale_offset(int64_t r, int64_t kb_index, int64_t rows) {
  return kb_index * round_up(rows, 4) + r;
}
// CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F (cublasLt.h line 939): one fp32 per 128x128 block;
// [ceil(rows / 128), roundup(ceil(K / 128), 4)] row-major (TE's GEMM_READY 2-D layout).
MIXP_BQ int64_t blk128_scale_count(int64_t rows, int64_t kb) {
  return ((rows + 127) / 128) * round_up(kb, 4);
}
MIXP_BQ int64_t blk128_scale_offset(int64_t rb, int64_t kb_index, int64_t kb) {
  return rb * round_up(kb, 4) + kb_index;
}

}  // namespace mixp::block_math
