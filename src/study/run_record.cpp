// Aggregation of K seeds of one precision into one RunRecord (mean, sample std per metric).
#include "mixp/study/run_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>

namespace mixp::study {
namespace {

constexpr std::array<std::string_view, 11> kMetricNames = {
    "ms_per_step",  "samples_per_s", "tokens_per_s",      "test_accuracy",
    "val_loss",     "final_loss",    "peak_memory_bytes", "peak_rss_bytes",
    "train_time_s", "energy_joules", "skipped_steps"};

// How one metric is read from and written to a record, and whether diverged seeds count.
struct Metric {
  std::string_view name;
  std::function<std::optional<double>(const RunRecord&)> get;
  std::function<void(RunRecord&, double)> set;
  bool finished_runs_only;  // quality and energy: a diverged seed has no meaningful value
};

std::optional<double> finite(double v) {
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}
std::optional<double> finite(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? v : std::nullopt;
}

const std::vector<Metric>& metrics() {
  static const std::vector<Metric> m = {
      {"ms_per_step", [](const RunRecord& r) { return finite(r.ms_per_step); },
       [](RunRecord& r, double v) { r.ms_per_step = v; }, false},
      {"samples_per_s", [](const RunRecord& r) { return finite(r.samples_per_s); },
       [](RunRecord& r, double v) { r.samples_per_s = v; }, false},
      {"tokens_per_s", [](const RunRecord& r) { return finite(r.tokens_per_s); },
       [](RunRecord& r, double v) { r.tokens_per_s = v; }, false},
      {"test_accuracy", [](const RunRecord& r) { return finite(r.test_accuracy); },
       [](RunRecord& r, double v) { r.test_accuracy = v; }, true},
      {"val_loss", [](const RunRecord& r) { return finite(r.val_loss); },
       [](RunRecord& r, double v) { r.val_loss = v; }, true},
      {"final_loss", [](const RunRecord& r) { return finite(r.final_loss); },
       [](RunRecord& r, double v) { r.final_loss = v; }, true},
      {"peak_memory_bytes",
       [](const RunRecord& r) { return std::optional<double>(double(r.peak_memory_bytes)); },
       [](RunRecord& r, double v) { r.peak_memory_bytes = int64_t(std::llround(v)); }, false},
      {"peak_rss_bytes",
       [](const RunRecord& r) { return std::optional<double>(double(r.peak_rss_bytes)); },
       [](RunRecord& r, double v) { r.peak_rss_bytes = int64_t(std::llround(v)); }, false},
      {"train_time_s", [](const RunRecord& r) { return finite(r.train_time_s); },
       [](RunRecord& r, double v) { r.train_time_s = v; }, false},
      {"energy_joules", [](const RunRecord& r) { return finite(r.energy_joules); },
       [](RunRecord& r, double v) { r.energy_joules = v; }, false},
      {"skipped_steps",
       [](const RunRecord& r) { return std::optional<double>(double(r.skipped_steps)); },
       [](RunRecord& r, double v) { r.skipped_steps = int64_t(std::llround(v)); }, false},
  };
  return m;
}

}  // namespace

std::span<const std::string_view> aggregated_metric_names() {
  return kMetricNames;
}

MeanStd mean_std(std::span<const double> values) {
  MeanStd out;
  out.n = int(values.size());
  if (values.empty()) return out;
  double sum = 0;
  for (double v : values) sum += v;
  out.mean = sum / double(values.size());
  if (values.size() >= 2) {
    double ss = 0;
    for (double v : values) ss += (v - out.mean) * (v - out.mean);
    out.stddev = std::sqrt(ss / double(values.size() - 1));
  }
  return out;
}

RunRecord aggregate_runs(std::span<const RunRecord> seeds) {
  if (seeds.empty()) throw RecordError("aggregate_runs: no runs to aggregate");
  const RunRecord& first = seeds.front();
  for (const RunRecord& r : seeds) {
    if (r.model != first.model || r.precision != first.precision) {
      throw RecordError(fmt::format(
          "aggregate_runs: runs of different model/precision ({}/{} and {}/{}); group them first "
          "(aggregate_by_precision)",
          first.model, first.precision, r.model, r.precision));
    }
  }
  if (seeds.size() == 1) return first;

  RunRecord out = first;
  out.num_seeds = int(seeds.size());
  out.seeds.clear();
  out.stddev.clear();
  out.diverged = false;
  out.diverged_at_step.reset();
  out.diverged_seeds = 0;
  out.error.reset();
  out.steps = 0;
  for (const RunRecord& r : seeds) {
    out.seeds.push_back(r.seed);
    out.steps = std::max(out.steps, r.steps);
    if (r.diverged) {
      out.diverged = true;
      out.diverged_seeds++;
      if (r.diverged_at_step &&
          (!out.diverged_at_step || *r.diverged_at_step < *out.diverged_at_step)) {
        out.diverged_at_step = r.diverged_at_step;
      }
    }
    if (r.error && !out.error) out.error = r.error;
    // Energy from different sources cannot be averaged; keep the first seed's source and count
    // only seeds that share it.
  }
  for (const Metric& m : metrics()) {
    std::vector<double> values;
    for (const RunRecord& r : seeds) {
      if (m.finished_runs_only && r.diverged) continue;
      if (m.name == "energy_joules" && r.energy_source != first.energy_source) continue;
      if (auto v = m.get(r)) values.push_back(*v);
    }
    if (values.empty()) {
      // No seed has it: leave the optional fields empty and the rest as a not-a-number marker.
      if (m.name == "final_loss") out.final_loss = std::numeric_limits<double>::quiet_NaN();
      if (m.name == "test_accuracy") out.test_accuracy.reset();
      if (m.name == "val_loss") out.val_loss.reset();
      if (m.name == "energy_joules") out.energy_joules.reset();
      if (m.name == "tokens_per_s") out.tokens_per_s.reset();
      continue;
    }
    MeanStd ms = mean_std(values);
    m.set(out, ms.mean);
    if (ms.n >= 2) out.stddev[std::string(m.name)] = ms.stddev;
  }

  // Mean loss curve on the first seed's steps, over the seeds that logged that step (finite).
  out.loss_curve.clear();
  if (!first.loss_curve.empty()) {
    std::vector<std::map<int64_t, double>> by_step;
    for (const RunRecord& r : seeds) {
      std::map<int64_t, double> m;
      for (const auto& [s, v] : r.loss_curve) m[s] = v;
      by_step.push_back(std::move(m));
    }
    for (const auto& [step, v0] : first.loss_curve) {
      double sum = 0;
      int n = 0;
      for (const auto& m : by_step) {
        auto it = m.find(step);
        if (it != m.end() && std::isfinite(it->second)) {
          sum += it->second;
          n++;
        }
      }
      out.loss_curve.emplace_back(step, n ? sum / n : std::numeric_limits<double>::quiet_NaN());
    }
  }
  return out;
}

std::vector<RunRecord> aggregate_by_precision(std::span<const RunRecord> runs) {
  std::vector<std::vector<RunRecord>> groups;
  for (const RunRecord& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return g.front().model == r.model && g.front().precision == r.precision;
    });
    if (it == groups.end()) {
      groups.push_back({r});
    } else {
      it->push_back(r);
    }
  }
  std::vector<RunRecord> out;
  out.reserve(groups.size());
  for (const auto& g : groups) out.push_back(aggregate_runs(g));
  return out;
}

}  // namespace mixp::study
