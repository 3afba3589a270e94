#include "mixp/tensor/allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

namespace mixp {

struct CachingAllocator::Impl {
  mutable std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // size -> block
  AllocatorStats st;
  bool caching = true;

  void* system_alloc(size_t sz) {
    void* p = std::aligned_alloc(kTensorAlignment, sz);
    if (!p) {
      release_all();
      p = std::aligned_alloc(kTensorAlignment, sz);
      if (!p) throw std::bad_alloc();
    }
    ++st.system_allocs;
    st.reserved_bytes += static_cast<int64_t>(sz);
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
    return p;
  }
  void system_free(void* p, size_t sz) {
    std::free(p);
    ++st.system_frees;
    st.reserved_bytes -= static_cast<int64_t>(sz);
  }
  void release_all() {
    for (auto& [sz, p] : free_blocks) system_free(p, sz);
    free_blocks.clear();
  }
};

CachingAllocator::CachingAllocator() : impl_(new Impl) {
  if (const char* e = std::getenv("MIXP_ALLOCATOR"); e && std::strcmp(e, "system") == 0)
    impl_->caching = false;
}

CachingAllocator& CachingAllocator::cpu() {
  // Never destroyed: tensors held by static objects may be freed during exit.
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

size_t CachingAllocator::round_size(size_t n) {
  auto up = [](size_t v, size_t m) { return (v + m - 1) / m * m; };
  if (n == 0) return kTensorAlignment;
  if (n <= 4096) return up(n, 64);
  if (n <= (1u << 20)) return up(n, 512);
  return up(n, 65536);
}

CachingAllocator::Block CachingAllocator::allocate(size_t nbytes) {
  const size_t sz = round_size(nbytes);
  std::lock_guard lock(impl_->mu);
  auto& st = impl_->st;
  ++st.allocs;
  Block b;
  auto it = impl_->free_blocks.lower_bound(sz);
  if (it != impl_->free_blocks.end() && it->first <= 2 * sz) {
    b = Block{it->second, it->first};
    impl_->free_blocks.erase(it);
    ++st.cache_hits;
  } else {
    b = Block{impl_->system_alloc(sz), sz};
  }
  st.allocated_bytes += static_cast<int64_t>(b.size);
  st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
  st.requested_bytes += static_cast<int64_t>(nbytes);
  st.peak_requested_bytes = std::max(st.peak_requested_bytes, st.requested_bytes);
  return b;
}

void CachingAllocator::deallocate(Block b, size_t nbytes) {
  if (!b.ptr) return;
  const size_t sz = b.size;
  void* p = b.ptr;
  std::lock_guard lock(impl_->mu);
  auto& st = impl_->st;
  st.allocated_bytes -= static_cast<int64_t>(sz);
  st.requested_bytes -= static_cast<int64_t>(nbytes);
  if (impl_->caching) {
    impl_->free_blocks.emplace(sz, p);
  } else {
    impl_->system_free(p, sz);
  }
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->st;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(impl_->mu);
  auto& st = impl_->st;
  st.peak_allocated_bytes = st.allocated_bytes;
  st.peak_requested_bytes = st.requested_bytes;
  st.peak_reserved_bytes = st.reserved_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(impl_->mu);
  impl_->release_all();
}

void CachingAllocator::set_caching(bool on) {
  std::lock_guard lock(impl_->mu);
  impl_->caching = on;
  if (!on) impl_->release_all();
}

bool CachingAllocator::caching() const {
  std::lock_guard lock(impl_->mu);
  return impl_->caching;
}

AllocatorStats allocator_stats() {
  return CachingAllocator::cpu().stats();
}
void reset_peak_memory() {
  CachingAllocator::cpu().reset_peak();
}
void empty_cache() {
  CachingAllocator::cpu().empty_cache();
}

}  // namespace mixp
