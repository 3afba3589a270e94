// Block sizes of the CPU caching allocator: how requests are rounded and where the small pool ends.
// One table for round_size, the size classes (size_class_pool) and the segment unit
// (segment_pool), so the three agree by construction. Private to libmixp.
#pragma once
#include <cstddef>

namespace mixp::detail {

// Requests up to 4 KiB round to 64 bytes (one cache line), up to 1 MiB to 512 bytes; larger ones to
// 64 KiB. Every block size is then a multiple of 64, so every block stays 64-byte aligned.
inline constexpr size_t kTinyGranule = 64;
inline constexpr size_t kTinyMax = 4096;
inline constexpr size_t kSmallGranule = 512;
// Blocks up to here come from the small pool (one system allocation each, kept in size classes);
// larger ones are carved out of segments (split and coalesced).
inline constexpr size_t kSmallMax = size_t(1) << 20;
inline constexpr size_t kLargeGranule = size_t(64) << 10;
// The smallest tail split off a large free block as a free block of its own; a shorter tail stays
// with the block handed out (and counts as allocated). MEASURED_PLACEHOLDER
inline constexpr size_t kMinSplitRemainder = kLargeGranule;

constexpr size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

constexpr size_t round_block_size(size_t n) {
  if (n == 0) return kTinyGranule;  // a valid, distinct pointer for empty tensors
  if (n <= kTinyMax) return round_up(n, kTinyGranule);
  if (n <= kSmallMax) return round_up(n, kSmallGranule);
  return round_up(n, kLargeGranule);
}

}  // namespace mixp::detail
