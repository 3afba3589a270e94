// write_study_report and the preparation shared by the four writers.
#include "mixp/study/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <system_error>

#include "mixp/io/atomic_file.h"
#include "mixp/study/energy_model.h"
#include "mixp/train/recipe_registry.h"
#include "study/report_detail.h"
#include "study/text_format.h"

namespace mixp::study {
namespace detail {

const char* const kCriteriaSource =
    "Criteria: speed-up > 2x, memory saving > 30%, accuracy loss < 0.5 percentage points (a "
    "gain passes), and no NaN; how each is decided is in docs/report.md, \"Verdicts\", and "
    "how the step times behind the speed-up are measured in docs/study.md, \"Timing in "
    "rounds\".";

std::string speed_text(const Verdict& v) {
  if (!v.speedup) return "–";
  std::string t = format_ratio(*v.speedup);
  if (v.speed_rounds > 1 && v.speedup_min && v.speedup_max) {
    t += fmt::format(" ({:.2f}–{:.2f}x)", *v.speedup_min, *v.speedup_max);
  }
  return t;
}

std::vector<std::string> speed_notes(const PreparedStudy& p) {
  std::vector<std::string> notes;
  const TimingRounds& t = p.study.timing;
  if (!t.precisions.empty()) {
    std::vector<std::string> per;
    for (const StepTiming& st : t.precisions) {
      if (st.round_ms.empty()) continue;
      const auto [lo, hi] = std::minmax_element(st.round_ms.begin(), st.round_ms.end());
      per.push_back(fmt::format("{} {} ms/step ({} to {})", st.precision,
                                format_sig(median_of(st.round_ms), 3), format_sig(*lo, 3),
                                format_sig(*hi, 3)));
    }
    notes.push_back(fmt::format(
        "Speed: each precision's step time was measured in {} interleaved rounds of {} steps "
        "(round r runs the precisions in the study's order rotated by r; docs/study.md, "
        "\"Timing in rounds\"); median and range over the rounds: {}.{}",
        t.rounds, t.steps_per_round, fmt::join(per, "; "),
        t.note.empty() ? "" : " " + t.note + "."));
  } else if (!t.note.empty()) {
    notes.push_back("Speed: not timed in rounds (" + t.note +
                    "); the speed-up compares the runs' median step times.");
  }
  std::vector<std::string> why;
  for (const Verdict& v : p.verdicts) {
    if (v.is_baseline || v.speed_reason.empty()) continue;
    why.push_back(v.precision + " " + v.speed_reason);
  }
  if (!why.empty()) {
    notes.push_back(fmt::format(
        "The speed-up check is pass or fail only when the target lies outside the range of the "
        "rounds' speed-ups, inconclusive otherwise: {}.",
        fmt::join(why, "; ")));
  }
  return notes;
}

PreparedStudy prepare_study(const StudyResults& s) {
  PreparedStudy p;
  p.study = s;
  p.study.runs = aggregate_by_precision(s.runs);
  if (p.study.runs.size() != s.runs.size()) p.seed_runs = s.runs;
  p.verdicts = compute_verdicts(p.study);
  p.recommendation = recommend(p.study, p.verdicts);
  p.summary = summary_sentence(p.study, p.verdicts, p.recommendation);
  for (const RunRecord& r : p.study.runs) {
    if (r.energy_joules) p.any_energy = true;
    if (r.energy_joules && r.energy_is_estimate()) p.any_estimate = true;
    if (!r.loss_scale_trace.empty()) p.any_loss_scale = true;
  }
  return p;
}

std::string energy_text(const RunRecord& r) {
  if (!r.energy_joules || !std::isfinite(*r.energy_joules)) return "n/a";
  std::string t = format_joules(*r.energy_joules);
  if (r.energy_is_estimate()) t += " (estimate)";
  return t;
}

std::string status_text(const RunRecord& r) {
  if (r.diverged) {
    std::string t = r.diverged_at_step ? fmt::format("diverged at step {}", *r.diverged_at_step)
                                       : std::string("diverged");
    if (r.num_seeds > 1) t += fmt::format(" ({} of {} seeds)", r.diverged_seeds, r.num_seeds);
    return t;
  }
  if (r.error) return "failed: " + *r.error;
  return "";
}

std::optional<double> spread(const RunRecord& r, const std::string& field, double value) {
  auto it = r.stddev.find(field);
  if (it == r.stddev.end() || !std::isfinite(it->second)) return std::nullopt;
  if (it->second <= 1e-9 * std::max(1.0, std::fabs(value))) return std::nullopt;
  return it->second;
}

std::string with_std(const RunRecord& r, const std::string& field, double value,
                     std::string (*format)(double), std::string (*std_format)(double)) {
  std::string t = format(value);
  if (auto sd = spread(r, field, value)) t += " ± " + (std_format ? std_format : format)(*sd);
  return t;
}

std::string format_spread(double v) {
  return format_sig(v, 2);
}

std::string energy_note(const PreparedStudy& p) {
  std::string note;
  if (p.any_estimate) {
    note = fmt::format(
        "Energy marked (estimate) is not measured: it is computed from the counted multiply-adds "
        "by precision and the bytes moved, priced with {}. It covers arithmetic and data movement "
        "only (45 nm, no idle power), so compare it between precisions, not with a power meter.",
        horowitz_45nm().citation);
  }
  bool rapl = false, nvml = false;
  for (const RunRecord& r : p.study.runs) {
    rapl |= r.energy_source == kEnergyRapl && r.energy_joules.has_value();
    nvml |= r.energy_source == kEnergyNvml && r.energy_joules.has_value();
  }
  if (rapl) {
    note += std::string(note.empty() ? "" : " ") +
            "Energy from rapl is measured by the CPU packages' RAPL counters (Linux powercap) over "
            "the training loop; it includes everything else the packages ran at the time.";
  }
  if (nvml) {
    note += std::string(note.empty() ? "" : " ") +
            "Energy from nvml is measured (NVML): the GPU board's energy counter over the training "
            "loop, GPU and its memory only (the host's share is not in it).";
  }
  if (!p.any_energy) note = "No energy was measured or estimated for these runs.";
  return note;
}

namespace {

std::optional<double> extra_number(const RunRecord& r, const char* key) {
  if (r.extra_json.empty()) return std::nullopt;
  const auto j = nlohmann::json::parse(r.extra_json, nullptr, false);
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

}  // namespace

std::string evaluated_model(const RunRecord& r) {
  if (r.extra_json.empty()) return "";
  const auto j = nlohmann::json::parse(r.extra_json, nullptr, false);
  if (!j.is_object() || !j.contains("evaluated_model") || !j["evaluated_model"].is_string()) {
    return "";
  }
  return j["evaluated_model"].get<std::string>();
}

std::string trainable_text(const RunRecord& r) {
  if (r.extra_json.empty()) return "";
  const auto j = nlohmann::json::parse(r.extra_json, nullptr, false);
  if (!j.is_object() || !j.contains("trainable_parameters") ||
      !j["trainable_parameters"].is_number())
    return "";
  const double t = j["trainable_parameters"].get<double>();
  const double all = j.contains("parameters") && j["parameters"].is_number()
                         ? j["parameters"].get<double>()
                         : 0;
  if (all <= 0) return format_count(int64_t(t));
  return fmt::format("{} of {} ({:.2g}%)", format_count(int64_t(t)), format_count(int64_t(all)),
                     100.0 * t / all);
}

std::vector<std::string> precision_notes(const PreparedStudy& p) {
  std::vector<std::string> notes;
  std::vector<std::string> fp8, block;
  for (const RunRecord& r : p.study.runs) {
    if (!train::is_recipe_family(r.precision, train::RecipeFamily::fp8)) continue;
    // The block-scaled recipes (docs/fp4.md) are emulated differently: a note of their own.
    const std::string base = r.precision.substr(0, r.precision.find(':'));
    (base == "fp8-block" || base == "nvfp4" || base == "mxfp4" ? block : fp8)
        .push_back(r.precision);
  }
  if (!block.empty()) {
    notes.push_back(fmt::format(
        "{}: emulated exactly on this CPU: each GEMM operand is quantized with the recipe's "
        "block quantizer (E4M3 with fp32 scales per 128 values or 128x128 block; E2M1 with E4M3 "
        "or E8M0 scales per 16 or 32 values) and multiplied as exact bf16 values with fp32 "
        "accumulation, the scales applied to the sums (docs/fp4.md). Its time is the "
        "emulation's, above what block-scaled tensor cores spend, and its memory holds "
        "dequantized copies.",
        fmt::join(block, ", ")));
  }
  if (!fp8.empty()) {
    notes.push_back(fmt::format(
        "{}: this CPU has no FP8 arithmetic, so the FP8 layers' operands are rounded to E4M3 "
        "(forward) and E5M2 (gradients) with their scales and multiplied exactly on the bf16 "
        "path with fp32 accumulation (docs/fp8.md). Its time is bf16's plus the quantization "
        "passes, its memory holds the codes in bf16 (2 bytes where FP8 hardware keeps 1), and "
        "its energy estimate prices the products as fp8 multiply-adds, as FP8 hardware would "
        "spend them.",
        fmt::join(fp8, ", ")));
  }
  // The low-bit recipes: the bottom of the ladder, judged plainly (docs/precision-guide.md,
  // "Below 8 bits").
  std::vector<std::string> lowbit;
  for (size_t i = 0; i < p.study.runs.size() && i < p.verdicts.size(); ++i) {
    const RunRecord& r = p.study.runs[i];
    if (!train::is_recipe_family(r.precision, train::RecipeFamily::lowbit_qat)) continue;
    const std::optional<double> d = p.verdicts[i].accuracy_delta_points;
    if (!d) {
      lowbit.push_back(r.precision + " (no accuracy to judge)");
      continue;
    }
    const double lost = -*d;
    const char* use = lost <= 1.0   ? "usable where int8 is"
                      : lost <= 3.0 ? "usable where its memory saving is worth a few points"
                      : lost <= 10.0
                          ? "only where size or XNOR speed matters more than accuracy"
                          : "not usable as trained here";
    lowbit.push_back(fmt::format("{} {:.2f} points {} ({})", r.precision, std::abs(lost),
                                 lost >= 0 ? "lost" : "gained", use));
  }
  if (!lowbit.empty()) {
    notes.push_back(fmt::format(
        "Below 8 bits (the bottom of the ladder; docs/precision-guide.md): {}. Each accuracy is "
        "that of the packed model (4-bit and 2-bit codes, ternary bit-planes, binary bits) "
        "converted after training, which equals the fake-quantized model's exactly; first and "
        "last layers stay int8. Their time, memory and energy are those of the fp32 training "
        "with fake quantization, not of packed inference (mixp eval --checkpoint DIR times the "
        "packed model; mixp bench gemm --dtypes int8,lowbit times the kernels).",
        fmt::join(lowbit, "; ")));
  }
  // One seed cannot separate a precision's effect from seed noise; say so where it matters.
  const bool one_seed = std::all_of(p.study.runs.begin(), p.study.runs.end(),
                                    [](const RunRecord& r) { return r.num_seeds <= 1; });
  if (one_seed && p.study.runs.size() > 1) {
    notes.push_back(
        "One seed per precision: differences of a few tenths of a point of accuracy (or a few "
        "percent of loss) can be seed-to-seed noise, and step times move with the machine's "
        "load. mixp compare --seeds 3 reports each metric as mean ± sd.");
  }
  for (const RunRecord& r : p.study.runs) {
    const train::RecipeTraits* t = train::find_recipe(r.precision);
    if (!t || t->accuracy != train::ReportedModel::converted_int8) continue;
    std::string n =
        "int8-qat trains in fp32 with fake quantization (observers, then int8 rounding in the "
        "forward pass); its accuracy is that of the int8 model converted after training";
    if (const auto fq = extra_number(r, "fake_quant_accuracy"); fq && std::isfinite(*fq)) {
      n += " (the fake-quantized model it was converted from: " + format_accuracy(*fq) + ")";
    }
    n += ". Its time, memory and energy are those of the fp32 training with fake quantization, "
         "not of int8 inference (mixp eval --checkpoint DIR times the int8 model; "
         "docs/quantization.md).";
    notes.push_back(n);
    break;
  }
  // Data-parallel studies (mpirun -np N mixp compare): what each precision's gradients cost on
  // the wire (train/data_parallel.h).
  std::vector<std::string> comm;
  double ranks = 0;
  std::string wire;
  for (const RunRecord& r : p.study.runs) {
    const auto n = extra_number(r, "ranks");
    const auto bytes = extra_number(r, "comm_bytes_per_step");
    const auto ms = extra_number(r, "comm_ms_per_step");
    if (!n || *n <= 1 || !bytes || !ms) continue;
    ranks = *n;
    const auto j = nlohmann::json::parse(r.extra_json, nullptr, false);
    if (j.is_object() && j.contains("grad_comm") && j["grad_comm"].is_string()) {
      wire = j["grad_comm"].get<std::string>();
    }
    comm.push_back(fmt::format("{} {} and {} ms", r.precision, format_bytes(*bytes),
                               format_number(*ms, 3)));
  }
  if (!comm.empty()) {
    notes.push_back(fmt::format(
        "Data-parallel over {:g} ranks, gradients sent in {} (docs/distributed.md); per step, "
        "each rank sent and spent in communication: {}.",
        ranks, wire, fmt::join(comm, "; ")));
  }
  return notes;
}

}  // namespace detail

std::string render_results_json(const StudyResults& s) {
  return detail::render_results_json(detail::prepare_study(s));
}
std::string render_results_csv(const StudyResults& s) {
  return detail::render_results_csv(detail::prepare_study(s));
}
std::string render_report_markdown(const StudyResults& s) {
  return detail::render_report_markdown(detail::prepare_study(s));
}
std::string render_report_html(const StudyResults& s) {
  return detail::render_report_html(detail::prepare_study(s));
}

namespace {
const char* const kStudyFiles[] = {"results.json", "results.csv", "report.md", "report.html"};

// Carries what else `from` holds (files the user put there, or anything under --force) into the
// staging folder by hard links (a copy where links fail), so that replacing the folder in one
// rename loses nothing but the previous study's own files.
void carry_over(const std::filesystem::path& from, const std::filesystem::path& to) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(from, ec)) return;
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path name = it->path().filename();
    bool ours = false;
    for (const char* f : kStudyFiles) ours = ours || name == f;
    if (ours) continue;
    const fs::path dst = to / name;
    const auto st = it->symlink_status(ec);
    if (fs::is_symlink(st)) {
      fs::copy_symlink(it->path(), dst, ec);
    } else if (fs::is_directory(st)) {
      fs::create_directory(dst, ec);
      if (!ec) carry_over(it->path(), dst);
    } else {
      fs::create_hard_link(it->path(), dst, ec);
      if (ec) fs::copy_file(it->path(), dst, ec);
    }
    if (ec) {
      throw IoError(
          fmt::format("cannot carry '{}' over into the new study folder: {}; nothing "
                      "was changed",
                      it->path().string(), ec.message()));
    }
  }
  if (ec) throw IoError(fmt::format("cannot list '{}': {}", from.string(), ec.message()));
}
}  // namespace

void write_study_report(const std::filesystem::path& out_dir, const StudyResults& s) {
  // Render everything first: an error here leaves the folder untouched.
  const detail::PreparedStudy p = detail::prepare_study(s);
  const std::string json = detail::render_results_json(p);
  const std::string csv = detail::render_results_csv(p);
  const std::string md = detail::render_report_markdown(p);
  const std::string html = detail::render_report_html(p);
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::absolute(out_dir, ec).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    throw IoError(
        fmt::format("cannot create the report folder '{}': {} (check the --out path and "
                    "its permissions)",
                    out_dir.string(), ec.message()));
  }
  // One unit: the four files are staged next to the folder and published by one rename, so a
  // failure (a full disk) or a concurrent study never leaves files of two studies side by side.
  write_directory_atomic(out_dir, [&](const std::filesystem::path& staging) {
    carry_over(out_dir, staging);
    write_text_atomic(staging / "results.json", json);
    write_text_atomic(staging / "results.csv", csv);
    write_text_atomic(staging / "report.md", md);
    write_text_atomic(staging / "report.html", html);
  });
}

}  // namespace mixp::study
