// The narrow interfaces the cpu backend gives the quant runtime (docs/architecture.md 2.2):
// host_parallel_for (mixp/backend/host_parallel.h), qk::lowbit_codes (mixp/backend/quant_kernels.h)
// and Int8Primitive (mixp/backend/int8_primitive.h), against plain loops and the backends.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "backend/kernel_compare.h"
#include "mixp/backend/host_parallel.h"
#include "mixp/backend/int8_primitive.h"
#include "mixp/backend/quant_kernels.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"

namespace mixp {
namespace {

TEST(HostParallel, EachIndexOnceInContiguousChunks) {
  const int64_t n = 1000;
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> calls{0};
  host_parallel_for(n, int64_t{1} << 24, [&](int64_t lo, int64_t hi) {
    ASSERT_LT(lo, hi);
    ++calls;
    for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i)];
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
  EXPECT_GE(calls.load(), 1);
  // Below the grain: one call over the whole range on this thread; nothing for n = 0.
  std::vector<std::pair<int64_t, int64_t>> seen;
  host_parallel_for(n, 10, [&](int64_t lo, int64_t hi) { seen.emplace_back(lo, hi); });
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(int64_t{0}, n));
  host_parallel_for(0, 1 << 24, [&](int64_t, int64_t) { FAIL() << "called for n = 0"; });
}

// The packer's codes (qk::lowbit_codes) are the backends' lowbit_codes, bit for bit.
TEST(QuantKernels, LowbitCodesAreTheBackendsCodes) {
  const int64_t O = 7, K = 301;
  Generator gen(3);
  Tensor w = randn(Shape{O, K}, gen);
  w.data<float>()[5] = 0.0f;
  for (const LowBitCodesSpec spec :
       {LowBitCodesSpec{.kind = LowBitCodesSpec::Kind::weight_int, .qmin = -8, .qmax = 7},
        LowBitCodesSpec{.kind = LowBitCodesSpec::Kind::weight_ternary},
        LowBitCodesSpec{.kind = LowBitCodesSpec::Kind::weight_binary}}) {
    std::vector<float> codes(static_cast<size_t>(O * K)), scales(static_cast<size_t>(O));
    std::vector<uint8_t> mask(static_cast<size_t>(O * K));
    qk::lowbit_codes(spec, w.data<float>(), O, K, codes.data(), scales.data(), mask.data());
    for (Backend* b : {&test::cpu_backend(), &test::ref_backend()}) {
      Tensor c = zeros(Shape{O, K}), s = zeros(Shape{O});
      Tensor m = zeros(Shape{O, K}, {.dtype = DType::uint8});
      b->lowbit_codes(spec, c, s, m, w);
      for (int64_t i = 0; i < O * K; ++i) {
        ASSERT_EQ(c.data<float>()[i], codes[static_cast<size_t>(i)]) << b->name() << " " << i;
        ASSERT_EQ(m.data<uint8_t>()[i], mask[static_cast<size_t>(i)]) << b->name() << " " << i;
      }
      for (int64_t o = 0; o < O; ++o) ASSERT_EQ(s.data<float>()[o], scales[static_cast<size_t>(o)]);
    }
  }
}

// u8 x s8 products summed exactly: the linear's fp32 result with unit scales and the
// convolution's s32 result equal plain integer loops.
TEST(Int8Primitive, LinearAndConvAreExactIntegerSums) {
  const int64_t M = 3, K = 37, O = 5;
  Tensor a = empty(Shape{M, K}, {.dtype = DType::uint8});
  Tensor w = empty(Shape{O, K}, {.dtype = DType::int8});
  for (int64_t i = 0; i < M * K; ++i) a.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 251);
  for (int64_t i = 0; i < O * K; ++i) w.data<int8_t>()[i] = static_cast<int8_t>((i * 29) % 255 - 127);
  Tensor y = empty(Shape{M, O});
  Int8Epilogue ep;
  ep.scales.assign(static_cast<size_t>(O), 1.0f);
  Int8Primitive::linear(M, K, O, w, Int8Dst::f32, ep).run(a, zeros(Shape{1, O}), y);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t o = 0; o < O; ++o) {
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += a.data<uint8_t>()[m * K + k] * w.data<int8_t>()[o * K + k];
      ASSERT_EQ(y.data<float>()[m * O + o], static_cast<float>(acc)) << m << " " << o;
    }
  }
  // [1, 4, 5, 3] NHWC * [2, 3, 3, 3], stride 1, padding 1 -> [1, 4, 5, 2] s32 NHWC.
  const int64_t H = 4, W = 5, C = 3, KO = 2;
  Tensor x = empty(Shape{1, H, W, C}, {.dtype = DType::uint8});
  Tensor k = empty(Shape{KO, C, 3, 3}, {.dtype = DType::int8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>((i * 53) % 256);
  for (int64_t i = 0; i < k.numel(); ++i) k.data<int8_t>()[i] = static_cast<int8_t>((i * 41) % 255 - 127);
  Tensor z = empty(Shape{1, H, W, KO}, {.dtype = DType::int32});
  Int8Primitive::conv2d(x.shape(), k, H, W, 1, 1, 1, 1, Int8Dst::s32, false, Int8Epilogue{})
      .run(x, Tensor(), z);
  for (int64_t oh = 0; oh < H; ++oh) {
    for (int64_t ow = 0; ow < W; ++ow) {
      for (int64_t o = 0; o < KO; ++o) {
        int32_t acc = 0;
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t i = 0; i < 3; ++i) {
            for (int64_t j = 0; j < 3; ++j) {
              const int64_t h = oh + i - 1, ww = ow + j - 1;
              if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
              acc += x.data<uint8_t>()[(h * W + ww) * C + c] *
                     k.data<int8_t>()[((o * C + c) * 3 + i) * 3 + j];
            }
          }
        }
        ASSERT_EQ(z.data<int32_t>()[(oh * W + ow) * KO + o], acc) << oh << " " << ow << " " << o;
      }
    }
  }
}

}  // namespace
}  // namespace mixp
