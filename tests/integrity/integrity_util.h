// Internal to tests/integrity: running the CLI as a child process (optionally with RLIMIT_FSIZE
// standing in for a full disk), what a clear error looks like, and the small fast run the
// fault-injection tests use (test_integrity.cpp, test_full_disk.cpp).
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/test_paths.h"

namespace mixp::integrity {

namespace fs = std::filesystem;
using test::read_text;

// ---------------------------------------------------------------------------------------------
// Running the CLI

struct Proc {
  int exit_code = -1;  // -1: killed by a signal
  int signal = 0;
  std::string out, err;
};

inline std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + " ") {
    if (c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

// Starts `mixp args` (space-separated, no quoting) in `cwd` with stdout/stderr to files;
// `fsize_limit` > 0 caps the size of any file it writes (RLIMIT_FSIZE, SIGXFSZ ignored).
inline pid_t spawn(const std::string& args, const fs::path& cwd, const fs::path& out,
                   const fs::path& err, rlim_t fsize_limit = 0) {
  std::vector<std::string> argv = split_args(args);
  argv.insert(argv.begin(), MIXP_CLI);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) _exit(127);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0) _exit(127);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    if (fsize_limit > 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit rl {
        fsize_limit, fsize_limit
      };
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    ::setenv("OMP_NUM_THREADS", "1", 1);
    std::vector<char*> av;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    _exit(127);
  }
  return pid;
}

inline Proc wait_run(pid_t pid, const fs::path& out, const fs::path& err) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  Proc r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

inline Proc run(const std::string& args, const fs::path& cwd, rlim_t fsize_limit = 0) {
  static int counter = 0;
  const fs::path out = cwd / ("out" + std::to_string(counter) + ".txt");
  const fs::path err = cwd / ("err" + std::to_string(counter++) + ".txt");
  return wait_run(spawn(args, cwd, out, err, fsize_limit), out, err);
}

// A clear error: exit 1 or 2, one line "mixp <command>: error: ..." on stderr, no raw
// nlohmann text, no bare std::bad_alloc.
inline void expect_clear_error(const Proc& r, const std::string& must_contain = "") {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit " << r.exit_code << "\n" << r.err;
  EXPECT_NE(r.err.find(": error: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("std::bad_alloc"), std::string::npos) << r.err;
  if (!must_contain.empty()) {
    EXPECT_NE(r.err.find(must_contain), std::string::npos) << r.err;
  }
}

// A small, fast run: its steps take well under a millisecond, so kills and races land anywhere.
inline const std::string kRun =
    "train --model mlp --width 16 --data synthetic --train-limit 512 --test-limit 64 --batch 16 "
    "--threads 1 --seed 3";

inline double final_loss(const Proc& r) {
  const auto j = nlohmann::json::parse(r.out);
  return j["final_loss"].get<double>();
}

inline std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline bool any_staging_left(const fs::path& dir, const std::string& base) {
  for (const auto& n : entries(dir)) {
    if (n.rfind(base + ".tmp-", 0) == 0 || n.rfind(base + ".old-", 0) == 0) return true;
  }
  return false;
}

}  // namespace mixp::integrity
