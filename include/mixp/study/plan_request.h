// One `mixp plan` request, as the CLI (tools/mixp/cmd_plan.cpp) and the Python module
// (python/src/engine_module.cpp, mixp.plan) both make it: a training configuration planned with
// probes (plan_memory) or a model shape planned analytically (plan_shape), and the plan as the
// JSON object `mixp plan --json` prints. One definition, so `mixp.plan(...)` returns the CLI's dict.
#pragma once
#include <string>

#include "mixp/study/memory_plan.h"
#include "mixp/train/train_config.h"

namespace mixp::study {

struct PlanRequest {
  train::TrainConfig config;  // --model, --data, --precision, --batch, ... (TrainConfig's fields)
  PlanOptions options;        // --zero-stage, --ranks, --gemm-record
  // --model-shape NAME (a model_shape_preset or "custom"); empty: plan config.model by probes.
  std::string shape;
  std::string family = "gpt2";  // --family, for shape "custom": gpt2 or llama
  int64_t vocab = 0;            // --vocab (shape only)
  // Which shape fields the caller gave (a given flag overrides the preset's field; config's
  // values are read only for those).
  struct Given {
    bool layers = false, width = false, heads = false, mlp_width = false, vocab = false,
         context = false, batch = false;
  } given;
};

// The shape a request names, with the given fields overriding the preset's. Throws
// train::ConfigError for an unknown preset, a bad family, or a custom shape missing a field.
ModelShape request_shape(const PlanRequest& r);
// The run planned for a shape: batch 1 and the shape's context unless given.
ShapeRun request_run(const PlanRequest& r, const ModelShape& s);
// plan_shape for a shape request, plan_memory (one step) otherwise. Throws train::ConfigError.
MemoryPlan plan_request(const PlanRequest& r);

// The object `mixp plan --json` prints (keys in the CLI's order; non-finite numbers as the
// strings "inf", "-inf", "nan", as tools/mixp/output.h json_number writes them).
std::string plan_to_json(const MemoryPlan& p, int indent = -1);

}  // namespace mixp::study
