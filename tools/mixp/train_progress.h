// The progress bar of `mixp train`: one line on stderr, redrawn in place, only when stderr is a
// terminal (a log file or a pipe gets nothing). Printing only; the Trainer reports through its
// callback interface.
#pragma once
#include <cstdint>

#include "mixp/train/callbacks.h"

namespace mixp::cli {

class ProgressBar final : public train::TrainCallback {
 public:
  // `language_model`: show tokens/s instead of samples/s.
  explicit ProgressBar(bool language_model) : lm_(language_model) {}
  void on_train_begin(int64_t first_step, int64_t total_steps) override;
  void on_step_end(const train::StepInfo& info) override;
  void on_evaluate_begin() override;
  void on_train_end() override;

 private:
  void clear_line();
  bool lm_;
  int64_t first_step_ = 1;
  double last_draw_ms_ = -1e9;
  bool drawn_ = false;
};

}  // namespace mixp::cli
