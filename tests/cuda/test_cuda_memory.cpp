// The device allocator is the cpu's CachingAllocator over another MemorySource (cudaMalloc /
// cudaFree, src/backend/cuda/cuda_memory.cpp). What can be checked without a GPU: an allocator
// over a foreign source caches, splits and counts exactly as the cpu one (same AllocatorStats),
// gets every segment from that source and gives every one back, retries once after emptying its
// cache when the source runs out; and the cuda hooks are registered exactly when the backend is
// built.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <set>
#include <string>

#include "mixp/backend/cuda.h"
#include "mixp/tensor/allocator.h"

namespace mixp {
namespace {

// A "device" whose memory the allocator must not touch (host = false), with a budget.
struct FakeDevice {
  std::set<void*> live;
  size_t budget = size_t{64} << 20, used = 0;
  int64_t allocs = 0, frees = 0;
  static void* alloc(size_t n, void* ctx) {
    auto* d = static_cast<FakeDevice*>(ctx);
    if (d->used + n > d->budget) return nullptr;  // "out of memory": the allocator retries once
    void* p = std::aligned_alloc(64, n);
    d->live.insert(p);
    d->used += n;
    ++d->allocs;
    return p;
  }
  static void free(void* p, size_t n, void* ctx) {
    auto* d = static_cast<FakeDevice*>(ctx);
    EXPECT_EQ(d->live.erase(p), 1u) << "freed a pointer this source did not hand out";
    d->used -= n;
    ++d->frees;
    std::free(p);
  }
};

TEST(CudaMemory, AnAllocatorOverAnotherSourceCachesAndCountsLikeTheCpuOne) {
  FakeDevice dev;
  {
    CachingAllocator a(MemorySource{.alloc = FakeDevice::alloc, .free = FakeDevice::free,
                                    .ctx = &dev, .host = false});
    CachingAllocator cpu;
    for (CachingAllocator* al : {&a, &cpu}) {
      auto b1 = al->allocate(1000);
      auto b2 = al->allocate(3 << 20);
      al->deallocate(b1, 1000);
      al->deallocate(b2, 3 << 20);
      auto b3 = al->allocate(900);  // a cache hit (same size class)
      al->deallocate(b3, 900);
    }
    const AllocatorStats s = a.stats(), c = cpu.stats();
    EXPECT_EQ(s.peak_requested_bytes, c.peak_requested_bytes);
    EXPECT_EQ(s.peak_reserved_bytes, c.peak_reserved_bytes);
    EXPECT_EQ(s.cache_hits, c.cache_hits);
    EXPECT_EQ(s.system_allocs, c.system_allocs);
    EXPECT_EQ(s.system_allocs, dev.allocs);
    EXPECT_EQ(s.requested_bytes, 0);
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved_bytes, 0);
    EXPECT_EQ(dev.frees, dev.allocs);
  }
  EXPECT_TRUE(dev.live.empty());
}

TEST(CudaMemory, ASourceThatRunsOutIsRetriedAfterEmptyingTheCache) {
  FakeDevice dev;
  dev.budget = size_t{4} << 20;
  CachingAllocator a(MemorySource{.alloc = FakeDevice::alloc, .free = FakeDevice::free,
                                  .ctx = &dev, .host = false});
  auto b = a.allocate(3 << 20);
  a.deallocate(b, 3 << 20);  // cached: the source's budget is still used
  auto c = a.allocate(static_cast<size_t>(3.5 * (1 << 20)));  // needs the cached segment back
  EXPECT_NE(c.ptr, nullptr);
  a.deallocate(c, static_cast<size_t>(3.5 * (1 << 20)));
  EXPECT_THROW(a.allocate(size_t{8} << 20), std::bad_alloc);
  a.empty_cache();
}

TEST(CudaMemory, CudaMemoryIsRegisteredExactlyWhenTheBackendIsBuilt) {
  EXPECT_EQ(device_memory(DeviceKind::cuda) != nullptr, cuda_status().built);
  EXPECT_EQ(device_memory(DeviceKind::cpu), nullptr);
}

// The device interface gives the backend's stream of a device (what the NCCL group runs its
// collectives on, src/dist/nccl/nccl_group.cpp, without including the backend): registered with
// the allocator, and saying "no CUDA device" as the allocator does where there is none.
TEST(CudaMemory, TheBackendRegistersTheStreamOfEachDevice) {
  const DeviceMemoryHooks* hooks = device_memory(DeviceKind::cuda);
  if (!hooks) GTEST_SKIP() << "the CUDA backend is not built";
  ASSERT_NE(hooks->stream, nullptr);
  if (cuda_available()) {
    EXPECT_EQ(hooks->stream(0), hooks->stream(0));  // one stream per device, made once
    return;
  }
  try {
    (void)hooks->stream(0);
    FAIL() << "cuda:0's stream without a device";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

// The allocator of a device's memory (what the training loop's peak is read from): the cpu's
// for host memory, the GPU's own for cuda, which says why when it cannot be had.
TEST(CudaMemory, EachDeviceHasItsAllocator) {
  EXPECT_EQ(&allocator_for(Device::cpu()), &CachingAllocator::cpu());
  EXPECT_EQ(&allocator_for(Device::guarded()), &CachingAllocator::cpu());
  reset_peak_memory(Device::cpu());
  const AllocatorStats a = allocator_stats(), b = allocator_stats(Device::cpu());
  EXPECT_EQ(a.peak_allocated_bytes, b.peak_allocated_bytes);
  EXPECT_EQ(a.allocs, b.allocs);
  if (cuda_available()) {
    EXPECT_EQ(&allocator_for(Device::cuda(0)), &cuda_allocator(0));
    return;
  }
  try {
    (void)allocator_stats(Device::cuda(0));
    FAIL() << "cuda:0's allocator without a device";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(cuda_status().built ? "no CUDA device" : "-DMIXP_CUDA=ON"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mixp
