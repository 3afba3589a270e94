// Whether a finished run trained (trainer.h TrainResult::trained; docs/train.md "When a run did
// not train"). The one definition: `mixp train` exits 1 on it and `mixp compare` calls such a run
// "diverged" (src/study/study_runner.cpp reads TrainResult::trained).
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "trainer_impl.h"

namespace mixp::train::detail {
namespace {

std::string value_name(double v) {
  return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf");
}

}  // namespace

std::string not_trained_reason(const TrainResult& r, double lr, bool loss_scaled) {
  std::vector<std::string> what;
  // A loss scaler that skips most steps leaves the weights nearly where they started: fp16's range
  // overflows at every scale it tries (a collapsed scale stops the run earlier, with a TrainError).
  if (r.steps_this_run > 0 && 2 * r.skipped_steps_this_run > r.steps_this_run) {
    what.push_back(fmt::format(
        "the loss scaler skipped {} of its {} optimizer steps (inf/NaN gradients; loss scale "
        "{:g} at the end)",
        r.skipped_steps_this_run, r.steps_this_run, r.loss_scale));
  }
  if (r.steps_this_run > 0 && !std::isfinite(r.final_loss)) {
    what.push_back("the loss of the last step is " + value_name(r.final_loss));
  }
  if (r.test_loss && !std::isfinite(*r.test_loss)) {
    what.push_back("the test loss is " + value_name(*r.test_loss));
  }
  if (r.val_loss && !std::isfinite(*r.val_loss)) {
    what.push_back("the validation loss is " + value_name(*r.val_loss));
  }
  if (what.empty()) return "";
  std::string s = "the run did not train: ";
  for (size_t i = 0; i < what.size(); ++i) s += (i == 0 ? "" : "; ") + what[i];
  s += fmt::format(". Lower the learning rate (now {:g}), clip gradients (--clip 1.0)", lr);
  s += loss_scaled ? ", or use bf16 (fp32's range, no loss scaling)"
                   : ", or check the data for extreme values";
  return s;
}

}  // namespace mixp::train::detail
