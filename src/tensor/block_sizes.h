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
// with the block handed out (and counts as allocated). Half the smallest large block: a kept tail
// costs nothing (it merges back when a neighbour is freed) but an entry in the free index, and
// tails below this are mostly rounding slack no large request can use. On the gpt recipes
// (docs/benchmarks.md) 64 KiB and 512 KiB give the same peaks; 1 and 2 MiB raise them.
inline constexpr size_t kMinSplitRemainder = size_t(512) << 10;

// The largest cached small block a small request may take: 1.5x the request. Exact classes only
// would count no waste but keep more blocks cached (peak reserved +2-5 MB on the gpt recipes);
// 2x, the old policy, counts up to 6 MB of slack in the 16-bit recipes; 1.5x held the least
// memory of the three on all seven gpt runs measured (docs/benchmarks.md).
constexpr size_t small_reuse_limit(size_t size) {
  const size_t limit = size + size / 2;
  return limit < kSmallMax ? limit : kSmallMax;
}

constexpr size_t round_up(size_t v, size_t m) {
  return (v + m - 1) / m * m;
}

constexpr size_t round_block_size(size_t n) {
  if (n == 0) return kTinyGranule;  // a valid, distinct pointer for empty tensors
  if (n <= kTinyMax) return round_up(n, kTinyGranule);
  if (n <= kSmallMax) return round_up(n, kSmallGranule);
  return round_up(n, kLargeGranule);
}

}  // namespace mixp::detail
