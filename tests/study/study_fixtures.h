// Crafted study results for the study tests: an fp32 baseline, a faster bf16 that keeps accuracy,
// an fp16 that diverges, and an fp8 that is fastest but loses one point of accuracy.
#pragma once
#include <cmath>
#include <limits>
#include <string>

#include "mixp/study/study_results.h"

namespace mixp::study::test {

inline RunRecord make_run(const std::string& precision, double ms_per_step, double accuracy,
                          int64_t peak_memory, double energy, double loss_shift = 0) {
  RunRecord r;
  r.model = "mlp";
  r.precision = precision;
  r.steps = 400;
  r.ms_per_step = ms_per_step;
  r.samples_per_s = 128.0 * 1000.0 / ms_per_step;
  r.test_accuracy = accuracy;
  r.final_loss = 0.31;
  r.peak_memory_bytes = peak_memory;
  r.peak_rss_bytes = peak_memory + 150'000'000;
  r.train_time_s = ms_per_step * 400 / 1000.0;
  r.energy_joules = energy;
  r.energy_source = "estimate";
  r.seed = 1;
  for (int s = 0; s <= 400; s += 10) {
    r.loss_curve.emplace_back(s, 2.3 * std::exp(-s / (90.0 + 60 * loss_shift)) + 0.3 + loss_shift +
                                     0.02 * std::sin(s * (0.37 + loss_shift)));
  }
  return r;
}

inline StudyResults crafted_study() {
  StudyResults s;
  s.model = "mlp";
  s.description = "Fashion-MNIST, 400 steps, batch 128";
  s.generated_at = "2025-01-01 12:00";
  s.machine.cpu_model = "Test CPU 9000";
  s.machine.cpu_features = {"avx2", "avx512f", "avx512_bf16"};
  s.machine.threads = 2;
  s.machine.os = "Linux 6.1 x86_64";

  RunRecord fp32 = make_run("fp32", 10.0, 0.8850, 100'000'000, 50.0);
  RunRecord bf16 = make_run("bf16", 5.5, 0.8840, 58'000'000, 21.0, 0.01);
  RunRecord fp16 = make_run("fp16", 5.0, 0.0, 57'000'000, 9.0);
  fp16.test_accuracy.reset();
  fp16.diverged = true;
  fp16.diverged_at_step = 120;
  fp16.final_loss = std::numeric_limits<double>::quiet_NaN();
  fp16.loss_curve.clear();
  for (int s = 0; s <= 120; s += 10) {
    fp16.loss_curve.emplace_back(s, s < 120 ? 2.3 * std::exp(-s / 80.0) + 0.3 + 0.002 * s
                                            : std::numeric_limits<double>::quiet_NaN());
  }
  for (int s = 0; s <= 120; s += 10) {
    fp16.loss_scale_trace.emplace_back(s, s < 60 ? 65536.0 : (s < 100 ? 8192.0 : 16.0));
  }
  fp16.skipped_steps = 14;
  RunRecord fp8 = make_run("fp8", 4.0, 0.8750, 40'000'000, 12.0, 0.06);
  fp8.loss_scale_trace = {{0, 65536.0}, {150, 32768.0}, {400, 32768.0}};
  fp8.skipped_steps = 1;
  s.runs = {fp32, bf16, fp16, fp8};
  return s;
}

}  // namespace mixp::study::test
