// `mixp inspect report RUN.jsonl -o inspect.html`: renders the statistics `mixp train --inspect`
// wrote (docs/inspect.md, "The report"). Printing only; the page is inspect::write_inspect_report.
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "mixp/inspect/inspect_report.h"

namespace mixp::cli {
namespace {

struct ReportOptions {
  std::string input;
  std::string output = "inspect.html";
};

void run_report(const ReportOptions& o) {
  try {
    inspect::write_inspect_report(o.input, o.output);
  } catch (const inspect::InspectError& e) {
    throw UsageError(e.what());
  }
  std::cout << "wrote " << o.output << "\n";
}

RegisterCommand reg(35, [](CLI::App& app) {
  CLI::App* ins = app.add_subcommand(
      "inspect", "work with the tensor statistics of `mixp train --inspect` (docs/inspect.md)");
  ins->require_subcommand(1);
  auto o = std::make_shared<ReportOptions>();
  CLI::App* rep = ins->add_subcommand(
      "report",
      "render a run's statistics as one HTML page: the ranges of every module and role, and per "
      "format a heatmap (module x step) of the overflow and underflow fractions");
  rep->add_option("RUN.jsonl", o->input, "the JSON Lines file of --inspect (its out=)")
      ->required();
  rep->add_option("-o,--out", o->output, "the HTML file to write (atomically)")
      ->capture_default_str();
  rep->footer(
      "Example:\n"
      "  mixp train --model gpt --steps 300 --inspect every=50,out=run.jsonl\n"
      "  mixp inspect report run.jsonl -o inspect.html\n");
  rep->callback([o] { run_report(*o); });
});

}  // namespace
}  // namespace mixp::cli
