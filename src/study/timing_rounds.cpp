// The step timing in interleaved rounds (study/timing_rounds.h).
//
// Why rounds: a precision's median over its own run is measured at another moment than the
// next precision's, so a change of the machine's load between two runs moves their ratio (a
// study on this project's shared 2-core machine gave bf16 1.4x fp32 once and 2.2x minutes later,
// issue 28). Timing every precision in short turns, in an order that rotates, spreads the load
// over all of them, and the rounds' spread says how far the ratio can be trusted (verdict.h).
#include "study/timing_rounds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "mixp/study/verdict.h"
#include "mixp/train/build_run.h"
#include "mixp/train/trainer.h"

namespace mixp::study::detail {
namespace {

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

}  // namespace

std::pair<int, int64_t> plan_rounds(const std::vector<TimedCandidate>& c, const TimingOptions& o) {
  std::vector<double> ms;
  double sum_ms = 0, train_s = 0;
  for (const TimedCandidate& t : c) {
    ms.push_back(t.run_ms_per_step);
    sum_ms += t.run_ms_per_step;
    train_s += t.run_train_time_s;
  }
  int rounds = std::max(o.rounds, 1);
  int64_t k = o.steps_per_round;
  if (k > 0 || sum_ms <= 0) return {rounds, std::max<int64_t>(k, 1)};
  k = std::clamp<int64_t>(std::llround(kRoundTargetMs / median_of(ms)), 1, kMaxStepsPerRound);
  const double budget_ms = o.budget_fraction * train_s * 1e3;
  if (budget_ms > 0 && double(rounds) * double(k) * sum_ms > budget_ms) {
    k = std::max<int64_t>(1, int64_t(budget_ms / (double(rounds) * sum_ms)));
    if (double(rounds) * double(k) * sum_ms > budget_ms) {
      rounds = std::clamp(int(budget_ms / sum_ms), std::min(3, rounds), rounds);
    }
  }
  return {rounds, k};
}

TimingRounds time_in_rounds(const train::TrainConfig& base,
                            const std::vector<TimedCandidate>& candidates,
                            const TimingOptions& options) {
  TimingRounds out;
  if (options.rounds <= 0) {
    out.note = "timing rounds turned off";
    return out;
  }
  if (candidates.size() < 2) {
    out.note = "fewer than two precisions finished";
    return out;
  }
  double held = 0;
  for (const TimedCandidate& c : candidates) held += double(c.peak_memory_bytes);
  const double phys = physical_memory_bytes();
  if (phys > 0 && held > 0.5 * phys) {
    out.note = fmt::format(
        "the precisions' trainers, built side by side, would hold {:.1f} GiB, more than half of "
        "this machine's {:.1f} GiB",
        held / double(1ll << 30), phys / double(1ll << 30));
    return out;
  }
  std::vector<std::string> left_out;
  std::vector<std::string> names;
  std::vector<std::unique_ptr<train::Trainer>> trainers;
  for (const TimedCandidate& c : candidates) {
    train::TrainConfig tc = train::without_outputs(base);
    tc.precision = c.precision;
    tc.evaluate = false;
    if (!train::is_language_model(tc.model.name)) {
      // An image model's step costs the same on any samples of the same shape: keep a few
      // batches instead of a copy of the whole data set per trainer, and for Fashion-MNIST
      // (28 x 28, 10 classes) generate them (the synthetic images have its shape) instead of
      // decompressing and parsing the 60000 images once more per precision.
      const int64_t keep =
          std::max<int64_t>(tc.batch, 1) * std::max<int64_t>(tc.grad_accum, 1) * 8;
      if (tc.data.empty() || tc.data == train::kFashionMnistData) {
        tc.data = train::kSyntheticData;
      }
      if (tc.train_limit == 0 || tc.train_limit > keep) tc.train_limit = keep;
      tc.test_limit = std::max<int64_t>(tc.batch, 1);
    }
    try {
      auto t = std::make_unique<train::Trainer>(tc);
      (void)t->train_steps(2);  // the first step allocates, the second has the optimizer states
      trainers.push_back(std::move(t));
      names.push_back(c.precision);
    } catch (const std::exception& e) {
      left_out.push_back(fmt::format("{} ({})", c.precision, e.what()));
    }
  }
  // k from the step the trainers take here (one more untimed step each): the runs' own step
  // times carry their data loading, callbacks and the load of their moment.
  std::vector<TimedCandidate> planned;
  for (size_t i = 0; i < trainers.size(); ++i) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      (void)trainers[i]->train_steps(1);
      const auto t1 = std::chrono::steady_clock::now();
      TimedCandidate c = *std::find_if(
          candidates.begin(), candidates.end(),
          [&](const TimedCandidate& x) { return x.precision == names[i]; });
      c.run_ms_per_step = std::chrono::duration<double, std::milli>(t1 - t0).count();
      planned.push_back(c);
    } catch (const std::exception&) {
      // judged in the rounds below
    }
  }
  const auto [rounds, k] = plan_rounds(planned.empty() ? candidates : planned, options);
  std::vector<std::vector<double>> times(trainers.size());
  std::vector<bool> failed(trainers.size(), false);
  for (int r = 0; r < rounds && trainers.size() >= 2; ++r) {
    for (size_t j = 0; j < trainers.size(); ++j) {
      const size_t i = (j + size_t(r)) % trainers.size();
      if (failed[i]) continue;
      try {
        // The round's value is the median of its k steps, so that one step the scheduler
        // interrupted does not move it.
        std::vector<double> steps;
        for (int64_t n = 0; n < k; ++n) {
          const auto t0 = std::chrono::steady_clock::now();
          (void)trainers[i]->train_steps(1);
          const auto t1 = std::chrono::steady_clock::now();
          steps.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        times[i].push_back(median_of(std::move(steps)));
      } catch (const std::exception& e) {
        failed[i] = true;
        left_out.push_back(fmt::format("{} ({})", names[i], e.what()));
      }
    }
  }
  trainers.clear();
  out.rounds = rounds;
  out.steps_per_round = k;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!failed[i] && int(times[i].size()) == rounds) {
      out.precisions.push_back({names[i], times[i]});
    }
  }
  if (out.precisions.size() < 2) out.precisions.clear();
  if (!left_out.empty()) {
    out.note = fmt::format("not timed in rounds: {}", fmt::join(left_out, "; "));
  }
  return out;
}

}  // namespace mixp::study::detail
