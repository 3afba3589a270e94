// CachingAllocator: the stats, the mutex and the system calls around the two pools (small size
// classes in size_class_pool.h, split/coalesced large blocks in segment_pool.h; their top comments
// say why each is built the way it is).
#include "mixp/tensor/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>

#include "tensor/asan_poison.h"
#include "tensor/block_sizes.h"
#include "tensor/segment_pool.h"
#include "tensor/size_class_pool.h"

namespace mixp {

namespace {
void* host_alloc(size_t sz, void*) {
  return std::aligned_alloc(kTensorAlignment, sz);
}
void host_free(void* p, size_t, void*) {
  std::free(p);
}
}  // namespace

struct CachingAllocator::Impl {
  explicit Impl(const MemorySource& s) : source(s) {}
  MemorySource source;
  mutable std::mutex mu;
  detail::SizeClassPool small;
  detail::SegmentPool large;
  AllocatorStats st;
  bool caching = true;

  void* system_alloc(size_t sz) {
    void* p = source.alloc(sz, source.ctx);
    if (!p) {
      release_cached();
      p = source.alloc(sz, source.ctx);
      if (!p) throw std::bad_alloc();
    }
    ++st.system_allocs;
    st.reserved_bytes += static_cast<int64_t>(sz);
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
    return p;
  }
  void system_free(void* p, size_t sz) {
    unpoison(p, sz);
    source.free(p, sz, source.ctx);
    ++st.system_frees;
    st.reserved_bytes -= static_cast<int64_t>(sz);
  }
  void release_cached() {
    auto release = [this](void* p, size_t sz) { system_free(p, sz); };
    small.release_all(release);
    large.release_free_segments(release);
  }

  Block take_cached(size_t sz) {
    Block b;
    if (sz <= detail::kSmallMax) {
      const auto t = small.take(sz, detail::small_reuse_limit(sz));
      b = {t.ptr, t.size};
    } else {
      const auto t = large.take(sz);
      b = {t.ptr, t.size};
    }
    if (b.ptr) unpoison(b.ptr, b.size);
    return b;
  }
  Block take_system(size_t sz) {
    void* p = system_alloc(sz);
    if (sz > detail::kSmallMax) {
      try {
        large.add_segment(p, sz);
      } catch (...) {
        system_free(p, sz);
        throw;
      }
    }
    return {p, sz};
  }
  // ASan knows only host memory.
  void poison(void* p, size_t n) const {
    if (source.host) detail::poison_cached(p, n);
  }
  void unpoison(void* p, size_t n) const {
    if (source.host) detail::unpoison_cached(p, n);
  }
  void give_back(Block b) {
    if (b.size <= detail::kSmallMax) {
      if (caching && small.put(b.ptr, b.size)) {
        poison(b.ptr, b.size);
      } else {
        system_free(b.ptr, b.size);
      }
      return;
    }
    poison(b.ptr, b.size);
    if (large.free_block(b.ptr, b.size) && !caching) {
      const auto s = large.remove_segment(b.ptr);
      system_free(s.ptr, s.size);
    }
  }
};

CachingAllocator::CachingAllocator()
    : CachingAllocator(MemorySource{.alloc = host_alloc, .free = host_free}) {}

CachingAllocator::CachingAllocator(const MemorySource& source) : impl_(new Impl(source)) {
  if (const char* e = std::getenv("MIXP_ALLOCATOR"); e && std::strcmp(e, "system") == 0)
    impl_->caching = false;
}

CachingAllocator::~CachingAllocator() {
  impl_->release_cached();
  delete impl_;
}

CachingAllocator& CachingAllocator::cpu() {
  // Never destroyed: tensors held by static objects may be freed during exit.
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

size_t CachingAllocator::round_size(size_t n) {
  return detail::round_block_size(n);
}

CachingAllocator::Block CachingAllocator::allocate(size_t nbytes) {
  const size_t sz = round_size(nbytes);
  std::lock_guard lock(impl_->mu);
  auto& st = impl_->st;
  ++st.allocs;
  Block b = impl_->caching ? impl_->take_cached(sz) : Block{};
  if (b.ptr) {
    ++st.cache_hits;
  } else {
    b = impl_->take_system(sz);
  }
  st.allocated_bytes += static_cast<int64_t>(b.size);
  st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
  st.requested_bytes += static_cast<int64_t>(nbytes);
  st.peak_requested_bytes = std::max(st.peak_requested_bytes, st.requested_bytes);
  return b;
}

void CachingAllocator::deallocate(Block b, size_t nbytes) {
  if (!b.ptr) return;
  std::lock_guard lock(impl_->mu);
  auto& st = impl_->st;
  st.allocated_bytes -= static_cast<int64_t>(b.size);
  st.requested_bytes -= static_cast<int64_t>(nbytes);
  impl_->give_back(b);
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
  impl_->release_cached();
}

void CachingAllocator::set_caching(bool on) {
  std::lock_guard lock(impl_->mu);
  impl_->caching = on;
  if (!on) impl_->release_cached();
}

bool CachingAllocator::caching() const {
  std::lock_guard lock(impl_->mu);
  return impl_->caching;
}

namespace {
DeviceMemoryHooks g_cuda_memory;  // written while libmixp loads, read afterwards
}  // namespace

void register_device_memory(DeviceKind kind, const DeviceMemoryHooks& hooks) {
  if (kind != DeviceKind::cuda)
    throw std::invalid_argument("mixp: only the cuda device registers its own memory");
  g_cuda_memory = hooks;
}
const DeviceMemoryHooks* device_memory(DeviceKind kind) {
  if (kind != DeviceKind::cuda || g_cuda_memory.allocator == nullptr) return nullptr;
  return &g_cuda_memory;
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
