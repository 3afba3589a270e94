// The fp8, fp8-current and mxfp8 training recipes through the Trainer: what runs in FP8, options
// and their errors, the scaling state in checkpoints (bit-identical resume, mismatches refused by
// name), evaluation in FP8 and in another precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/module.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/fp8_recipe.h"
#include "mixp/train/inspect_callback.h"
#include "mixp/train/trainer.h"
#include "train/resume_check.h"
#include "train/train_test_util.h"

namespace mixp::train {
namespace {

using testing::expect_resume_identical;
using testing::small_mlp;
using testing::TempDir;

std::string error_of(const std::function<void()>& f) {
  return ::mixp::test::error_of<std::exception>(f);
}

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace

TEST(Fp8Recipe, NamesOptionsAndErrors) {
  for (const char* n : {"fp8", "fp8-current", "mxfp8"}) {
    auto r = make_recipe(n);
    EXPECT_EQ(r->name(), n);
    EXPECT_EQ(r->param_dtype(), DType::fp32);
    EXPECT_EQ(r->loss_scale(), 1.0);
    EXPECT_FALSE(r->skips_nonfinite());
  }
  const auto avail = available_recipes();
  EXPECT_EQ(avail, (std::vector<std::string>{"fp64", "fp32", "tf32", "bf16", "bf16-pure", "fp16",
                                             "fp16-o2", "fp16-pure", "fp8", "fp8-current",
                                             "mxfp8", "fp8-block", "nvfp4", "mxfp4", "int8-qat", "int4-qat", "int2-qat", "ternary", "binary", "binary-act", "qlora-nf4", "qlora-int4", "auto"}));
  auto d = make_recipe("fp8:amax_history=16,amax_algo=most_recent,margin=2,format=e4m3");
  const auto& f = dynamic_cast<Fp8TrainingRecipe&>(*d).fp8();
  EXPECT_EQ(f.amax_history_len, 16);
  EXPECT_EQ(f.amax_compute_algo, amp::AmaxComputeAlgo::most_recent);
  EXPECT_EQ(f.margin, 2);
  EXPECT_EQ(f.format, amp::Fp8Format::e4m3);
  EXPECT_TRUE(has(d->describe(), "delayed scaling")) << d->describe();
  EXPECT_TRUE(has(make_recipe("mxfp8")->describe(), "MXFP8 block scaling"));

  EXPECT_TRUE(has(error_of([] { make_recipe("fp8-current:amax_history=16"); }),
                  "only applies to precision fp8 (delayed scaling)"));
  EXPECT_TRUE(has(error_of([] { make_recipe("fp8:format=e5m2"); }),
                  "pure E5M2 training is not supported"));
  EXPECT_TRUE(has(error_of([] { make_recipe("fp8:speed=max"); }), "unknown policy key 'speed'"));
  EXPECT_TRUE(has(error_of([] { make_recipe("fp8:amax_history=0"); }), "[1, 1048576]"));
  EXPECT_TRUE(has(error_of([] { make_recipe("mxfp8:margin=1"); }), "does not apply to mxfp8"));
  // The rest of the model in fp16 needs a GradScaler again (fp8.md, "No loss scaling").
  EXPECT_EQ(make_recipe("fp8:compute=fp16")->loss_scale(), 65536.0);
  RecipeOptions ls;
  ls.loss_scale_init = 1024.0;
  EXPECT_TRUE(has(error_of([&] { make_recipe("fp8", ls); }), "fp8 does not scale the loss"));
  RecipeOptions lp;
  lp.layer_precision = "fc1=fp8_e5m2";
  EXPECT_TRUE(has(error_of([&] { make_recipe("fp8", lp); }),
                  "under an FP8 recipe a layer runs in fp8"));
}

TEST(Fp8Recipe, MlpTrainsWithItsLinearLayersInFp8AndTheHeadOutside) {
  for (const char* p : {"fp8", "fp8-current", "mxfp8"}) {
    TrainConfig c = small_mlp(p);
    c.steps = 30;
    Trainer t(c);
    const auto& r = dynamic_cast<const Fp8TrainingRecipe&>(t.recipe());
    EXPECT_EQ(r.fp8_layers(), (std::vector<std::string>{"fc1", "fc2"})) << p;
    EXPECT_NE(amp::fp8_meta(static_cast<nn::Linear&>(t.model().module("fc1"))), nullptr);
    EXPECT_EQ(amp::fp8_meta(static_cast<nn::Linear&>(t.model().module("head"))), nullptr);
    const TrainResult res = t.fit();
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += res.losses[size_t(i)], last += res.losses[size_t(25 + i)];
    EXPECT_LT(last, first * 0.7) << p;
    ASSERT_TRUE(res.test_accuracy.has_value());
    EXPECT_GT(*res.test_accuracy, 0.5) << p;
  }
  // Delayed scaling: the state is buffers of the layers, updated every step.
  TrainConfig c = small_mlp("fp8:amax_history=4");
  c.steps = 3;
  c.evaluate = false;
  Trainer t(c);
  t.fit();
  const Tensor h = t.model().buffer("fc1.fp8_input_amax_history");
  EXPECT_EQ(h.shape(), Shape({4}));
  EXPECT_EQ(h.at({0}), 0.0);  // nothing pending after a step
  EXPECT_GT(h.at({3}), 0.0);  // the last step's amax
  EXPECT_GT(t.model().buffer("fc2.fp8_grad_output_scale").item(), 1.0);  // gradients are small
  EXPECT_THROW(t.model().buffer("head.fp8_input_scale"), std::out_of_range);
}

TEST(Fp8Recipe, LayerPrecisionRules) {
  auto layers = [](const std::string& rules) {
    TrainConfig c = small_mlp("fp8");
    c.layer_precision = rules;
    c.steps = 1;
    Trainer t(c);
    return dynamic_cast<const Fp8TrainingRecipe&>(t.recipe()).fp8_layers();
  };
  EXPECT_EQ(layers("fc1=bf16"), (std::vector<std::string>{"fc2"}));
  EXPECT_EQ(layers("head=fp8"), (std::vector<std::string>{"fc1", "fc2", "head"}));
  EXPECT_EQ(layers("linear=fp32,fc2=fp8"), (std::vector<std::string>{"fc2"}));  // name beats kind
  // A layer named twice is an error (issue 28 item 8), not "last wins".
  EXPECT_TRUE(has(error_of([&] { layers("fc2=fp8,fc2=bf16"); }), "'fc2' is given twice"));
  // `*` is the rest of the model: every Linear the other rules leave, the head included.
  EXPECT_EQ(layers("*=fp8"), (std::vector<std::string>{"fc1", "fc2", "head"}));
  EXPECT_EQ(layers("*=fp8,head=bf16"), (std::vector<std::string>{"fc1", "fc2"}));
  EXPECT_EQ(layers("head=fp8,*=bf16"), (std::vector<std::string>{"head"}));
  EXPECT_TRUE(has(error_of([&] { layers("embed=fp8"); }), "'embed' matches no module"));
  EXPECT_TRUE(has(error_of([&] { layers("flatten=fp8"); }), "'flatten' has no Linear layer"));
  EXPECT_TRUE(has(error_of([&] { layers("linear=bf16"); }), "no Linear layer of this model runs in FP8"));
}

// The formats a rule chooses are the ones the GEMMs run in: an FP8 layer quantizes (its amax
// history fills) and returns fp32, a bf16 layer runs its GEMM under bf16 autocast (bf16 output,
// no FP8 state), an fp32 layer neither.
TEST(Fp8Recipe, RulesDecideTheFormatOfEachGemm) {
  TempDir dir;
  TrainConfig c = small_mlp("fp8:amax_history=4");
  c.layer_precision = "*=fp8,head=bf16,fc1=fp32";
  c.steps = 2;
  c.evaluate = false;
  Trainer t(c);
  InspectOptions o;
  o.inspect = inspect::parse_inspect_spec("roles=activation,formats=bf16,out=" +
                                          (dir.path() / "s.jsonl").string());
  auto cb = std::make_shared<InspectCallback>(t, o);
  t.add_callback(cb);
  t.fit();
  EXPECT_EQ(dynamic_cast<const Fp8TrainingRecipe&>(t.recipe()).fp8_layers(),
            (std::vector<std::string>{"fc2"}));
  const Tensor h = t.model().buffer("fc2.fp8_input_amax_history");
  double amax = 0;
  for (int64_t i = 0; i < h.numel(); ++i) amax = std::max(amax, h.at({i}));
  EXPECT_GT(amax, 0.0);
  EXPECT_THROW(t.model().buffer("fc1.fp8_input_scale"), std::out_of_range);
  EXPECT_THROW(t.model().buffer("head.fp8_input_scale"), std::out_of_range);
  std::map<std::string, DType> out;
  for (const inspect::StatRecord& r : cb->inspector()->records())
    if (r.step == 2) out[r.module] = r.dtype;
  EXPECT_EQ(out.at("fc1"), DType::fp32);
  EXPECT_EQ(out.at("fc2"), DType::fp32);  // the FP8 GEMM's fp32 output
  EXPECT_EQ(out.at("head"), DType::bf16);
}

TEST(Fp8Recipe, ResumeIsBitIdentical) {
  for (const char* p : {"fp8:amax_history=8", "fp8-current", "mxfp8"}) {
    TrainConfig c = small_mlp(p);
    c.grad_accum = 2;
    // An evaluation before the checkpoint must not change the state.
    expect_resume_identical(c, 4, /*evaluate_before_save=*/true);
  }
}

TEST(Fp8Recipe, GptWithActivationCheckpointingMatchesWithout) {
  // The recomputed blocks quantize with the scales their forward used: same losses, same weights.
  auto run = [](bool ckpt) {
    TrainConfig c = testing::small_gpt("fp8:amax_history=4");
    c.model.checkpointing = ckpt;
    c.batch = 4;
    c.steps = 6;
    c.evaluate = false;
    Trainer t(c);
    const TrainResult r = t.fit();
    return std::make_pair(r.losses, module_state(t.model()));
  };
  const auto [la, sa] = run(false);
  const auto [lb, sb] = run(true);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i)
    EXPECT_EQ(std::memcmp(&la[i], &lb[i], sizeof(double)), 0) << "step " << i;
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  for (size_t i = 0; i < sa.tensors.size(); ++i)
    EXPECT_TRUE(sa.tensors[i].data == sb.tensors[i].data) << sa.tensors[i].name;
  EXPECT_NE(sa.find("blocks.0.attn.qkv.fp8_input_amax_history"), nullptr);
  EXPECT_NE(sa.find("blocks.1.mlp.fc.fp8_grad_output_scale"), nullptr);
}

TEST(Fp8Recipe, CheckpointWhoseScalingStateDoesNotMatchIsRefusedByName) {
  TempDir dir;
  TrainConfig c = small_mlp("fp8:amax_history=16");
  c.steps = 2;
  c.evaluate = false;
  c.save_dir = (dir / "ck").string();
  Trainer(c).fit();
  const auto file = dir / "ck" / "model.safetensors";
  const SafeTensorsFile good = read_safetensors(file);
  ASSERT_NE(good.find("fc2.fp8_weight_amax_history"), nullptr);
  ASSERT_NE(good.find("fc1.fp8_grad_output_scale"), nullptr);

  TrainConfig r = small_mlp("fp8:amax_history=16");
  r.steps = 4;
  r.resume_dir = (dir / "ck").string();
  // A history of another length.
  SafeTensorsFile bad = good;
  SafeTensor* h = bad.find("fc2.fp8_weight_amax_history");
  h->shape = {8};
  h->data.resize(8 * sizeof(float));
  write_safetensors(file, bad);
  seal_checkpoint(dir / "ck");  // changed on purpose: the manifest would refuse it first
  std::string e = error_of([&] { Trainer t(r); });
  EXPECT_TRUE(has(e, "FP8 scaling state 'fc2.fp8_weight_amax_history' has shape [8] but the "
                     "model's is [16]"))
      << e;
  // A missing entry.
  bad = good;
  bad.tensors.erase(std::find_if(bad.tensors.begin(), bad.tensors.end(),
                                 [](const SafeTensor& t) { return t.name == "fc1.fp8_grad_output_scale"; }));
  write_safetensors(file, bad);
  seal_checkpoint(dir / "ck");
  e = error_of([&] { Trainer t(r); });
  EXPECT_TRUE(has(e, "has no FP8 scaling state 'fc1.fp8_grad_output_scale'")) << e;
  // State for a layer that is not in FP8 in this run.
  write_safetensors(file, good);
  seal_checkpoint(dir / "ck");
  TrainConfig other = r;
  other.layer_precision = "fc2=bf16";
  e = error_of([&] { (void)evaluate_checkpoint(dir / "ck", "", ""); });
  EXPECT_EQ(e, "(no error)");
  e = error_of([&] {
    Trainer t(other);
  });
  // Another --layer-precision is refused by the configuration first (docs/train.md, "Resuming")...
  EXPECT_TRUE(has(e, "--layer-precision fc2=bf16 does not match checkpoint")) << e;
  // ...and a checkpoint whose state.json does not say how it was trained, by the tensor's name.
  {
    const auto state_file = dir / "ck" / kStateFile;
    auto state = nlohmann::json::parse(mixp::test::read_text(state_file));
    state["config"]["layer_precision"] = "fc2=bf16";
    std::ofstream(state_file) << state.dump(2);
  }
  seal_checkpoint(dir / "ck");
  e = error_of([&] {
    Trainer t(other);
  });
  EXPECT_TRUE(has(e, "fc2.fp8_")) << e;
}

TEST(Fp8Recipe, EvaluationUsesTheSavedStateAndOtherPrecisionsIgnoreIt) {
  TempDir dir;
  TrainConfig c = small_mlp("fp8");
  c.steps = 20;
  c.save_dir = (dir / "ck").string();
  Trainer t(c);
  const TrainResult r = t.fit();
  ASSERT_TRUE(r.test_accuracy.has_value());
  const EvalResult same = evaluate_checkpoint(dir / "ck", "", "");
  ASSERT_TRUE(same.accuracy.has_value());
  EXPECT_EQ(*same.accuracy, *r.test_accuracy);  // same model, same saved scales
  const EvalResult bf16 = evaluate_checkpoint(dir / "ck", "bf16", "");
  ASSERT_TRUE(bf16.accuracy.has_value());
  EXPECT_NEAR(*bf16.accuracy, *r.test_accuracy, 0.05);
  // A bf16 checkpoint has no FP8 state to evaluate delayed scaling with.
  TrainConfig b = small_mlp("bf16");
  b.steps = 2;
  b.evaluate = false;
  b.save_dir = (dir / "ck16").string();
  Trainer(b).fit();
  const std::string e = error_of([&] { (void)evaluate_checkpoint(dir / "ck16", "fp8", ""); });
  EXPECT_TRUE(has(e, "has no FP8 scaling state 'fc1.fp8_input_amax_history'")) << e;
  EXPECT_TRUE(has(e, "fp8-current and mxfp8 keep no state")) << e;
  const EvalResult cur = evaluate_checkpoint(dir / "ck16", "fp8-current", "");
  EXPECT_TRUE(cur.accuracy.has_value());
}

}  // namespace mixp::train
