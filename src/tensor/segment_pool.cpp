#include "tensor/segment_pool.h"

#include <algorithm>
#include <cassert>
#include <functional>

namespace mixp::detail {
namespace {

// Best fit: the smallest block, then the lowest address (deterministic, and it keeps reuse at the
// front of segments, away from the tails that may merge into larger free blocks).
bool smaller(const SegmentPool::Span& a, const SegmentPool::Span& b) {
  if (a.size != b.size) return a.size < b.size;
  return std::less<char*>{}(a.ptr, b.ptr);
}

}  // namespace

std::vector<SegmentPool::Segment>::iterator SegmentPool::segment_after(const char* p) {
  return std::upper_bound(
      segments_.begin(), segments_.end(), p,
      [](const char* q, const Segment& s) { return std::less<const char*>{}(q, s.base); });
}

SegmentPool::Segment& SegmentPool::segment_of(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  auto it = segment_after(p);
  assert(it != segments_.begin() && "pointer not from this pool");
  --it;
  assert(p < it->base + it->size() && "pointer not from this pool");
  return *it;
}

void SegmentPool::set_length(Segment& s, uint32_t start, uint32_t units) {
  s.slots[start].units = units;
  if (start + units < s.slots.size()) s.slots[start + units].prev = start;
}

void SegmentPool::reserve_free_index() {
  const size_t need = num_blocks_ + 1;
  if (free_.capacity() < need) free_.reserve(std::max({need, 2 * free_.capacity(), size_t(16)}));
}

void SegmentPool::insert_free(Span b) noexcept {
  assert(free_.size() < free_.capacity());  // reserve_free_index keeps room for every block
  free_.insert(std::lower_bound(free_.begin(), free_.end(), b, smaller), b);
}

void SegmentPool::erase_free(Span b) noexcept {
  auto it = std::lower_bound(free_.begin(), free_.end(), b, smaller);
  assert(it != free_.end() && it->ptr == b.ptr && it->size == b.size);
  free_.erase(it);
}

SegmentPool::Span SegmentPool::take(size_t size) {
  auto it = std::lower_bound(free_.begin(), free_.end(), Span{nullptr, size}, smaller);
  if (it == free_.end()) return {};
  const Span b = *it;
  const size_t rest = b.size - size;
  const bool split = rest > 0 && rest >= kMinSplitRemainder;
  if (split) {
    reserve_free_index();  // before any change: if it throws, the pool is as it was
    it = std::lower_bound(free_.begin(), free_.end(), b, smaller);
  }
  free_.erase(it);
  Segment& s = segment_of(b.ptr);
  const auto start = uint32_t((b.ptr - s.base) / kUnit);
  s.slots[start].free = false;
  if (!split) return b;
  const auto units = uint32_t(size / kUnit);
  const uint32_t tail = start + units;
  s.slots[tail].free = true;
  set_length(s, tail, s.slots[start].units - units);
  set_length(s, start, units);
  ++num_blocks_;
  insert_free({b.ptr + size, rest});
  return {b.ptr, size};
}

void SegmentPool::add_segment(void* base, size_t size) {
  Segment seg{static_cast<char*>(base), std::vector<Slot>(size / kUnit)};
  seg.slots[0].units = uint32_t(seg.slots.size());
  reserve_free_index();
  const auto pos = segment_after(seg.base);
  segments_.insert(pos, std::move(seg));
  ++num_blocks_;
}

bool SegmentPool::free_block(void* ptr, size_t size) noexcept {
  Segment& s = segment_of(ptr);
  auto start = uint32_t((static_cast<char*>(ptr) - s.base) / kUnit);
  assert(!s.slots[start].free && s.slots[start].units * kUnit == size && "not a live block");
  (void)size;
  auto span = [&](uint32_t at) { return Span{s.base + at * kUnit, s.slots[at].units * kUnit}; };
  s.slots[start].free = true;
  const uint32_t next = start + s.slots[start].units;
  if (next < s.slots.size() && s.slots[next].free) {
    erase_free(span(next));
    set_length(s, start, s.slots[start].units + s.slots[next].units);
    --num_blocks_;
  }
  const uint32_t prev = s.slots[start].prev;
  if (prev != kNone && s.slots[prev].free) {
    erase_free(span(prev));
    set_length(s, prev, s.slots[prev].units + s.slots[start].units);
    --num_blocks_;
    start = prev;
  }
  insert_free(span(start));
  return s.whole_free();
}

SegmentPool::Span SegmentPool::remove_segment_at(size_t i) {
  Segment& s = segments_[i];
  assert(s.whole_free());
  const Span whole{s.base, s.size()};
  erase_free(whole);
  --num_blocks_;
  segments_.erase(segments_.begin() + std::ptrdiff_t(i));
  return whole;
}

SegmentPool::Span SegmentPool::remove_segment(void* ptr) {
  const Segment& s = segment_of(ptr);
  return remove_segment_at(size_t(&s - segments_.data()));
}

}  // namespace mixp::detail
