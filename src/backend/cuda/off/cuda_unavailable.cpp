// The CUDA entry points of a libmixp built without the CUDA backend (MIXP_CUDA=OFF, or AUTO on a
// machine without the toolkit; cmake/MixpCuda.cmake compiles this file instead of
// src/backend/cuda/*). Each says that CUDA is not built and how to build it.
#include <stdexcept>

#include "backend/cuda_entry.h"
#include "mixp/backend/cuda.h"
#include "mixp/backend/cuda_block.h"
#include "mixp/backend/cuda_gemm.h"

namespace mixp {
namespace {
constexpr const char* kNotBuilt =
    "this mixp was built without the CUDA backend (configured with MIXP_CUDA=OFF, or no CUDA "
    "toolkit was found); rebuild with -DMIXP_CUDA=ON on a machine with the toolkit (docs/cuda.md)";
}  // namespace

const CudaStatus& cuda_status() {
  static const CudaStatus s = [] {
    CudaStatus st;
    st.message = std::string("CUDA backend not built: ") + kNotBuilt;
    return st;
  }();
  return s;
}
bool cuda_available() {
  return false;
}
CachingAllocator& cuda_allocator(int index) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}

void cuda_synchronize(int index) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}

Backend& detail::cuda_backend(int index) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}

bool cuda_fp8_matmul(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             bool) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
void cuda_int8_matmul(Tensor&, const Tensor&, const Tensor&) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
std::string detail::cuda_pci_bus_id(int) {
  return "";
}
bool detail::cublaslt_mapped() {
  return false;
}
std::string detail::cublaslt_probe() {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
bool cuda_fp8_gemm_native(int) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
BlockScaledTensor CudaBlockTensor::to_host() const {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
CudaBlockTensor cuda_block_quantize(const Tensor&, const BlockScaledOptions&) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
Tensor cuda_block_fake_quantize(const Tensor&, const BlockScaledOptions&) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
Tensor cuda_block_gemm_nt(const Tensor&, const Tensor&, const BlockScaledOptions&,
                          const BlockScaledOptions&, BlockGemmPath*, const BlockGemmPath*) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
Tensor cuda_block_columns(const Tensor&, bool) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}
void cuda_rht16_rows(Tensor&) {
  throw std::invalid_argument(std::string("mixp: no CUDA device: ") + kNotBuilt);
}

}  // namespace mixp
