// The int4/int2 GEMM that expands packed codes in registers (backend/lowbit_gemm.h,
// lowbit_gemm_s32) against unpacking to int8 and a plain int32 loop, bit for bit, with shapes on
// and off the kernel's 4-row x 32-column blocks and k chunks, and extreme codes and activations.
#include <gtest/gtest.h>

#include <random>

#include "mixp/backend/lowbit_gemm.h"

namespace mixp {
namespace {

void check(int bits, int64_t M, int64_t O, int64_t K, int64_t lda, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << bits << " bits, " << M << " x " << O << " x " << K);
  std::mt19937 rng(seed);
  const int64_t row = (K * bits + 7) / 8;
  std::vector<uint8_t> packed(static_cast<size_t>(O * row));
  for (auto& v : packed) v = static_cast<uint8_t>(rng());
  if (O > 1) std::fill(packed.begin(), packed.begin() + row, bits == 4 ? 0x88 : 0xAA);  // qmin
  std::vector<uint8_t> a(static_cast<size_t>(M * lda));
  for (auto& v : a) v = static_cast<uint8_t>(rng());
  std::fill(a.begin(), a.begin() + K, 255);
  std::vector<int8_t> w(static_cast<size_t>(O * K));
  for (int64_t o = 0; o < O; ++o) {
    (bits == 4 ? unpack_int4_to_int8 : unpack_int2_to_int8)(w.data() + o * K,
                                                             packed.data() + o * row, K);
  }
  std::vector<int32_t> want(static_cast<size_t>(M * O));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t o = 0; o < O; ++o) {
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += int32_t{a[m * lda + k]} * int32_t{w[o * K + k]};
      want[m * O + o] = s;
    }
  }
  const LowBitB b = pack_lowbit_b(packed.data(), O, K, bits);
  std::vector<int32_t> got(static_cast<size_t>(M * O), 12345);
  lowbit_gemm_s32(got.data(), a.data(), lda, b, M);
  EXPECT_EQ(got, want) << lowbit_gemm_kernel_name();
}

TEST(LowBitCodesGemm, Int4AndInt2EqualUnpackingToInt8) {
  for (int bits : {4, 2}) {
    check(bits, 1, 1, 1, 1, 1);
    check(bits, 7, 37, 51, 51, 2);      // every tail: rows, columns, k
    check(bits, 8, 64, 64, 70, 3);      // whole blocks, a row stride past K
    check(bits, 13, 100, 300, 300, 4);
    check(bits, 4, 32, 16, 16, 5);
  }
}

TEST(LowBitCodesGemm, RefusesOtherWidths) {
  const uint8_t p[1] = {0};
  EXPECT_THROW(pack_lowbit_b(p, 1, 1, 3), std::invalid_argument);
}

}  // namespace
}  // namespace mixp
