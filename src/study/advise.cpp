// `mixp advise` (advise.h): the statistics run, the advisor's decision, the verification runs, the
// measured choice and the three symptoms.
#include "mixp/study/advise.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "mixp/bench/gemm_bench.h"
#include "mixp/inspect/inspect_report.h"
#include "mixp/optim/optimizer.h"
#include "mixp/tensor/allocator.h"
#include "mixp/train/build_run.h"
#include "mixp/train/inspect_callback.h"
#include "mixp/train/trainer.h"

namespace mixp::study {
namespace {

using inspect::LayerAdvice;
using inspect::LayerFormat;

void say(const AdviseOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

std::string pct(double f) {
  return fmt::format("{:.1f}%", 100 * f);
}

// For fractions that may be tiny: three significant digits.
std::string pct3(double f) {
  return fmt::format("{:.3g}%", 100 * f);
}

train::TrainConfig quiet(train::TrainConfig c) {
  c = train::without_outputs(std::move(c));
  c.layer_precision.clear();
  return c;
}

// The statistics run: the forward tensors and output gradients of every module.
std::vector<inspect::StatRecord> statistics_run(const AdviseOptions& o) {
  if (o.reference != "fp32" && o.reference != "bf16") {
    throw train::ConfigError(fmt::format(
        "--reference {}: the statistics come from an fp32 or a bf16 run (the formats to judge "
        "are the narrower ones)",
        o.reference));
  }
  train::TrainConfig c = quiet(o.base);
  c.precision = o.reference;
  c.steps = o.stats_steps;
  c.epochs = 0;
  c.evaluate = false;
  train::Trainer t(c);
  train::InspectOptions io;
  inspect::InspectSpec spec = inspect::parse_inspect_spec(fmt::format(
      "every={},roles=activation+activation-grad+weight,formats=fp16+bf16+fp8_e4m3+mxfp8,"
      "out=/dev/null",
      std::max<int64_t>(1, o.inspect_every)));
  io.inspect = spec;
  auto cb = std::make_shared<train::InspectCallback>(t, io);
  t.add_callback(cb);
  t.fit();
  return cb->inspector()->records();
}

// One verification run; its Trainer is kept in `keep` for the interleaved timing rounds.
VerifyRun verify(const AdviseOptions& o, const std::string& label, const std::string& precision,
                 const std::string& rules, std::unique_ptr<train::Trainer>& keep) {
  train::TrainConfig c = quiet(o.base);
  c.precision = precision;
  c.layer_precision = rules;
  c.steps = o.verify_steps;
  c.epochs = 0;
  c.evaluate = true;
  // The earlier runs' Trainers are still alive (for the timing rounds): their tensors are not
  // this run's memory.
  const double before = double(allocator_stats(default_device()).allocated_bytes);
  keep = std::make_unique<train::Trainer>(c);
  train::Trainer& t = *keep;
  train::InspectOptions io;
  io.profile = true;
  auto cb = std::make_shared<train::InspectCallback>(t, io);
  t.add_callback(cb);
  VerifyRun v;
  v.label = label;
  v.precision = precision;
  v.layer_precision = rules;
  const train::TrainResult r = t.fit();
  v.ms_per_step = v.fit_ms_per_step = r.ms_per_step;
  if (r.test_accuracy) v.accuracy = 100 * *r.test_accuracy;
  v.val_loss = r.val_loss ? r.val_loss : r.test_loss;
  v.final_loss = r.final_loss;
  v.finite = std::isfinite(r.final_loss) && (!v.val_loss || std::isfinite(*v.val_loss));
  double total = 0, casts = 0, fp32 = 0, ln = 0, gemm = 0, all_gemm = 0;
  const std::vector<inspect::ProfileRow> rows = cb->profiler()->rows();  // largest first
  for (const inspect::ProfileRow& row : rows) {
    total += row.ns;
    if (row.dtype.find("->") != std::string::npos) casts += row.ns;
    if (row.dtype == "fp32") fp32 += row.ns;
    if (row.op.find("layer_norm") != std::string::npos) ln += row.ns;
    const bool narrow = row.dtype == "bf16" || row.dtype == "fp16";
    const bool is_gemm = row.op == "matmul" || row.op.rfind("linear", 0) == 0;
    if (narrow && is_gemm) gemm += row.ns;
    if (is_gemm) all_gemm += row.ns;
  }
  int shown = 0;
  for (const inspect::ProfileRow& row : rows) {
    if (shown == 3 || total <= 0) break;
    if (row.dtype != "fp32" && row.dtype.find("->") == std::string::npos) continue;
    v.top_fixed += fmt::format("{}{} {} {} {}", shown++ ? ", " : "", row.op, row.dtype,
                               mixp::to_string(row.phase), pct(row.ns / total));
  }
  if (total > 0) {
    v.cast_share = casts / total;
    v.fp32_share = fp32 / total;
    v.layer_norm_share = ln / total;
    v.gemm_share = gemm / total;
    v.all_gemm_share = all_gemm / total;
  }
  const double train_ms = r.train_time_s * 1e3;
  if (train_ms > 0) v.outside_share = std::max(0.0, 1 - total * 1e-6 / train_ms);
  v.peak = double(r.peak_memory_bytes) - before;
  for (const optim::ParamState& p : t.optimizer().params()) {
    v.params += double(p.param.nbytes());
    if (p.master.defined()) v.masters += double(p.master.nbytes());
    for (const Tensor& s : p.slots) v.states += double(s.nbytes());
    if (p.param.grad().defined()) v.grads += double(p.param.grad().nbytes());
  }
  say(o, fmt::format("  {:<16} {:>8.2f} ms/step  {}", label, v.ms_per_step,
                     v.accuracy ? fmt::format("accuracy {:.2f}%", *v.accuracy)
                                : fmt::format("val loss {:.4f}", v.val_loss.value_or(NAN))));
  return v;
}


// JSON has no inf or NaN: written as strings, as the CLI's other JSON (tools/mixp/output.h).
using Json = nlohmann::ordered_json;
Json num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string mib(double b) {
  return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0));
}

std::vector<std::string> symptoms(const AdviseResult& r) {
  std::vector<std::string> s;
  const VerifyRun& f = r.runs[0];
  const VerifyRun& b = r.runs[1];
  s.push_back(fmt::format(
      "no speed-up: in the bf16 run {} of kernel time is casts and {} fp32 kernels{} (largest: "
      "{}), time bf16 cannot shorten; its 16-bit GEMMs are {} of it; bf16 {:.2f} ms/step vs fp32 "
      "{:.2f} ({:.2f}x)",
      pct(b.cast_share), pct(b.fp32_share),
      b.layer_norm_share > 0 ? fmt::format(", LayerNorm alone {}", pct(b.layer_norm_share)) : "",
      b.top_fixed.empty() ? std::string("none") : b.top_fixed, pct(b.gemm_share), b.ms_per_step,
      f.ms_per_step, b.ms_per_step > 0 ? f.ms_per_step / b.ms_per_step : 0.0));
  const double fixed = b.params + b.masters + b.states + b.grads;
  s.push_back(fmt::format(
      "no memory saving: in the bf16 run the parameters ({}), fp32 master copies ({}), optimizer "
      "states ({}) and gradients ({}) are {} of the {} peak of tracked tensors; mixed precision "
      "shrinks none of them, only the activations (fp32 peak {})",
      mib(b.params), mib(b.masters), mib(b.states), mib(b.grads),
      b.peak > 0 ? pct(fixed / b.peak) : std::string("n/a"), mib(b.peak), mib(f.peak)));
  // What fp16 and unscaled fp8 would do to this model's tensors.
  const LayerAdvice* worst_ov = nullptr;
  const LayerAdvice* worst_un = nullptr;
  const LayerAdvice* worst_e4m3 = nullptr;
  for (const LayerAdvice& a : r.layers) {
    if (!worst_ov || a.numbers.fp16_overflow > worst_ov->numbers.fp16_overflow) worst_ov = &a;
    if (!worst_un || a.numbers.grad_fp16_underflow > worst_un->numbers.grad_fp16_underflow)
      worst_un = &a;
    if (!worst_e4m3 || a.numbers.e4m3_overflow > worst_e4m3->numbers.e4m3_overflow)
      worst_e4m3 = &a;
  }
  std::string nan = "loss NaN: ";
  if (worst_ov && worst_ov->numbers.fp16_overflow > 0) {
    nan += fmt::format("fp16 overflows {} of {}'s forward tensors (inf, then NaN): keep it in bf16",
                       pct3(worst_ov->numbers.fp16_overflow), worst_ov->module);
  } else {
    nan += "no forward tensor of this model overflows fp16";
  }
  if (worst_un && worst_un->numbers.grad_fp16_underflow > 0) {
    nan += fmt::format(
        "; without loss scaling fp16 flushes up to {} of a layer's output gradient to zero ({}), "
        "which is what fp16's loss scaler is for",
        pct3(worst_un->numbers.grad_fp16_underflow), worst_un->module);
  } else if (worst_un) {
    nan += "; fp16 flushes none of the output gradients, even unscaled";
  }
  if (worst_e4m3 && worst_e4m3->numbers.e4m3_overflow > 0) {
    nan += fmt::format("; unscaled E4M3 would overflow {} of {} (FP8 needs its per-tensor scale)",
                       pct3(worst_e4m3->numbers.e4m3_overflow), worst_e4m3->module);
  }
  const auto bad = std::find_if(r.runs.begin(), r.runs.end(),
                                [](const VerifyRun& v) { return !v.finite; });
  nan += bad == r.runs.end()
             ? "; no verification run went non-finite"
             : fmt::format("; the verification run {} went non-finite", bad->label);
  s.push_back(nan);
  return s;
}

// The predicted step time and error of a candidate that runs each Linear layer in
// `format_of(layer)`: fp32's step with its GEMM time rescaled (weights: the layers' weight sizes).
void predict(VerifyRun& v, const AdviseResult& r, double fp32_ms, double gemm_share,
             const std::function<LayerFormat(const LayerAdvice&)>& format_of) {
  double total = 0, scaled = 0;
  for (const LayerAdvice& a : r.layers) {
    const double w = double(std::max<int64_t>(1, a.weight_numel));
    const LayerFormat f = format_of(a);
    total += w;
    scaled += w / (f == LayerFormat::fp8    ? r.gemm_speedup_fp8
                   : f == LayerFormat::bf16 ? r.gemm_speedup_bf16
                                            : 1.0);
    const double e = f == LayerFormat::fp8    ? a.numbers.fp8_rel_mse
                     : f == LayerFormat::bf16 ? a.numbers.bf16_rel_mse
                                              : 0.0;
    v.predicted_rel_mse = std::max(v.predicted_rel_mse, e);
  }
  v.predicted_ms = fp32_ms * ((1 - gemm_share) + gemm_share * (total > 0 ? scaled / total : 1));
}

}  // namespace

AdviseResult run_advise(const AdviseOptions& o) {
  if (o.verify_steps < 2)
    throw train::ConfigError("--steps must be at least 2 (the first step is not timed)");
  AdviseResult r;
  r.model = o.base.model.name;
  std::vector<inspect::StatRecord> records;
  if (!o.stats_file.empty()) {
    say(o, "statistics: reading " + o.stats_file);
    records = inspect::read_inspect_jsonl(o.stats_file);
    if (records.empty())
      throw inspect::InspectError(o.stats_file + " holds no --inspect record");
    r.stats_source = o.stats_file;
  } else {
    say(o, fmt::format("statistics: {} steps of {} with --inspect", o.stats_steps, o.reference));
    records = statistics_run(o);
    r.stats_source = fmt::format("{} steps of {} (inspected every {})", o.stats_steps, o.reference,
                                 o.inspect_every);
  }
  r.layers = inspect::advise_layers(records, o.limits);

  // What each format's GEMM costs on this machine, for the predictions.
  {
    bench::GemmBenchConfig g;
    g.n = 512;
    g.dtypes = {DType::fp32, DType::bf16, DType::fp8_e4m3};
    g.threads = o.base.threads;
    g.repeat = 3;
    g.peak_seconds = 0.01;
    for (const bench::GemmBenchResult& x : bench::run_gemm_bench(g)) {
      if (x.dtype == DType::bf16) r.gemm_speedup_bf16 = x.speedup_vs_fp32.value_or(1);
      if (x.dtype == DType::fp8_e4m3) r.gemm_speedup_fp8 = x.speedup_vs_fp32.value_or(1);
    }
    say(o, fmt::format("GEMM bench (n = 512): bf16 {:.2f}x fp32, fp8 (emulated) {:.2f}x fp32",
                       r.gemm_speedup_bf16, r.gemm_speedup_fp8));
  }
  say(o, fmt::format("verification: {} steps each", o.verify_steps));
  std::vector<std::unique_ptr<train::Trainer>> trainers(4);
  r.runs.push_back(verify(o, "fp32", "fp32", "", trainers[0]));
  // Predictions as ratios to fp32 here; in ms once fp32's step time is final (below).
  const double fp32_ms = 1.0, g = r.runs[0].all_gemm_share;
  auto run_candidate = [&](const std::string& label, const std::string& precision,
                           const std::string& rules,
                           const std::function<LayerFormat(const LayerAdvice&)>& format_of) {
    VerifyRun pred;
    predict(pred, r, fp32_ms, g, format_of);
    VerifyRun v = verify(o, label, precision, rules, trainers[r.runs.size()]);
    v.predicted_ms = pred.predicted_ms;
    v.predicted_rel_mse = pred.predicted_rel_mse;
    r.runs.push_back(std::move(v));
  };
  run_candidate("bf16", "bf16", "", [](const LayerAdvice&) { return LayerFormat::bf16; });
  const std::string fp8_rules = inspect::fp8_layer_rules(r.layers);
  if (!fp8_rules.empty()) {
    run_candidate("proposal: fp8", "fp8", fp8_rules,
                  [](const LayerAdvice& a) { return a.choice; });
  }
  const std::string bf16_rules = inspect::bf16_layer_rules(r.layers);
  if (!bf16_rules.empty()) {
    run_candidate("proposal: bf16", "bf16", bf16_rules, [](const LayerAdvice& a) {
      return a.choice == LayerFormat::fp32 ? LayerFormat::fp32 : LayerFormat::bf16;
    });
  }
  r.runs[0].predicted_ms = 1.0;
  // The runs above ran one after the other, so a change of the machine's load between them
  // shows as a speed difference. The step times that decide come from interleaved rounds: each
  // run's Trainer trains `timing_steps` more steps in turn, `timing_rounds` times; the median of
  // its rounds is its ms/step (the quality numbers stay those of the runs above).
  if (o.timing_rounds > 0) {
    const int64_t k = o.timing_steps > 0 ? std::max<int64_t>(2, o.timing_steps)
                                         : std::max<int64_t>(10, o.verify_steps / 10);
    say(o, fmt::format("timing: {} interleaved rounds of {} steps per run", o.timing_rounds, k));
    std::vector<std::vector<double>> ms(r.runs.size());
    for (int round = 0; round < o.timing_rounds; ++round) {
      for (size_t i = 0; i < r.runs.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        trainers[i]->train_steps(k);
        const double el = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count();
        ms[i].push_back(el / double(k));
      }
    }
    for (size_t i = 0; i < r.runs.size(); ++i) {
      std::sort(ms[i].begin(), ms[i].end());
      r.runs[i].ms_per_step = ms[i][ms[i].size() / 2];
      say(o, fmt::format("  {:<16} {:>8.2f} ms/step (rounds: {:.2f})", r.runs[i].label,
                         r.runs[i].ms_per_step, fmt::join(ms[i], ", ")));
    }
    r.timing = fmt::format("median of {} interleaved rounds of {} steps per run", o.timing_rounds,
                           k);
  } else {
    r.timing = "median step of each verification run (run one after the other)";
  }
  trainers.clear();
  for (VerifyRun& v : r.runs) v.predicted_ms *= r.runs[0].ms_per_step;

  const VerifyRun& ref = r.runs[0];
  for (VerifyRun& v : r.runs) {
    if (!v.finite) continue;
    if (v.accuracy && ref.accuracy) {
      v.within_tolerance = *v.accuracy >= *ref.accuracy - o.max_accuracy_drop;
    } else if (v.val_loss && ref.val_loss) {
      v.within_tolerance = *v.val_loss <= *ref.val_loss * (1 + o.max_loss_rise);
    }
  }
  // Candidates in order of simplicity (bf16, then the advised policies; fp32 is the reference,
  // not a candidate): a later one replaces the one kept only when it is within tolerance and
  // faster by more than min_gain, so that timing noise never buys a more complex policy.
  std::optional<size_t> best;
  for (size_t i = 1; i < r.runs.size(); ++i) {
    if (!r.runs[i].within_tolerance) continue;
    if (!best || r.runs[i].ms_per_step < r.runs[*best].ms_per_step * (1 - o.min_gain)) best = i;
  }
  const VerifyRun& bf = r.runs[1];
  if (best) {
    r.chosen = *best;
  } else {
    r.chosen = 0;  // nothing narrower holds the quality: stay in fp32
  }
  const VerifyRun& p = r.runs[r.chosen];
  r.as_fast_as_bf16 = p.ms_per_step <= bf.ms_per_step;
  auto quality = [](const VerifyRun& v) {
    return v.accuracy ? fmt::format("accuracy {:.2f}%", *v.accuracy)
                      : fmt::format("val loss {:.4f}", v.val_loss.value_or(NAN));
  };
  if (!best) {
    r.why = "no narrower precision kept the quality of fp32 within the tolerance: stay in fp32";
  } else {
    r.why = fmt::format("{} is the fastest run within the tolerance of fp32 ({:.2f} ms/step, {}; "
                        "fp32 {:.2f} ms/step, {})",
                        p.label, p.ms_per_step, quality(p), ref.ms_per_step, quality(ref));
    for (size_t i = 2; i < r.runs.size(); ++i) {
      const VerifyRun& c = r.runs[i];
      if (i == r.chosen) continue;
      if (c.precision == "fp8" && c.within_tolerance) {
        r.why += fmt::format(
            "; the FP8 policy keeps the quality ({}) but is not faster by more than {} here "
            "({:.2f} ms/step, {:.2f}x bf16): this CPU has no FP8 GEMM, so mixp emulates it "
            "(quantize to FP8 codes, then a bf16 GEMM; {} of its training time is outside the "
            "profiled backend kernels, the FP8 layers' own quantize and GEMM calls among it, "
            "against {} for bf16), which pays only on hardware with FP8 matrix units",
            quality(c), pct(o.min_gain), c.ms_per_step,
            bf.ms_per_step > 0 ? c.ms_per_step / bf.ms_per_step : 0.0, pct(c.outside_share),
            pct(bf.outside_share));
      } else if (c.within_tolerance) {
        r.why += fmt::format("; {} is not faster by more than {} ({:.2f} ms/step)", c.label,
                             pct(o.min_gain), c.ms_per_step);
      } else if (!c.within_tolerance) {
        r.why += fmt::format("; {} loses too much ({})", c.label, quality(c));
      }
    }
  }
  r.symptoms = symptoms(r);
  return r;
}

std::string advise_text(const AdviseResult& r) {
  std::string s = fmt::format("statistics: {}\n", r.stats_source);
  s += fmt::format("{:<22} {:<6} {:>9} {:>9} {:>10} {:>10} {:>9} {:>8}  {}\n", "layer", "fits",
                   "fp16 ovf", "bf16 mse", "mx underf", "mx mse", "grad rng", "choice",
                   "rule: why");
  for (const LayerAdvice& a : r.layers) {
    std::string fits = std::string(a.fits_fp8 ? "8" : "") + (a.fits_bf16 ? "b" : "") +
                       (a.fits_fp16 ? "h" : "");
    s += fmt::format("{:<22} {:<6} {:>8.3f}% {:>9.2e} {:>9.3f}% {:>10.2e} {:>9.1f} {:>8}  {}: {}\n",
                     a.module, fits, 100 * a.numbers.fp16_overflow, a.numbers.bf16_rel_mse,
                     100 * a.numbers.fp8_underflow, a.numbers.fp8_rel_mse, a.numbers.grad_range,
                     to_string(a.choice), a.rule, a.reason);
  }
  s += "(fits: 8 = fp8 with a per-tensor scale, b = bf16, h = fp16; mse relative to rms^2)\n\n";
  s += fmt::format("timing: {}\n", r.timing);
  s += fmt::format("predicted: fp32's step with its GEMM share ({}) rescaled by the GEMM bench "
                   "(n = 512: bf16 {:.2f}x, fp8 {:.2f}x fp32) per layer; error: the largest "
                   "relative MSE its formats add to a layer\n",
                   pct(r.runs[0].all_gemm_share), r.gemm_speedup_bf16, r.gemm_speedup_fp8);
  s += fmt::format("{:<16} {:<9} {:<40} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>5}\n", "run",
                   "precision", "--layer-precision", "predicted", "ms/step", "(in run)",
                   "error", "quality", "vs fp32", "ok");
  const VerifyRun& ref = r.runs[0];
  for (const VerifyRun& v : r.runs) {
    const std::string q = v.accuracy ? fmt::format("{:.2f}%", *v.accuracy)
                                     : fmt::format("{:.4f}", v.val_loss.value_or(NAN));
    const std::string d =
        v.accuracy && ref.accuracy ? fmt::format("{:+.2f}", *v.accuracy - *ref.accuracy)
        : v.val_loss && ref.val_loss
            ? fmt::format("{:+.2f}%", 100 * (*v.val_loss / *ref.val_loss - 1))
            : std::string("-");
    s += fmt::format("{:<16} {:<9} {:<40} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2e} {:>10} {:>8} {:>5}\n",
                     v.label, v.precision, v.layer_precision.empty() ? "-" : v.layer_precision,
                     v.predicted_ms, v.ms_per_step, v.fit_ms_per_step, v.predicted_rel_mse, q, d,
                     &v == &ref ? "ref" : v.within_tolerance ? "yes" : "no");
  }
  const VerifyRun& p = r.proposal();
  s += fmt::format("\nproposal: --precision {}{}\n", p.precision,
                   p.layer_precision.empty() ? ""
                                             : " --layer-precision '" + p.layer_precision + "'");
  s += "why: " + r.why + "\n";
  for (const std::string& x : r.symptoms) s += x + "\n";
  return s;
}

std::string advise_json(const AdviseResult& r) {
  Json j;
  j["model"] = r.model;
  j["statistics"] = r.stats_source;
  j["timing"] = r.timing;
  j["gemm_speedup_vs_fp32"] = {{"bf16", r.gemm_speedup_bf16}, {"fp8", r.gemm_speedup_fp8}};
  auto& layers = j["layers"] = Json::array();
  for (const LayerAdvice& a : r.layers) {
    const inspect::LayerNumbers& n = a.numbers;
    layers.push_back({{"module", a.module},
                      {"kind", a.kind},
                      {"fits", {{"fp8", a.fits_fp8}, {"bf16", a.fits_bf16}, {"fp16", a.fits_fp16}}},
                      {"choice", to_string(a.choice)},
                      {"rule", a.rule},
                      {"reason", a.reason},
                      {"numbers",
                       {{"nonfinite", n.nonfinite},
                        {"fp16_overflow", n.fp16_overflow},
                        {"bf16_overflow", n.bf16_overflow},
                        {"bf16_rel_mse", n.bf16_rel_mse},
                        {"mxfp8_underflow", n.fp8_underflow},
                        {"mxfp8_rel_mse", n.fp8_rel_mse},
                        {"e4m3_overflow", n.e4m3_overflow},
                        {"grad_dynamic_range", n.grad_range},
                        {"grad_fp16_underflow", n.grad_fp16_underflow}}}});
  }
  auto& runs = j["runs"] = Json::array();
  for (const VerifyRun& v : r.runs) {
    Json x = {{"label", v.label},
                        {"precision", v.precision},
                        {"layer_precision", v.layer_precision},
                        {"ms_per_step", num(v.ms_per_step)},
                        {"run_ms_per_step", num(v.fit_ms_per_step)},
                        {"predicted_ms_per_step", num(v.predicted_ms)},
                        {"predicted_rel_mse", num(v.predicted_rel_mse)},
                        {"final_loss", num(v.final_loss)},
                        {"finite", v.finite},
                        {"within_tolerance", v.within_tolerance},
                        {"profile",
                         {{"cast_share", v.cast_share},
                          {"fp32_share", v.fp32_share},
                          {"layer_norm_share", v.layer_norm_share},
                          {"gemm_share", v.gemm_share},
                          {"outside_kernels_share", v.outside_share}}},
                        {"memory",
                         {{"peak_bytes", v.peak},
                          {"parameters", v.params},
                          {"masters", v.masters},
                          {"optimizer_states", v.states},
                          {"gradients", v.grads}}}};
    x["accuracy"] = v.accuracy ? num(*v.accuracy) : Json(nullptr);
    x["val_loss"] = v.val_loss ? num(*v.val_loss) : Json(nullptr);
    runs.push_back(x);
  }
  const VerifyRun& p = r.proposal();
  j["proposal"] = {{"precision", p.precision},
                   {"layer_precision", p.layer_precision},
                   {"run", p.label},
                   {"as_fast_as_bf16", r.as_fast_as_bf16},
                   {"why", r.why}};
  j["symptoms"] = r.symptoms;
  return j.dump();
}

}  // namespace mixp::study
