// CUDA error messages, device discovery (cuda_status) and the per-device contexts.
#include "backend/cuda/cuda_device.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <stdexcept>

#include "backend/cuda_entry.h"
#include "mixp/backend/cuda.h"

namespace mixp {

const CudaStatus& cuda_status() {
  static const CudaStatus s = [] {
    CudaStatus st;
    st.built = true;
    st.toolkit_version = MIXP_CUDA_VERSION;
    st.architectures = MIXP_CUDA_ARCHS;
    if (cudaRuntimeGetVersion(&st.runtime_version) != cudaSuccess) st.runtime_version = 0;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky error so later calls report their own
      // No driver at all reads as "insufficient driver" from the runtime: say both.
      const bool driver = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
      st.message = fmt::format(
          "no CUDA device: cudaGetDeviceCount failed with {} ({}){}; run on a machine with an "
          "NVIDIA GPU and its driver, or use the cpu device",
          cudaGetErrorName(e), cudaGetErrorString(e),
          driver ? fmt::format(": no NVIDIA driver, or one older than this CUDA {} runtime",
                               MIXP_CUDA_VERSION)
                 : std::string());
      return st;
    }
    st.device_count = n;
    st.message = n == 0 ? std::string("no CUDA device: the CUDA runtime sees no GPU; run on a "
                                      "machine with an NVIDIA GPU, or use the cpu device")
                        : fmt::format("{} CUDA device{}", n, n == 1 ? "" : "s");
    return st;
  }();
  return s;
}

bool cuda_available() {
  return cuda_status().device_count > 0;
}

namespace cuda {
DeviceContext& context(int index);
}  // namespace cuda

void cuda_synchronize(int index) {
  cuda::DeviceContext& c = cuda::context(index);
  MIXP_CUDA_CHECK(cudaStreamSynchronize(c.stream));
}

namespace cuda {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw std::runtime_error(fmt::format("mixp: CUDA error {} ({}) in {} at {}:{}",
                                       cudaGetErrorName(e), cudaGetErrorString(e), call, file,
                                       line));
}
void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  throw std::runtime_error(fmt::format("mixp: cuBLAS error {} ({}) in {} at {}:{}",
                                       lt().cublasLtGetStatusName(s), lt().cublasLtGetStatusString(s), call,
                                       file, line));
}

void require_device(int index) {
  const CudaStatus& st = cuda_status();
  if (st.device_count == 0) throw std::invalid_argument("mixp: " + st.message);
  if (index < 0 || index >= st.device_count) {
    throw std::invalid_argument(fmt::format(
        "mixp: no CUDA device: cuda:{} does not exist ({} device{} visible: cuda:0 to cuda:{})",
        index, st.device_count, st.device_count == 1 ? "" : "s", st.device_count - 1));
  }
}

namespace {
constexpr int kMaxDevices = 64;
// cuBLASLt's recommendation for Hopper (32 MiB); enough for every algorithm on older GPUs.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
std::mutex g_mu;
std::unique_ptr<DeviceContext> g_contexts[kMaxDevices];  // never destroyed before exit
}  // namespace

DeviceContext& context(int index) {
  require_device(index);
  if (index >= kMaxDevices) throw std::runtime_error("mixp: more than 64 CUDA devices");
  MIXP_CUDA_CHECK(cudaSetDevice(index));
  std::lock_guard lock(g_mu);
  std::unique_ptr<DeviceContext>& c = g_contexts[index];
  if (!c) {
    auto ctx = std::make_unique<DeviceContext>();
    ctx->index = index;
    MIXP_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    MIXP_CUBLAS_CHECK(lt().cublasLtCreate(&ctx->lt));
    MIXP_CUDA_CHECK(cudaMalloc(&ctx->workspace, kWorkspaceBytes));
    ctx->workspace_bytes = kWorkspaceBytes;
    MIXP_CUDA_CHECK(
        cudaDeviceGetAttribute(&ctx->cc_major, cudaDevAttrComputeCapabilityMajor, index));
    MIXP_CUDA_CHECK(
        cudaDeviceGetAttribute(&ctx->cc_minor, cudaDevAttrComputeCapabilityMinor, index));
    c = std::move(ctx);
  }
  return *c;
}

}  // namespace cuda
}  // namespace mixp

namespace mixp::detail {

std::string cuda_pci_bus_id(int index) {
  cuda::require_device(index);
  char bus[32] = {};
  MIXP_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, index));
  return bus;
}

}  // namespace mixp::detail
