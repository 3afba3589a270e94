// The large pool of the CPU caching allocator: blocks over 1 MiB carved out of system segments,
// split and coalesced like the large pool of PyTorch's CUDACachingAllocator. Private to libmixp;
// not thread-safe (CachingAllocator holds its mutex).
//
// A segment is one system allocation. Its blocks tile it; a request takes the smallest free block
// that fits (ties: the lowest address) and, when what is left is at least kMinSplitRemainder
// (block_sizes.h), the tail is split off as a free block of its own. A freed block merges with free
// neighbours of its segment, so a segment whose blocks are all free is one free block again; only
// release_free_segments (empty_cache, the out-of-memory retry) returns segments to the system.
//
// Data structures, none of which allocate per take/free once the loop is in steady state:
// - segments_: sorted by base address (binary search finds a pointer's segment); changes only when
//   a segment is added or released.
// - each segment's side table `slots`, allocated once with the segment: one entry per 64 KiB unit
//   (every large size is a multiple of it), meaningful where a block starts: its length, whether
//   it is free and where the previous block starts (boundary tags, kept outside the memory tensors
//   write, so a kernel overrunning its buffer cannot corrupt the pool).
// - free_: (size, address) of every free block, sorted; best fit is a lower_bound. A sorted vector
//   rather than a tree: there are tens of free blocks, not thousands, so an insert or erase is a
//   short memmove, and its capacity is kept at one entry per block, so freeing never allocates
//   (and never throws).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/block_sizes.h"

namespace mixp::detail {

class SegmentPool {
 public:
  static constexpr size_t kUnit = kLargeGranule;
  struct Span {
    char* ptr = nullptr;
    size_t size = 0;
  };

  // Removes the smallest free block of at least `size` (a multiple of kUnit) from the pool,
  // splitting off its tail; {nullptr, 0} when no free block is large enough.
  Span take(size_t size);
  // Adds a system segment, handed out whole as one block (the caller's new allocation).
  void add_segment(void* base, size_t size);
  // Frees a block from take/add_segment (with its real size) and merges it with its free
  // neighbours. Returns whether its whole segment is now free.
  bool free_block(void* ptr, size_t size) noexcept;
  // Removes the (whole free) segment holding ptr, returning its system allocation.
  Span remove_segment(void* ptr);
  // Removes every segment whose blocks are all free, calling release(base, size) for each.
  template <class Release>
  void release_free_segments(Release&& release) {
    for (size_t i = segments_.size(); i-- > 0;) {
      if (!segments_[i].whole_free()) continue;
      const Span s = remove_segment_at(i);
      release(s.ptr, s.size);
    }
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Slot {  // boundary tag of the block starting at this unit
    uint32_t units = 0;
    uint32_t prev = kNone;  // unit where the previous block of the segment starts
    bool free = false;
  };
  struct Segment {
    char* base = nullptr;
    std::vector<Slot> slots;  // one per unit
    size_t size() const { return slots.size() * kUnit; }
    bool whole_free() const { return slots[0].free && slots[0].units == slots.size(); }
  };

  std::vector<Segment>::iterator segment_after(const char* p);  // the first starting after p
  Segment& segment_of(const void* ptr);
  Span remove_segment_at(size_t i);
  // Sets the block at `start` to `units` long and tells the block after it where it starts.
  static void set_length(Segment& s, uint32_t start, uint32_t units);
  void insert_free(Span b) noexcept;
  void erase_free(Span b) noexcept;
  void reserve_free_index();  // room in free_ for one entry per block

  std::vector<Segment> segments_;
  std::vector<Span> free_;  // sorted by (size, ptr)
  size_t num_blocks_ = 0;   // blocks in all segments, free or not
};

}  // namespace mixp::detail
