// The terminal summary of a study (format_study_table) and the one-line run result
// (format_run_line) that `mixp compare` prints.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "mixp/study/study_runner.h"
#include "mixp/study/verdict.h"
#include "study/report_detail.h"
#include "study/text_format.h"

namespace mixp::study {

namespace {

using namespace detail;

std::string with_sd(const RunRecord& r, const char* field, double v, std::string (*f)(double)) {
  std::string t = f(v);
  auto it = r.stddev.find(field);
  if (it != r.stddev.end() && std::isfinite(it->second) && it->second > 0)
    t += " ± " + f(it->second);
  return t;
}

std::string acc_points(double v) {
  return fmt::format("{:.2f}", 100 * v);
}
std::string loss4(double v) {
  return format_loss(v);
}
std::string ms3(double v) {
  return format_sig(v, 3);
}

// The report's status (report_detail.h), with "failed" and "ok" for the table's narrow column.
std::string status(const RunRecord& r) {
  if (r.diverged) return status_text(r);
  return r.error ? "failed" : "ok";
}

// Pads to `w` display columns (counting UTF-8 code points, so "±" is one column).
std::string pad(const std::string& s, size_t w, bool right = false) {
  size_t cols = 0;
  for (unsigned char c : s) cols += (c & 0xC0) != 0x80;
  if (cols >= w) return s;
  return right ? std::string(w - cols, ' ') + s : s + std::string(w - cols, ' ');
}

}  // namespace

std::string format_run_line(const RunRecord& r) {
  std::string who = fmt::format("{}  seed {}", r.precision, r.seed);
  if (r.diverged) {
    return fmt::format("{}: diverged at step {} (loss or gradient not finite){}", who,
                       r.diverged_at_step.value_or(r.steps),
                       r.skipped_steps ? fmt::format(", {} skipped steps", r.skipped_steps) : "");
  }
  if (r.error) return fmt::format("{}: failed: {}", who, *r.error);
  std::string q = r.test_accuracy ? "accuracy " + format_accuracy(*r.test_accuracy)
                                  : (r.val_loss ? "val loss " + format_loss(*r.val_loss) : "");
  std::string t = who + ": ";
  if (!q.empty()) t += q + ", ";
  t += fmt::format("loss {}, {} ms/step, {} training", format_loss(r.final_loss),
                   format_sig(r.ms_per_step, 3), format_duration(r.train_time_s));
  if (r.skipped_steps) t += fmt::format(", {} skipped steps", r.skipped_steps);
  return t;
}

std::string format_study_table(const StudyResults& in) {
  StudyResults s = in;
  s.runs = aggregate_by_precision(in.runs);
  const std::vector<Verdict> verdicts = compute_verdicts(s);
  const Recommendation rec = recommend(s, verdicts);
  const bool lm = std::none_of(s.runs.begin(), s.runs.end(),
                               [](const RunRecord& r) { return r.test_accuracy.has_value(); });

  std::vector<std::string> other_models;  // what the starred rows' accuracies are of
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"precision", lm ? "val loss" : "accuracy %", "final loss", "ms/step", "speed-up",
                  "peak memory", "energy", "status"});
  // LoRA studies: what each run trains (the adapters), next to its memory.
  const bool lora = std::any_of(s.runs.begin(), s.runs.end(), [](const RunRecord& r) {
    return !detail::trainable_text(r).empty();
  });
  if (lora) rows[0].insert(rows[0].begin() + 6, "trainable");
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const RunRecord& r = s.runs[i];
    const Verdict& v = verdicts[i];
    const bool done = !r.diverged && !r.error;
    std::string quality = "–";
    if (done && lm && r.val_loss) quality = with_sd(r, "val_loss", *r.val_loss, loss4);
    if (done && !lm && r.test_accuracy) {
      quality = with_sd(r, "test_accuracy", *r.test_accuracy, acc_points);
    }
    const std::string evaluated = detail::evaluated_model(r);
    const bool other_model = !evaluated.empty();
    if (other_model && std::find(other_models.begin(), other_models.end(), evaluated) ==
                           other_models.end()) {
      other_models.push_back(evaluated);
    }
    rows.push_back({
        r.precision + (other_model ? "*" : ""),
        quality,
        done ? with_sd(r, "final_loss", r.final_loss, loss4) : "–",
        // The timing rounds' median where the study has them (the speed-up's timing).
        v.step_ms_median ? ms3(*v.step_ms_median)
        : r.ms_per_step > 0 ? with_sd(r, "ms_per_step", r.ms_per_step, ms3)
                            : "–",
        v.is_baseline ? "baseline" : detail::speed_text(v),
        r.peak_memory_bytes > 0 ? format_bytes(double(r.peak_memory_bytes)) : "–",
        energy_text(r),
        status(r),
    });
    if (lora) {
      const std::string t = detail::trainable_text(r);
      rows.back().insert(rows.back().begin() + 6, t.empty() ? "all" : t);
    }
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      size_t cols = 0;
      for (unsigned char ch : row[c]) cols += (ch & 0xC0) != 0x80;
      width[c] = std::max(width[c], cols);
    }
  }
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string line;
    for (size_t c = 0; c < rows[i].size(); ++c) {
      const bool numeric = c >= 1 && c <= 5;
      line += pad(rows[i][c], width[c], numeric && i > 0) + (c + 1 < rows[i].size() ? "  " : "");
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  for (const RunRecord& r : s.runs) {
    if (r.error) out += fmt::format("{} failed: {}\n", r.precision, *r.error);
  }
  if (!other_models.empty()) {
    out += fmt::format(
        "* accuracy of the {}; time, memory and energy of its training (fp32 with fake "
        "quantization)\n",
        fmt::join(other_models, ", or the "));
  }
  if (!rec.precision.empty()) {
    out += fmt::format("\nrecommended: {}. {}\n", rec.precision, rec.reason);
  } else if (!rec.reason.empty()) {
    out += "\n" + rec.reason + "\n";
  }
  return out;
}

}  // namespace mixp::study
