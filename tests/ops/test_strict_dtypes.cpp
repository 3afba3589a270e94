// Strict dtypes (ops.h): off by default (mixed GEMM inputs promote), on it raises as PyTorch does
// ("mat1 and mat2 must have the same dtype"); autocast regions cast first, so they still run.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "mixp/mixp.h"

namespace mixp {
namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::fp32) {
  Generator g(seed);
  const Tensor t = randn(s, g);
  return dt == DType::fp32 ? t : t.to(dt, Round::nearest_even);
}

TEST(StrictDtypes, OffByDefaultMixedInputsPromote) {
  EXPECT_FALSE(strict_dtypes());
  const Tensor y = linear(rnd({4, 8}, 1, DType::bf16), rnd({3, 8}, 2));
  EXPECT_EQ(y.dtype(), DType::fp32);
}

TEST(StrictDtypes, OnRaisesNamingTheOpAndDtypes) {
  StrictDtypesGuard strict(true);
  const Tensor x16 = rnd({4, 8}, 1, DType::bf16), w = rnd({3, 8}, 2), b = rnd({3}, 3);
  try {
    (void)linear(x16, w, b);
    FAIL() << "a bf16 input into an fp32 linear must raise under strict dtypes";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("linear: x is bf16 but w is fp32"), std::string::npos) << m;
    EXPECT_NE(m.find("mat1 and mat2 must have the same dtype"), std::string::npos) << m;
  }
  EXPECT_THROW((void)matmul(x16, rnd({8, 3}, 4)), std::invalid_argument);
  EXPECT_THROW((void)bmm(rnd({2, 4, 8}, 5), rnd({2, 8, 3}, 6, DType::fp16)),
               std::invalid_argument);
  EXPECT_THROW((void)conv2d(rnd({1, 2, 5, 5}, 7, DType::bf16), rnd({3, 2, 3, 3}, 8)),
               std::invalid_argument);
  // same dtypes are fine, and so is an autocast region (it casts every input first)
  EXPECT_EQ(linear(x16, w.to(DType::bf16, Round::nearest_even)).dtype(), DType::bf16);
  amp::Autocast ac(DType::bf16);
  EXPECT_EQ(linear(x16, w, b).dtype(), DType::bf16);
}

TEST(StrictDtypes, GuardRestoresTheProcessSetting) {
  {
    StrictDtypesGuard g(true);
    EXPECT_TRUE(strict_dtypes());
  }
  EXPECT_FALSE(strict_dtypes());
  set_strict_dtypes(true);
  EXPECT_TRUE(strict_dtypes());
  {
    StrictDtypesGuard g(false);
    EXPECT_FALSE(strict_dtypes());
  }
  set_strict_dtypes(false);
  EXPECT_FALSE(strict_dtypes());
}

}  // namespace
}  // namespace mixp
