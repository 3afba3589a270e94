// Fault injection on the command line (issue 28 item 8): every numeric flag of every command,
// found from `mixp <command> --help` (so a new flag is covered without touching this file), gets
// absurd values: an integer that overflows 64 bits, and its negative (integer flags) or nan (real
// flags). Each must be a usage error, exit 2, with one line on stderr naming the flag and its
// range, nothing on stdout, and no crash (CLI11 2.1 alone turned --batch 99999999999999999999
// into INT64_MAX and a segfault). Every numeric flag must show its range in --help.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli_commands.h"
#include "common/cli_runner.h"
#include "common/test_paths.h"

namespace mixp::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct NumericFlag {
  std::string name;  // the long name, e.g. "--batch"
  std::string type;  // CLI11's type name with the validator's range: "INT:[1, 2147483647]"
  bool real = false;
};

// The options of a help text whose type is INT, UINT or FLOAT.
std::vector<NumericFlag> numeric_flags(const std::string& help) {
  static const std::regex option(R"(^\s+((?:-{1,2}[A-Za-z][\w-]*,?)+)\s+((?:U?INT|FLOAT)\S*(?: \S+\])?))");
  std::vector<NumericFlag> out;
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, option)) continue;
    // CLI11 names an option by its first long name in messages ("--mlp-width,--ffn").
    const std::string names = m[1];
    const size_t first = names.find("--");
    NumericFlag f;
    f.name = names.substr(first == std::string::npos ? 0 : first);
    f.name = f.name.substr(0, f.name.find(','));
    f.type = m[2];
    f.real = f.type.rfind("FLOAT", 0) == 0;
    out.push_back(f);
  }
  return out;
}

// Arguments some commands require before they look at a flag (positionals, required options).
std::string required_args(const std::string& command, const std::string& flag) {
  if (command == "convert") return "in.safetensors -o out.safetensors";
  if (command == "quantize") return flag == "--calibrate" ? "--checkpoint none" : "--checkpoint none --calibrate 1";
  if (command == "inspect report") return "run.jsonl";
  if (command == "tokenize") return "in.txt -o out.bin";
  return "";
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CliNumericFlags, AbsurdValuesAreUsageErrorsNamingTheFlag) {
  int flags = 0;
  for (const std::string& c : all_commands()) {
    const CliResult help = run_cli(c + " --help");
    for (const NumericFlag& f : numeric_flags(help.out)) {
      SCOPED_TRACE("mixp " + c + " " + f.name + " (" + f.type + ")");
      ++flags;
      // The range is part of the help's type column ("INT:[1, 2147483647]").
      EXPECT_THAT(f.type, ::testing::MatchesRegex(R"(U?INT:\[.*\]|FLOAT:[\[(].*\])"));
      // Two per flag keep the test short (each is a process start): the overflow that crashed
      // (for reals a value beyond fp32, the widest real range), and its negative (integers) or
      // nan (reals); -inf is in RangesAndMessages.
      const std::vector<std::string> values = {f.real ? "1e300" : "99999999999999999999",
                                               f.real ? "nan" : "-99999999999999999999"};
      for (const std::string& v : values) {
        // `timeout`: a flag that took the value would start working; it must not run long.
        const CliResult r = run_shell("timeout 20 '" + std::string(MIXP_CLI) + "' " + c + " " +
                                      required_args(c, f.name) + " " + f.name + " " + v);
        EXPECT_EQ(r.exit_code, 2) << v << ": " << r.err;
        EXPECT_EQ(r.out, "") << v;
        EXPECT_EQ(count_lines(r.err), 1) << v << ": " << r.err;
        EXPECT_THAT(r.err, StartsWith("mixp " + c + ": error: " + f.name + ": must be ")) << v;
      }
    }
  }
  // train alone has more than 30; a parse that finds none would pass vacuously.
  EXPECT_GT(flags, 50);
}

// The ranges themselves: an in-range value passes the parse (the run then stops for another
// reason, here a missing --model), the bounds are inclusive, and the message says the range.
TEST(CliNumericFlags, RangesAndMessages) {
  CliResult r = run_cli("train --model mlp --batch 99999999999999999999");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "mixp train: error: --batch: must be an integer from 1 to 2147483647, got "
            "'99999999999999999999' (see --help)\n");
  r = run_cli("train --model gpt --context 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--context: must be an integer from 1 to 1048576, got '0'"));
  r = run_cli("train --model mlp --steps 100000000000000000000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--steps: must be an integer from 1 to 1000000000"));
  r = run_cli("train --model mlp --clip 1e300");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--clip: must be a number in (0, 1e+09], got '1e300'"));
  r = run_cli("train --model mlp --momentum -inf");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--momentum: must be a number in [0, 1], got '-inf'"));
  r = run_cli("train --model mlp --lr 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--lr: must be a number in (0, 3.40282e+38], got '0'"));
  r = run_cli("train --model mlp --seed -1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--seed: must be an integer from 0 to 18446744073709551615"));
  // In range: the parse accepts it; --epochs and --steps together stop the run before any work.
  r = run_cli("train --model mlp --seed 18446744073709551615 --batch 2147483647 --lr 1000 "
              "--epochs 1 --steps 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--epochs and --steps both given"));
  // A layer named twice in --layer-precision.
  r = run_cli("train --model mlp --steps 1 --precision bf16 --layer-precision fc1=bf16,fc1=fp16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'fc1' is given twice (fc1=bf16 and fc1=fp16)"));
}

}  // namespace
}  // namespace mixp::test
