// mixp: mixed- and low-precision training, and what each precision costs and buys.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "mixp/dist/process_group.h"
#include "mixp/format/describe.h"

namespace mixp::cli {
namespace {
std::vector<std::pair<int, CommandSetup>>& registry() {
  static std::vector<std::pair<int, CommandSetup>> r;
  return r;
}
}  // namespace

RegisterCommand::RegisterCommand(int order, CommandSetup setup) {
  registry().emplace_back(order, setup);
}

// CLI11 reads "-inf", "-nan" and "-.5" as short options ("-i nf"...); "-1.5" it already takes as a
// value. A leading space makes CLI11 see a plain argument, and every number parser (strtod,
// mixp::parse_real, CLI11's own) skips it, so negative numbers work as positionals and values.
static std::vector<std::string> protect_negative_numbers(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (size_t i = 1; i < out.size(); ++i) {
    const std::string& a = out[i];
    if (a == "--") break;  // after "--" everything is positional anyway
    const bool looks_like_option =
        a.size() > 1 && a[0] == '-' && a[1] != '-' && !(a[1] >= '0' && a[1] <= '9');
    if (looks_like_option && mixp::parse_real(a)) out[i] = " " + a;
  }
  return out;
}

bool stdout_is_tty() {
  return isatty(STDOUT_FILENO) != 0;
}
bool stderr_is_tty() {
  return isatty(STDERR_FILENO) != 0;
}

}  // namespace mixp::cli

int main(int argc, char** argv) {
  using namespace mixp::cli;
  CLI::App app{
      "mixp: train neural networks in mixed and low precision, and measure what each precision "
      "costs and buys.\nRun `mixp <command> --help` for a command's options.",
      "mixp"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mixp 0.1.0");
  auto& reg = registry();
  std::stable_sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : reg) setup(app);

  std::vector<std::string> args = protect_negative_numbers(argc, argv);
  std::vector<char*> arg_ptrs;
  for (auto& a : args) arg_ptrs.push_back(a.data());
  // Every failure prints one line, "mixp <command>: error: <what>", on stderr
  // (docs/architecture.md 4.1). <command> is the whole path given ("bench gemm"), as far as it
  // was parsed.
  const auto fail = [&app](const char* what, int code) {
    std::fflush(stdout);
    std::string command = "mixp";
    for (const CLI::App* a = &app; !a->get_subcommands().empty();) {
      a = a->get_subcommands()[0];
      command += " " + a->get_name();
    }
    mixp::dist::ProcessGroup* world = mixp::dist::world_if_started();
    if (world && world->size() > 1) {
      // One rank failed: say which, and stop the others now rather than at their timeout.
      std::cerr << command << ": error (rank " << world->rank() << " of " << world->size()
                << "): " << what << "\n";
      std::cerr.flush();
      mixp::dist::abort_world(code);
    }
    std::cerr << command << ": error: " << what << "\n";
    return code;
  };
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    return fail((std::string(e.what()) + " (see --help)").c_str(), 2);
  } catch (const UsageError& e) {
    return fail(e.what(), 2);
  } catch (const std::bad_alloc&) {
    // An allocation the system refused: `mixp train` checks its planned peak before starting
    // (study/memory_check.h), so this is what that check cannot see (another process taking the
    // memory meanwhile, a command without the check). std::bad_alloc's what() is only
    // "std::bad_alloc".
    return fail(
        "out of memory: an allocation failed while working (the system has less memory "
        "available than this needs); a smaller --batch, --context or model needs less, and "
        "`mixp plan` shows a training run's peak",
        1);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
  return 0;
}
