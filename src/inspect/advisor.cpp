// The advisor's rules (advisor.h): the worst numbers of each Linear layer, then the first rule
// that fires.
#include "mixp/inspect/advisor.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace mixp::inspect {
namespace {

const FormatStats* format_of(const TensorStats& s, StatFormat f) {
  for (const FormatStats& x : s.formats)
    if (x.format == f) return &x;
  return nullptr;
}

double rel_mse(const TensorStats& s, const FormatStats& f) {
  const double ms = s.rms * s.rms;
  return ms > 0 ? f.mse / ms : 0.0;
}

bool is_linear_kind(const std::string& k) {
  return k == "linear" || k == "head";
}

std::string pct(double f) {
  return fmt::format("{:.3g}%", 100 * f);
}

}  // namespace

const char* to_string(LayerFormat f) {
  switch (f) {
    case LayerFormat::fp8: return "fp8";
    case LayerFormat::bf16: return "bf16";
    case LayerFormat::fp32: return "fp32";
  }
  return "?";
}

std::vector<LayerAdvice> advise_layers(const std::vector<StatRecord>& records,
                                       const AdviceThresholds& t) {
  // The Linear layers: the modules whose output was recorded with a Linear kind.
  std::vector<LayerAdvice> out;
  std::map<std::string, size_t> index;
  for (const StatRecord& r : records) {
    if (r.role != Role::activation || !is_linear_kind(r.kind) || index.count(r.module)) continue;
    index[r.module] = out.size();
    LayerAdvice a;
    a.module = r.module;
    a.kind = r.kind;
    out.push_back(std::move(a));
  }
  if (out.empty()) {
    throw InspectError(
        "the statistics hold no Linear layer's output (role activation of a module of kind linear "
        "or head); record them with --inspect roles=activation+activation-grad+weight");
  }
  for (const StatRecord& r : records) {
    const auto it = index.find(r.module);
    if (it == index.end()) continue;
    LayerNumbers& n = out[it->second].numbers;
    const TensorStats& s = r.stats;
    if (r.role == Role::weight && r.tensor == "weight") out[it->second].weight_numel = s.numel;
    n.nonfinite += s.nan + s.inf;
    if (r.role == Role::fp8_operand) {
      // Step 1 is skipped: delayed scaling's first pass casts with TE's initial scale 1, before
      // any amax was seen (fp8_scaling.h), and flushes small weights at any history length.
      if (r.step <= 1) continue;
      // The share of the nonzero values the cast flushed (zeros, e.g. after ReLU's mask, are
      // not flushed: they were zero already).
      const int64_t nonzero = s.numel - s.zeros - s.nan - s.inf;
      for (const FormatStats& f : s.formats) {
        const double share = nonzero > 0 ? double(f.underflow) / double(nonzero) : 0.0;
        if (share > n.fp8_flush) {
          n.fp8_flush = share;
          n.fp8_flush_operand = r.tensor;
          n.fp8_flush_format = to_string(f.format);
          n.fp8_flush_step = r.step;
        }
      }
      continue;
    }
    const bool forward =
        r.role == Role::activation || (r.role == Role::weight && r.tensor == "weight");
    const bool grad = r.role == Role::activation_grad;
    if (!forward && !grad) continue;
    if (const FormatStats* f = format_of(s, StatFormat::bf16)) {
      n.bf16_overflow = std::max(n.bf16_overflow, s.fraction(f->overflow));
      if (forward) n.bf16_rel_mse = std::max(n.bf16_rel_mse, rel_mse(s, *f));
    }
    if (grad) {
      n.grad_range = std::max(n.grad_range, s.dynamic_range);
      if (const FormatStats* f = format_of(s, StatFormat::fp16))
        n.grad_fp16_underflow = std::max(n.grad_fp16_underflow, s.fraction(f->underflow));
      continue;
    }
    if (const FormatStats* f = format_of(s, StatFormat::fp16))
      n.fp16_overflow = std::max(n.fp16_overflow, s.fraction(f->overflow));
    if (const FormatStats* f = format_of(s, StatFormat::fp8_e4m3))
      n.e4m3_overflow = std::max(n.e4m3_overflow, s.fraction(f->overflow));
    if (const FormatStats* f = format_of(s, StatFormat::mxfp8)) {
      n.fp8_underflow = std::max(n.fp8_underflow, s.fraction(f->underflow));
      const double e = rel_mse(s, *f);
      if (e >= n.fp8_rel_mse) {
        n.fp8_rel_mse = e;
        n.worst_fp8_tensor = r.tensor;
      }
    }
  }
  for (LayerAdvice& a : out) {
    const LayerNumbers& n = a.numbers;
    a.fits_fp16 = n.nonfinite == 0 && n.fp16_overflow == 0;
    a.fits_bf16 = n.nonfinite == 0 && n.bf16_overflow == 0 && n.bf16_rel_mse <= t.max_bf16_rel_mse;
    a.fits_fp8 = a.fits_bf16 && n.fp8_flush <= t.max_fp8_flush &&
                 n.fp8_underflow <= t.max_fp8_underflow &&
                 n.fp8_rel_mse <= t.max_fp8_rel_mse && n.grad_range <= t.max_grad_range;
    auto decide = [&](LayerFormat f, const char* rule, std::string reason) {
      a.choice = f;
      a.rule = rule;
      a.reason = std::move(reason);
    };
    if (n.nonfinite > 0) {
      decide(LayerFormat::fp32, "nonfinite",
             fmt::format("{} NaN/inf values in the reference run", n.nonfinite));
    } else if (n.bf16_overflow > 0) {
      decide(LayerFormat::fp32, "bf16-overflow",
             fmt::format("{} of its values overflow bf16", pct(n.bf16_overflow)));
    } else if (n.bf16_rel_mse > t.max_bf16_rel_mse) {
      decide(LayerFormat::fp32, "bf16-error",
             fmt::format("bf16 relative MSE {:.3g} > {:.3g}", n.bf16_rel_mse, t.max_bf16_rel_mse));
    } else if (a.kind == "head") {
      decide(LayerFormat::bf16, "head",
             fmt::format("the output layer: its error goes straight into the loss (mxfp8 "
                         "relative MSE {:.3g} would be added to the logits)",
                         n.fp8_rel_mse));
    } else if (n.fp8_flush > t.max_fp8_flush) {
      decide(LayerFormat::bf16, "fp8-flush",
             fmt::format("its FP8 cast of {} ({}) flushed {} of the nonzero values to zero at "
                         "step {} (limit {}): the scale came from an amax far above the values "
                         "(a long amax history keeps an early large one); use a shorter history "
                         "(fp8:amax_history=16 or amax_algo=most_recent), fp8-current, or bf16 "
                         "for this layer",
                         n.fp8_flush_operand, n.fp8_flush_format, pct(n.fp8_flush),
                         n.fp8_flush_step, pct(t.max_fp8_flush)));
    } else if (n.fp8_underflow > t.max_fp8_underflow) {
      decide(LayerFormat::bf16, "fp8-underflow",
             fmt::format("mxfp8 flushes {} of a forward tensor to zero (limit {})",
                         pct(n.fp8_underflow), pct(t.max_fp8_underflow)));
    } else if (n.fp8_rel_mse > t.max_fp8_rel_mse) {
      decide(LayerFormat::bf16, "fp8-error",
             fmt::format("mxfp8 relative MSE {:.3g} of its {} > {:.3g}", n.fp8_rel_mse,
                         n.worst_fp8_tensor, t.max_fp8_rel_mse));
    } else if (n.grad_range > t.max_grad_range) {
      decide(LayerFormat::bf16, "grad-range",
             fmt::format("its output gradient spans {:.1f} binades, more than E5M2's {:.0f} under "
                         "one scale",
                         n.grad_range, t.max_grad_range));
    } else {
      decide(LayerFormat::fp8, "fits-fp8",
             fmt::format("mxfp8 relative MSE {:.3g} <= {:.3g}, underflow {} <= {}, gradient "
                         "range {:.1f} <= {:.0f} binades",
                         n.fp8_rel_mse, t.max_fp8_rel_mse, pct(n.fp8_underflow),
                         pct(t.max_fp8_underflow), n.grad_range, t.max_grad_range));
    }
  }
  return out;
}

std::string fp8_layer_rules(const std::vector<LayerAdvice>& layers) {
  if (std::none_of(layers.begin(), layers.end(),
                   [](const LayerAdvice& a) { return a.choice == LayerFormat::fp8; }))
    return "";
  std::string s;
  for (const LayerAdvice& a : layers)
    if (a.choice != LayerFormat::fp8) s += a.module + "=" + to_string(a.choice) + ",";
  return s + "*=fp8";
}

std::string bf16_layer_rules(const std::vector<LayerAdvice>& layers) {
  std::string s;
  for (const LayerAdvice& a : layers)
    if (a.choice == LayerFormat::fp32) s += (s.empty() ? "" : ",") + a.module + "=fp32";
  return s;
}

}  // namespace mixp::inspect
