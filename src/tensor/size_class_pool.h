// The small pool of the CPU caching allocator: cached blocks of at most 1 MiB, one free stack per
// size class. Private to libmixp; not thread-safe (CachingAllocator holds its mutex).
//
// Why size classes and no splitting: small blocks are many but hold little memory, so what they
// waste by being taken for a smaller request (at most 1.5x, block_sizes.h) matters less than
// making take/put O(1). Each class keeps its free blocks in a
// std::vector used as a stack: the vectors only grow when more blocks of a class are free at once
// than ever before, so a training loop in steady state does no heap allocation here (the old
// std::multimap allocated a node on every free). A bitmap of non-empty classes finds the smallest
// cached block in [size, max_size] without visiting empty classes.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/block_sizes.h"

namespace mixp::detail {

class SizeClassPool {
 public:
  // 64 classes of 64 bytes up to 4 KiB, then one per 512 bytes up to 1 MiB.
  static constexpr size_t kClasses =
      kTinyMax / kTinyGranule + (kSmallMax - kTinyMax) / kSmallGranule;

  SizeClassPool() : stacks_(kClasses) {}

  // A cached block of the smallest class in [size, max_size] (both rounded block sizes <=
  // kSmallMax), removed from the pool; {nullptr, 0} when there is none.
  struct Taken {
    void* ptr = nullptr;
    size_t size = 0;
  };
  Taken take(size_t size, size_t max_size);
  // Caches a free block of the rounded size `size`. Returns false (and caches nothing) when growing
  // the class's stack failed: the caller then gives the block back to the system.
  bool put(void* ptr, size_t size) noexcept;
  // Removes every cached block, calling release(ptr, size) for each.
  template <class Release>
  void release_all(Release&& release) {
    for (size_t c = 0; c < kClasses; ++c) {
      for (void* p : stacks_[c]) release(p, class_size(c));
      stacks_[c].clear();
    }
    nonempty_.fill(0);
  }

  static size_t class_of(size_t size);
  static size_t class_size(size_t c);

 private:
  size_t first_nonempty(size_t from, size_t to) const;  // kClasses when none in [from, to]

  std::vector<std::vector<void*>> stacks_;
  std::array<uint64_t, (kClasses + 63) / 64> nonempty_{};
};

}  // namespace mixp::detail
