// The caching allocator behind every tensor's storage, with allocation tracking.
//
// Why: a training step allocates the same sequence of buffers every iteration. Going to the system
// (aligned_alloc) for each costs page faults and lock traffic; like PyTorch's CUDACachingAllocator,
// freed blocks are kept in a size-keyed pool and reused, so that after the first step the loop
// makes no system allocations (checked by tests/tensor through `system_allocs`).
//
// Policy (docs/engine.md): requests are rounded up to 64 bytes (<= 4 KiB), to 512 bytes
// (<= 1 MiB), else to 64 KiB. Small blocks (<= 1 MiB) are kept in size classes; a request takes
// the smallest cached block at least as large and at most 1.5x as large. Large blocks are carved
// out of system segments: a request takes the smallest free block that fits and splits off the
// rest as a free block of its own (when at least 512 KiB); a freed block coalesces with the free
// neighbours in its segment, and only empty_cache() (or a retry after the system ran out of
// memory) gives whole free segments back. Blocks are 64-byte aligned (one cache line, one AVX-512
// vector). MIXP_ALLOCATOR=system in the environment disables the cache (every free goes back to
// the system), which makes ASan find use-after-free in tensor code.
#pragma once
#include <cstddef>
#include <cstdint>

#include "mixp/tensor/device.h"

namespace mixp {

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // bytes in blocks handed out now (what tensors hold)
  int64_t peak_allocated_bytes = 0;  // maximum of allocated_bytes since the last reset_peak
  int64_t requested_bytes = 0;       // bytes asked for now (before rounding)
  int64_t peak_requested_bytes = 0;
  int64_t reserved_bytes = 0;  // allocated + cached (what the process holds from the system)
  int64_t peak_reserved_bytes = 0;
  int64_t system_allocs = 0;  // calls to the system allocator, ever
  int64_t system_frees = 0;
  int64_t allocs = 0;      // allocate() calls, ever
  int64_t cache_hits = 0;  // allocate() calls served from the cache
};

inline constexpr size_t kTensorAlignment = 64;

// Where an allocator's segments come from. The cpu allocator uses aligned_alloc; a device
// allocator (the CUDA one, src/backend/cuda/cuda_memory.cpp) passes cudaMalloc/cudaFree, so that
// both devices cache, split and count alike (same policy, same AllocatorStats). `alloc` returns
// null when the memory is exhausted (the allocator then empties its cache and retries once) and
// may throw for other failures; `host` says whether the CPU may touch the bytes (ASan poisoning).
struct MemorySource {
  void* (*alloc)(size_t nbytes, void* ctx) = nullptr;
  void (*free)(void* ptr, size_t nbytes, void* ctx) = nullptr;
  void* ctx = nullptr;
  bool host = true;
};

class CachingAllocator {
 public:
  // The process-wide allocator for CPU tensors (thread-safe).
  static CachingAllocator& cpu();

  // A separate allocator (tests); caching unless MIXP_ALLOCATOR=system. Destroy it only after
  // every block it handed out was deallocated: the destructor returns the cached memory.
  CachingAllocator();
  explicit CachingAllocator(const MemorySource& source);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  struct Block {
    void* ptr = nullptr;
    size_t size = 0;  // the block's real size (>= the request)
  };
  // Returns a 64-byte aligned block of at least `nbytes` (nbytes may be 0: a valid pointer is still
  // returned). Throws std::bad_alloc when the system is out of memory (after emptying the cache).
  Block allocate(size_t nbytes);
  // Gives back a block returned by allocate (with the same size and request).
  void deallocate(Block block, size_t nbytes);

  AllocatorStats stats() const;
  // Sets the peak counters to the current values.
  void reset_peak();
  // Returns every cached small block and every wholly free segment to the system (a segment with
  // a block still allocated stays).
  void empty_cache();
  // Whether freed blocks are cached (default true unless MIXP_ALLOCATOR=system).
  void set_caching(bool on);
  bool caching() const;

  static size_t round_size(size_t nbytes);

 private:
  struct Impl;
  Impl* impl_;
};

// The allocators of devices whose memory is not the host's (cuda): a backend built for such a
// device registers a function giving the allocator of device `index` (it throws, saying what to
// do, when that device is not there). Storage::Storage asks here (src/tensor/tensor.cpp), and
// Tensor::to(Device) copies through the registered copy function. Registration happens while
// libmixp loads (a static registrar in the backend's sources); nothing else calls it.
struct DeviceMemoryHooks {
  CachingAllocator& (*allocator)(int index) = nullptr;
  // Copies nbytes between contiguous buffers; either side may be the host (Device::cpu()).
  // Synchronous: the bytes are in place when it returns.
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device,
               size_t nbytes) = nullptr;
  // The native stream (cudaStream_t for cuda) on which the backend of device `index` runs its
  // kernels, with that device made current on the calling thread; throws as `allocator` when the
  // device is not there. Work queued on it is ordered after the backend's kernels: the NCCL group
  // (src/dist/nccl/nccl_group.cpp) runs its collectives there.
  void* (*stream)(int index) = nullptr;
};
void register_device_memory(DeviceKind kind, const DeviceMemoryHooks& hooks);
// The hooks of `kind`, or null when no backend for it is built into this library.
const DeviceMemoryHooks* device_memory(DeviceKind kind);

// Shorthands for the CPU allocator.
AllocatorStats allocator_stats();
void reset_peak_memory();
void empty_cache();

// The allocator of `device`'s memory: the cpu one for host memory (cpu, the guarded test device),
// the registered one for a device's own memory (cuda: that GPU's caching allocator). Throws
// std::invalid_argument, saying how to build it, when no backend for the device is built in, and
// the device backend's error when the device is absent. The training loop reads its device's
// peak through these (TrainResult::peak_memory_bytes, the study's records).
CachingAllocator& allocator_for(Device device);
AllocatorStats allocator_stats(Device device);
void reset_peak_memory(Device device);

}  // namespace mixp
