// Subcommand registry for the `mixp` CLI. Each tools/mixp/cmd_*.cpp registers itself with a
// static RegisterCommand, so adding a command never edits main.cpp. The CLI only parses and
// prints (docs/architecture.md 2.2): logic a library user would need lives in the library.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>

namespace mixp::cli {

// `order` sorts commands in --help.
using CommandSetup = void (*)(CLI::App& app);
struct RegisterCommand {
  RegisterCommand(int order, CommandSetup setup);
};

// A mistake in how the command was called (exit code 2), as opposed to a failure while doing the
// work (exit code 1). Both print "mixp <command>: error: <message>" on stderr.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// True when stdout is a terminal (progress bars and colour only then).
bool stdout_is_tty();
bool stderr_is_tty();

}  // namespace mixp::cli
