// The PyTorch GPT-2 reference of bench/peers/gpt2_reference.py, generated at test time with
// Debian's /usr/bin/python3 (python3-torch, installed by scripts/bootstrap.sh). When that
// interpreter or torch is missing, torch_fixture() returns the reason and the tests skip.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "common/temp_dir.h"
#include "common/test_paths.h"

namespace mixp::test {

inline constexpr const char* kTorchPython = "/usr/bin/python3";

// Runs the peer script (bench/peers/<script>) into `dir` with `args`; returns "" on success, else
// why not.
inline std::string make_torch_fixture(const std::filesystem::path& dir, const std::string& args,
                                      const std::string& script = "gpt2_reference.py") {
  std::error_code ec;
  if (!std::filesystem::exists(kTorchPython, ec)) {
    return std::string(kTorchPython) + " is missing (scripts/bootstrap.sh installs python3-torch)";
  }
  const std::string probe = std::string(kTorchPython) + " -c 'import torch' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    return "torch cannot be imported by " + std::string(kTorchPython) +
           " (scripts/bootstrap.sh installs python3-torch)";
  }
  const std::string cmd = std::string(kTorchPython) + " '" + MIXP_SOURCE_DIR +
                          "/bench/peers/" + script + "' --out '" + dir.string() + "' " + args +
                          " >'" + (dir / "peer.log").string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    // The interpreter and torch are there, so a failing script is a real failure, not a skip.
    throw std::runtime_error(script + " failed: " + read_text(dir / "peer.log"));
  }
  return "";
}

}  // namespace mixp::test
