// Rounding and overflow modes, conversion status, and the counter-based random bits used by
// stochastic rounding. docs/architecture.md 6.2: rounding and overflow are always named at the call
// site; nothing here has a default.
#pragma once
#include <cstdint>
#include <string_view>

namespace mixp {

enum class Round : uint8_t {
  nearest_even,  // IEEE 754 roundTiesToEven: the default everywhere in mixp.
  toward_zero,   // truncation (bf16's `u >> 16`); on overflow gives max finite, as IEEE says.
  stochastic,    // up with probability (x - down) / ulp, from 32 random bits (see below).
  nearest_away,  // ties away from zero: PTX cvt.rna (TF32), qtorch/microxcaling "nearest".
};

enum class Overflow : uint8_t {
  ieee,      // the format's own behaviour: inf where it has inf, NaN for E4M3FN; formats with
             // neither (fp6, fp4) always saturate.
  saturate,  // clamp to +-max finite (CUDA __NV_SATFINITE); NaN stays NaN.
};

// What a conversion did to a value. "underflow" means a non-zero input became zero.
enum class ConvertStatus : uint8_t { exact, inexact, overflow, underflow, nan };

std::string_view to_string(Round r);
std::string_view to_string(Overflow o);
std::string_view to_string(ConvertStatus s);
// Parses "nearest-even" | "nearest_even" | "toward-zero" | "stochastic" | "nearest-away";
// throws std::invalid_argument naming the accepted spellings otherwise.
Round parse_round(std::string_view s);

// Random bits for stochastic rounding: a pure function of (seed, element index), so a bulk
// conversion is reproducible from its seed and SIMD lanes can compute it independently.
// lowbias32 is Chris Wellons' 32-bit integer hash (bias ~0.17); the index's high word is folded
// into the key so indices past 2^32 do not repeat.
constexpr uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
constexpr uint32_t sr_key(uint64_t seed, uint64_t index) {
  return mix32(static_cast<uint32_t>(seed) ^ mix32(static_cast<uint32_t>(seed >> 32) ^
                                                   static_cast<uint32_t>(index >> 32) ^ 0x9E3779B9U));
}
constexpr uint32_t sr_bits_with_key(uint32_t key, uint32_t index_lo) {
  return mix32(index_lo * 0x9E3779B9U + key);
}
constexpr uint32_t sr_bits(uint64_t seed, uint64_t index) {
  return sr_bits_with_key(sr_key(seed, index), static_cast<uint32_t>(index));
}

}  // namespace mixp
