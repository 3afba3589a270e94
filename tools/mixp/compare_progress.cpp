#include "compare_progress.h"

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
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}
std::string prefix(const study::StudyEvent& e) {
  return fmt::format("[{}/{}] ", e.run_index + 1, e.run_count);
}
}  // namespace

void CompareProgress::clear_line() {
  if (drawn_) std::fputs("\r\033[2K", stderr);
  drawn_ = false;
}

void CompareProgress::operator()(const study::StudyEvent& e) {
  using Kind = study::StudyEvent::Kind;
  switch (e.kind) {
    case Kind::run_begin:
      if (!live_) last_draw_ms_ = -1;  // the 30 s of the plain lines count from the run's start
      if (live_) {
        clear_line();
        std::fputs((prefix(e) + e.precision + ": loading data and building the model...").c_str(),
                   stderr);
        drawn_ = true;
        last_draw_ms_ = -1e9;
      }
      break;
    case Kind::step: {
      if (!e.step) break;
      const train::StepInfo& s = *e.step;
      const double now = train::now_ms();
      if (!live_) {
        // A log or pipe gets a plain line every 30 s of a long run (a gpt2 run takes minutes),
        // so that it shows the study is alive and how far it is.
        if (last_draw_ms_ < 0) last_draw_ms_ = now;
        if (now - last_draw_ms_ < 30000 || s.step >= s.total_steps) break;
        last_draw_ms_ = now;
        const double eta =
            s.step > 0 ? s.elapsed_s / double(s.step) * double(s.total_steps - s.step) : NAN;
        std::fputs(fmt::format("{}{} step {}/{} loss {:.4f} ETA {}\n", prefix(e), e.precision,
                               s.step, s.total_steps, s.loss, clock(eta))
                       .c_str(),
                   stderr);
        break;
      }
      if (now - last_draw_ms_ < 100 && s.step < s.total_steps) break;
      last_draw_ms_ = now;
      const double frac = s.total_steps > 0 ? double(s.step) / double(s.total_steps) : 1;
      const int width = 20;
      const int filled = std::min(width, int(frac * width));
      std::string bar(size_t(filled), '=');
      if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
      const double eta =
          s.step > 0 ? s.elapsed_s / double(s.step) * double(s.total_steps - s.step) : NAN;
      clear_line();
      std::fputs(fmt::format("{}{} step {}/{} [{}] loss {:.4f}{}  ETA {}", prefix(e), e.precision,
                             s.step, s.total_steps, bar, s.loss,
                             s.loss_scale != 1.0 ? fmt::format(" scale {:g}", s.loss_scale) : "",
                             clock(eta))
                     .c_str(),
                 stderr);
      drawn_ = true;
      break;
    }
    case Kind::evaluate:
      if (live_) {
        clear_line();
        std::fputs((prefix(e) + e.precision + ": evaluating...").c_str(), stderr);
        drawn_ = true;
      }
      break;
    case Kind::run_end:
      clear_line();
      if (e.record)
        std::fputs((prefix(e) + study::format_run_line(*e.record) + "\n").c_str(), stderr);
      break;
  }
  std::fflush(stderr);
}

}  // namespace mixp::cli
