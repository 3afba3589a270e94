#include "train_progress.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "mixp/train/metrics.h"

namespace mixp::cli {

namespace {
std::string clock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = int64_t(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}
}  // namespace

void ProgressBar::on_train_begin(int64_t first_step, int64_t total_steps) {
  first_step_ = first_step;
}

void ProgressBar::clear_line() {
  if (drawn_) std::fputs("\r\033[2K", stderr);
}

void ProgressBar::on_step_end(const train::StepInfo& s) {
  const double now = train::now_ms();
  // Redraw at most 10 times a second, and always for the last step.
  if (now - last_draw_ms_ < 100 && s.step < s.total_steps) return;
  last_draw_ms_ = now;
  const int64_t done = s.step - first_step_ + 1;
  const double rate = s.elapsed_s > 0 ? done / s.elapsed_s : 0;  // steps per second
  const double eta = rate > 0 ? double(s.total_steps - s.step) / rate : NAN;
  const double frac = s.total_steps > 0 ? double(s.step) / double(s.total_steps) : 1;
  const int width = 24;
  const int filled = int(frac * width);
  std::string bar(size_t(filled), '=');
  if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
  const double per_s = rate * double(lm_ ? s.tokens : s.samples);
  clear_line();
  std::fputs(fmt::format("step {}/{} [{}] loss {:.4f}  {:.0f} {}/s  ETA {}", s.step, s.total_steps,
                         bar, s.loss, per_s, lm_ ? "tokens" : "samples", clock(eta))
                 .c_str(),
             stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::on_evaluate_begin() {
  clear_line();
  std::fputs("evaluating...", stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::on_train_end() {
  clear_line();
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace mixp::cli
