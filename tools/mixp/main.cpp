// mixp: mixed- and low-precision training, and what each precision costs and buys.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <utility>
#include <vector>

#include "command.h"

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

bool stdout_is_tty() { return isatty(STDOUT_FILENO) != 0; }
bool stderr_is_tty() { return isatty(STDERR_FILENO) != 0; }

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::cerr << "mixp " << (app.get_subcommands().empty() ? "" : app.get_subcommands()[0]->get_name())
              << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "mixp " << (app.get_subcommands().empty() ? "" : app.get_subcommands()[0]->get_name())
              << ": error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
