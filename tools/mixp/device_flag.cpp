#include "device_flag.h"

#include <fmt/format.h>

#include <cctype>
#include <stdexcept>

#include "command.h"
#include "mixp/backend/cuda.h"

namespace mixp::cli {

Device parse_device_flag(const std::string& s, bool allow_guarded) {
  if (s == "cpu") return Device::cpu();
  if (s == "guarded" && allow_guarded) return Device::guarded();
  int index = 0;
  if (s != "cuda") {
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
