// run_study: one Trainer per precision and seed, a RunRecord per run, then the report.
#include "mixp/study/study_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "mixp/backend/backend.h"
#include "mixp/backend/nvml_energy.h"
#include "mixp/data/error.h"
#include "mixp/dist/process_group.h"
#include "mixp/io/atomic_file.h"
#include "mixp/study/energy_meter.h"
#include "mixp/study/report.h"
#include "mixp/study/step_counts.h"
#include "mixp/tensor/allocator.h"
#include "mixp/inspect/inspect_spec.h"
#include "mixp/train/build_run.h"
#include "mixp/train/inspect_callback.h"
#include "mixp/train/metrics.h"
#include "mixp/train/recipe.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/trainer.h"
#include "study/peak_rss.h"
#include "study/timing_rounds.h"
#include "util/text.h"

namespace mixp::study {

namespace {

using ::mixp::detail::join;

using train::ConfigError;

// Everything a run reports through the Trainer's callbacks, kept so that a run that stops
// early (the NaN guard) still has its curve, step times and energy.
class RunCollector final : public train::TrainCallback {
 public:
  RunCollector(const StudyProgress& progress, StudyEvent event)
      : progress_(progress), event_(std::move(event)) {}

  void on_train_begin(int64_t, int64_t) override {
    meter_.start();
    metering_ = meter_.available();
    // A run on a GPU: its board's energy from NVML (backend/nvml_energy.h), the number the
    // report shows for it (energy_source "nvml"); RAPL still measures the host.
    if (default_device().kind == DeviceKind::cuda) {
      gpu_meter_.emplace(default_device().index);
      gpu_meter_->start();
    }
  }
  void on_step_end(const train::StepInfo& info) override {
    steps = info.step;
    elapsed_s = info.elapsed_s;
    times.add(info.ms);
    if (info.skipped) ++skipped;
    loss_curve.emplace_back(info.step, info.loss);
    loss_scales.emplace_back(info.step, info.loss_scale);
    if (!std::isfinite(info.loss) && !first_nonfinite) first_nonfinite = info.step;
    if (metering_) meter_.sample();
    if (progress_) {
      StudyEvent e = event_;
      e.kind = StudyEvent::Kind::step;
      e.step = &info;
      progress_(e);
    }
  }
  void on_evaluate_begin() override {
    stop_meter();
    if (progress_) {
      StudyEvent e = event_;
      e.kind = StudyEvent::Kind::evaluate;
      progress_(e);
    }
  }
  void on_train_end() override { stop_meter(); }
  // After a run that threw: the meter still runs.
  void stop_meter() {
    stop_gpu_meter();
    if (!metering_) return;
    measured_joules = meter_.joules();
    metering_ = false;
  }
  void stop_gpu_meter() {
    if (gpu_meter_ && gpu_meter_->available() && !gpu_joules) gpu_joules = gpu_meter_->joules();
  }
  std::string gpu_reason() const { return gpu_meter_ ? gpu_meter_->unavailable_reason() : ""; }
  bool on_gpu() const { return gpu_meter_.has_value(); }
  bool rapl_available() const { return meter_.available(); }
  std::string rapl_reason() const { return meter_.unavailable_reason(); }

  int64_t steps = 0, skipped = 0;
  double elapsed_s = 0;
  train::StepTimes times;
  std::vector<std::pair<int64_t, double>> loss_curve, loss_scales;
  std::optional<int64_t> first_nonfinite;
  std::optional<double> measured_joules;
  std::optional<double> gpu_joules;  // NVML, runs on a cuda device

 private:
  const StudyProgress& progress_;
  StudyEvent event_;
  RaplEnergyMeter meter_;
  bool metering_ = false;
  std::optional<NvmlEnergyMeter> gpu_meter_;
};

bool all_ones(const std::vector<std::pair<int64_t, double>>& trace) {
  return std::all_of(trace.begin(), trace.end(), [](const auto& p) { return p.second == 1.0; });
}

nlohmann::ordered_json counts_json(const OpCounts& c, const StepPrecision& p) {
  nlohmann::ordered_json macs = nlohmann::ordered_json::object();
  for (int k = 0; k < kNumMacKinds; ++k) {
    if (c.macs[size_t(k)] > 0) macs[std::string(to_string(MacKind(k)))] = c.macs[size_t(k)];
  }
  return {{"compute_dtype", std::string(name(p.compute))},
          {"macs", macs},
          {"dram_bytes", c.dram_bytes},
          {"sram_bytes", c.sram_bytes},
          {"joules", estimate_joules(c)}};
}

struct RunSetup {
  train::TrainConfig config;
  int run_index = 0, run_count = 0;
};

// Fills the fields of a run that stopped early (diverged or failed during training) from what
// the callbacks saw.
void fill_from_collector(RunRecord& rec, const RunCollector& col, const train::TrainConfig& c) {
  rec.steps = col.steps;
  rec.skipped_steps = col.skipped;
  rec.ms_per_step = col.times.median_ms();
  rec.samples_per_s =
      rec.ms_per_step > 0 ? double(c.batch * c.grad_accum) * 1000.0 / rec.ms_per_step : 0;
  rec.final_loss = col.loss_curve.empty() ? NAN : col.loss_curve.back().second;
  rec.train_time_s = col.elapsed_s;
  rec.peak_memory_bytes = allocator_stats(default_device()).peak_allocated_bytes;
}

// The format whose overflow and underflow the report shows for a run: its own narrow compute
// format (FP8 recipes: E4M3 for the forward tensors, E5M2 for gradients); none for fp32 and
// wider.
std::optional<inspect::StatFormat> run_format(DType compute, inspect::Role role) {
  switch (compute) {
    case DType::bf16: return inspect::StatFormat::bf16;
    case DType::fp16: return inspect::StatFormat::fp16;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      return role == inspect::Role::activation_grad || role == inspect::Role::weight_grad
                 ? inspect::StatFormat::fp8_e5m2
                 : inspect::StatFormat::fp8_e4m3;
    default: return std::nullopt;
  }
}

// extra["inspect"]: {"format": ..., "cells": [[role, "module tensor", step, overflow, underflow,
// format], ...]} in the run's own format; extra["top_ops"]: the profiler's 8 largest rows.
void inspection_extra(train::InspectCallback& cb, DType compute,
                      nlohmann::ordered_json& extra) {
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  std::string formats;
  for (const inspect::StatRecord& r : cb.inspector()->records()) {
    const auto f = run_format(compute, r.role);
    if (!f) continue;
    for (const inspect::FormatStats& x : r.stats.formats) {
      if (x.format != *f) continue;
      const std::string row = (r.module.empty() ? std::string("(model)") : r.module) + " " +
                              r.tensor + (r.call > 0 ? fmt::format(" #{}", r.call) : "");
      cells.push_back({inspect::to_string(r.role), row, r.step, r.stats.fraction(x.overflow),
                       r.stats.fraction(x.underflow), inspect::to_string(x.format)});
    }
  }
  const auto fwd = run_format(compute, inspect::Role::activation);
  extra["inspect"] = {{"format", fwd ? inspect::to_string(*fwd) : "none"}, {"cells", cells}};
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  const inspect::Profiler* prof = cb.profiler();
  const double total = prof->total_ns();
  for (const inspect::ProfileRow& row : prof->rows()) {
    if (top.size() == 8) break;
    top.push_back({{"op", row.op},
                   {"dtype", row.dtype},
                   {"phase", mixp::to_string(row.phase)},
                   {"calls", row.calls},
                   {"ms", row.ns * 1e-6},
                   {"share", total > 0 ? row.ns / total : 0.0}});
  }
  extra["top_ops"] = top;
}

RunRecord run_one(const RunSetup& setup, const StudyConfig& sc, const StudyProgress& progress,
                  std::optional<StepTrace>& trace, std::string& data_description,
                  std::string& rapl_note) {
  const train::TrainConfig& c = setup.config;
  StudyEvent event;
  event.run_index = setup.run_index;
  event.run_count = setup.run_count;
  event.precision = c.precision;
  event.seed = c.seed;
  if (progress) progress(event);

  RunRecord rec;
  rec.model = c.model.name;
  rec.precision = c.precision;
  rec.seed = c.seed;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();

  // A fresh start for the memory numbers: cached blocks of the previous run go back to the
  // system, and the kernel's peak-RSS mark is reset to the current RSS.
  empty_cache();
  const bool rss_reset = detail::reset_peak_rss();

  std::unique_ptr<train::Trainer> trainer;
  try {
    trainer = std::make_unique<train::Trainer>(c);
  } catch (const data::DataError&) {
    throw;  // the data is the same for every run: nothing can run
  } catch (const std::exception& e) {
    rec.error = e.what();
    rec.final_loss = NAN;
    if (progress) {
      event.kind = StudyEvent::Kind::run_end;
      event.record = &rec;
      progress(event);
    }
    return rec;
  }
  const train::TrainConfig& rc = trainer->config();
  if (data_description.empty()) data_description = trainer->data_description();
  if (!trace) trace = trace_step_gemms(rc.model, rc.batch);
  const StepPrecision sp = step_precision(trainer->recipe().dtypes(), rc.optimizer);
  const OpCounts per_step = count_training_step(*trace, sp, rc.grad_accum);

  std::shared_ptr<train::InspectCallback> inspected;
  if (!sc.inspect.empty()) {
    train::InspectOptions io;
    io.inspect = inspect::parse_inspect_spec(sc.inspect);  // checked by run_study
    io.inspect->out = "/dev/null";                         // the records are kept in memory
    io.inspect->dump.clear();
    io.profile = true;
    inspected = std::make_shared<train::InspectCallback>(*trainer, io);
    trainer->add_callback(inspected);
  }
  auto col = std::make_shared<RunCollector>(progress, event);
  trainer->add_callback(col);
  try {
    const train::TrainResult r = trainer->fit();
    rec = run_record_from_json(train::result_to_json(r));
    // "Diverged" is the Trainer's "did not train" (train::TrainResult::trained, the rule of
    // docs/train.md that `mixp train` exits 1 on): one definition for both commands.
    rec.diverged = !r.trained;
    if (!r.trained) {
      rec.diverged_at_step = col->first_nonfinite.value_or(r.steps);
      extra["diverged_reason"] = r.not_trained;
    }
  } catch (const train::TrainError& e) {
    // The NaN guard: the loss or gradient norm of step N was not finite.
    col->stop_meter();
    fill_from_collector(rec, *col, rc);
    rec.diverged = true;
    rec.diverged_at_step = col->steps + 1;
    rec.final_loss = NAN;
    extra["diverged_reason"] = e.what();
    extra["threads"] = get_num_threads();
    extra["batch"] = rc.batch;
  } catch (const std::exception& e) {
    col->stop_meter();
    fill_from_collector(rec, *col, rc);
    rec.error = e.what();
    extra["threads"] = get_num_threads();
    extra["batch"] = rc.batch;
  }
  if (rss_reset) {
    if (auto p = detail::peak_rss_since_reset()) rec.peak_rss_bytes = *p;
  }
  // Start from the Trainer's extra fields (threads, batch, ...), then add the study's.
  if (!rec.extra_json.empty()) {
    const nlohmann::ordered_json trainer_extra = nlohmann::ordered_json::parse(rec.extra_json);
    for (const auto& [k, v] : trainer_extra.items()) extra[k] = v;
  }
  // A recipe that reports another model's accuracy (int8-qat: the converted int8 model; the
  // trained one is reported as "<label>_accuracy") says so.
  if (extra.contains(trainer->recipe().trained_model_label() + "_accuracy")) {
    const train::RecipeTraits* t = train::find_recipe(rc.precision);
    extra["evaluated_model"] = t && t->accuracy != train::ReportedModel::trained
                                   ? std::string(t->accuracy_note)
                                   : "the recipe's inference model, not the trained one";
  }
  rec.loss_curve = downsample_curve(col->loss_curve, sc.max_curve_points);
  rec.loss_scale_trace = all_ones(col->loss_scales)
                             ? std::vector<std::pair<int64_t, double>>{}
                             : downsample_steps(col->loss_scales, sc.max_curve_points);

  // Energy: measured when RAPL was readable, else the estimate from the counted operations.
  const double steps_done = double(col->steps);
  const double estimate = estimate_joules(per_step * steps_done);
  extra["energy_estimate_joules"] = estimate;
  extra["estimate_per_step"] = counts_json(per_step, sp);
  if (col->on_gpu()) {
    if (col->gpu_joules) {
      rec.energy_joules = col->gpu_joules;
      rec.energy_source = std::string(kEnergyNvml);
    } else {
      extra["nvml_unavailable"] = col->gpu_reason();
    }
    // The estimate models CPU arithmetic; a GPU run without NVML reports no energy.
    if (col->measured_joules) extra["host_rapl_joules"] = *col->measured_joules;
  } else if (col->measured_joules) {
    rec.energy_joules = col->measured_joules;
    rec.energy_source = std::string(kEnergyRapl);
  } else {
    rec.energy_joules = estimate;
    rec.energy_source = std::string(kEnergyEstimate);
    if (rapl_note.empty() && !col->rapl_available()) rapl_note = col->rapl_reason();
  }
  if (inspected) inspection_extra(*inspected, trainer->recipe().dtypes().compute, extra);
  if (!rss_reset) extra["peak_rss_note"] = "process peak (could not reset the peak per run)";
  rec.extra_json = extra.dump();

  if (progress) {
    event.kind = StudyEvent::Kind::run_end;
    event.record = &rec;
    progress(event);
  }
  return rec;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

std::string describe(const StudyConfig& sc, const train::TrainConfig& rc, int64_t steps,
                     const std::string& data) {
  std::string d = data.empty() ? rc.data : data;
  if (rc.steps > 0) {
    d += fmt::format(", {} steps", rc.steps);
  } else {
    const int64_t e = std::max<int64_t>(rc.epochs, 1);
    d += fmt::format(", {} epoch{} ({} steps)", e, e == 1 ? "" : "s", steps);
  }
  d += fmt::format(", batch {}", rc.batch);
  if (rc.grad_accum > 1) d += fmt::format(" x {}", rc.grad_accum);
  d += fmt::format(", {} lr {:g}", rc.optimizer, rc.lr);
  if (sc.seeds > 1) {
    d += fmt::format(", {} seeds ({}..{})", sc.seeds, rc.seed, rc.seed + uint64_t(sc.seeds - 1));
  } else {
    d += fmt::format(", seed {}", rc.seed);
  }
  return d;
}

}  // namespace

std::vector<std::string> default_study_precisions(std::string_view model) {
  return train::recipe_names({.model = model, .study_default = true});
}

void check_precisions(const std::vector<std::string>& precisions, std::string_view model) {
  const std::vector<std::string> have = train::available_recipes();
  const std::vector<std::string>& planned = train::planned_recipes();
  if (precisions.empty()) {
    throw ConfigError("no precision to compare; name some of: " + join(have));
  }
  std::set<std::string> seen;
  for (const auto& p : precisions) {
    if (!seen.insert(p).second) {
      throw ConfigError(fmt::format("precision '{}' is listed twice", p));
    }
    if (const train::RecipeTraits* t = train::find_recipe(p); t && !t->supports_model(model)) {
      throw ConfigError(fmt::format(
          "precision '{}' cannot train the {}: int8 quantization-aware training wraps the layers "
          "of the mlp and the cnn only (docs/quantization.md); drop it from --precisions or "
          "compare with --model mlp|cnn",
          p, model));
    }
    if (std::find(have.begin(), have.end(), p) != have.end()) continue;
    if (std::find(planned.begin(), planned.end(), p) == planned.end()) {
      // Not a preset name: a policy string the recipes accept ("bf16:params=fp32,...")?
      try {
        (void)train::make_recipe(p);
        continue;
      } catch (const std::exception&) {
      }
    }
    if (std::find(planned.begin(), planned.end(), p) != planned.end()) {
      throw ConfigError(
          fmt::format("precision '{}' is not available in this build yet; known precisions: {}", p,
                      join(have)));
    }
    throw ConfigError(fmt::format("unknown precision '{}'; known precisions: {}", p, join(have)));
  }
}

bool is_previous_study(const std::filesystem::path& dir) {
  std::ifstream in(dir / "results.json");
  if (!in) return false;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    return j.is_object() && j.contains("model") && j.contains("runs") && j["runs"].is_array() &&
           j.contains("verdicts") && j.contains("criteria");
  } catch (const std::exception&) {
    return false;
  }
}

void check_output_dir(const std::filesystem::path& dir, bool force) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw StudyError(
        fmt::format("refusing to write into {}: it exists and is not a folder", dir.string()));
  }
  if (force || is_previous_study(dir)) return;
  if (std::filesystem::is_empty(dir, ec)) return;  // an empty folder holds nothing to lose
  throw StudyError(fmt::format(
      "refusing to write into {}: it exists and is not a previous mixp study; use --force",
      dir.string()));
}

std::vector<std::pair<int64_t, double>> downsample_curve(
    const std::vector<std::pair<int64_t, double>>& curve, int max_points) {
  if (max_points < 2 || int64_t(curve.size()) <= max_points) return curve;
  const size_t stride = (curve.size() - 1 + size_t(max_points) - 2) / size_t(max_points - 1);
  std::vector<std::pair<int64_t, double>> out;
  for (size_t i = 0; i < curve.size(); i += stride) out.push_back(curve[i]);
  if (out.back() != curve.back()) out.push_back(curve.back());
  return out;
}

std::vector<std::pair<int64_t, double>> downsample_steps(
    const std::vector<std::pair<int64_t, double>>& trace, int max_points) {
  std::vector<std::pair<int64_t, double>> out;
  for (size_t i = 0; i < trace.size(); ++i) {
    if (i == 0 || i + 1 == trace.size() || trace[i].second != trace[i - 1].second) {
      out.push_back(trace[i]);
    }
  }
  return downsample_curve(out, max_points);
}

StudyOutcome run_study(const StudyConfig& sc, const StudyProgress& progress) {
  const std::vector<std::string> precisions =
      sc.precisions.empty() ? default_study_precisions(sc.base.model.name) : sc.precisions;
  check_precisions(precisions, sc.base.model.name);
  if (sc.seeds < 1) throw ConfigError(fmt::format("seeds must be at least 1, got {}", sc.seeds));
  if (!sc.inspect.empty()) {
    try {
      (void)inspect::parse_inspect_spec(sc.inspect);
    } catch (const inspect::InspectError& e) {
      throw ConfigError(e.what());
    }
  }
  // Under mpirun every rank runs the study (data-parallel runs); rank 0 alone writes the report.
  const bool writer = dist::world().rank() == 0;
  if (!sc.out_dir.empty() && writer) check_output_dir(sc.out_dir, sc.force);
  // A second study writing the same folder fails here, before its first run (io/atomic_file.h).
  std::optional<FolderLock> out_lock;
  if (!sc.out_dir.empty() && writer) out_lock.emplace(sc.out_dir);

  train::TrainConfig base = train::without_outputs(sc.base);
  base.precision = precisions.front();
  const train::TrainConfig resolved = base.resolved();  // a bad field fails before any run

  StudyOutcome out;
  StudyResults& s = out.results;
  s.model = resolved.model.name;
  s.generated_at = now_text();
  s.baseline_precision = std::find(precisions.begin(), precisions.end(), "fp32") != precisions.end()
                             ? "fp32"
                             : precisions[0];

  std::optional<StepTrace> trace;
  std::string data_description, rapl_note;
  const int count = sc.seeds * int(precisions.size());
  int index = 0;
  int64_t steps_seen = 0;
  // Seed-major: all precisions of one seed, then the next seed, so that slow drifts of the
  // machine's load spread over every precision instead of favouring the first ones.
  for (int k = 0; k < sc.seeds; ++k) {
    for (const auto& p : precisions) {
      RunSetup setup;
      setup.config = base;
      setup.config.precision = p;
      setup.config.seed = base.seed + uint64_t(k);
      setup.run_index = index++;
      setup.run_count = count;
      RunRecord r = run_one(setup, sc, progress, trace, data_description, rapl_note);
      if (!r.diverged && !r.error) {
        out.any_finished = true;
        steps_seen = std::max(steps_seen, r.steps);
      }
      s.runs.push_back(std::move(r));
    }
  }
  // The speed verdict's timing: the first seed's finished precisions, side by side in
  // interleaved rounds (study/timing_rounds.h).
  std::vector<detail::TimedCandidate> timed;
  for (const RunRecord& r : s.runs) {
    if (r.seed == base.seed && !r.diverged && !r.error && r.ms_per_step > 0) {
      timed.push_back({r.precision, r.ms_per_step, r.train_time_s, r.peak_memory_bytes});
    }
  }
  if (dist::world().size() > 1) {
    // Each rank would plan its rounds from its own step times, and ranks whose k differ would
    // wait in each other's collectives: data-parallel studies keep the runs' medians.
    s.timing.note = "not timed in rounds under data parallelism";
  } else {
    s.timing = detail::time_in_rounds(
        base, timed, {.rounds = sc.timing_rounds, .steps_per_round = sc.timing_steps});
  }
  s.machine = describe_this_machine(resolved.threads);
  // The thread count the runs used, as the Trainer reported it.
  for (const RunRecord& r : s.runs) {
    if (r.extra_json.empty()) continue;
    const auto j = nlohmann::json::parse(r.extra_json);
    if (j.contains("threads") && j["threads"].is_number_integer()) {
      s.machine.threads = j["threads"].get<int>();
      break;
    }
  }
  s.description = sc.description.empty() ? describe(sc, resolved, steps_seen, data_description)
                                         : sc.description;
  if (!rapl_note.empty())
    s.description += ". Energy estimated (RAPL unavailable: " + rapl_note + ")";
  if (!sc.out_dir.empty() && writer) write_study_report(sc.out_dir, s);
  return out;
}

}  // namespace mixp::study
