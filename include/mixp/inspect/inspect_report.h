// The report of a run's tensor statistics (`mixp inspect report RUN.jsonl -o inspect.html`,
// docs/inspect.md "The report"): one self-contained HTML page (inline CSS, no scripts) with the
// ranges of every module and role at the last inspected step, and for each format a heatmap per
// role of the overflow and underflow fractions, module by step.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "mixp/inspect/tensor_inspector.h"

namespace mixp::inspect {

// Reads the JSON Lines written by --inspect. Throws InspectError naming the file and line of a
// line that is not a record.
std::vector<StatRecord> read_inspect_jsonl(const std::filesystem::path& path);

// The page. `source` is shown as where the records came from.
std::string inspect_report_html(const std::vector<StatRecord>& records, const std::string& source);

// read_inspect_jsonl + inspect_report_html, written atomically to `html`. Throws InspectError for
// an empty or unreadable input and io errors for the output.
void write_inspect_report(const std::filesystem::path& jsonl, const std::filesystem::path& html);

}  // namespace mixp::inspect
