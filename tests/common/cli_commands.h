// Every command of the built `mixp`, found by walking `mixp --help` (so a new one is covered
// without touching the tests that use this): tests/cli's help and numeric-flag tests.
#pragma once
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/cli_runner.h"

namespace mixp::test {

// The names listed under "Subcommands:" in a CLI11 help text.
inline std::vector<std::string> subcommands_in(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream in(help);
  std::string line;
  bool listing = false;
  while (std::getline(in, line)) {
    if (line == "Subcommands:") {
      listing = true;
    } else if (listing && line.size() > 2 && line.rfind("  ", 0) == 0 && line[2] != ' ') {
      out.push_back(line.substr(2, line.find(' ', 2) - 2));
    } else if (listing && line.empty()) {
      listing = false;
    }
  }
  return out;
}

// "bench gemm", "train", ...: every command path, parents before their subcommands.
inline std::vector<std::string> all_commands() {
  std::vector<std::string> todo{""}, out;
  while (!todo.empty()) {
    const std::string path = todo.back();
    todo.pop_back();
    const CliResult r = run_cli(path + " --help");
    EXPECT_EQ(r.exit_code, 0) << "mixp " << path << " --help: " << r.err;
    for (const auto& sub : subcommands_in(r.out)) {
      const std::string p = path.empty() ? sub : path + " " + sub;
      out.push_back(p);
      todo.push_back(p);
    }
  }
  return out;
}

}  // namespace mixp::test
