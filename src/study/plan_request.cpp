// plan_request.h: the `mixp plan` request and its JSON, shared by the CLI and the Python module.
#include "mixp/study/plan_request.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mixp::study {
namespace {

using Json = nlohmann::ordered_json;

// As tools/mixp/output.h json_number (the CLI's convention for non-finite numbers).
Json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

}  // namespace

ModelShape request_shape(const PlanRequest& r) {
  ModelShape s;
  const auto& g = r.given;
  if (r.shape == "custom") {
    s.name = "custom";
    if (r.family != "gpt2" && r.family != "llama") {
      throw train::ConfigError("--family must be gpt2 or llama, got '" + r.family + "'");
    }
    s.family = r.family == "llama" ? ShapeFamily::llama : ShapeFamily::gpt2;
    const std::pair<bool, const char*> needed[] = {
        {g.layers, "--layers"}, {g.width, "--width"}, {g.heads, "--heads"}, {g.vocab, "--vocab"}};
    for (const auto& [have, flag] : needed) {
      if (!have) {
        throw train::ConfigError(std::string("--model-shape custom needs ") + flag +
                                 " (and --mlp-width, default 4 x width)");
      }
    }
  } else {
    try {
      s = model_shape_preset(r.shape);
    } catch (const std::invalid_argument& e) {
      throw train::ConfigError(e.what());
    }
  }
  const auto& m = r.config.model;
  if (g.layers) s.layers = m.layers;
  if (g.width) s.width = m.width;
  if (g.heads) s.heads = m.heads;
  if (g.mlp_width) {
    s.ffn = m.mlp_width;
  } else if (r.shape == "custom") {
    s.ffn = 4 * s.width;
  }
  if (g.vocab) {
    s.vocab = r.vocab;
    // Padded to a multiple of 64 as mixp's gpt2 does (nn/models.h); LLaMA's 32000 already is.
    s.padded_vocab = (r.vocab + 63) / 64 * 64;
  }
  if (g.context && s.family == ShapeFamily::gpt2) s.context = m.context;
  return s;
}

ShapeRun request_run(const PlanRequest& r, const ModelShape& s) {
  const train::TrainConfig& c = r.config;
  ShapeRun run;
  run.batch = r.given.batch ? c.batch : 1;
  run.seq = r.given.context ? c.model.context : s.context;
  run.micro_batches = c.grad_accum;
  run.precision = c.precision.empty() ? "fp32" : c.precision;
  run.optimizer = c.optimizer.empty() ? "adamw" : c.optimizer;
  run.checkpointing = c.model.checkpointing;
  run.optimizer_in_backward = c.optimizer_in_backward;
  run.threads = c.threads;
  run.lora = c.lora;
  run.grad_comm = c.grad_comm;
  return run;
}

MemoryPlan plan_request(const PlanRequest& r) {
  if (!r.shape.empty()) {
    const ModelShape s = request_shape(r);
    return plan_shape(s, request_run(r, s), r.options);
  }
  if (r.config.model.name.empty()) throw train::ConfigError("--model or --model-shape is required");
  train::TrainConfig c = r.config;
  c.steps = 1;
  return plan_memory(c, r.options);
}

std::string plan_to_json(const MemoryPlan& p, int indent) {
  Json probes = Json::array();
  for (const auto& pr : p.probes) {
    probes.push_back({{"layers", pr.layers},
                      {"peak_bytes", pr.peak_bytes},
                      {"parameters", pr.params},
                      {"ms_per_step", number(pr.ms)}});
  }
  const Json j = {{"model", p.model},
                  {"precision", p.precision},
                  {"parameters", p.parameters},
                  {"layers", p.layers},
                  {"batch", p.batch},
                  {"context", p.context},
                  {"checkpointing", p.checkpointing},
                  {"optimizer_in_backward", p.optimizer_in_backward},
                  {"zero_stage", p.zero_stage},
                  {"ranks", p.ranks},
                  {"lora", p.lora},
                  {"trainable", p.trainable},
                  {"param_bytes", p.param_bytes},
                  {"grad_bytes", p.grad_bytes},
                  {"master_bytes", p.master_bytes},
                  {"state_bytes", p.state_bytes},
                  {"cast_copy_bytes", p.cast_copy_bytes},
                  {"comm_bytes", p.comm_bytes},
                  {"activation_bytes", p.activation_bytes},
                  {"peak_bytes", p.peak_bytes},
                  {"step_ms", number(p.step_ms)},
                  {"step_flops", number(p.step_flops)},
                  {"analytic", p.analytic},
                  {"analytic_activation_bytes", p.analytic_activation_bytes},
                  {"analytic_peak_bytes", p.analytic_peak_bytes},
                  {"gemm_flops", number(p.gemm_flops)},
                  {"gemm_dtype", p.gemm_dtype},
                  {"gemm_gflops", number(p.gemm_gflops)},
                  {"gemm_source", p.gemm_source},
                  {"non_gemm_factor", number(p.non_gemm_factor)},
                  {"estimated_step_ms", number(p.estimated_step_ms)},
                  {"probes", probes}};
  return j.dump(indent);
}

}  // namespace mixp::study
