// Every registered command, found by walking `mixp --help` (so a new one is covered without
// touching this file): `--help` prints its usage and exits 0, and an unknown flag is a usage error,
// exit 2 with one line "mixp <command>: error: ..." on stderr and nothing on stdout
// (docs/architecture.md 4.1).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli_runner.h"

namespace mixp::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The names listed under "Subcommands:" in a CLI11 help text.
std::vector<std::string> subcommands_in(const std::string& help) {
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
std::vector<std::string> all_commands() {
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

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CliHelp, EveryCommandHasHelpAndRejectsUnknownFlags) {
  const std::vector<std::string> commands = all_commands();
  // The commands docs/architecture.md 4.2 and the README promise; more may come.
  for (const char* c : {"formats", "convert", "train", "eval", "quantize", "bench", "bench gemm",
                        "compare", "doctor"}) {
    EXPECT_NE(std::find(commands.begin(), commands.end(), c), commands.end()) << c;
  }
  for (const std::string& c : commands) {
    SCOPED_TRACE("mixp " + c);
    const CliResult help = run_cli(c + " --help");
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_THAT(help.out, HasSubstr("Usage: mixp " + c));
    EXPECT_EQ(help.err, "");
    for (const char* bad : {"--no-such-flag", "--no-such-flag=1"}) {
      const CliResult r = run_cli(c + " " + bad);
      EXPECT_EQ(r.exit_code, 2) << bad;
      EXPECT_EQ(r.out, "") << bad;
      EXPECT_EQ(count_lines(r.err), 1) << bad << ": " << r.err;
      EXPECT_THAT(r.err, StartsWith("mixp " + c + ": error: ")) << bad;
    }
  }
}

TEST(CliHelp, TopLevel) {
  const CliResult r = run_cli("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Usage: mixp"));
  const CliResult v = run_cli("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_THAT(v.out, StartsWith("mixp "));
  const CliResult none = run_cli("");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(count_lines(none.err), 1) << none.err;
  const CliResult unknown = run_cli("no-such-command");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(count_lines(unknown.err), 1) << unknown.err;
  EXPECT_THAT(unknown.err, StartsWith("mixp: error: "));
}

}  // namespace
}  // namespace mixp::test
