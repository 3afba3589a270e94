// The study's step timing in interleaved rounds (internal; docs/study.md, "Timing in rounds").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixp/study/study_results.h"
#include "mixp/train/train_config.h"

namespace mixp::study::detail {

// What the training runs of one seed measured, for planning the rounds.
struct TimedCandidate {
  std::string precision;
  double run_ms_per_step = 0;     // the run's median step
  double run_train_time_s = 0;    // the run's training loop
  int64_t peak_memory_bytes = 0;  // the run's peak tensor memory
};

struct TimingOptions {
  int rounds = 5;               // R (at least 3 are kept when the budget is tight)
  int64_t steps_per_round = 0;  // k; 0 = about kRoundTargetMs per precision and round
  double budget_fraction = 0.25;  // the rounds may add at most this share of the runs' time
};
inline constexpr double kRoundTargetMs = 40;
inline constexpr int64_t kMaxStepsPerRound = 50;

// How many rounds of how many steps fit the budget: k from the candidates' median step time
// (kRoundTargetMs per precision and round, 1..kMaxStepsPerRound steps), then k and R lowered so
// that R x k x (sum of the step times) stays within budget_fraction of the runs' training time,
// down to k = 1 and R = 3. Returns {R, k}. time_in_rounds passes the step times it measures
// itself (one untimed step per trainer after the warm-up), not the runs'.
std::pair<int, int64_t> plan_rounds(const std::vector<TimedCandidate>& c, const TimingOptions& o);

// Builds one Trainer per candidate from `base` (its precision replaced; no evaluation, no
// outputs; an image model keeps only 8 batches of its data, generated for Fashion-MNIST, which
// sets no step's cost), runs two untimed steps on each and a third to plan k (plan_rounds), then
// the rounds: round r runs k steps of every candidate, in the candidates' order rotated by r,
// each step timed with a steady clock; a round's value is the median of its k steps. The steps
// run through Trainer::train_steps, without the runs' per-step callbacks (progress, energy
// meter). A candidate whose Trainer cannot be built or whose steps throw is left out (the note
// says so); fewer than two candidates, or candidates that together held more than half this
// machine's memory in their runs, are not timed at all (an empty result with the reason).
TimingRounds time_in_rounds(const train::TrainConfig& base,
                            const std::vector<TimedCandidate>& candidates,
                            const TimingOptions& options);

}  // namespace mixp::study::detail
