#include "tensor/size_class_pool.h"

#include <bit>

namespace mixp::detail {

size_t SizeClassPool::class_of(size_t size) {
  if (size <= kTinyMax) return size / kTinyGranule - 1;
  return kTinyMax / kTinyGranule + (size - kTinyMax) / kSmallGranule - 1;
}

size_t SizeClassPool::class_size(size_t c) {
  constexpr size_t tiny = kTinyMax / kTinyGranule;
  if (c < tiny) return (c + 1) * kTinyGranule;
  return kTinyMax + (c - tiny + 1) * kSmallGranule;
}

size_t SizeClassPool::first_nonempty(size_t from, size_t to) const {
  for (size_t w = from / 64; w <= to / 64; ++w) {
    uint64_t bits = nonempty_[w];
    if (w == from / 64) bits &= ~uint64_t(0) << (from % 64);
    if (bits == 0) continue;
    const size_t c = w * 64 + size_t(std::countr_zero(bits));
    return c <= to ? c : kClasses;
  }
  return kClasses;
}

SizeClassPool::Taken SizeClassPool::take(size_t size, size_t max_size) {
  const size_t c = first_nonempty(class_of(size), class_of(max_size));
  if (c == kClasses) return {};
  auto& stack = stacks_[c];
  void* p = stack.back();
  stack.pop_back();
  if (stack.empty()) nonempty_[c / 64] &= ~(uint64_t(1) << (c % 64));
  return {p, class_size(c)};
}

bool SizeClassPool::put(void* ptr, size_t size) noexcept {
  const size_t c = class_of(size);
  try {
    stacks_[c].push_back(ptr);
  } catch (...) {
    return false;
  }
  nonempty_[c / 64] |= uint64_t(1) << (c % 64);
  return true;
}

}  // namespace mixp::detail
