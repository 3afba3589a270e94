// Runs the built `mixp` (MIXP_CLI) through the shell and captures exit code, stdout and stderr,
// for the end-to-end tests of tests/cli.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mixp::test {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  nlohmann::json json() const { return nlohmann::json::parse(out); }
};

// A fresh directory under the system temp dir, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mixp_cli_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// `args` is passed to /bin/sh as written (quote what needs quoting); `env` sets variables for
// this run only.
inline CliResult run_cli(const std::string& args,
                         const std::vector<std::pair<std::string, std::string>>& env = {}) {
  TempDir dir;
  std::string vars;
  for (const auto& [k, v] : env) vars += k + "='" + v + "' ";
  const std::string cmd = vars + "'" + MIXP_CLI + "' " + args + " >'" + (dir / "out") + "' 2>'" +
                          (dir / "err") + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir.path / "out");
  r.err = slurp(dir.path / "err");
  return r;
}

}  // namespace mixp::test
