#include "device_flag.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include "command.h"
#include "mixp/backend/cuda.h"

namespace mixp::cli {

namespace {

// This rank's place among the ranks on its host under mpirun (OpenMPI's
// OMPI_COMM_WORLD_LOCAL_RANK), or -1 outside mpirun.
int local_rank() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  return end && *end == '\0' && r >= 0 && r < 100000 ? int(r) : -1;
}

}  // namespace

Device parse_device_flag(const std::string& s, bool allow_guarded) {
  if (s == "cpu") return Device::cpu();
  if (s == "guarded" && allow_guarded) return Device::guarded();
  int index = 0;
  const int local = local_rank();
  if (s == "cuda" && local >= 0) {
    // Under mpirun each rank of a host takes a GPU of its own, cuda:<local rank> (torchrun's
    // LOCAL_RANK convention): NCCL refuses two ranks on one GPU.
    const CudaStatus& st = cuda_status();
    if (st.built && st.device_count > 0 && local >= st.device_count) {
      throw std::runtime_error(fmt::format(
          "--device cuda: this is rank {} of its host, which has {} GPU(s) (cuda:0 to cuda:{}); "
          "each rank takes the GPU of its local rank (NCCL needs one GPU per rank): start at most "
          "{} rank(s) per host",
          local, st.device_count, st.device_count - 1, st.device_count));
    }
    index = local;
  } else if (s != "cuda") {
    const std::string digits = s.rfind("cuda:", 0) == 0 ? s.substr(5) : std::string();
    bool ok = !digits.empty() && digits.size() <= 4;
    for (char ch : digits) ok = ok && std::isdigit(static_cast<unsigned char>(ch));
    if (!ok) throw UsageError("--device: '" + s + "' is not a device; use cpu, cuda or cuda:N");
    index = std::stoi(digits);
  }
  const CudaStatus& st = cuda_status();
  if (!st.built || index >= st.device_count) {
    // cuda_status's message already says what to do (build with CUDA, or use the cpu).
    throw std::runtime_error(
        st.device_count > 0
            ? fmt::format("--device {}: no CUDA device cuda:{} ({} visible: cuda:0 to cuda:{})", s,
                          index, st.device_count, st.device_count - 1)
            : fmt::format("--device {}: {}", s, st.message));
  }
  return Device::cuda(index);
}

}  // namespace mixp::cli
