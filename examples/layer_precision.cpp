// Per-layer precision: keep the sensitive layers of a model in fp32 while the rest runs in bf16.
// The seeds (001 section 11.3.4, "特定层需要 FP32") do it in PyTorch with
//   model.lm_head = model.lm_head.float()
// and an autocast(enabled=False) region inside the head's forward. mixp offers the same at three
// levels:
//   1. by hand: a forward wrapper that opens a disabled Autocast region around one module;
//   2. a rule list on a model: amp::apply_policy(model, policy, "embed=fp32,head=fp32");
//   3. the Trainer / CLI: --precision bf16 --layer-precision
//   embed=fp32,attn=bf16,mlp=bf16,head=fp32
//
// Run: build/release/example_layer_precision
// ctest-args:
#include "mixp/amp/layer_precision.h"

#include <cstdio>

#include "mixp/amp/autocast.h"
#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/trainer.h"

using namespace mixp;

int main() {
  const nn::ModelConfig cfg{.name = "gpt",
                            .width = 64,
                            .layers = 2,
                            .heads = 2,
                            .context = 32,
                            .vocab = 50,
                            .mlp_width = 128};
  Generator gen(1);
  const Tensor idx = randint(0, 50, {4, 32}, gen, {.dtype = DType::int64});

  // 1. By hand: the LM head runs with autocast off, on fp32 inputs.
  auto a = nn::make_model(cfg);
  a->module("head").set_forward_wrapper([](nn::Module& head, const Tensor& x) {
    amp::Autocast off(DType::bf16, /*enabled=*/false);
    return head.forward(x.to(DType::fp32));
  });
  Tensor logits_a;
  {
    amp::Autocast ac(DType::bf16);
    logits_a = (*a)(idx);
  }
  std::printf("by hand:     logits %s\n", std::string(name(logits_a.dtype())).c_str());

  // 2. Rules on a model: a pure-bf16 model (bf16 parameters) with fp32 embeddings and head.
  auto b = nn::make_model(cfg);
  amp::apply_policy(*b, amp::parse_policy("bf16-pure"),
                    amp::parse_layer_precision("embed=fp32,head=fp32"));
  for (const char* p : {"tok_emb.weight", "blocks.0.attn.qkv.weight", "head.weight"})
    std::printf("rules:       %-26s %s\n", p, std::string(name(b->parameter(p).dtype())).c_str());
  std::printf("rules:       logits %s\n", std::string(name((*b)(idx).dtype())).c_str());

  // 3. The Trainer (what `mixp train --layer-precision` does).
  train::TrainConfig c;
  c.model = {.name = "gpt", .width = 64, .layers = 2, .heads = 2, .context = 32, .mlp_width = 128};
  c.data = train::kSyntheticData;
  c.train_limit = 20000;
  c.test_limit = 16;
  c.batch = 8;
  c.steps = 20;
  c.precision = "bf16";
  c.layer_precision = "embed=fp32,attn=bf16,mlp=bf16,head=fp32";
  train::Trainer t(c);
  const train::TrainResult r = t.fit();
  std::printf("trainer:     %s\n             final loss %.3f, validation loss %.3f\n",
              r.recipe.c_str(), r.final_loss, r.val_loss.value_or(0));
  return 0;
}
