// Shared helpers for the bulk-converter tests: the configurations to sweep, input sets that hit
// every rounding boundary, and a bit-for-bit comparison that names the first differing element.
#pragma once
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/convert_kernels.h"
#include "mixp/format/convert.h"

namespace mixp::test {

inline constexpr DType kNarrowTargets[] = {DType::bf16,     DType::fp16, DType::fp8_e4m3,
                                           DType::fp8_e5m2, DType::tf32, DType::fp32};
inline constexpr Round kRounds[] = {Round::nearest_even, Round::toward_zero, Round::stochastic,
                                    Round::nearest_away};
inline constexpr Overflow kOverflows[] = {Overflow::ieee, Overflow::saturate};

inline size_t out_bytes(DType t) {
  return (t == DType::fp32 || t == DType::tf32) ? 4 : traits(t).bits / 8;
}

inline std::vector<float> from_bits(const std::vector<uint32_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = std::bit_cast<float>(bits[i]);
  return v;
}

inline uint32_t element(const std::vector<uint8_t>& buf, size_t i, size_t ob) {
  uint32_t v = 0;
  std::memcpy(&v, buf.data() + i * ob, ob);
  return v;
}

inline std::string describe(DType dst, const ConvertOptions& o) {
  return std::string(name(dst)) + " " + std::string(to_string(o.round)) + " " +
         std::string(to_string(o.overflow));
}

// Compares two encoded buffers; on failure names the first differing element and its input.
inline ::testing::AssertionResult same_bits(const std::vector<uint8_t>& want,
                                            const std::vector<uint8_t>& got, const float* in,
                                            size_t n, size_t ob, const std::string& what) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << what << ": size differs";
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t bad = 0;
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if (element(want, i, ob) != element(got, i, ob)) {
      if (first == n) first = i;
      ++bad;
    }
  }
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "%s: %zu of %zu differ; first at %zu: input 0x%08X want 0x%X got 0x%X",
                what.c_str(), bad, n, first, in ? std::bit_cast<uint32_t>(in[first]) : 0U,
                element(want, first, ob), element(got, first, ob));
  return ::testing::AssertionFailure() << buf;
}

inline std::vector<uint8_t> narrow_ref(DType dst, const std::vector<float>& in,
                                       const ConvertOptions& o) {
  std::vector<uint8_t> out(in.size() * out_bytes(dst));
  convert_f32_to_reference(dst, in, out.data(), o);
  return out;
}

inline std::vector<uint8_t> narrow_tier(SimdTier t, bool hw, DType dst,
                                        const std::vector<float>& in, const ConvertOptions& o) {
  std::vector<uint8_t> out(in.size() * out_bytes(dst), 0xCD);
  detail::convert_f32_to_tier(t, hw, dst, in, out.data(), o);
  return out;
}

// Every (tier, hardware) combination this CPU runs; the scalar tier is the dispatcher's fallback.
struct Impl {
  SimdTier tier;
  bool hw;
  std::string name() const { return std::string(to_string(tier)) + (hw ? "+hw" : ""); }
};
inline std::vector<Impl> impls() {
  std::vector<Impl> v;
  for (SimdTier t : detail::available_tiers()) {
    v.push_back({t, false});
    if (t != SimdTier::scalar) v.push_back({t, true});
  }
  return v;
}

// Every bit pattern of a 16- or 8-bit format (in `bits`, element i holding pattern i) and its
// reference widening to fp32 (decode_float): what each widening kernel must reproduce.
struct EveryPattern {
  DType src;
  size_t count;
  std::vector<uint8_t> bits;
  std::vector<float> want;
};
inline EveryPattern every_pattern(DType src) {
  const size_t ib = out_bytes(src);
  EveryPattern p{src, size_t{1} << (8 * ib), {}, {}};
  p.bits.resize(p.count * ib);
  for (size_t i = 0; i < p.count; ++i) std::memcpy(p.bits.data() + i * ib, &i, ib);
  p.want.resize(p.count);
  convert_to_f32_reference(src, p.bits.data(), p.want);
  return p;
}
inline constexpr DType kWidenSources[] = {DType::bf16, DType::fp16, DType::fp8_e4m3,
                                          DType::fp8_e5m2};

// fp32 bit patterns around every boundary of every element-wise target: for each positive value
// of the format and the midpoint to the next one (the overflow threshold after max finite), the
// fp32 patterns within +-2 ulps, both signs; plus fp32's own special values. tf32 has 2^18
// positive values: only the lowest and highest 4096 of them (subnormals, overflow) are taken.
inline std::vector<uint32_t> boundary_patterns() {
  std::vector<uint32_t> out;
  auto around = [&](double v) {
    const float f = static_cast<float>(v);  // exact or within one fp32 ulp; +-2 ulps covers it
    const uint32_t b = std::bit_cast<uint32_t>(f) & 0x7FFFFFFFU;
    for (int k = -2; k <= 2; ++k) {
      const uint32_t c = b + static_cast<uint32_t>(k);
      if (c > 0x7F800000U) continue;  // NaNs are listed separately below
      out.push_back(c);
      out.push_back(c | 0x80000000U);
    }
  };
  const FloatFormat fmts[] = {kBf16, kFp16, kFp8E4M3, kFp8E5M2, kTf32};
  for (const FloatFormat& f : fmts) {
    const uint32_t max = f.max_finite_bits();
    for (uint32_t e = 0; e <= max; ++e) {
      if (f.exp_bits + f.man_bits > 16 && e > 4096 && e < max - 4096) continue;
      const double lo = decode_float(f, e);
      const double hi =
          e < max ? decode_float(f, e + 1) : lo + (decode_float(f, max) - decode_float(f, max - 1));
      around(lo);
      around((lo + hi) / 2);
    }
  }
  const uint32_t specials[] = {
      0x00000000, 0x00000001, 0x00000002, 0x00007FFF, 0x00008000, 0x00008001, 0x0000FFFF,
      0x00400000, 0x007FFFFF, 0x00800000, 0x00800001, 0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000,
      0x7F800000, 0x7F800001, 0x7F800100, 0x7F802000, 0x7F803FFF, 0x7FA00000, 0x7FBFFFFF,
      0x7FC00000, 0x7FC00001, 0x7FE00000, 0x7FFFE000, 0x7FFFFFFF, 0x3F800000, 0x3F808000,
      0x3F818000, 0x3F800001, 0x3F807FFF, 0x3F80FFFF, 0x3F801000, 0x3F802000};
  for (uint32_t s : specials) {
    out.push_back(s);
    out.push_back(s | 0x80000000U);
  }
  return out;
}

// Uniformly random fp32 bit patterns (every class in proportion), then values with exponents in
// [2^-40, 2^20) where the narrow formats' subnormal and overflow boundaries lie.
inline std::vector<uint32_t> random_patterns(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const auto r = static_cast<uint32_t>(g());
    if (i % 2 == 0) {
      out[i] = r;
    } else {
      const uint32_t e = 127 - 40 + static_cast<uint32_t>(g() % 60);
      out[i] = (r & 0x807FFFFFU) | (e << 23);
    }
  }
  return out;
}

}  // namespace mixp::test
