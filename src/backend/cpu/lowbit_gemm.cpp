// XNOR-popcount (tiered, xnor_kernels.h) and u8/s8 x s8 -> s32 on oneDNN; see
// include/mixp/backend/lowbit_gemm.h.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/onednn_util.h"
#include "mixp/format/cpu_features.h"
#include "backend/cpu/conv_sign.h"
#include "backend/cpu/lowbit_codes_gemm.h"
#include "backend/cpu/sign_bits.h"
#include "backend/cpu/xnor_kernels.h"
#include "mixp/backend/lowbit_gemm.h"

namespace mixp {

namespace {
bool use_vpopcnt() {
  return simd_tier() == SimdTier::avx512 && cpu_features().avx512_vpopcntdq;
}
cpu::xnor::XnorGemmFn xnor_kernel() {
  static const cpu::xnor::XnorGemmFn k = by_tier(
      use_vpopcnt() ? &cpu::xnor::xnor_gemm_avx512 : &cpu::xnor::xnor_gemm_generic,
      &cpu::xnor::xnor_gemm_generic, &cpu::xnor::xnor_gemm_generic);
  return k;
}
}  // namespace

const char* xnor_gemm_kernel_name() {
  return xnor_kernel() == &cpu::xnor::xnor_gemm_avx512 ? "avx512_vpopcntdq" : "generic";
}

void xnor_gemm_s32(int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O,
                   int64_t words, int32_t k) {
  const cpu::xnor::XnorGemmFn f = xnor_kernel();
  // Blocks of 4 rows (the kernel's register block) per thread.
  const int64_t blocks = (M + 3) / 4;
  cpu::parallel_for(blocks, M * O * words, [&](int64_t lo, int64_t hi) {
    const int64_t m0 = lo * 4, m1 = std::min(M, hi * 4);
    f(dst + m0 * O, a + m0 * words, b, m1 - m0, O, words, k);
  });
}

void xnor_sign_bits(uint64_t* out, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O,
                    int64_t words, int32_t k, const int32_t* const* thr, const uint64_t* flip) {
  const int64_t CW = (O + 63) / 64;
  if (xnor_kernel() == &cpu::xnor::xnor_gemm_avx512 && O % 16 == 0) {
    const int64_t blocks = (M + 5) / 6;  // the kernel's 6-row register blocks
    cpu::parallel_for(blocks, M * O * words, [&](int64_t lo, int64_t hi) {
      const int64_t m0 = lo * 6, m1 = std::min(M, hi * 6);
      cpu::xnor::xnor_sign_bits_avx512(out + m0 * CW, a + m0 * words, b, m1 - m0, O, words, k,
                                       thr + m0, flip);
    });
    return;
  }
  // Elsewhere: the s32 sums of one row at a time, then the thresholds of that row.
  const cpu::xnor::XnorGemmFn f = xnor_kernel();
  cpu::parallel_for(M, M * O * words, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> row(static_cast<size_t>(O));
    for (int64_t m = lo; m < hi; ++m) {
      f(row.data(), a + m * words, b, 1, O, words, k);
      cpu::bits::sign_bits_generic(out + m * CW, row.data(), 1, O, thr[m], flip);
    }
  });
}

bool int8_conv_sign_bits(uint64_t* out, const uint8_t* img, const int8_t* w, int64_t N,
                         int64_t C, int64_t HP, int64_t WPS, int64_t KS, int64_t stride,
                         int64_t OH, int64_t OW, int64_t O, const int32_t* thr,
                         const uint64_t* flip) {
  static const bool vnni = simd_tier() == SimdTier::avx512 && cpu_features().avx512_vnni;
  if (!vnni || O % 16 != 0 || O == 0) return false;
  const int64_t CW = (O + 63) / 64;
  cpu::parallel_for(N, N * OH * OW * O * C * KS * KS, [&](int64_t lo, int64_t hi) {
    cpu::bits::conv_sign_bits_avx512(out + lo * OH * OW * CW, img + lo * C * HP * WPS, w, hi - lo,
                                     C, HP, WPS, KS, stride, OH, OW, O, thr, flip);
  });
  return true;
}

void sign_bits_s32(uint64_t* out, const int32_t* acc, int64_t M, int64_t O, const int32_t* t,
                   const uint64_t* flip) {
  static const cpu::bits::SignBitsFn f = by_tier(
      &cpu::bits::sign_bits_avx512, &cpu::bits::sign_bits_generic, &cpu::bits::sign_bits_generic);
  const int64_t CW = (O + 63) / 64;
  cpu::parallel_for(M, M * O, [&](int64_t lo, int64_t hi) {
    f(out + lo * CW, acc + lo * O, hi - lo, O, t, flip);
  });
}

namespace {
// Whether oneDNN's int8 GEMM is exact here: without VNNI it sums pairs of u8 x s8 products in
// saturating int16 (vpmaddubsw), which the codes of the packed models can overflow.
bool onednn_int8_exact() {
  static const bool exact = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    auto has = [&](dnnl::cpu_isa want) {
      const auto w = static_cast<unsigned>(want);
      return (isa & w) == w;
    };
    return has(dnnl::cpu_isa::avx512_core_vnni) || has(dnnl::cpu_isa::avx2_vnni);
  }();
  return exact;
}

// The exact fallback: int32 sums, row by row.
template <class A>
void int8_gemm_loop(int32_t* dst, const A* a, const int8_t* b, int64_t M, int64_t O, int64_t K) {
  cpu::parallel_for(M, M * O * K, [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; ++m) {
      for (int64_t o = 0; o < O; ++o) {
        int32_t s = 0;
        for (int64_t k = 0; k < K; ++k) s += int32_t{a[m * K + k]} * int32_t{b[o * K + k]};
        dst[m * O + o] = s;
      }
    }
  });
}
}  // namespace

void int8_gemm_s32(int32_t* dst, const void* a, bool a_signed, const int8_t* b, int64_t M,
                   int64_t O, int64_t K) {
  using dnnl::memory;
  if (!onednn_int8_exact()) {
    if (a_signed) {
      int8_gemm_loop(dst, static_cast<const int8_t*>(a), b, M, O, K);
    } else {
      int8_gemm_loop(dst, static_cast<const uint8_t*>(a), b, M, O, K);
    }
    return;
  }
  using dt = memory::data_type;
  if (M == 0 || O == 0) return;
  const memory::desc a_md({M, K}, a_signed ? dt::s8 : dt::u8, memory::format_tag::ab);
  // b is [O, K] row-major: as the [K, O] operand it is column-major.
  const memory::desc b_md({K, O}, dt::s8, memory::dims{1, K});
  const memory::desc d_md({M, O}, dt::s32, memory::format_tag::ab);
  onednn::Key key;
  for (int64_t v : {int64_t{0x10b17}, M, O, K, int64_t{a_signed}}) key.add(v);
  onednn::CachedPrimitive& p = onednn::cached(key, [&] {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, d_md),
                                          onednn::base_attr(), onednn::engine());
    return onednn::CachedPrimitive{dnnl::matmul(pd), pd.scratchpad_desc().get_size(), {}};
  });
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(a_md, onednn::engine(), const_cast<void*>(a))},
      {DNNL_ARG_WEIGHTS, memory(b_md, onednn::engine(), const_cast<int8_t*>(b))},
      {DNNL_ARG_DST, memory(d_md, onednn::engine(), dst)}};
  onednn::execute(p, args);
}

void unpack_int4_to_int8(int8_t* dst, const uint8_t* src, int64_t n) {
  for (int64_t i = 0; i + 1 < n; i += 2) {
    const uint8_t b = src[i / 2];
    // Sign-extend each nibble: shift it to the top of a byte, then arithmetic shift back.
    dst[i] = static_cast<int8_t>(static_cast<int8_t>(b << 4) >> 4);
    dst[i + 1] = static_cast<int8_t>(static_cast<int8_t>(b) >> 4);
  }
  if (n % 2) dst[n - 1] = static_cast<int8_t>(static_cast<int8_t>(src[n / 2] << 4) >> 4);
}

void unpack_int2_to_int8(int8_t* dst, const uint8_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int sh = 6 - 2 * static_cast<int>(i % 4);
    dst[i] = static_cast<int8_t>(static_cast<int8_t>(src[i / 4] << sh) >> 6);
  }
}

namespace {
bool lowbit_vnni() {
  static const bool v = simd_tier() == SimdTier::avx512 && cpu_features().avx512_vnni;
  return v;
}
// Code k of a packed row (the unpack_int*_to_int8 layout).
int code_at(const uint8_t* row, int64_t k, int bits) {
  if (bits == 4) {
    const uint8_t b = row[k / 2];
    return k % 2 ? static_cast<int8_t>(b) >> 4
                 : static_cast<int8_t>(static_cast<uint8_t>(b << 4)) >> 4;
  }
  const int sh = 6 - 2 * static_cast<int>(k % 4);
  return static_cast<int8_t>(static_cast<uint8_t>(row[k / 4] << sh)) >> 6;
}
}  // namespace

const char* lowbit_gemm_kernel_name() {
  return lowbit_vnni() ? "avx512_vnni, codes expanded in registers"
                       : "unpacked to int8 per call + int8_gemm_s32";
}

LowBitB pack_lowbit_b(const uint8_t* packed, int64_t O, int64_t K, int bits) {
  if (bits != 4 && bits != 2) {
    throw std::invalid_argument("mixp::pack_lowbit_b: bits must be 4 or 2, got " +
                                std::to_string(bits));
  }
  LowBitB b;
  b.bits = bits;
  b.O = O;
  b.K = K;
  const int64_t row = (K * bits + 7) / 8;
  b.packed.assign(packed, packed + O * row);
  const int S = 8 / bits, offset = bits == 4 ? 8 : 2;
  const int64_t chunk = 4 * S, chunks = (K + chunk - 1) / chunk, OB = (O + 15) / 16;
  b.data.assign(static_cast<size_t>(OB * chunks * 64), 0);
  for (int64_t o = 0; o < OB * 16; ++o) {
    for (int64_t kc = 0; kc < chunks; ++kc) {
      for (int i = 0; i < S; ++i) {
        for (int bb = 0; bb < 4; ++bb) {
          const int64_t k = kc * chunk + 4 * i + bb;
          const int c = o < O && k < K ? code_at(packed + o * row, k, bits) : 0;
          b.data[static_cast<size_t>(((o / 16) * chunks + kc) * 64 + (o % 16) * 4 + bb)] |=
              static_cast<uint8_t>((c + offset) << (bits * i));
        }
      }
    }
  }
  return b;
}

void lowbit_gemm_s32(int32_t* dst, const uint8_t* a, int64_t lda, const LowBitB& b, int64_t M) {
  if (M <= 0 || b.O <= 0) return;
  if (lowbit_vnni()) {
    const int64_t blocks = (M + 3) / 4;  // the kernel's 4-row register blocks
    cpu::parallel_for(blocks, M * b.O * b.K, [&](int64_t lo, int64_t hi) {
      const int64_t m0 = lo * 4, m1 = std::min(M, hi * 4);
      cpu::lowbit::gemm_avx512(dst + m0 * b.O, a + m0 * lda, lda, b, m1 - m0);
    });
    return;
  }
  std::vector<int8_t> w(static_cast<size_t>(b.O * b.K));
  const int64_t row = (b.K * b.bits + 7) / 8;
  for (int64_t o = 0; o < b.O; ++o) {
    (b.bits == 4 ? unpack_int4_to_int8 : unpack_int2_to_int8)(w.data() + o * b.K,
                                                               b.packed.data() + o * row, b.K);
  }
  std::vector<uint8_t> ac;
  const uint8_t* ap = a;
  if (lda != b.K) {
    ac.resize(static_cast<size_t>(M * b.K));
    for (int64_t m = 0; m < M; ++m) std::copy(a + m * lda, a + m * lda + b.K, ac.data() + m * b.K);
    ap = ac.data();
  }
  int8_gemm_s32(dst, ap, false, w.data(), M, b.O, b.K);
}

}  // namespace mixp
