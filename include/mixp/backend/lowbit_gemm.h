// Integer GEMM cores below 8 bits, for the packed low-bit models (quant/lowbit_model.h) and
// `mixp bench gemm` (bench/gemm_bench.h).
//
// xnor_gemm_s32: binary x binary as XNOR + popcount. a [M, words] and b [O, words] hold bit rows
// (bit = 1 for -1, 0 for +1; `words` 64-bit words per row, any number; the bits past `k` zero
// in both), and dst[m * O + o] = k - 2 * popcount(a[m] XOR b[o]) = sum_k a[m][k] * b[o][k] over
// the +-1 values. AVX-512 VPOPCNTQ (blocks of 6 rows x 16 columns in registers) when the CPU
// has AVX512_VPOPCNTDQ and the SIMD tier is avx512 (docs/architecture.md 6.6), a portable loop
// elsewhere; parallel over rows.
//
// sign_bits_s32: the integer thresholds that end a packed binary-act layer (quant/lowbit_model.h):
// row m of acc [M, O] s32 becomes CW = ceil(O / 64) words of out [M, CW], bit o % 64 of word
// o / 64 = (acc[m * O + o] < t[o]) XOR (bit o of flip [CW]); flip's bits past O must be zero, and
// so are out's. AVX-512 compares (16 channels per instruction) or a portable loop; parallel over
// rows.
//
// xnor_sign_bits: the XNOR sums compared with a threshold row per output row, straight into sign
// bits: bit o of out row m ([M, ceil(O / 64)] words) = (sum[m][o] < thr[m][o]) XOR (bit o of
// flip). On the AVX-512 kernel (O a multiple of 16) the sums never reach memory; elsewhere a row
// of them at a time.
//
// int8_conv_sign_bits: a direct convolution of u8 codes with s8 weights [O, C, KS, KS] ending in
// sign bits, for the first layer of a packed binary-act cnn (few input channels): img is
// [N, C, HP, WPS] u8, already padded (HP, WP = the padded sizes) with WPS >= WP + 3 (each row's
// slack is read against zero weights); output position (oh, ow) of sample n is bit row
// (n * OH + oh) * OW + ow of out, bit o = (sum < thr[o]) XOR (bit o of flip), the sum exact in
// int32. Runs where the CPU has AVX-512 VNNI and O is a multiple of 16, and returns false
// (writing nothing) elsewhere: the caller then takes int8_conv2d_s32 and sign_bits_s32.
//
// xnor_conv_sign_bits: a binary-act convolution of sign bits straight to sign bits, without bit
// rows: `in` is the input's sign map [N, H, W, CW] (CW = ceil(C / 64) words per position, bit
// c % 64 of word c / 64 = 1 for -1, the bits past C zero), padded with +1 (zero bits) by `pad`
// on each side; weights from pack_xnor_conv_weights. Output position p = oh * OW + ow of sample n
// is row n * OH * OW + p of out ([.., ceil(O / 64)] words, the bits past O zero), bit o =
// (sum < thr[p][o]) XOR (bit o of flip), sum the +-1 dot product over the window with the
// padding read as +1 (so thr[p] carries the padding's correction, as for xnor_sign_bits). Runs
// where the CPU has AVX-512 VPOPCNTDQ (and KS * KS * ceil(C / 32) <= 64), and returns false
// (writing nothing) elsewhere: the caller then builds bit rows for xnor_sign_bits.
//
// int8_gemm_s32: [M, K] u8 (or s8) x [O, K] s8 -> [M, O] s32 on oneDNN's VNNI GEMM, both
// row-major; exact. Where oneDNN would run without VNNI (its pairs of products saturate int16)
// a plain int32 loop runs instead, slower but exact.
#pragma once
#include <cstdint>
#include <vector>

namespace mixp {

// int4/int2 weights [O, K] kept packed for lowbit_gemm_s32 (pack_lowbit_b): `data` in the
// kernel's layout (blocks of 16 columns by chunks of 4 * 8 / bits k; still 4 or 2 bits per code)
// and `packed`, the codes in the layout of unpack_int4_to_int8 / unpack_int2_to_int8 (rows of
// ceil(K * bits / 8) bytes), for the portable path.
struct LowBitB {
  int bits = 4;
  int64_t O = 0, K = 0;
  std::vector<uint8_t> data;
  std::vector<uint8_t> packed;
};
// `packed`: O rows of ceil(K * bits / 8) bytes, two's complement codes as unpack_int4_to_int8 /
// unpack_int2_to_int8 read them; bits 4 or 2 (std::invalid_argument otherwise).
LowBitB pack_lowbit_b(const uint8_t* packed, int64_t O, int64_t K, int bits);
// dst [M, O] s32 = a [M, K] u8 (row stride lda >= K) x the codes of b, transposed; exact, so
// equal to unpacking b to int8 and int8_gemm_s32 bit for bit. With AVX-512 VNNI the codes are
// expanded to bytes in registers inside the GEMM loop (a shift and a mask per field, an offset
// that keeps them non-negative, taken off with the row sums of a at the end); elsewhere b is
// unpacked to int8 and int8_gemm_s32 runs. Parallel over rows. Which one: lowbit_gemm_kernel_name.
void lowbit_gemm_s32(int32_t* dst, const uint8_t* a, int64_t lda, const LowBitB& b, int64_t M);
const char* lowbit_gemm_kernel_name();

void xnor_gemm_s32(int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O,
                   int64_t words, int32_t k);
// Which XNOR kernel runs here: "avx512_vpopcntdq" or "generic".
const char* xnor_gemm_kernel_name();
void xnor_sign_bits(uint64_t* out, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O,
                    int64_t words, int32_t k, const int32_t* const* thr, const uint64_t* flip);
bool int8_conv_sign_bits(uint64_t* out, const uint8_t* img, const int8_t* w, int64_t N,
                         int64_t C, int64_t HP, int64_t WPS, int64_t KS, int64_t stride,
                         int64_t OH, int64_t OW, int64_t O, const int32_t* thr,
                         const uint64_t* flip);
// act_codes_u8: activation codes as bytes, dst[i] = uint8(int(clamp(nearbyint(src[i] * inv),
// qmin, qmax)) + offset) (the conversions of C++ on x86, a NaN included), for the padded image
// of int8_conv_sign_bits; AVX-512 or a portable loop, equal bit for bit.
void act_codes_u8(uint8_t* dst, const float* src, int64_t n, float inv, float qmin, float qmax,
                  int32_t offset);
// act_codes_f32: the same codes as floats, dst[i] = clamp(nearbyint(src[i] * inv), qmin, qmax)
// (a NaN stays NaN, -0 stays -0, as std::clamp leaves them): the packed models' activation codes
// between unfused layers, equal bit for bit to quant::lowbit_act_codes. Parallel.
void act_codes_f32(float* dst, const float* src, int64_t n, float inv, float qmin, float qmax);
// rescale_s32: a packed layer's s32 sums acc [N, P, O] (P output positions, channels last) to
// its fp32 output, channels first [N, O, P]: dst[(n * O + o) * P + p] =
// float(acc[(n * P + p) * O + o] - off[o]) * mult[o] + bias[o], the multiply and the add each
// rounded to fp32 (as quant::lowbit_rescale's mul and add); off and bias may be null. Parallel.
void rescale_s32(float* dst, const int32_t* acc, int64_t N, int64_t P, int64_t O,
                 const int32_t* off, const float* mult, const float* bias);
// Binary conv weights [O, C, KS, KS] (codes +-1) for xnor_conv_sign_bits: the sign bits of
// channels 32 j .. 32 j + 31 of window position (kh, kw) as one 32-bit word per output channel,
// data[((kh * KS + kw) * CW32 + j) * OB * 16 + o] (OB = ceil(O / 16); the bits of channels past C
// and the words of outputs past O zero).
struct XnorConvWeights {
  int64_t O = 0, C = 0, KS = 0, K = 0, CW32 = 0;
  std::vector<uint32_t> data;
};
XnorConvWeights pack_xnor_conv_weights(const int8_t* w, int64_t O, int64_t C, int64_t KS);
bool xnor_conv_sign_bits(uint64_t* out, const uint64_t* in, const XnorConvWeights& w, int64_t N,
                         int64_t H, int64_t W, int64_t stride, int64_t pad, int64_t OH,
                         int64_t OW, const int32_t* const* thr, const uint64_t* flip);
void sign_bits_s32(uint64_t* out, const int32_t* acc, int64_t M, int64_t O, const int32_t* t,
                   const uint64_t* flip);
void int8_gemm_s32(int32_t* dst, const void* a, bool a_signed, const int8_t* b, int64_t M,
                   int64_t O, int64_t K);

// n packed two's complement codes -> int8: int4 two per byte (code i in the low nibble for even
// i), int2 four per byte (code i in bits 2 * (i % 4)); the layouts of quant/lowbit_model.h.
void unpack_int4_to_int8(int8_t* dst, const uint8_t* src, int64_t n);
void unpack_int2_to_int8(int8_t* dst, const uint8_t* src, int64_t n);

}  // namespace mixp
