#include "study/peak_rss.h"

#include <fstream>
#include <sstream>
#include <string>

namespace mixp::study::detail {

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return bool(f);
}

std::optional<int64_t> peak_rss_since_reset() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream in(line.substr(6));
      int64_t kb = 0;
      if (in >> kb) return kb * 1024;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace mixp::study::detail
