// RunRecord <-> JSON. Field names are the `mixp train --json` ones (docs/architecture.md 4.3).
#include "study/run_record_json.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <string_view>

namespace mixp::study {
namespace detail {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Every key this file reads or writes; anything else goes to RunRecord::extra_json.
constexpr std::array<std::string_view, 27> kKnownKeys = {"model",
                                                         "precision",
                                                         "steps",
                                                         "skipped_steps",
                                                         "ms_per_step",
                                                         "samples_per_s",
                                                         "tokens_per_s",
                                                         "test_accuracy",
                                                         "val_loss",
                                                         "final_loss",
                                                         "peak_memory_bytes",
                                                         "peak_rss_bytes",
                                                         "train_time_s",
                                                         "energy_joules",
                                                         "energy_source",
                                                         "seed",
                                                         "diverged",
                                                         "trained",
                                                         "not_trained",
                                                         "diverged_at_step",
                                                         "error",
                                                         "loss_curve",
                                                         "loss_scale_trace",
                                                         "num_seeds",
                                                         "diverged_seeds",
                                                         "seeds",
                                                         "std"};

bool is_known(std::string_view key) {
  for (auto k : kKnownKeys) {
    if (k == key) return true;
  }
  return false;
}

[[noreturn]] void bad(std::string_view field, std::string_view expected, const json& got) {
  std::string shown = got.dump();
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  throw RecordError(
      fmt::format("run record: field \"{}\" must be {}, got {}", field, expected, shown));
}

const json* find(const json& j, std::string_view key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

double read_number(const json& v, std::string_view field) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v.is_number()) bad(field, "a number or null", v);
  return v.get<double>();
}

std::optional<double> read_opt_number(const json& j, std::string_view field) {
  const json* v = find(j, field);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number()) bad(field, "a number or null", *v);
  return v->get<double>();
}

int64_t read_int(const json& v, std::string_view field) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return int64_t(d);
  }
  bad(field, "an integer", v);
}

int64_t read_int_or(const json& j, std::string_view field, int64_t fallback) {
  const json* v = find(j, field);
  if (!v || v->is_null()) return fallback;
  return read_int(*v, field);
}

std::string read_string(const json& j, std::string_view field, bool required) {
  const json* v = find(j, field);
  if (!v || v->is_null()) {
    if (required) throw RecordError(fmt::format("run record: field \"{}\" is missing", field));
    return {};
  }
  if (!v->is_string()) bad(field, "a string", *v);
  return v->get<std::string>();
}

std::vector<std::pair<int64_t, double>> read_curve(const json& j, std::string_view field) {
  std::vector<std::pair<int64_t, double>> out;
  const json* v = find(j, field);
  if (!v || v->is_null()) return out;
  if (!v->is_array()) bad(field, "an array of [step, value] pairs", *v);
  out.reserve(v->size());
  for (const json& p : *v) {
    if (!p.is_array() || p.size() != 2) bad(field, "an array of [step, value] pairs", p);
    out.emplace_back(read_int(p[0], field), read_number(p[1], field));
  }
  return out;
}

ojson curve_to_json(const std::vector<std::pair<int64_t, double>>& c) {
  ojson a = ojson::array();
  for (const auto& [step, v] : c) a.push_back(ojson::array({step, number_or_null(v)}));
  return a;
}

}  // namespace

ojson number_or_null(double v) {
  return std::isfinite(v) ? ojson(v) : ojson(nullptr);
}
ojson number_or_null(const std::optional<double>& v) {
  return v ? number_or_null(*v) : ojson(nullptr);
}

ojson run_record_to_json(const RunRecord& r) {
  ojson j;
  j["model"] = r.model;
  j["precision"] = r.precision;
  j["steps"] = r.steps;
  j["skipped_steps"] = r.skipped_steps;
  j["ms_per_step"] = number_or_null(r.ms_per_step);
  j["samples_per_s"] = number_or_null(r.samples_per_s);
  if (r.tokens_per_s) j["tokens_per_s"] = number_or_null(r.tokens_per_s);
  if (r.test_accuracy || !r.val_loss) j["test_accuracy"] = number_or_null(r.test_accuracy);
  if (r.val_loss) j["val_loss"] = number_or_null(r.val_loss);
  j["final_loss"] = number_or_null(r.final_loss);
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["train_time_s"] = number_or_null(r.train_time_s);
  j["energy_joules"] = number_or_null(r.energy_joules);
  j["energy_source"] = r.energy_source;
  j["seed"] = r.seed;
  j["diverged"] = r.diverged;
  if (r.diverged_at_step) j["diverged_at_step"] = *r.diverged_at_step;
  if (r.error) j["error"] = *r.error;
  if (!r.extra_json.empty()) {
    ojson extra;
    try {
      extra = ojson::parse(r.extra_json);
    } catch (const nlohmann::json::exception& e) {
      throw RecordError(fmt::format("run record: extra_json is not valid JSON: {}", e.what()));
    }
    if (!extra.is_object()) throw RecordError("run record: extra_json must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (!is_known(it.key())) j[it.key()] = it.value();
    }
  }
  if (r.num_seeds > 1 || !r.seeds.empty()) {
    j["num_seeds"] = r.num_seeds;
    j["diverged_seeds"] = r.diverged_seeds;
    j["seeds"] = r.seeds;
    ojson sd = ojson::object();
    for (const auto& [k, v] : r.stddev) sd[k] = number_or_null(v);
    j["std"] = sd;
  }
  j["loss_curve"] = curve_to_json(r.loss_curve);
  j["loss_scale_trace"] = curve_to_json(r.loss_scale_trace);
  return j;
}

RunRecord run_record_from_json(const json& j) {
  if (!j.is_object()) throw RecordError("run record: expected a JSON object");
  RunRecord r;
  r.model = read_string(j, "model", true);
  r.precision = read_string(j, "precision", true);
  const json* steps = find(j, "steps");
  if (!steps) throw RecordError("run record: field \"steps\" is missing");
  r.steps = read_int(*steps, "steps");
  r.skipped_steps = read_int_or(j, "skipped_steps", 0);
  r.ms_per_step = read_opt_number(j, "ms_per_step").value_or(0.0);
  r.samples_per_s = read_opt_number(j, "samples_per_s").value_or(0.0);
  r.tokens_per_s = read_opt_number(j, "tokens_per_s");
  r.test_accuracy = read_opt_number(j, "test_accuracy");
  r.val_loss = read_opt_number(j, "val_loss");
  bool final_loss_null = false;
  if (const json* fl = find(j, "final_loss")) {
    r.final_loss = read_number(*fl, "final_loss");
    final_loss_null = !std::isfinite(r.final_loss);
  } else {
    r.final_loss = std::numeric_limits<double>::quiet_NaN();
  }
  r.peak_memory_bytes = read_int_or(j, "peak_memory_bytes", 0);
  r.peak_rss_bytes = read_int_or(j, "peak_rss_bytes", 0);
  r.train_time_s = read_opt_number(j, "train_time_s").value_or(0.0);
  r.energy_joules = read_opt_number(j, "energy_joules");
  std::string src = read_string(j, "energy_source", false);
  r.energy_source = src.empty() ? std::string(kEnergyUnavailable) : src;
  if (const json* seed = find(j, "seed"); seed && !seed->is_null()) {
    if (seed->is_number_unsigned()) {
      r.seed = seed->get<uint64_t>();
    } else {
      int64_t s = read_int(*seed, "seed");
      if (s < 0) bad("seed", "a non-negative integer", *seed);
      r.seed = uint64_t(s);
    }
  }
  if (const json* d = find(j, "diverged"); d && !d->is_null()) {
    if (!d->is_boolean()) bad("diverged", "true or false", *d);
    r.diverged = d->get<bool>();
  } else if (const json* t = find(j, "trained"); t && t->is_boolean()) {
    // A `mixp train --json` object: the Trainer's "did not train" is a diverged run.
    r.diverged = !t->get<bool>();
  } else {
    r.diverged = final_loss_null && !find(j, "error");
  }
  if (const json* d = find(j, "diverged_at_step"); d && !d->is_null()) {
    r.diverged_at_step = read_int(*d, "diverged_at_step");
  }
  if (const json* e = find(j, "error"); e && !e->is_null()) {
    if (!e->is_string()) bad("error", "a string", *e);
    r.error = e->get<std::string>();
  }
  r.loss_curve = read_curve(j, "loss_curve");
  r.loss_scale_trace = read_curve(j, "loss_scale_trace");
  r.num_seeds = int(read_int_or(j, "num_seeds", 1));
  if (r.num_seeds < 1) bad("num_seeds", "at least 1", j["num_seeds"]);
  r.diverged_seeds = int(read_int_or(j, "diverged_seeds", r.diverged && r.num_seeds == 1 ? 1 : 0));
  if (const json* s = find(j, "seeds"); s && !s->is_null()) {
    if (!s->is_array()) bad("seeds", "an array of integers", *s);
    for (const json& v : *s) r.seeds.push_back(uint64_t(read_int(v, "seeds")));
  }
  if (const json* sd = find(j, "std"); sd && !sd->is_null()) {
    if (!sd->is_object()) bad("std", "an object of numbers", *sd);
    for (auto it = sd->begin(); it != sd->end(); ++it) {
      r.stddev[it.key()] = read_number(it.value(), "std");
    }
  }
  ojson extra = ojson::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!is_known(it.key())) extra[it.key()] = it.value();
  }
  if (!extra.empty()) r.extra_json = extra.dump();
  return r;
}

}  // namespace detail

std::string to_json_string(const RunRecord& r, int indent) {
  return detail::run_record_to_json(r).dump(indent, ' ', false,
                                            nlohmann::json::error_handler_t::replace);
}

RunRecord run_record_from_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw RecordError(fmt::format("run record: not valid JSON ({})", e.what()));
  }
  return detail::run_record_from_json(j);
}

}  // namespace mixp::study
