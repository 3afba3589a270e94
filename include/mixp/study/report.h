// The precision study's report (docs/architecture.md 4.3, `mixp compare --out DIR`):
//
//   DIR/results.json  {"model", "machine", "baseline", "criteria", "runs": [<train --json object
//                      with curves>, ...], "seed_runs": [...] (when K > 1), "verdicts": [...],
//                      "recommendation": {"precision", "reason"}, "summary"}
//   DIR/results.csv   one row per run (aggregated per precision), header = the field names
//   DIR/report.md     title, summary, results and verdict tables, recommendation
//   DIR/report.html   the same with inline SVG charts: loss curves, time/memory/energy relative
//                      to the baseline, accuracy difference, loss-scale trace; self-contained
//                      (inline CSS and SVG, no scripts, no external URLs)
//
// Diverged runs are reported ("diverged at step N"), never dropped. Energy from the model
// estimate is marked "(estimate)" wherever it appears. See docs/report.md.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "mixp/study/study_results.h"

namespace mixp::study {

// Renders all four files, then publishes out_dir as one unit (io/atomic_file.h's AtomicDirectory:
// staged in out_dir.tmp-XXXXXX and swapped in by one rename), creating its parents when missing;
// other files in out_dir are carried over (hard links) and so left alone. A rendering or write
// error (a full disk) leaves out_dir exactly as it was; a reader never sees files of two studies
// side by side. Throws mixp::IoError (mixp/io/atomic_file.h) when a file cannot be written, and
// FolderBusyError when another process is writing out_dir.
void write_study_report(const std::filesystem::path& out_dir, const StudyResults& s);

// The file contents, for tests and for callers that want one of them.
std::string render_results_json(const StudyResults& s);
std::string render_results_csv(const StudyResults& s);
std::string render_report_markdown(const StudyResults& s);
std::string render_report_html(const StudyResults& s);

// The columns of results.csv, in order.
const std::vector<std::string>& results_csv_columns();

}  // namespace mixp::study
