#include "omp_wait.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace mixp::cli {

void ensure_passive_omp_wait() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  if (!in) return;
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  if (start < all.size()) args.push_back(all.substr(start));
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (::setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  ::execv("/proc/self/exe", argv.data());
  // execv returned: not possible here (no /proc). Carry on with the default policy; the variable
  // stays set for any child process.
}

}  // namespace mixp::cli
