// The caching allocator's pools on a private CachingAllocator (deterministic: no other test's
// blocks): large blocks split and coalesce inside their segment, empty_cache gives back only whole
// free segments, system mode caches nothing, randomized alloc/free sequences (one thread and two)
// never hand out overlapping blocks, and under ASan cached memory is poisoned.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "mixp/tensor/allocator.h"
#include "tensor/block_sizes.h"

namespace mixp {
namespace {

using Block = CachingAllocator::Block;
constexpr size_t MiB = size_t(1) << 20;
constexpr size_t KiB = size_t(1) << 10;

char* at(Block b) {
  return static_cast<char*>(b.ptr);
}

// A private allocator that caches whatever MIXP_ALLOCATOR says (tests of the cache turn it on).
struct CachingOn {
  CachingAllocator a;
  CachingOn() { a.set_caching(true); }
  Block alloc(size_t n) { return a.allocate(n); }
  void free(Block b) { a.deallocate(b, b.size); }  // every request here is its block size
  AllocatorStats st() const { return a.stats(); }
};

TEST(AllocatorPools, LargeBlocksSplitAndCoalesceInsideTheirSegment) {
  CachingOn c;
  const Block seg = c.alloc(8 * MiB);
  c.free(seg);
  EXPECT_EQ(c.st().reserved_bytes, int64_t(8 * MiB));
  EXPECT_EQ(c.st().allocated_bytes, 0);

  // Three blocks carved from the front of the cached segment, in address order.
  const Block b1 = c.alloc(2 * MiB), b2 = c.alloc(3 * MiB), b3 = c.alloc(3 * MiB);
  EXPECT_EQ(at(b1), at(seg));
  EXPECT_EQ(at(b2), at(seg) + 2 * MiB);
  EXPECT_EQ(at(b3), at(seg) + 5 * MiB);
  EXPECT_EQ(b2.size, 3 * MiB);
  EXPECT_EQ(c.st().allocated_bytes, int64_t(8 * MiB));  // the split blocks, not 3x the segment
  EXPECT_EQ(c.st().system_allocs, 1);
  EXPECT_EQ(c.st().cache_hits, 3);

  // Nothing free is left: a new segment.
  const Block b4 = c.alloc(2 * MiB);
  EXPECT_EQ(c.st().system_allocs, 2);
  EXPECT_EQ(c.st().reserved_bytes, int64_t(10 * MiB));
  c.free(b4);

  // A free block between two live ones stays 3 MiB; best fit takes the 2 MiB segment instead.
  c.free(b2);
  const Block b5 = c.alloc(2 * MiB);
  EXPECT_EQ(at(b5), at(b4));
  c.free(b5);

  // Freeing b1 merges it with b2's range: one 5 MiB block at the segment's start.
  c.free(b1);
  const Block b6 = c.alloc(5 * MiB);
  EXPECT_EQ(at(b6), at(seg));
  EXPECT_EQ(b6.size, 5 * MiB);
  c.free(b6);
  // b3 merges with the free block before it: the whole segment is one block again.
  c.free(b3);
  const Block whole = c.alloc(8 * MiB);
  EXPECT_EQ(at(whole), at(seg));
  EXPECT_EQ(c.st().system_allocs, 2);
  EXPECT_EQ(c.st().allocated_bytes, int64_t(8 * MiB));
  c.free(whole);
  EXPECT_EQ(c.st().allocated_bytes, 0);
  EXPECT_EQ(c.st().reserved_bytes, int64_t(10 * MiB));
}

TEST(AllocatorPools, ATailShorterThanTheMinimumStaysWithTheBlock) {
  CachingOn c;
  const size_t big = 4 * MiB + detail::kMinSplitRemainder;
  c.free(c.alloc(big));
  // Would leave one granule less than the minimum: the whole block is handed out and counted.
  const size_t want = 4 * MiB + detail::kLargeGranule;
  const Block b = c.alloc(want);
  EXPECT_EQ(b.size, big);
  EXPECT_EQ(c.st().allocated_bytes, int64_t(big));
  EXPECT_EQ(c.st().requested_bytes, int64_t(want));
  c.a.deallocate(b, want);
  // Leaves exactly the minimum: split, only the request's block is counted.
  const Block s = c.alloc(4 * MiB);
  EXPECT_EQ(s.ptr, b.ptr);
  EXPECT_EQ(s.size, 4 * MiB);
  EXPECT_EQ(c.st().allocated_bytes, int64_t(4 * MiB));
  c.free(s);
  EXPECT_EQ(c.st().system_allocs, 1);
}

TEST(AllocatorPools, SmallBlocksComeFromSizeClassesAtMostOneAndAHalfTimesTheRequest) {
  CachingOn c;
  const Block a = c.alloc(100 * KiB);
  EXPECT_EQ(a.size, 100 * KiB);
  c.free(a);
  const Block b = c.alloc(70 * KiB);  // takes the 100 KiB block: counted whole
  EXPECT_EQ(b.ptr, a.ptr);
  EXPECT_EQ(b.size, 100 * KiB);
  EXPECT_EQ(c.st().allocated_bytes, int64_t(100 * KiB));
  c.free(b);
  const Block d = c.alloc(60 * KiB);  // more than 1.5x: a new block
  EXPECT_NE(d.ptr, a.ptr);
  EXPECT_EQ(d.size, 60 * KiB);
  EXPECT_EQ(c.st().system_allocs, 2);
  c.free(d);
  // Small requests never take large blocks (nor the reverse).
  c.free(c.alloc(2 * MiB));
  const Block e = c.alloc(MiB);
  EXPECT_EQ(e.size, MiB);
  EXPECT_EQ(c.st().system_allocs, 4);
  c.free(e);
}

TEST(AllocatorPools, EmptyCacheReleasesOnlyWholeFreeSegments) {
  CachingOn c;
  const Block a = c.alloc(4 * MiB), b = c.alloc(4 * MiB), small = c.alloc(1000);
  c.free(a);
  c.free(small);
  c.free(b);
  const Block live = c.alloc(2 * MiB);  // from one of the two segments (lowest address)
  const AllocatorStats s0 = c.st();
  EXPECT_EQ(s0.reserved_bytes, int64_t(8 * MiB + 1024));
  c.a.empty_cache();
  const AllocatorStats s1 = c.st();
  EXPECT_EQ(s1.system_frees - s0.system_frees, 2);  // the free segment and the small block
  EXPECT_EQ(s1.reserved_bytes, int64_t(4 * MiB));   // the segment holding `live` stays whole
  // Its free tail is still cached.
  const Block tail = c.alloc(2 * MiB);
  EXPECT_EQ(at(tail), at(live) + 2 * MiB);
  EXPECT_EQ(c.st().system_allocs, s1.system_allocs);
  c.free(live);
  c.free(tail);
  c.a.empty_cache();
  EXPECT_EQ(c.st().reserved_bytes, 0);
  EXPECT_EQ(c.st().system_frees, c.st().system_allocs);
}

TEST(AllocatorPools, SystemModeCachesNothing) {
  CachingOn c;
  const Block kept = c.alloc(8 * MiB);
  c.free(kept);
  const Block live = c.alloc(2 * MiB);  // leaves 6 MiB free in the segment
  c.a.set_caching(false);
  EXPECT_EQ(c.st().reserved_bytes, int64_t(8 * MiB));  // the segment is in use
  const Block fresh = c.alloc(2 * MiB);
  EXPECT_EQ(c.st().system_allocs, 2);  // not from the free tail
  c.free(fresh);
  c.free(live);  // its segment is whole again: back to the system
  c.free(c.alloc(100));
  const AllocatorStats s = c.st();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.system_frees, s.system_allocs);
  EXPECT_EQ(s.cache_hits, 1);
}

TEST(AllocatorPools, EnvironmentSelectsSystemMode) {
  const char* old = std::getenv("MIXP_ALLOCATOR");
  const std::string saved = old ? old : "";
  setenv("MIXP_ALLOCATOR", "system", 1);
  EXPECT_FALSE(CachingAllocator().caching());
  setenv("MIXP_ALLOCATOR", "caching", 1);
  EXPECT_TRUE(CachingAllocator().caching());
  if (old) {
    setenv("MIXP_ALLOCATOR", saved.c_str(), 1);
  } else {
    unsetenv("MIXP_ALLOCATOR");
  }
}

// Live blocks: a new block's range must not overlap any live one, and each block is stamped
// with its id at both ends and every 4 KiB (what the allocator does to other blocks must leave
// the stamps intact; writing whole blocks would make the test slow).
class LiveBlocks {
 public:
  explicit LiveBlocks(CachingAllocator& a) : a_(a) {}
  void add(size_t n, uint64_t id) {
    const Block b = a_.allocate(n);
    ASSERT_GE(b.size, n);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(b.ptr) % kTensorAlignment, 0u);
    const auto begin = [](Block x) { return reinterpret_cast<uintptr_t>(x.ptr); };
    for (const Live& l : live_) {
      ASSERT_TRUE(begin(b) + b.size <= begin(l.b) || begin(l.b) + l.b.size <= begin(b))
          << "block " << id << " overlaps live block " << l.id;
    }
    stamp(b, id);
    live_.push_back({b, n, id});
  }
  void remove(size_t i) {
    const Live l = live_[i];
    check(l);
    a_.deallocate(l.b, l.n);
    live_[i] = live_.back();
    live_.pop_back();
  }
  void check_all() const {
    for (const Live& l : live_) check(l);
  }
  size_t size() const { return live_.size(); }
  int64_t block_bytes() const {
    int64_t s = 0;
    for (const Live& l : live_) s += int64_t(l.b.size);
    return s;
  }

 private:
  struct Live {
    Block b;
    size_t n;
    uint64_t id;
  };
  template <class Fn>
  static void for_each_stamp(Block b, Fn&& fn) {
    for (size_t off = 0; off + 8 <= b.size; off += 4096) fn(at(b) + off);
    fn(at(b) + b.size - 8);
  }
  static void stamp(Block b, uint64_t id) {
    for_each_stamp(b, [&](char* p) { std::memcpy(p, &id, 8); });
  }
  static void check(const Live& l) {
    for_each_stamp(l.b, [&](const char* p) {
      uint64_t v;
      std::memcpy(&v, p, 8);
      ASSERT_EQ(v, l.id) << "block " << l.id << " overwritten at offset " << (p - at(l.b));
    });
  }
  CachingAllocator& a_;
  std::vector<Live> live_;
};

// Sizes across both pools: small (up to 1 MiB), just over the boundary, and large.
size_t random_size(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return rng() % 5000;
    case 1:
      return rng() % detail::kSmallMax + 1;
    case 2:
      return detail::kSmallMax + rng() % (256 * KiB) + 1;
    default:
      return rng() % (12 * MiB) + 1;
  }
}

// Random allocations and frees (at most 24 live blocks), checking every live block's stamps now
// and then and emptying the cache now and then; after_op(live) runs after each operation.
template <class AfterOp>
void random_sequence(CachingAllocator& a, uint64_t seed, int ops, AfterOp&& after_op) {
  std::mt19937_64 rng(seed);
  LiveBlocks live(a);
  for (int i = 0; i < ops; ++i) {
    if (live.size() < 24 && (live.size() == 0 || rng() % 2 == 0)) {
      live.add(random_size(rng), seed << 32 | uint64_t(i));
    } else {
      live.remove(rng() % live.size());
    }
    if (i % 97 == 0) live.check_all();
    if (i % 500 == 499) a.empty_cache();
    after_op(live);
  }
  while (live.size() > 0) live.remove(live.size() - 1);
}

TEST(AllocatorPools, RandomSequencesNeverOverlapLiveBlocks) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    CachingOn c;
    random_sequence(c.a, seed, 1500, [&](const LiveBlocks& live) {
      const AllocatorStats s = c.st();
      ASSERT_EQ(s.allocated_bytes, live.block_bytes()) << "seed " << seed;
      ASSERT_GE(s.reserved_bytes, s.allocated_bytes);
    });
    EXPECT_EQ(c.st().allocated_bytes, 0);
    EXPECT_EQ(c.st().requested_bytes, 0);
    EXPECT_GT(c.st().cache_hits, 0);
    c.a.empty_cache();  // every segment coalesced back into one free block
    EXPECT_EQ(c.st().reserved_bytes, 0) << "seed " << seed;
  }
}

TEST(AllocatorPools, TwoThreadsShareOneAllocator) {
  CachingOn c;
  auto run = [&](uint64_t seed) { random_sequence(c.a, seed, 1500, [](const LiveBlocks&) {}); };
  std::thread t1(run, 11), t2(run, 12);
  t1.join();
  t2.join();
  EXPECT_EQ(c.st().allocated_bytes, 0);
  EXPECT_EQ(c.st().requested_bytes, 0);
  EXPECT_EQ(c.st().allocs, c.st().cache_hits + c.st().system_allocs);  // no call was lost
  c.a.empty_cache();
  EXPECT_EQ(c.st().reserved_bytes, 0);
}

#if defined(__SANITIZE_ADDRESS__)
// Under ASan the pools poison what they cache, so touching a freed tensor's block, or running
// past a split block into the free rest of its segment, is reported although the memory stays
// with the allocator.
void touch(void* p) {
  *static_cast<volatile char*>(p) = 1;
}

TEST(AllocatorPoolsDeathTest, AsanSeesCachedMemory) {
  EXPECT_DEATH(
      {
        CachingOn c;
        const Block b = c.alloc(1000);
        c.free(b);
        touch(at(b) + 8);
      },
      "use-after-poison");
  EXPECT_DEATH(
      {
        CachingOn c;
        const Block b = c.alloc(4 * MiB);
        c.free(b);
        touch(at(b) + MiB);
      },
      "use-after-poison");
  EXPECT_DEATH(
      {
        CachingOn c;
        c.free(c.alloc(8 * MiB));
        const Block b = c.alloc(2 * MiB);
        touch(at(b) + b.size - 1);  // the last byte of the block is fine
        touch(at(b) + b.size);      // the first of the free tail is not
      },
      "use-after-poison");
}
#endif

}  // namespace
}  // namespace mixp
