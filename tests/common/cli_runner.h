// Runs the built `mixp` (MIXP_CLI, defined for every test binary) through the shell and captures
// exit code, stdout and stderr, for the end-to-end tests.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/temp_dir.h"
#include "common/test_paths.h"

namespace mixp::test {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  nlohmann::json json() const { return nlohmann::json::parse(out); }
};

// Runs `command` through /bin/sh with stdout and stderr captured and stdin /dev/null.
inline CliResult run_shell(const std::string& command) {
  TempDir dir;
  const std::string cmd = command + " >'" + (dir / "out").string() + "' 2>'" +
                          (dir / "err").string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(dir / "out");
  r.err = read_text(dir / "err");
  return r;
}

// `args` is passed to /bin/sh as written (quote what needs quoting); `env` sets variables for
// this run only. stdin is /dev/null.
inline CliResult run_cli(const std::string& args,
                         const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::string vars;
  for (const auto& [k, v] : env) vars += k + "='" + v + "' ";
  return run_shell(vars + "'" + MIXP_CLI + "' " + args);
}

}  // namespace mixp::test
