// Internal: the per-tier bulk conversion kernels behind include/mixp/format/convert.h, and the
// entry points that force one tier (used by the tests and the benchmark, never by users).
//
// Kernel contract (every tier): element i of [0, n) is converted exactly as encode_float /
// decode_float would, with random bits mix32((idx0 + i) * 0x9E3779B9 + key) under
// Round::stochastic, which is sr_bits(seed, index) for key = sr_key(seed, index) as long as the
// index's high word does not change inside the call; the dispatcher splits spans at multiples of
// 2^32 to guarantee that. A kernel returns false when it does not handle the combination, and the
// dispatcher falls back to the scalar reference.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "mixp/format/convert.h"
#include "mixp/format/cpu_features.h"

namespace mixp::detail {

struct NarrowArgs {
  DType dst;
  const float* src;
  void* dst_bits;
  size_t n;
  Round round;
  Overflow overflow;
  uint32_t key;   // sr_key(seed, first index)
  uint32_t idx0;  // low word of the first index
  // Use hardware conversion instructions where they are bit-exact after fix-ups (VCVTNE2PS2BF16,
  // VCVTPS2PH). False runs the integer kernels for every format, so tests reach both.
  bool hardware;
  bool avx512_bf16;  // the CPU has AVX512_BF16 (VCVTNE2PS2BF16)
};

struct WidenArgs {
  DType src;
  const void* src_bits;
  float* dst;
  size_t n;
  bool hardware;  // VCVTPH2PS for fp16
};

bool narrow_avx2(const NarrowArgs& a);
bool widen_avx2(const WidenArgs& a);
bool narrow_avx512(const NarrowArgs& a);
bool widen_avx512(const WidenArgs& a);

// Run a conversion on one tier exactly as the public functions do (same splitting and fallback).
// Throws std::invalid_argument if the CPU lacks the tier. `hardware` as in NarrowArgs.
void convert_f32_to_tier(SimdTier tier, bool hardware, DType dst, std::span<const float> src,
                         void* dst_bits, const ConvertOptions& opt);
void convert_to_f32_tier(SimdTier tier, bool hardware, DType src, const void* src_bits,
                         std::span<float> dst);

// Tiers this CPU can run (scalar always first).
std::span<const SimdTier> available_tiers();

}  // namespace mixp::detail
