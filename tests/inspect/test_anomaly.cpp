// --detect-anomaly names an injected fault correctly (docs/inspect.md): a layer that emits a NaN
// in its forward at step k, and one whose backward makes a NaN at step k (sqrt'(0) * 0), each
// reported with module, op, direction and step; an fp16 run whose loss scale is far too large
// is reported in the backward with the loss scaler's verdict (test_inspect_cli.cpp). With no
// observer installed, backend() hands out the plain backend.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "mixp/backend/backend.h"
#include "mixp/backend/kernel_observer.h"
#include "mixp/inspect/anomaly.h"
#include "mixp/nn/activation.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/inspect_callback.h"
#include "mixp/train/recipe.h"
#include "mixp/train/tensor_dataset.h"
#include "mixp/train/trainer.h"

namespace mixp::train {
namespace {

enum class Fault { forward, backward };

// Passes x through, except in training forward number `at` (1-based): a NaN added (forward), or
// x + 0 * sqrt(0 * x), whose backward is 0 * (0.5 / 0) = NaN (backward).
class FaultLayer final : public nn::Module {
 public:
  FaultLayer(Fault f, int64_t at) : Module("fault"), fault_(f), at_(at) {}
  Tensor forward(const Tensor& x) override {
    if (!is_training() || ++calls_ != at_) return x;
    if (fault_ == Fault::forward) return add(x, std::nan(""));
    return add(x, mul(sqrt(mul(x, 0.0)), 0.0));
  }

 private:
  Fault fault_;
  int64_t at_;
  int64_t calls_ = 0;
};

inspect::AnomalyReport run_with_fault(Fault f, int64_t at) {
  Generator g(3);
  const Tensor x = randn({64, 8}, g);
  const Tensor y = from_vector(std::vector<int64_t>(64, 1), {64});
  auto model = std::make_shared<nn::Sequential>();
  Generator init(1);
  model->add("fc1", std::make_shared<nn::Linear>(8, 16, init))
      .add("fault", std::make_shared<FaultLayer>(f, at))
      .add("act", std::make_shared<nn::ReLU>())
      .add("head", std::make_shared<nn::Linear>(16, 4, init));
  TrainOptions o;
  o.steps = 5;
  o.evaluate = false;
  Trainer t(model, make_recipe("fp32"),
            std::make_unique<TensorDataset>(x, y, TensorDatasetOptions{.batch_size = 16}), o);
  InspectOptions io;
  io.detect_anomaly = true;
  t.add_callback(std::make_shared<InspectCallback>(t, io));
  try {
    t.fit();
  } catch (const inspect::AnomalyError& e) {
    EXPECT_FALSE(kernel_observers_on()) << "the detector uninstalls itself when it stops the run";
    return e.report;
  }
  ADD_FAILURE() << "no anomaly reported";
  return {};
}

TEST(DetectAnomaly, NamesAForwardNaN) {
  const inspect::AnomalyReport r = run_with_fault(Fault::forward, 3);
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.phase, KernelPhase::forward);
  EXPECT_EQ(r.module, "fault");
  EXPECT_EQ(r.kind, "fault");
  EXPECT_EQ(r.kernel, "scalar:add");
  EXPECT_EQ(r.nan, 16 * 16);
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].stats.nan, 0) << "the input of the op was clean";
  EXPECT_NE(r.message().find("step 3, forward pass"), std::string::npos) << r.message();
  EXPECT_NE(r.note.find("does not scale the loss"), std::string::npos) << r.note;
}

TEST(DetectAnomaly, NamesABackwardNaNByItsForwardOp) {
  const inspect::AnomalyReport r = run_with_fault(Fault::backward, 2);
  EXPECT_EQ(r.step, 2);
  EXPECT_EQ(r.phase, KernelPhase::backward);
  EXPECT_EQ(r.module, "fault");
  EXPECT_EQ(r.op, "sqrt");
  EXPECT_EQ(r.kernel, "unary_backward:sqrt");
  EXPECT_GT(r.nan, 0);
  EXPECT_NE(r.message().find("the backward of op 'sqrt'"), std::string::npos) << r.message();
}

// The optimizer's update is no kernel the observer sees (issue 28: AdamW's exp_avg_sq overflowed
// at step 3, and the anomaly was reported at step 4's forward); check_optimizer names it.
TEST(DetectAnomaly, NamesTheOptimizerStateAnUpdateMadeNonFinite) {
  Tensor fc1 = zeros({4}), head = zeros({3});
  optim::AdamW opt(nn::NamedTensors{{"fc1.weight", fc1}, {"head.weight", head}});
  fc1.set_grad(full({4}, 1.0));
  head.set_grad(full({3}, 1e30));  // its square, 1e60, overflows fp32's exp_avg_sq
  opt.step();
  inspect::AnomalyDetector d(nullptr);
  d.check_optimizer(opt);  // not installed: checks nothing
  d.set_step(3);
  d.install();
  try {
    d.check_optimizer(opt);
    ADD_FAILURE() << "no anomaly reported";
  } catch (const inspect::AnomalyError& e) {
    const inspect::AnomalyReport& r = e.report;
    EXPECT_EQ(r.step, 3);
    EXPECT_EQ(r.phase, KernelPhase::optimizer);
    EXPECT_EQ(r.kernel, "adamw");
    EXPECT_EQ(r.parameter, "head.weight");
    EXPECT_EQ(r.tensor, "exp_avg_sq");
    EXPECT_EQ(r.inf, 3);
    EXPECT_EQ(r.nan, 0);
    EXPECT_EQ(r.more, 0) << "exp_avg / sqrt(inf) moves the weight by 0: it stays finite";
    EXPECT_NE(r.message().find("step 3, optimizer: the adamw update wrote 0 NaN and 3 inf into "
                               "exp_avg_sq of parameter head.weight"),
              std::string::npos)
        << r.message();
  }
  EXPECT_FALSE(kernel_observers_on()) << "the detector uninstalls itself when it stops the run";
}

TEST(DetectAnomaly, NoObserverMeansThePlainBackend) {
  EXPECT_FALSE(kernel_observers_on());
  EXPECT_EQ(&backend(), &get_backend(current_backend_kind()));
  {
    inspect::AnomalyDetector d(nullptr);
    d.install();
    EXPECT_TRUE(kernel_observers_on());
    EXPECT_NE(&backend(), &get_backend(current_backend_kind()));
    const Tensor a = full({4}, 1.0);
    EXPECT_THROW(div(a, zeros({4})), inspect::AnomalyError);  // 1/0 = inf
  }
  EXPECT_FALSE(kernel_observers_on());
  EXPECT_EQ(&backend(), &get_backend(current_backend_kind()));
}

}  // namespace
}  // namespace mixp::train
