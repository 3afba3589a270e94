// fp32 -> {bf16, fp16, fp8 e4m3, fp8 e5m2, tf32, fp32}: every SIMD tier this CPU has (with and
// without the hardware conversion instructions) against the scalar reference, bit for bit, for
// every rounding and overflow mode, on boundary values, random patterns, odd lengths and
// unaligned pointers (docs/architecture.md 6.5).
#include <algorithm>
#include <numeric>

#include "convert/convert_test_util.h"

namespace mixp::test {
namespace {

class Narrow : public ::testing::TestWithParam<DType> {};

// One input set through every impl x rounding x overflow.
void check_all(DType dst, const std::vector<float>& in, uint64_t seed, const char* set) {
  const size_t ob = out_bytes(dst);
  for (Round r : kRounds) {
    for (Overflow o : kOverflows) {
      const ConvertOptions opt{r, o, seed, 12345};
      const auto want = narrow_ref(dst, in, opt);
      for (const Impl& im : impls()) {
        const auto got = narrow_tier(im.tier, im.hw, dst, in, opt);
        EXPECT_TRUE(same_bits(want, got, in.data(), in.size(), ob,
                              std::string(set) + " " + describe(dst, opt) + " on " + im.name()));
      }
    }
  }
}

TEST_P(Narrow, BoundaryValuesOfEveryFormat) {
  check_all(GetParam(), from_bits(boundary_patterns()), 7, "boundaries");
}

TEST_P(Narrow, RandomPatterns) {
  check_all(GetParam(), from_bits(random_patterns(1 << 18, 99)), 0xDEADBEEF, "random");
}

TEST_P(Narrow, PublicEntryPointMatchesReference) {
  const DType dst = GetParam();
  const auto in = from_bits(random_patterns(4099, 3));
  for (Round r : kRounds) {
    const ConvertOptions opt{r, Overflow::ieee, 42, 0};
    const auto want = narrow_ref(dst, in, opt);
    std::vector<uint8_t> got(want.size());
    convert_f32_to(dst, in, got.data(), opt);
    EXPECT_TRUE(same_bits(want, got, in.data(), in.size(), out_bytes(dst), describe(dst, opt)));
  }
}

// Lengths around the vector widths (8, 16, 32) and pointers off the vector alignment: the
// source by whole floats, the destination by single bytes. Bytes outside the output must stay.
TEST_P(Narrow, OddLengthsAndUnalignedPointers) {
  const DType dst = GetParam();
  const size_t ob = out_bytes(dst);
  const auto pool = from_bits(random_patterns(2048, 5));
  const size_t lengths[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 257};
  for (const Impl& im : impls()) {
    for (Round r : {Round::nearest_even, Round::stochastic}) {
      for (size_t n : lengths) {
        for (size_t src_off : {size_t{0}, size_t{1}, size_t{3}}) {
          for (size_t dst_off : {size_t{0}, size_t{1}, size_t{5}}) {
            std::vector<float> in(pool.begin() + static_cast<long>(src_off * 17),
                                  pool.begin() + static_cast<long>(src_off * 17 + src_off + n));
            const std::span<const float> src = std::span<const float>(in).subspan(src_off, n);
            const ConvertOptions opt{r, Overflow::saturate, 11, 1000};
            std::vector<uint8_t> want(n * ob);
            convert_f32_to_reference(dst, src, want.data(), opt);
            std::vector<uint8_t> buf(n * ob + 16, 0xA5);
            detail::convert_f32_to_tier(im.tier, im.hw, dst, src, buf.data() + dst_off, opt);
            const std::vector<uint8_t> got(buf.begin() + static_cast<long>(dst_off),
                                           buf.begin() + static_cast<long>(dst_off + n * ob));
            EXPECT_TRUE(
                same_bits(want, got, src.data(), n, ob,
                          describe(dst, opt) + " on " + im.name() + " n=" + std::to_string(n)));
            EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + static_cast<long>(dst_off),
                                    [](uint8_t b) { return b == 0xA5; }));
            EXPECT_TRUE(std::all_of(buf.begin() + static_cast<long>(dst_off + n * ob), buf.end(),
                                    [](uint8_t b) { return b == 0xA5; }))
                << "wrote past the end: " << im.name() << " n=" << n;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, Narrow, ::testing::ValuesIn(kNarrowTargets),
                         [](const auto& info) { return std::string(name(info.param)); });

}  // namespace
}  // namespace mixp::test
