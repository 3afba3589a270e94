// The Trainer built from parts (a Module, a recipe, a DataSource, TrainOptions) runs the same loop
// as the one built from a TrainConfig, bit for bit; the gradient stages of the callbacks
// (on_backward_end, on_gradients_ready) are called where callbacks.h says and can change the
// gradients; a custom loss trains a regression; a run from parts resumes bit-identically; and
// build_run builds what each purpose needs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "mixp/data/image_dataset.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/sgd.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/build_run.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/tensor_dataset.h"
#include "mixp/train/trainer.h"
#include "train_test_util.h"

namespace mixp::train {
namespace {

using testing::small_mlp;
using testing::TempDir;

std::vector<std::vector<std::byte>> weights(nn::Module& m) {
  std::vector<std::vector<std::byte>> out;
  for (const auto& t : module_state(m).tensors) out.push_back(t.data);
  return out;
}

void expect_same_losses(const std::vector<double>& a, const std::vector<double>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0)
        << what << ": step " << i + 1 << ": " << a[i] << " vs " << b[i];
  }
}

// The synthetic images of small_mlp() (data = synthetic: one generated set, the first
// train_limit samples for training, the next test_limit for evaluation) as user tensors.
std::unique_ptr<TensorDataset> synthetic_as_tensors(const TrainConfig& c) {
  const data::ImageDataset all =
      data::synthetic_images(c.train_limit + c.test_limit, 28, 28, 10, c.seed);
  auto part = [&](int64_t b, int64_t e) {
    const int64_t row = all.sample_size();
    std::vector<float> x(all.images.begin() + b * row, all.images.begin() + e * row);
    std::vector<int64_t> y(all.labels.begin() + b, all.labels.begin() + e);
    return std::make_pair(from_vector(x, {e - b, row}), from_vector(y, {e - b}));
  };
  const auto [x, y] = part(0, c.train_limit);
  const auto [ex, ey] = part(c.train_limit, c.train_limit + c.test_limit);
  auto d = std::make_unique<TensorDataset>(
      x, y, TensorDatasetOptions{.batch_size = c.batch, .seed = c.seed, .eval_batch_size = 1000});
  d->set_eval(ex, ey);
  return d;
}

// small_mlp(precision) over 8 steps of 3 micro-batches: 16 batches per epoch make windows of
// 3, 3, 3, 3, 3, 1, so the run crosses an epoch boundary through a short window.
TrainConfig config(const std::string& precision) {
  TrainConfig c = small_mlp(precision);
  c.grad_accum = 3;
  c.steps = 8;
  return c;
}

class PartsEqualConfig : public ::testing::TestWithParam<const char*> {};

TEST_P(PartsEqualConfig, BitForBit) {
  const TrainConfig c = config(GetParam());
  Trainer built(c);
  const TrainResult rc = built.fit();

  TrainOptions o;
  o.steps = c.steps;
  o.grad_accum = c.grad_accum;
  o.seed = c.seed;
  o.threads = c.threads;
  RecipeOptions ro;
  ro.seed = c.seed;  // as the config path does (stochastic-rounding streams)
  Trainer parts(nn::make_model(built.config().model), make_recipe(c.precision, ro),
                synthetic_as_tensors(c), o);
  const TrainResult rp = parts.fit();

  expect_same_losses(rc.losses, rp.losses, c.precision);
  EXPECT_TRUE(weights(built.model()) == weights(parts.model())) << c.precision;
  ASSERT_TRUE(rc.test_accuracy && rp.test_accuracy);
  EXPECT_EQ(*rc.test_accuracy, *rp.test_accuracy);
  EXPECT_EQ(*rc.test_loss, *rp.test_loss);
  EXPECT_EQ(rc.skipped_steps, rp.skipped_steps);
  EXPECT_EQ(rp.model, "custom");
  EXPECT_EQ(rp.precision, rc.precision);
}

INSTANTIATE_TEST_SUITE_P(Recipes, PartsEqualConfig,
                         ::testing::Values("fp32", "bf16", "fp16", "bf16-pure", "fp8"));

// Records the gradient stages.
struct Stage {
  bool ready = false;  // on_gradients_ready (else on_backward_end)
  int64_t step, micro_batch, micro_batches, epoch;
  double loss, loss_scale;
  bool all_grads = true;
};
class StageRecorder final : public TrainCallback {
 public:
  void on_backward_end(StepContext& ctx) override { record(ctx, false); }
  void on_gradients_ready(StepContext& ctx) override { record(ctx, true); }
  void on_step_end(const StepInfo& info) override { step_losses.push_back(info.loss); }
  std::vector<Stage> stages;
  std::vector<double> step_losses;

 private:
  void record(StepContext& ctx, bool ready) {
    Stage s{ready,     ctx.step, ctx.micro_batch, ctx.micro_batches,
            ctx.epoch, ctx.loss, ctx.loss_scale};
    for (const Tensor& p : ctx.parameters) s.all_grads = s.all_grads && p.grad().defined();
    EXPECT_EQ(ctx.parameters.size(), ctx.model.parameters().size());
    stages.push_back(s);
  }
};

TEST(TrainerStages, CalledPerMicroBatchAndPerStepBeforeTheOptimizer) {
  TrainConfig c = config("fp16");
  Trainer t(c);
  auto rec = std::make_shared<StageRecorder>();
  t.add_callback(rec);
  t.fit();
  // 8 steps: 5 of 3 micro-batches, one of 1 (the end of epoch 0), 2 of 3.
  const std::vector<int64_t> windows{3, 3, 3, 3, 3, 1, 3, 3};
  size_t i = 0;
  for (int64_t step = 1; step <= 8; ++step) {
    const int64_t w = windows[size_t(step - 1)];
    double sum = 0;
    for (int64_t m = 0; m < w; ++m, ++i) {
      ASSERT_LT(i, rec->stages.size());
      const Stage& s = rec->stages[i];
      EXPECT_FALSE(s.ready);
      EXPECT_EQ(s.step, step);
      EXPECT_EQ(s.micro_batch, m);
      EXPECT_EQ(s.micro_batches, w);
      EXPECT_EQ(s.epoch, step <= 6 ? 0 : 1);
      EXPECT_TRUE(s.all_grads);
      sum += s.loss;
    }
    ASSERT_LT(i, rec->stages.size());
    const Stage& r = rec->stages[i++];
    EXPECT_TRUE(r.ready);
    EXPECT_EQ(r.step, step);
    EXPECT_EQ(r.micro_batches, w);
    EXPECT_DOUBLE_EQ(r.loss, sum / double(w));
    EXPECT_EQ(r.loss, rec->step_losses[size_t(step - 1)]) << "the step's mean loss";
    if (step == 1) {
      EXPECT_EQ(r.loss_scale, 65536.0) << "gradients are still scaled";
    }
  }
  EXPECT_EQ(i, rec->stages.size());
}

// A callback with every stage overridden and doing nothing.
class NoOp final : public TrainCallback {
 public:
  void on_backward_end(StepContext&) override {}
  void on_gradients_ready(StepContext&) override {}
  void on_step_end(const StepInfo&) override {}
};

TEST(TrainerStages, ANoOpCallbackChangesNothing) {
  const TrainConfig c = config("bf16");
  Trainer a(c), b(c);
  b.add_callback(std::make_shared<NoOp>());
  const TrainResult ra = a.fit(), rb = b.fit();
  expect_same_losses(ra.losses, rb.losses, "no-op callback");
  EXPECT_TRUE(weights(a.model()) == weights(b.model()));
}

// Plain SGD: p -= lr * g. Halving every gradient in on_gradients_ready is halving the learning
// rate, exactly: a power of two scales a float without rounding.
TEST(TrainerStages, HalvingTheGradientsIsHalvingTheLearningRate) {
  TrainConfig c = config("fp32");
  c.optimizer = "sgd";
  c.momentum = 0;
  c.lr = 0.05;
  Trainer hooked(c);
  hooked.add_callback(std::make_shared<GradientFunctionCallback>([](StepContext& ctx) {
    for (const Tensor& p : ctx.parameters) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(0.5);
    }
  }));
  TrainConfig half = c;
  half.lr = 0.025;
  Trainer slower(half), plain(c);
  const TrainResult rh = hooked.fit(), rs = slower.fit(), rp = plain.fit();
  expect_same_losses(rh.losses, rs.losses, "grad * 0.5 vs lr / 2");
  EXPECT_TRUE(weights(hooked.model()) == weights(slower.model()));
  EXPECT_FALSE(weights(hooked.model()) == weights(plain.model())) << "the hook had an effect";
}

TEST(TrainerParts, ACustomLossTrainsARegression) {
  Generator g(5);
  const Tensor x = randn({256, 8}, g);
  const Tensor w = randn({8, 1}, g);
  const Tensor y = matmul(x, w).detach();  // float targets [256, 1]
  auto data = std::make_unique<TensorDataset>(x, y, TensorDatasetOptions{.batch_size = 32});
  data->set_eval(x.slice(0, 0, 64), y.slice(0, 0, 64));
  TrainOptions o;
  o.steps = 60;
  o.lr = 0.05;
  o.loss = [](const Tensor& out, const Tensor& target) { return mse_loss(out, target); };
  Generator init(1);
  Trainer t(std::make_shared<nn::Linear>(8, 1, init), make_recipe("bf16"), std::move(data), o);
  const TrainResult r = t.fit();
  EXPECT_LT(r.final_loss, r.losses.front() / 10);
  EXPECT_FALSE(r.test_accuracy.has_value()) << "no accuracy for a regression";
  ASSERT_TRUE(r.test_loss.has_value());
  EXPECT_LT(*r.test_loss, r.losses.front() / 10);
  EXPECT_NE(result_to_json(r).find("\"model\":\"custom\""), std::string::npos);
}

TEST(TrainerParts, OwnOptimizerAndOptionsAreChecked) {
  const TrainConfig c = small_mlp("fp32");
  auto model = [&] { return nn::make_model({.name = "mlp", .width = 16, .seed = 1}); };
  TrainOptions both;
  both.steps = 2;
  both.epochs = 1;
  EXPECT_THROW(Trainer(model(), make_recipe("fp32"), synthetic_as_tensors(c), both), ConfigError);
  TrainOptions bad_lr;
  bad_lr.lr = 0;
  EXPECT_THROW(Trainer(model(), make_recipe("fp32"), synthetic_as_tensors(c), bad_lr), ConfigError);

  TrainOptions nowhere;
  nowhere.save_dir = "/nonexistent-parent/ckpt";
  EXPECT_THROW(Trainer(model(), make_recipe("fp32"), synthetic_as_tensors(c), nowhere),
               ConfigError);

  TrainOptions own;
  own.steps = 3;
  int made = 0;
  own.make_optimizer = [&](const nn::NamedTensors& params,
                           const optim::PrecisionOptions& p) -> std::unique_ptr<optim::Optimizer> {
    ++made;
    optim::SGDOptions so;
    so.precision = p;
    return std::make_unique<optim::SGD>(params, so);
  };
  own.lr = 0.1;
  Trainer t(model(), make_recipe("bf16"), synthetic_as_tensors(c), own);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(t.config().optimizer, "custom");
  const TrainResult r = t.fit();
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(t.optimizer().lr(), 0.1) << "the Trainer sets the learning rate";
}

TEST(TrainerParts, ResumeIsBitIdentical) {
  TempDir dir;
  const TrainConfig c = small_mlp("fp16");
  auto run = [&](int64_t steps, const std::string& save, const std::string& resume) {
    TrainOptions o;
    o.steps = steps;
    o.grad_accum = 2;
    o.evaluate = false;
    o.save_dir = save;
    o.resume_dir = resume;
    auto t = std::make_unique<Trainer>(nn::make_model({.name = "mlp", .width = 32, .seed = 4}),
                                       make_recipe("fp16"), synthetic_as_tensors(c), o);
    const TrainResult r = t->fit();
    return std::make_pair(std::move(t), r);
  };
  // 16 micro-batches per epoch, 8 steps: steps 9-12 are in the second epoch.
  const auto [full, rf] = run(12, "", "");
  const auto [a, ra] = run(9, (dir / "ckpt").string(), "");
  const auto [b, rb] = run(12, "", (dir / "ckpt").string());
  std::vector<double> resumed = ra.losses;
  resumed.insert(resumed.end(), rb.losses.begin(), rb.losses.end());
  expect_same_losses(resumed, rf.losses, "resumed from parts");
  EXPECT_TRUE(weights(full->model()) == weights(b->model()));
  EXPECT_EQ(rb.loss_scale, rf.loss_scale);
}

TEST(BuildRun, BuildsWhatEachPurposeNeeds) {
  TrainConfig c = small_mlp("auto");
  c.save_dir = "/nonexistent-parent/ckpt";
  EXPECT_THROW(build_run(c, RunPurpose::train), ConfigError) << "the save folder is checked";
  c.save_dir.clear();
  const RunParts t = build_run(c, RunPurpose::train);
  EXPECT_NE(t.config.precision, "auto") << "replaced by the recipe it picked";
  ASSERT_TRUE(t.model && t.data && t.recipe);
  EXPECT_GT(t.data->batches_per_epoch(), 0);

  c.save_dir = "/nonexistent-parent/ckpt";
  c.save_every = 5;
  const RunParts e = build_run(c, RunPurpose::evaluate, /*with_model=*/false);
  EXPECT_TRUE(e.config.save_dir.empty()) << "evaluation writes nothing";
  EXPECT_EQ(e.config.save_every, 0);
  EXPECT_FALSE(e.model);
  EXPECT_EQ(e.config.precision, "auto");
  EXPECT_GT(e.data->eval_batches(), 0);
}

}  // namespace
}  // namespace mixp::train
