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

#include "common/cli_commands.h"
#include "common/cli_runner.h"

namespace mixp::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

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
