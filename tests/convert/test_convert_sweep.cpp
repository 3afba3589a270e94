// Sweeps: a strided walk over the whole 2^32 fp32 space for the conversions that matter most,
// and every bit pattern of the 16- and 8-bit formats through the widening kernels.
#include "convert/convert_test_util.h"

namespace mixp::test {
namespace {

// Every 257th fp32 pattern (257 is odd and prime: the walk visits every residue of the low
// bits, so all rounding cases and every exponent occur): 16.7 M inputs per configuration.
std::vector<float> strided_sweep(uint32_t stride, uint32_t start) {
  std::vector<float> v;
  v.reserve((uint64_t{1} << 32) / stride + 1);
  for (uint64_t b = start; b < (uint64_t{1} << 32); b += stride) {
    v.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  }
  return v;
}

void sweep(DType dst, Round r, Overflow o, uint32_t stride) {
  const auto in = strided_sweep(stride, 1);
  const ConvertOptions opt{r, o, 2024, 0};
  const auto want = narrow_ref(dst, in, opt);
  for (const Impl& im : impls()) {
    if (im.tier == SimdTier::scalar) continue;
    const auto got = narrow_tier(im.tier, im.hw, dst, in, opt);
    EXPECT_TRUE(same_bits(want, got, in.data(), in.size(), out_bytes(dst),
                          "sweep " + describe(dst, opt) + " on " + im.name()));
  }
}

TEST(Sweep, Bf16NearestEvenEvery257th) {
  sweep(DType::bf16, Round::nearest_even, Overflow::ieee, 257);
}
TEST(Sweep, Fp16NearestEvenEvery257th) {
  sweep(DType::fp16, Round::nearest_even, Overflow::ieee, 257);
}
// The other modes and formats on a coarser walk (still every exponent and all low-bit residues).
TEST(Sweep, OtherModesEvery4099th) {
  for (DType d : kNarrowTargets) {
    for (Round r : kRounds) {
      for (Overflow o : kOverflows) sweep(d, r, o, 4099);
    }
  }
}

// Every 16-bit and 8-bit pattern widened by every impl equals decode_float bit for bit.
TEST(Widen, EveryPatternOfEveryFormat) {
  for (DType src : kWidenSources) {
    const EveryPattern p = every_pattern(src);
    for (const Impl& im : impls()) {
      std::vector<float> got(p.count);
      detail::convert_to_f32_tier(im.tier, im.hw, src, p.bits.data(), got);
      for (size_t i = 0; i < p.count; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(p.want[i]), std::bit_cast<uint32_t>(got[i]))
            << name(src) << " pattern 0x" << std::hex << i << " on " << im.name();
      }
    }
  }
}

TEST(Widen, ReferenceIsDecodeFloat) {
  // Exact values, quiet NaNs that keep sign and payload (decode_float, IEEE 754 convertFormat).
  uint16_t h[] = {0x3C00, 0x0001, 0x7C00, 0xFC01, 0x7E00, 0x8000};
  float f[6];
  convert_to_f32_reference(DType::fp16, h, f);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(std::bit_cast<uint32_t>(f[2]), 0x7F800000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(f[3]), 0xFFC02000u);  // signalling -> quiet, payload kept
  EXPECT_EQ(std::bit_cast<uint32_t>(f[4]), 0x7FC00000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(f[5]), 0x80000000u);
  uint16_t b[] = {0x0001, 0x7F81, 0xFFC0};
  float g[3];
  convert_to_f32_reference(DType::bf16, b, g);
  EXPECT_EQ(std::bit_cast<uint32_t>(g[0]), 0x00010000u);  // bf16 subnormal: an fp32 denormal
  EXPECT_EQ(std::bit_cast<uint32_t>(g[1]), 0x7FC10000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(g[2]), 0xFFC00000u);
  uint8_t e4[] = {0x7F, 0x7E, 0x01, 0x80};
  float e[4];
  convert_to_f32_reference(DType::fp8_e4m3, e4, e);
  EXPECT_TRUE(std::isnan(e[0]));
  EXPECT_EQ(e[1], 448.0f);
  EXPECT_EQ(e[2], std::ldexp(1.0f, -9));
  EXPECT_EQ(std::bit_cast<uint32_t>(e[3]), 0x80000000u);
}

// Narrowing what was widened gives the same bits back (every non-NaN pattern, nearest even).
TEST(Widen, RoundTripsThroughNarrow) {
  for (DType t : {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2}) {
    const size_t ib = out_bytes(t);
    const size_t count = size_t{1} << (8 * ib);
    std::vector<uint8_t> bits(count * ib), back(count * ib);
    for (size_t i = 0; i < count; ++i) std::memcpy(bits.data() + i * ib, &i, ib);
    std::vector<float> wide(count);
    convert_to_f32(t, bits.data(), wide);
    convert_f32_to(t, wide, back.data(), {Round::nearest_even, Overflow::ieee});
    for (size_t i = 0; i < count; ++i) {
      if (std::isnan(wide[i])) continue;
      ASSERT_EQ(element(bits, i, ib), element(back, i, ib)) << name(t) << " pattern " << i;
    }
  }
}

}  // namespace
}  // namespace mixp::test
