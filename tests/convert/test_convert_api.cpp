// The public contract of the bulk converters: rejected formats, typed helpers agreeing with the
// value types, stochastic rounding that is reproducible from its seed and independent of chunking
// (also across a 2^32 index boundary), results independent of the MXCSR, in-place tf32.
#include <xmmintrin.h>

#include <cmath>
#include <stdexcept>

#include "convert/convert_test_util.h"

namespace mixp::test {
namespace {

constexpr ConvertOptions kRne{Round::nearest_even, Overflow::ieee};

TEST(ConvertApi, RejectsBlockIntegerAndWideFormats) {
  std::vector<float> in(4, 1.0f);
  std::vector<uint8_t> out(64);
  for (DType t : {DType::fp6_e2m3, DType::fp6_e3m2, DType::fp4_e2m1, DType::int8, DType::int4,
                  DType::nf4, DType::e8m0, DType::fp64}) {
    EXPECT_THROW(convert_f32_to(t, in, out.data(), kRne), std::invalid_argument) << name(t);
    EXPECT_THROW(convert_to_f32(t, out.data(), in), std::invalid_argument) << name(t);
    EXPECT_THROW(convert_f32_to_reference(t, in, out.data(), kRne), std::invalid_argument);
  }
  try {
    convert_f32_to(DType::fp4_e2m1, in, out.data(), kRne);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fp4_e2m1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("quantize_block"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mxfp4"), std::string::npos) << msg;
  }
  EXPECT_TRUE(is_elementwise_float(DType::fp8_e5m2));
  EXPECT_FALSE(is_elementwise_float(DType::fp6_e2m3));
}

TEST(ConvertApi, TypedHelpersAgreeWithValueTypes) {
  const auto in = from_bits(random_patterns(1000, 8));
  std::vector<bfloat16> b(in.size());
  std::vector<half> h(in.size());
  std::vector<float8_e4m3> e4(in.size());
  std::vector<float8_e5m2> e5(in.size());
  std::vector<tfloat32> t(in.size());
  const ConvertOptions sat{Round::nearest_even, Overflow::saturate};
  convert(std::span<const float>(in), std::span<bfloat16>(b), kRne);
  convert(std::span<const float>(in), std::span<half>(h), kRne);
  convert(std::span<const float>(in), std::span<float8_e4m3>(e4), sat);
  convert(std::span<const float>(in), std::span<float8_e5m2>(e5), kRne);
  convert(std::span<const float>(in), std::span<tfloat32>(t), kRne);
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(b[i].bits, bfloat16::from_float(in[i], Round::nearest_even, Overflow::ieee).bits);
    ASSERT_EQ(h[i].bits, half::from_float(in[i], Round::nearest_even, Overflow::ieee).bits);
    ASSERT_EQ(e4[i].bits,
              float8_e4m3::from_float(in[i], Round::nearest_even, Overflow::saturate).bits);
    ASSERT_EQ(e5[i].bits, float8_e5m2::from_float(in[i], Round::nearest_even, Overflow::ieee).bits);
    ASSERT_EQ(t[i].bits, tfloat32::from_float(in[i], Round::nearest_even, Overflow::ieee).bits);
  }
  std::vector<float> back(in.size());
  convert(std::span<const half>(h), std::span<float>(back));
  for (size_t i = 0; i < in.size(); ++i) {
    if (!std::isnan(back[i])) {
      ASSERT_EQ(back[i], h[i].to_float());
    }
  }
  std::vector<float> shorter(3);
  EXPECT_THROW(convert(std::span<const float>(in), std::span<bfloat16>(b.data(), 5), kRne),
               std::invalid_argument);
  EXPECT_THROW(convert(std::span<const bfloat16>(b), std::span<float>(shorter)),
               std::invalid_argument);
}

TEST(ConvertApi, Tf32InPlace) {
  auto v = from_bits(random_patterns(777, 9));
  const auto want = narrow_ref(DType::tf32, v, kRne);
  convert_f32_to(DType::tf32, v, v.data(), kRne);
  std::vector<uint8_t> got(v.size() * 4);
  std::memcpy(got.data(), v.data(), got.size());
  EXPECT_TRUE(same_bits(want, got, nullptr, v.size(), 4, "tf32 in place"));
}

// Stochastic rounding is a pure function of (seed, offset + i): converting in chunks with the
// right offsets gives exactly the one-shot bits, on every impl, for every target.
TEST(Stochastic, ChunkedEqualsOneShot) {
  const auto in = from_bits(random_patterns(5000, 10));
  const size_t cuts[] = {0, 1, 17, 18, 500, 1023, 3333, 4999, 5000};
  for (DType dst : kNarrowTargets) {
    const size_t ob = out_bytes(dst);
    const ConvertOptions one{Round::stochastic, Overflow::ieee, 77, 1000000};
    const auto want = narrow_ref(dst, in, one);
    for (const Impl& im : impls()) {
      std::vector<uint8_t> got(want.size());
      for (size_t c = 0; c + 1 < std::size(cuts); ++c) {
        const size_t lo = cuts[c], hi = cuts[c + 1];
        ConvertOptions o = one;
        o.offset = one.offset + lo;
        detail::convert_f32_to_tier(im.tier, im.hw, dst,
                                    std::span<const float>(in).subspan(lo, hi - lo),
                                    got.data() + lo * ob, o);
      }
      EXPECT_TRUE(same_bits(want, got, in.data(), in.size(), ob,
                            "chunked " + std::string(name(dst)) + " " + im.name()));
    }
  }
}

// A span whose indices cross 2^32 (and 2^33): the key changes with the high word mid-span.
TEST(Stochastic, SpanCrossingA2To32IndexBoundary) {
  const auto in = from_bits(random_patterns(300, 11));
  for (uint64_t offset : {(uint64_t{1} << 32) - 37, (uint64_t{2} << 32) - 1, (uint64_t{1} << 32)}) {
    for (DType dst : kNarrowTargets) {
      const ConvertOptions o{Round::stochastic, Overflow::saturate, 0xFEEDFACECAFEBEEFULL, offset};
      const auto want = narrow_ref(dst, in, o);
      // The reference itself uses sr_bits(seed, offset + i) element by element.
      if (dst == DType::bf16) {
        for (size_t i = 0; i < in.size(); ++i) {
          const uint32_t e = encode_float(kBf16, in[i], Round::stochastic, Overflow::saturate,
                                          sr_bits(o.seed, offset + i), nullptr);
          ASSERT_EQ(element(want, i, 2), e);
        }
      }
      for (const Impl& im : impls()) {
        const auto got = narrow_tier(im.tier, im.hw, dst, in, o);
        EXPECT_TRUE(same_bits(want, got, in.data(), in.size(), out_bytes(dst),
                              describe(dst, o) + " across 2^32 on " + im.name()));
      }
    }
  }
}

TEST(Stochastic, ReproducibleFromSeedAndSeedMatters) {
  const auto in = from_bits(random_patterns(4096, 12));
  const ConvertOptions a{Round::stochastic, Overflow::ieee, 1, 0};
  ConvertOptions b = a;
  b.seed = 2;
  std::vector<uint16_t> x(in.size()), y(in.size()), z(in.size());
  convert_f32_to(DType::bf16, in, x.data(), a);
  convert_f32_to(DType::bf16, in, y.data(), a);
  convert_f32_to(DType::bf16, in, z.data(), b);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

// Unbiased: the mean of many stochastic roundings of 1 + u/3 (u = bf16 ulp at 1) is 1 + u/3,
// within 6 standard errors (the rounding is up with probability 1/3 up to 2^-32).
TEST(Stochastic, UnbiasedOnAverage) {
  const float x = 1.0f + std::ldexp(1.0f, -7) / 3;
  const size_t n = 200000;
  std::vector<float> in(n, x), back(n);
  std::vector<bfloat16> out(n);
  convert(std::span<const float>(in), std::span<bfloat16>(out),
          {Round::stochastic, Overflow::ieee, 5, 0});
  convert(std::span<const bfloat16>(out), std::span<float>(back));
  double sum = 0;
  for (float v : back) sum += v;
  const double ulp = std::ldexp(1.0, -7);
  const double p_up = (sum / n - 1.0) / ulp;
  EXPECT_NEAR(p_up, 1.0 / 3, 6 * std::sqrt(2.0 / 9 / n));
}

// The kernels must not read the MXCSR: with DAZ, FTZ and round-up set, every impl still gives
// the bits computed under the default MXCSR.
TEST(ConvertApi, IndependentOfMxcsr) {
  const auto in = from_bits(boundary_patterns());
  const unsigned saved = _mm_getcsr();
  for (DType dst : kNarrowTargets) {
    for (Round r : kRounds) {
      for (Overflow o : kOverflows) {
        const ConvertOptions opt{r, o, 3, 0};
        const auto want = narrow_ref(dst, in, opt);
        std::vector<std::vector<uint8_t>> got;
        _mm_setcsr((saved & ~0x6000U) | 0x8040U | 0x4000U);  // FTZ | DAZ | RC = toward +inf
        for (const Impl& im : impls()) got.push_back(narrow_tier(im.tier, im.hw, dst, in, opt));
        _mm_setcsr(saved);
        for (size_t k = 0; k < got.size(); ++k) {
          EXPECT_TRUE(same_bits(want, got[k], in.data(), in.size(), out_bytes(dst),
                                "MXCSR " + describe(dst, opt) + " on " + impls()[k].name()));
        }
      }
    }
  }
  for (DType src : kWidenSources) {
    const EveryPattern p = every_pattern(src);
    for (const Impl& im : impls()) {
      std::vector<float> got(p.count);
      _mm_setcsr((saved & ~0x6000U) | 0x8040U | 0x4000U);
      detail::convert_to_f32_tier(im.tier, im.hw, src, p.bits.data(), got);
      _mm_setcsr(saved);
      EXPECT_EQ(0, std::memcmp(p.want.data(), got.data(), p.count * 4))
          << name(src) << " " << im.name();
    }
  }
}

TEST(ConvertApi, TierRequestsAreChecked) {
  std::vector<float> in(3, 1.0f);
  std::vector<uint16_t> out(3);
  if (!cpu_features().use_avx512()) {
    EXPECT_THROW(
        detail::convert_f32_to_tier(SimdTier::avx512, true, DType::bf16, in, out.data(), kRne),
        std::invalid_argument);
  }
  EXPECT_GE(detail::available_tiers().size(), 1u);
  EXPECT_EQ(detail::available_tiers()[0], SimdTier::scalar);
}

}  // namespace
}  // namespace mixp::test
