// `mixp plan`: the planned peak memory and step time of a training configuration, split into
// what holds it (mixp::study::plan_memory, include/mixp/study/memory_plan.h; docs/plan.md).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "command.h"
#include "mixp/study/memory_plan.h"
#include "output.h"

namespace mixp::cli {
namespace {

struct PlanArgs {
  train::TrainConfig c;
  study::PlanOptions opt;
  bool json = false;
};

std::string mib(int64_t b) {
  return fmt::format("{:.1f} MiB", double(b) / (1 << 20));
}

void run(PlanArgs& a) {
  if (a.c.model.name.empty()) throw UsageError("--model is required");
  a.c.steps = 1;
  study::MemoryPlan p;
  try {
    p = study::plan_memory(a.c, a.opt);
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  if (a.json) {
    Json probes = Json::array();
    for (const auto& pr : p.probes) {
      probes.push_back({{"layers", pr.layers},
                        {"peak_bytes", pr.peak_bytes},
                        {"parameters", pr.params},
                        {"ms_per_step", json_number(pr.ms)}});
    }
    print_json({{"model", p.model},
                {"precision", p.precision},
                {"parameters", p.parameters},
                {"layers", p.layers},
                {"batch", p.batch},
                {"context", p.context},
                {"checkpointing", p.checkpointing},
                {"zero_stage", p.zero_stage},
                {"ranks", p.ranks},
                {"param_bytes", p.param_bytes},
                {"grad_bytes", p.grad_bytes},
                {"master_bytes", p.master_bytes},
                {"state_bytes", p.state_bytes},
                {"cast_copy_bytes", p.cast_copy_bytes},
                {"comm_bytes", p.comm_bytes},
                {"activation_bytes", p.activation_bytes},
                {"peak_bytes", p.peak_bytes},
                {"step_ms", json_number(p.step_ms)},
                {"step_flops", json_number(p.step_flops)},
                {"probes", probes}});
    return;
  }
  std::cout << fmt::format("plan for {} ({} parameters) in {}, batch {}{}{}{}:\n", p.model,
                           p.parameters, p.precision, p.batch,
                           p.context ? fmt::format(" x {} tokens", p.context) : "",
                           p.checkpointing ? ", checkpointing" : "",
                           p.ranks > 1 || p.zero_stage
                               ? fmt::format(", ZeRO stage {} over {} ranks", p.zero_stage, p.ranks)
                               : "");
  TextTable t({"what", "per device"});
  t.add({"parameters", mib(p.param_bytes)});
  t.add({"gradients", mib(p.grad_bytes)});
  t.add({"master weights", mib(p.master_bytes)});
  t.add({"optimizer states", mib(p.state_bytes)});
  t.add({"cast weight copies", mib(p.cast_copy_bytes)});
  t.add({"communication buffers", mib(p.comm_bytes)});
  t.add({"activations (measured)", mib(p.activation_bytes)});
  t.add({"peak", mib(p.peak_bytes)});
  t.print(std::cout);
  std::cout << fmt::format("step time: {:.0f} ms ({:.3g} GFLOP per step, {:.1f} GFLOP/s)\n",
                           p.step_ms, p.step_flops / 1e9,
                           p.step_ms > 0 ? p.step_flops / p.step_ms / 1e6 : 0.0);
}

RegisterCommand reg(35, [](CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* sub = app.add_subcommand(
      "plan", "plan a training run's peak memory and step time (measured on two small probes)");
  train::TrainConfig& c = a->c;
  sub->add_option("--model", c.model.name, "mlp | cnn | gpt | gpt2 | gpt2-medium")->required();
  sub->add_option("--data", c.data, "as for mixp train (the vocabulary comes from it)");
  sub->add_option("--precision", c.precision, "precision recipe, as for mixp train (default fp32)");
  sub->add_option("--batch", c.batch, "samples per micro-batch (default: the model's)");
  sub->add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step (default 1)");
  sub->add_option("--optimizer", c.optimizer, "adamw | adam | sgd (default adamw)");
  sub->add_flag("--checkpointing", c.model.checkpointing, "gpt/gpt2: checkpoint each block");
  sub->add_option("--width", c.model.width, "model width");
  sub->add_option("--layers", c.model.layers, "layers (gpt/gpt2 blocks)");
  sub->add_option("--heads", c.model.heads, "attention heads");
  sub->add_option("--context", c.model.context, "context length");
  sub->add_option("--mlp-width", c.model.mlp_width, "MLP width");
  sub->add_option("--threads", c.threads, "CPU threads (default: all)");
  sub->add_option("--seed", c.seed, "seed (default 0)");
  sub->add_option("--zero-stage", a->opt.zero_stage,
                  "ZeRO stage 0-3: shard optimizer states (1), gradients (2), parameters (3)");
  sub->add_option("--ranks", a->opt.ranks, "data-parallel processes the ZeRO stage shards over");
  sub->add_flag("--json", a->json, "print one JSON object on stdout");
  sub->footer(
      "The persistent tensors are counted from the parameters and the recipe's formats; the\n"
      "rest (activations, logits, workspaces) is measured by training two probes with 1 and 2\n"
      "blocks for two steps, extrapolated per block (docs/plan.md). --ranks > 1 is a projection:\n"
      "mixp trains on one process.\n\n"
      "Examples:\n"
      "  mixp plan --model gpt2 --data tokens_train.bin --batch 8 --context 256 --precision bf16\n"
      "  mixp plan --model gpt2-medium --data synthetic --batch 4 --context 64 --checkpointing\n"
      "  mixp plan --model gpt2 --data synthetic --precision bf16 --zero-stage 2 --ranks 8 "
      "--json\n");
  sub->callback([a] { run(*a); });
});

}  // namespace
}  // namespace mixp::cli
