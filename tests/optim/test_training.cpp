// End to end: a small classifier on synthetic data learns (its loss falls well below the start)
// with each optimizer, and with a cosine schedule plus clipping.
#include <gtest/gtest.h>

#include <memory>

#include "mixp/nn/activation.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/clip_grad.h"
#include "mixp/optim/lr_schedule.h"
#include "mixp/optim/sgd.h"
#include "mixp/tensor/factories.h"

namespace mixp::optim {
namespace {

// 4 classes, each a Gaussian blob around its own centre in 8 dimensions.
struct Data {
  Tensor x, y;
};
Data make_data() {
  Generator g(11);
  const int64_t n = 256, d = 8, k = 4;
  const Tensor centres = randn({k, d}, g) * 2.0;
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % k;
  Tensor y = from_vector(labels, {n});
  Tensor x = add(embedding(y, centres), randn({n, d}, g) * 0.7);
  return {x.detach(), y};
}

double train(const std::function<std::unique_ptr<Optimizer>(nn::Module&)>& make_opt,
             double* first_loss, bool clip = false, const LrSchedule* sched = nullptr) {
  Generator g(5);
  auto model = std::make_shared<nn::Sequential>();
  model->add("fc1", std::make_shared<nn::Linear>(8, 32, g))
      .add("relu", std::make_shared<nn::ReLU>());
  model->add("head", std::make_shared<nn::Linear>(32, 4, g));
  auto opt = make_opt(*model);
  const Data d = make_data();
  double loss_v = 0;
  const std::vector<Tensor> params = model->parameters();
  for (int step = 0; step < 60; ++step) {
    if (sched) opt->set_lr(sched->lr_at(step));
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(d.x), d.y);
    loss_v = loss.item();
    if (step == 0) *first_loss = loss_v;
    loss.backward();
    if (clip) clip_grad_norm(params, 1.0);
    opt->step();
  }
  return loss_v;
}

TEST(Training, EachOptimizerReducesTheLoss) {
  double first = 0;
  const double sgd = train(
      [](nn::Module& m) {
        return std::make_unique<SGD>(m.named_parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
      },
      &first);
  EXPECT_LT(sgd, 0.3 * first) << "sgd";
  const double adam = train(
      [](nn::Module& m) {
        return std::make_unique<Adam>(m.named_parameters(), AdamOptions{.lr = 1e-2});
      },
      &first);
  EXPECT_LT(adam, 0.3 * first) << "adam";
  const double adamw = train(
      [](nn::Module& m) {
        return std::make_unique<AdamW>(m.named_parameters(), AdamOptions{.lr = 1e-2});
      },
      &first);
  EXPECT_LT(adamw, 0.3 * first) << "adamw";
  const double plain = train(
      [](nn::Module& m) { return std::make_unique<SGD>(m.parameters(), SGDOptions{.lr = 0.2}); },
      &first);
  EXPECT_LT(plain, 0.5 * first) << "plain sgd";
  const LrSchedule s{.kind = ScheduleKind::warmup_cosine,
                     .base_lr = 2e-2,
                     .warmup_steps = 5,
                     .total_steps = 60,
                     .min_lr = 1e-3};
  const double sched = train(
      [](nn::Module& m) {
        return std::make_unique<AdamW>(m.named_parameters(), AdamOptions{.lr = 1e-2});
      },
      &first, true, &s);
  EXPECT_LT(sched, 0.3 * first) << "adamw + warmup_cosine + clip";
}

}  // namespace
}  // namespace mixp::optim
