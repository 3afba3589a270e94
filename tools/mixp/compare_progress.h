// The progress display of `mixp compare` on stderr: a live line per run (precision, step, bar,
// loss, ETA) redrawn in place when stderr is a terminal, replaced by the run's result when it
// ends; when stderr is not a terminal (a log, a pipe, CI), a plain progress line every 30 s of a
// run and the result line of each run.
#pragma once
#include "mixp/study/study_runner.h"

namespace mixp::cli {

class CompareProgress {
 public:
  explicit CompareProgress(bool live) : live_(live) {}
  void operator()(const study::StudyEvent& e);

 private:
  void clear_line();
  bool live_;
  bool drawn_ = false;
  double last_draw_ms_ = -1e9;
};

}  // namespace mixp::cli
