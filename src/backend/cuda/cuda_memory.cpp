// Device memory: one caching allocator per CUDA device over cudaMalloc/cudaFree (the cpu
// allocator's policy and statistics, tensor/allocator.h), and the host<->device copies of
// Tensor::to(Device). Both are registered with the tensor module while libmixp loads, so that
// Device::cuda(i) tensors allocate here (DeviceMemoryHooks in tensor/allocator.h).
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "backend/cuda/cuda_device.h"
#include "mixp/backend/cuda.h"

namespace mixp {
namespace {

void* device_alloc(size_t n, void* ctx) {
  const int index = static_cast<int>(reinterpret_cast<intptr_t>(ctx));
  MIXP_CUDA_CHECK(cudaSetDevice(index));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, n);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;  // the allocator empties its cache and retries, then throws bad_alloc
  }
  if (e != cudaSuccess) cuda::throw_cuda_error(e, "cudaMalloc", __FILE__, __LINE__);
  return p;
}
void device_free(void* p, size_t, void* ctx) {
  const int index = static_cast<int>(reinterpret_cast<intptr_t>(ctx));
  // Blocks are freed while other work may still be queued: cudaFree waits for the device.
  // Errors are ignored here (a destructor path; the device may be gone at exit).
  if (cudaSetDevice(index) == cudaSuccess) (void)cudaFree(p);
}

constexpr int kMaxDevices = 64;
std::mutex g_mu;
CachingAllocator* g_allocators[kMaxDevices] = {};  // never destroyed: tensors may outlive main

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (n == 0) return;
  const int index = dst_dev.kind == DeviceKind::cuda ? dst_dev.index : src_dev.index;
  cuda::DeviceContext& ctx = cuda::context(index);
  // cudaMemcpyDefault: unified addressing tells host from device pointers (and one device from
  // another). Pageable host memory: the copy is staged by the driver; we wait for it anyway.
  MIXP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, ctx.stream));
  MIXP_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

CachingAllocator& allocator_of(int index) {
  return cuda_allocator(index);
}
void* stream_of(int index) {
  return cuda::context(index).stream;
}

const bool g_registered = [] {
  register_device_memory(DeviceKind::cuda,
                         DeviceMemoryHooks{.allocator = &allocator_of, .copy = &copy_bytes, .stream = &stream_of});
  return true;
}();

}  // namespace

CachingAllocator& cuda_allocator(int index) {
  cuda::require_device(index);
  if (index >= kMaxDevices) throw std::runtime_error("mixp: more than 64 CUDA devices");
  std::lock_guard lock(g_mu);
  CachingAllocator*& a = g_allocators[index];
  if (!a) {
    a = new CachingAllocator(MemorySource{.alloc = device_alloc,
                                          .free = device_free,
                                          .ctx = reinterpret_cast<void*>(intptr_t{index}),
                                          .host = false});
  }
  return *a;
}

}  // namespace mixp
