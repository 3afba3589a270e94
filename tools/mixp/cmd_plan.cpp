// `mixp plan`: the planned peak memory and step time of a training configuration, split into
// what holds it (mixp::study::plan_memory, include/mixp/study/memory_plan.h; docs/plan.md).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "command.h"
#include "flag_range.h"
#include "mixp/study/memory_plan.h"
#include "mixp/study/plan_request.h"
#include "output.h"

namespace mixp::cli {
namespace {

struct PlanArgs {
  study::PlanRequest req;  // the flags below fill it (study/plan_request.h, shared with Python)
  bool json = false;
  bool seed_table = false;
  CLI::App* sub = nullptr;
  bool given(const char* flag) const { return sub->count(flag) > 0; }
  // req with the given shape flags recorded (which fields override the shape's preset).
  const study::PlanRequest& request() {
    auto& g = req.given;
    g.layers = given("--layers");
    g.width = given("--width");
    g.heads = given("--heads");
    g.mlp_width = given("--mlp-width");
    g.vocab = given("--vocab");
    g.context = given("--context");
    g.batch = given("--batch");
    return req;
  }
};

std::string mib(int64_t b) {
  return fmt::format("{:.1f} MiB", double(b) / (1 << 20));
}

std::string gib(int64_t b) {
  return fmt::format("{:.1f} GiB", double(b) / double(1ll << 30));
}

std::string size(int64_t b) {
  return b >= (10ll << 30) ? gib(b) : mib(b);
}

// --model-shape NAME (a preset) or custom, with --layers --width --heads --mlp-width --vocab
// --context overriding the preset's fields (study::request_shape).
study::ModelShape shape_of(PlanArgs& a) {
  try {
    return study::request_shape(a.request());
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
}

study::MemoryPlan plan_or_usage(const study::ModelShape& s, const study::ShapeRun& r,
                                const study::PlanOptions& opt) {
  try {
    return study::plan_shape(s, r, opt);
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
}

// The seed's LLaMA-7B fine-tuning table (per_device_train_batch_size 4, gradient checkpointing,
// bf16; docs/plan.md "The seed's LLaMA-7B table"), next to this model's plan of the same runs.
void print_seed_table(PlanArgs& a) {
  const study::ModelShape s = shape_of(a);
  study::ShapeRun base = study::request_run(a.request(), s);
  if (!a.given("--batch")) base.batch = 4;
  if (!a.given("--context")) base.seq = 512;
  struct Row {
    const char* what;
    const char* precision;
    bool ckpt;
    int64_t batch;
    double seed_gb;         // 0: the seed has no such row
    const char* lora = "";  // LoRA / QLoRA rows (docs/plan.md "LoRA and QLoRA")
  };
  // The LoRA rows: r=16 on every Linear of the blocks (QLoRA's "all linear layers"), dropout 0.05.
  constexpr const char* kAll =
      "r=16,alpha=32,dropout=0.05,targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
  const Row rows[] = {{"fp32", "fp32", false, base.batch, 32},
                      {"bf16", "bf16", false, base.batch, 18},
                      {"bf16 + checkpointing", "bf16", true, base.batch, 12},
                      {"bf16 + checkpointing, batch 1", "bf16", true, 1, 6.5},
                      {"LoRA r=16 bf16 + checkpointing", "bf16", true, base.batch, 0, kAll},
                      {"QLoRA nf4 r=16 + checkpointing", "qlora-nf4", true, base.batch, 0, kAll},
                      {"QLoRA nf4 r=16 + checkpointing, batch 1", "qlora-nf4", true, 1, 0, kAll}};
  const bool llama = s.family == study::ShapeFamily::llama;
  study::PlanOptions opt = a.req.options;
  opt.estimate_time = false;
  Json jrows = Json::array();
  TextTable t({"run", "seed", "mixp plan", "weights + activations", "weights alone"});
  for (const Row& row : rows) {
    if (*row.lora && !llama) continue;  // the LoRA rows name llama's projections
    study::ShapeRun r = base;
    r.precision = row.precision;
    r.checkpointing = row.ckpt;
    r.batch = row.batch;
    r.lora = row.lora;
    const study::MemoryPlan p = plan_or_usage(s, r, opt);
    const study::MemoryFormats f =
        study::memory_formats(row.precision, r.optimizer, r.checkpointing);
    const study::AnalyticMemory m = study::analytic_memory(s, r.batch, r.seq, f, r.checkpointing);
    // What the seed's fp32 and bf16 rows can be counting: the weights in the training format
    // (bf16 for the bf16 rows, as a pure-bf16 fine-tune or inference holds them) and the
    // activations, without gradients or optimizer states.
    // LoRA rows: the frozen base as stored plus the adapters (the plan's parameter row).
    const int64_t weight_bytes =
        *row.lora ? p.param_bytes : p.parameters * (row.precision == std::string("fp32") ? 4 : 2);
    const int64_t wa = weight_bytes + m.activation_bytes;
    auto gb = [](int64_t b) { return double(b) / 1e9; };
    t.add({fmt::format("{} (batch {} x {})", row.what, r.batch, r.seq),
           row.seed_gb > 0 ? fmt::format("{:g} GB", row.seed_gb) : std::string("-"),
           fmt::format("{:.1f} GB", gb(p.peak_bytes)), fmt::format("{:.1f} GB", gb(wa)),
           fmt::format("{:.1f} GB", gb(weight_bytes))});
    jrows.push_back({{"run", row.what},
                     {"precision", row.precision},
                     {"checkpointing", row.ckpt},
                     {"batch", r.batch},
                     {"seq", r.seq},
                     {"seed_gb", row.seed_gb > 0 ? Json(row.seed_gb) : Json(nullptr)},
                     {"lora", row.lora},
                     {"trainable", p.trainable},
                     {"plan_peak_bytes", p.peak_bytes},
                     {"weights_and_activations_bytes", wa},
                     {"weight_bytes", weight_bytes},
                     {"activation_bytes", m.activation_bytes}});
  }
  if (a.json) {
    print_json({{"model", s.name}, {"parameters", study::parameters(s)}, {"rows", jrows}});
    return;
  }
  std::cout << fmt::format(
      "{} ({} parameters), AdamW, against the seed's LLaMA-7B fine-tuning table (GB = 1e9 "
      "bytes):\n",
      s.name, study::parameters(s));
  t.print(std::cout);
  std::cout << "A full fine-tuning holds gradients and AdamW's two states for every parameter:\n"
               "16 bytes per parameter in fp32, 18 in bf16 autocast (fp32 weights, gradients and\n"
               "states, a bf16 copy). The seed's fp32 and bf16 rows are close to the weights and\n"
               "activations alone; its checkpointing rows are below the bf16 weights alone, so\n"
               "they cannot hold every weight in 16 bits (a LoRA or 8-bit setup would). See\n"
               "docs/plan.md, \"The seed's LLaMA-7B table\".\n";
}

void print_plan(const PlanArgs& a, const study::MemoryPlan& p);

void run(PlanArgs& a) {
  if (!a.req.shape.empty()) {
    if (a.given("--model")) throw UsageError("give --model or --model-shape, not both");
    if (a.given("--data"))
      throw UsageError("--model-shape plans from the shape: --data is not read");
    if (a.seed_table) {
      print_seed_table(a);
      return;
    }
    (void)shape_of(a);  // a bad shape is a usage error
  } else if (a.seed_table) {
    throw UsageError("--seed-table needs --model-shape (e.g. llama-7b)");
  }
  study::MemoryPlan p;
  try {
    p = study::plan_request(a.request());
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  print_plan(a, p);
}

void print_plan(const PlanArgs& a, const study::MemoryPlan& p) {
  if (a.json) {
    std::cout << study::plan_to_json(p, 2) << "\n";
    return;
  }
  std::cout << fmt::format(
      "plan for {} ({} parameters{}) in {}, batch {}{}{}{}{}:\n", p.model, p.parameters,
      p.lora ? fmt::format(", {} trainable in LoRA adapters", p.trainable) : "", p.precision,
      p.batch, p.context ? fmt::format(" x {} tokens", p.context) : "",
      p.checkpointing ? ", checkpointing" : "",
      p.optimizer_in_backward ? ", optimizer in backward" : "",
      p.ranks > 1 || p.zero_stage
          ? fmt::format(", ZeRO stage {} over {} ranks", p.zero_stage, p.ranks)
          : "");
  TextTable t({"what", "per device"});
  t.add({"parameters", size(p.param_bytes)});
  t.add({"gradients", size(p.grad_bytes)});
  t.add({"master weights", size(p.master_bytes)});
  t.add({"optimizer states", size(p.state_bytes)});
  t.add({"cast weight copies", size(p.cast_copy_bytes)});
  t.add({"communication buffers", size(p.comm_bytes)});
  if (p.analytic) {
    t.add({"activations, temporaries at the peak (analytic)", size(p.activation_bytes)});
  } else {
    t.add({"activations, temporaries at the peak (measured)", size(p.activation_bytes)});
  }
  t.add({"peak", size(p.peak_bytes)});
  if (!p.analytic && p.analytic_peak_bytes > 0) {
    t.add({"peak (analytic model)", size(p.analytic_peak_bytes)});
  }
  // What backward keeps (docs/plan.md, "Analytic model"): every block's saves, or under
  // checkpointing one block input per block; the peak's moment may hold less (the end of
  // backward holds none), so the row above can be the same with and without checkpointing.
  if (p.analytic_activation_bytes > 0) {
    t.add({p.checkpointing ? "saved for backward (analytic): checkpoints + head"
                           : "saved for backward (analytic): all blocks + head",
           size(p.analytic_activation_bytes)});
  }
  t.print(std::cout);
  if (p.step_ms > 0) {
    std::cout << fmt::format(
        "step time (probes): {:.0f} ms ({:.3g} GFLOP per step, {:.1f} GFLOP/s)\n", p.step_ms,
        p.step_flops / 1e9, p.step_flops / p.step_ms / 1e6);
  }
  if (p.estimated_step_ms > 0) {
    const double ms = p.estimated_step_ms;
    std::cout << fmt::format(
        "step time (estimate): {} = {:.3g} GFLOP of GEMMs at {:.0f} GFLOP/s ({}) x {:.2f} for the "
        "non-GEMM work (docs/plan.md)\n",
        ms >= 1e4 ? fmt::format("{:.1f} s", ms / 1e3) : fmt::format("{:.0f} ms", ms),
        p.gemm_flops / 1e9, p.gemm_gflops, p.gemm_source, p.non_gemm_factor);
  }
}

RegisterCommand reg(35, [](CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* sub = app.add_subcommand(
      "plan", "plan a training run's peak memory and step time (measured on two small probes)");
  a->sub = sub;
  train::TrainConfig& c = a->req.config;
  sub->add_option("--model", c.model.name,
                  "mlp | cnn | gpt | gpt2 | gpt2-medium | llama and its presets (probed)");
  sub->add_option("--model-shape", a->req.shape,
                  "plan a shape analytically, without probes: gpt2 gpt2-medium gpt2-large "
                  "gpt2-xl gpt3-175b llama-7b llama-13b llama-tiny smollm-135m tinyllama-1.1b "
                  "llama2-7b llama2-70b, or custom (with --family --layers "
                  "--width --heads --vocab [--mlp-width])");
  sub->add_option("--family", a->req.family,
                  "--model-shape custom: gpt2 (LayerNorm, GELU, biases, tied head) or llama "
                  "(RMSNorm, SwiGLU, RoPE, no biases, untied head)");
  sub->add_option("--vocab", a->req.vocab, "--model-shape: vocabulary size (padded to 64)");
  sub->add_flag("--seed-table", a->seed_table,
                "with --model-shape llama-7b: the seed's fine-tuning memory table (fp32 32 GB, "
                "bf16 18 GB, bf16 + checkpointing 12 GB) next to this plan (default batch 4 x "
                "512 tokens)");
  sub->add_flag("--gemm-record", a->req.options.gemm_from_record,
                "step-time estimate from the saved `mixp bench gemm` record instead of "
                "measuring the GEMM now");
  sub->add_option("--data", c.data, "as for mixp train (the vocabulary comes from it)");
  sub->add_option("--precision", c.precision, "precision recipe, as for mixp train (default fp32)");
  sub->add_option("--batch", c.batch, "samples per micro-batch (default: the model's)");
  sub->add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step (default 1)");
  sub->add_option("--optimizer", c.optimizer, "adamw | adam | sgd (default adamw)");
  sub->add_flag("--checkpointing", c.model.checkpointing, "gpt/gpt2: checkpoint each block");
  sub->add_option("--lora", c.lora,
                  "LoRA adapters as for mixp train (r=16,alpha=32,targets=q_proj,v_proj): the "
                  "base frozen, gradients and states for the adapters only; with --precision "
                  "qlora-nf4|qlora-int4 the base Linear layers are 4-bit (docs/lora.md)");
  sub->add_flag("--optimizer-in-backward", c.optimizer_in_backward,
                "as for mixp train: each parameter updated in backward, its gradient freed then");
  sub->add_option("--width", c.model.width, "model width");
  sub->add_option("--layers", c.model.layers, "layers (gpt/gpt2 blocks)");
  sub->add_option("--heads", c.model.heads, "attention heads");
  sub->add_option("--context", c.model.context,
                  "context length (--model-shape: the sequence length planned)");
  sub->add_option("--mlp-width,--ffn", c.model.mlp_width, "MLP / FFN hidden width");
  sub->add_option("--threads", c.threads, "CPU threads (default: all)");
  sub->add_option("--seed", c.seed, "seed (default 0)");
  sub->add_option("--zero-stage", a->req.options.zero_stage,
                  "ZeRO stage 0-3: shard optimizer states (1), gradients (2), parameters (3)");
  sub->add_option("--ranks", a->req.options.ranks, "data-parallel processes the ZeRO stage shards over");
  sub->add_option("--grad-comm", c.grad_comm,
                  "as for mixp train: fp32 | bf16 | fp16 | bf16-ring (default fp32); ZeRO 3 "
                  "gathers fp32 parameters rounded to a 16-bit wire");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  shared_flag_ranges(*sub);
  int_range(sub->get_option("--zero-stage"), 0, 3);
  int_range(sub->get_option("--ranks"), 1, 1 << 20);
  sub->add_flag("--json", a->json, "print one JSON object on stdout");
  sub->footer(
      "The persistent tensors are counted from the parameters and the recipe's formats; the\n"
      "rest (activations, logits, workspaces) is measured by training two probes with 1 and 2\n"
      "blocks for two steps, extrapolated per block (docs/plan.md). --ranks > 1 is a projection:\n"
      "mixp trains on one process. The step-time estimate is the step's GEMM FLOPs over this\n"
      "machine's GEMM throughput (measured now, or --gemm-record) times a calibrated allowance\n"
      "for the non-GEMM work. --model-shape plans from the shape alone (the analytic model,\n"
      "checked against the probes on gpt2 and gpt2-medium), for models too large to run here.\n\n"
      "Examples:\n"
      "  mixp plan --model gpt2 --data tokens_train.bin --batch 8 --context 256 --precision bf16\n"
      "  mixp plan --model gpt2-medium --data synthetic --batch 4 --context 64 --checkpointing\n"
      "  mixp plan --model gpt2 --data synthetic --precision bf16 --zero-stage 2 --ranks 8 "
      "--json\n"
      "  mixp plan --model-shape llama-7b --batch 4 --context 512 --precision bf16 "
      "--checkpointing\n"
      "  mixp plan --model llama --data synthetic --precision qlora-nf4 --lora "
      "r=16,targets=q_proj,v_proj\n"
      "  mixp plan --model-shape llama-7b --seed-table\n"
      "  mixp plan --model-shape custom --family llama --layers 32 --width 4096 --heads 32 "
      "--ffn 11008 --vocab 32000 --context 2048\n");
  sub->callback([a] { run(*a); });
});

}  // namespace
}  // namespace mixp::cli
