// results.json: {"model", "machine", "baseline", "criteria", "timing", "runs", "seed_runs",
// "verdicts", "recommendation", "summary", "energy_note"}.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "study/report_detail.h"
#include "study/run_record_json.h"

namespace mixp::study::detail {
namespace {

using ojson = nlohmann::ordered_json;

ojson opt(const std::optional<double>& v) {
  return number_or_null(v);
}

ojson verdict_to_json(const Verdict& v) {
  ojson j;
  j["precision"] = v.precision;
  j["baseline"] = v.is_baseline;
  j["diverged"] = v.diverged;
  j["diverged_at_step"] = v.diverged_at_step ? ojson(*v.diverged_at_step) : ojson(nullptr);
  j["speedup"] = opt(v.speedup);
  // The range of the timing rounds' speed-ups, and this precision's step time over the rounds
  // (docs/study.md, "Timing in rounds").
  j["speedup_min"] = opt(v.speedup_min);
  j["speedup_max"] = opt(v.speedup_max);
  j["speed_rounds"] = v.speed_rounds;
  j["step_ms_median"] = opt(v.step_ms_median);
  j["step_ms_min"] = opt(v.step_ms_min);
  j["step_ms_max"] = opt(v.step_ms_max);
  j["speed_reason"] = v.speed_reason;
  j["time_ratio"] = opt(v.time_ratio);
  j["memory_ratio"] = opt(v.memory_ratio);
  j["memory_saving"] = opt(v.memory_saving);
  j["memory_metric"] = v.memory_from_rss ? "peak_rss_bytes" : "peak_memory_bytes";
  j["energy_ratio"] = opt(v.energy_ratio);
  j["quality_metric"] = to_string(v.quality);
  j["accuracy_delta_points"] = opt(v.accuracy_delta_points);
  j["loss_increase"] = opt(v.loss_increase);
  j["checks"] = {{"speedup", to_string(v.speedup_check)},
                 {"memory_saving", to_string(v.memory_check)},
                 {"accuracy", to_string(v.accuracy_check)},
                 {"no_nan", to_string(v.finite_check)}};
  j["passes_all"] = v.passes_all();
  j["acceptable"] = v.acceptable();
  return j;
}

}  // namespace

std::string render_results_json(const PreparedStudy& p) {
  const StudyResults& s = p.study;
  ojson j;
  j["model"] = s.model;
  if (!s.description.empty()) j["description"] = s.description;
  if (!s.generated_at.empty()) j["generated_at"] = s.generated_at;
  j["baseline"] = s.baseline_precision;
  j["machine"] = {{"cpu_model", s.machine.cpu_model},
                  {"cpu_features", s.machine.cpu_features},
                  {"threads", s.machine.threads},
                  {"gpu", s.machine.gpu},
                  {"os", s.machine.os}};
  j["criteria"] = {{"min_speedup", s.criteria.min_speedup},
                   {"min_memory_saving", s.criteria.min_memory_saving},
                   {"max_accuracy_loss_points", s.criteria.max_accuracy_loss_points},
                   {"max_loss_increase", s.criteria.max_loss_increase},
                   {"source", kCriteriaSource}};
  ojson timing = ojson::array();
  for (const StepTiming& t : s.timing.precisions) {
    ojson rounds = ojson::array();
    for (double ms : t.round_ms) rounds.push_back(number_or_null(ms));
    const auto [lo, hi] = std::minmax_element(t.round_ms.begin(), t.round_ms.end());
    timing.push_back({{"precision", t.precision},
                      {"median_ms", t.round_ms.empty() ? ojson(nullptr)
                                                       : number_or_null(median_of(t.round_ms))},
                      {"min_ms", t.round_ms.empty() ? ojson(nullptr) : number_or_null(*lo)},
                      {"max_ms", t.round_ms.empty() ? ojson(nullptr) : number_or_null(*hi)},
                      {"round_ms", std::move(rounds)}});
  }
  j["timing"] = {{"rounds", s.timing.rounds},
                 {"steps_per_round", s.timing.steps_per_round},
                 {"order", "rotating"},
                 {"precisions", std::move(timing)},
                 {"note", s.timing.note}};
  ojson runs = ojson::array();
  for (const RunRecord& r : s.runs) runs.push_back(run_record_to_json(r));
  j["runs"] = std::move(runs);
  if (!p.seed_runs.empty()) {
    ojson seeds = ojson::array();
    for (const RunRecord& r : p.seed_runs) seeds.push_back(run_record_to_json(r));
    j["seed_runs"] = std::move(seeds);
  }
  ojson verdicts = ojson::array();
  for (const Verdict& v : p.verdicts) verdicts.push_back(verdict_to_json(v));
  j["verdicts"] = std::move(verdicts);
  j["recommendation"] = {{"precision", p.recommendation.precision},
                         {"reason", p.recommendation.reason}};
  j["summary"] = p.summary;
  j["energy_note"] = energy_note(p);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace mixp::study::detail
