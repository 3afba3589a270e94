// results.csv: one row per run (aggregated per precision), RFC 4180 quoting, empty cell = absent.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "study/report_detail.h"

namespace mixp::study {
namespace detail {
namespace {

std::string csv_cell(std::string_view s) {
  if (s.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string num(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : std::string();
}
std::string num(const std::optional<double>& v) {
  return v ? num(*v) : std::string();
}
// Derived ratios: 12 significant digits, so 1 - 0.58 reads 0.42, not 0.42000000000000004.
std::string derived(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? fmt::format("{:.12g}", *v) : std::string();
}

// A field the study runner adds beside the train --json ones (extra_json), as text.
std::string extra_cell(const RunRecord& r, const char* key, const char* sub = nullptr) {
  if (r.extra_json.empty()) return "";
  const auto j = nlohmann::json::parse(r.extra_json, nullptr, false);
  if (!j.is_object() || !j.contains(key)) return "";
  const nlohmann::json* v = &j[key];
  if (sub) {
    if (!v->is_object() || !v->contains(sub)) return "";
    v = &(*v)[sub];
  }
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number()) return num(v->get<double>());
  return "";
}

struct Column {
  std::string name;
  std::function<std::string(const RunRecord&, const Verdict&)> cell;
};

const std::vector<Column>& columns() {
  static const std::vector<Column> cols = [] {
    std::vector<Column> c = {
        {"model", [](const RunRecord& r, const Verdict&) { return r.model; }},
        {"precision", [](const RunRecord& r, const Verdict&) { return r.precision; }},
        {"steps", [](const RunRecord& r, const Verdict&) { return std::to_string(r.steps); }},
        {"skipped_steps",
         [](const RunRecord& r, const Verdict&) { return num(double(r.skipped_steps)); }},
        {"ms_per_step", [](const RunRecord& r, const Verdict&) { return num(r.ms_per_step); }},
        {"samples_per_s", [](const RunRecord& r, const Verdict&) { return num(r.samples_per_s); }},
        {"tokens_per_s", [](const RunRecord& r, const Verdict&) { return num(r.tokens_per_s); }},
        {"test_accuracy", [](const RunRecord& r, const Verdict&) { return num(r.test_accuracy); }},
        {"val_loss", [](const RunRecord& r, const Verdict&) { return num(r.val_loss); }},
        {"final_loss", [](const RunRecord& r, const Verdict&) { return num(r.final_loss); }},
        {"peak_memory_bytes",
         [](const RunRecord& r, const Verdict&) { return std::to_string(r.peak_memory_bytes); }},
        {"peak_rss_bytes",
         [](const RunRecord& r, const Verdict&) { return std::to_string(r.peak_rss_bytes); }},
        {"train_time_s", [](const RunRecord& r, const Verdict&) { return num(r.train_time_s); }},
        {"energy_joules", [](const RunRecord& r, const Verdict&) { return num(r.energy_joules); }},
        {"energy_source", [](const RunRecord& r, const Verdict&) { return r.energy_source; }},
        {"seed", [](const RunRecord& r, const Verdict&) { return std::to_string(r.seed); }},
        {"diverged", [](const RunRecord& r,
                        const Verdict&) { return std::string(r.diverged ? "true" : "false"); }},
        {"diverged_at_step",
         [](const RunRecord& r, const Verdict&) {
           return r.diverged_at_step ? std::to_string(*r.diverged_at_step) : std::string();
         }},
        {"error", [](const RunRecord& r, const Verdict&) { return r.error.value_or(""); }},
        {"num_seeds",
         [](const RunRecord& r, const Verdict&) { return std::to_string(r.num_seeds); }},
    };
    for (std::string_view m : aggregated_metric_names()) {
      std::string key(m);
      c.push_back({key + "_std", [key](const RunRecord& r, const Verdict&) {
                     auto it = r.stddev.find(key);
                     return it == r.stddev.end() ? std::string() : num(it->second);
                   }});
    }
    c.push_back({"speedup", [](const RunRecord&, const Verdict& v) { return derived(v.speedup); }});
    // The timing rounds (docs/study.md, "Timing in rounds"): the speed-up's range, the check it
    // gives (pass, fail, inconclusive) and this precision's step time over the rounds.
    c.push_back(
        {"speedup_min", [](const RunRecord&, const Verdict& v) { return derived(v.speedup_min); }});
    c.push_back(
        {"speedup_max", [](const RunRecord&, const Verdict& v) { return derived(v.speedup_max); }});
    c.push_back({"speedup_check", [](const RunRecord&, const Verdict& v) {
                   return std::string(to_string(v.speedup_check));
                 }});
    c.push_back({"timed_ms_per_step_median",
                 [](const RunRecord&, const Verdict& v) { return derived(v.step_ms_median); }});
    c.push_back({"timed_ms_per_step_min",
                 [](const RunRecord&, const Verdict& v) { return derived(v.step_ms_min); }});
    c.push_back({"timed_ms_per_step_max",
                 [](const RunRecord&, const Verdict& v) { return derived(v.step_ms_max); }});
    c.push_back({"timing_rounds", [](const RunRecord&, const Verdict& v) {
                   return std::to_string(v.speed_rounds);
                 }});
    c.push_back({"memory_saving",
                 [](const RunRecord&, const Verdict& v) { return derived(v.memory_saving); }});
    c.push_back({"accuracy_delta_points", [](const RunRecord&, const Verdict& v) {
                   return derived(v.accuracy_delta_points);
                 }});
    c.push_back({"loss_increase",
                 [](const RunRecord&, const Verdict& v) { return derived(v.loss_increase); }});
    c.push_back({"energy_ratio",
                 [](const RunRecord&, const Verdict& v) { return derived(v.energy_ratio); }});
    c.push_back({"passes_all", [](const RunRecord&, const Verdict& v) {
                   return std::string(v.passes_all() ? "true" : "false");
                 }});
    c.push_back({"acceptable", [](const RunRecord&, const Verdict& v) {
                   return std::string(v.acceptable() ? "true" : "false");
                 }});
    // What the study runner adds: the energy estimate (also where RAPL measured), the format
    // its products were priced in, and the model whose accuracy is reported when it is not the
    // trained one (int8-qat).
    c.push_back({"energy_estimate_joules", [](const RunRecord& r, const Verdict&) {
                   return extra_cell(r, "energy_estimate_joules");
                 }});
    c.push_back({"estimate_compute_dtype", [](const RunRecord& r, const Verdict&) {
                   return extra_cell(r, "estimate_per_step", "compute_dtype");
                 }});
    c.push_back({"evaluated_model", [](const RunRecord& r, const Verdict&) {
                   return extra_cell(r, "evaluated_model");
                 }});
    return c;
  }();
  return cols;
}

}  // namespace

std::string render_results_csv(const PreparedStudy& p) {
  std::string out;
  const auto& cols = columns();
  for (size_t i = 0; i < cols.size(); ++i) {
    if (i) out += ',';
    out += cols[i].name;
  }
  out += "\n";
  for (size_t r = 0; r < p.study.runs.size(); ++r) {
    for (size_t i = 0; i < cols.size(); ++i) {
      if (i) out += ',';
      out += csv_cell(cols[i].cell(p.study.runs[r], p.verdicts[r]));
    }
    out += "\n";
  }
  return out;
}

}  // namespace detail

const std::vector<std::string>& results_csv_columns() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& c : detail::columns()) n.push_back(c.name);
    return n;
  }();
  return names;
}

}  // namespace mixp::study
