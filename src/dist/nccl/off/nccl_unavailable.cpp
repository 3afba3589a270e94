// The NCCL entry points of a libmixp built without the NCCL group (no CUDA backend, no nccl.h, or
// MIXP_NCCL=OFF; cmake/MixpCuda.cmake compiles this file instead of src/dist/nccl/*.cpp).
#include <stdexcept>

#include "mixp/dist/process_group.h"

namespace mixp::dist {
namespace {
constexpr const char* kNotBuilt =
    "this mixp was built without NCCL (it needs the CUDA backend and nccl.h: configure with "
    "-DMIXP_CUDA=ON on a machine with the CUDA toolkit and NCCL, and MIXP_NCCL=AUTO or ON; "
    "docs/distributed.md)";
}  // namespace

NcclStatus nccl_status() {
  NcclStatus s;
  s.message = std::string("NCCL not built: ") + kNotBuilt;
  return s;
}

std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup*, int) {
  throw std::runtime_error(std::string("mixp: NCCL: ") + kNotBuilt);
}

}  // namespace mixp::dist
