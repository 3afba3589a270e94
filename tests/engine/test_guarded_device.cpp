// The proof that nothing computes outside the backend (issue 12, item 6): the guarded device
// (tensor/device.h) is host memory whose data pointer only a backend call may take; its backend
// forwards every kernel to the cpu backend inside a DeviceAccessScope. A training step that
// touched tensor data anywhere else throws at that data_ptr(), naming the file and line. Trained
// on it, a run must give the cpu device's results bit for bit (losses, evaluation, every saved
// tensor's bytes).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/cuda.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/tensor_dataset.h"
#include "mixp/train/trainer.h"

namespace mixp {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

TEST(GuardedDevice, DataPointerOnlyInsideABackendCall) {
  Generator gen(1);
  const Tensor a = randn({4, 3}, gen, {.device = Device::guarded()});
  EXPECT_EQ(a.device(), Device::guarded());
  try {
    (void)a.data_ptr();
    FAIL() << "data_ptr() on a guarded tensor outside a backend call did not throw";
  } catch (const std::logic_error& e) {
    // The message names the caller: this file.
    EXPECT_NE(std::string(e.what()).find("test_guarded_device.cpp"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)a.data<float>(), std::logic_error);
  {
    const DeviceAccessScope inside;
    EXPECT_NE(a.data_ptr(), nullptr);
  }
  // The explicit host-access paths work.
  const Tensor h = a.to(Device::cpu());
  EXPECT_TRUE(h.device().is_cpu());
  EXPECT_EQ(h.to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(a.at({1, 2}), h.at({1, 2}));
}

TEST(GuardedDevice, OpsDispatchByDeviceAndMatchTheCpu) {
  Generator gen(2);
  const Tensor x = randn({8, 16}, gen), w = randn({16, 5}, gen);
  const Tensor gx = x.to(Device::guarded()), gw = w.to(Device::guarded());
  Tensor y, gy;
  {
    y = softmax(relu(matmul(x, w)), -1);
  }
  {
    const DefaultDeviceGuard on(Device::guarded());
    gy = softmax(relu(matmul(gx, gw)), -1);
  }
  EXPECT_EQ(gy.device(), Device::guarded());
  EXPECT_EQ(gy.to_vector<float>(), y.to_vector<float>());
}

// Outputs follow their inputs' device, with the default device left at the cpu: forward results,
// saved tensors, gradients (including the implied one of backward() and the zero gradient of an
// unused output) all stay on the guarded device, and match the cpu's bit for bit.
TEST(GuardedDevice, OutputsFollowTheirInputsDevice) {
  Generator gen(4);
  const Tensor x = randn({6, 16}, gen), w = randn({16, 8}, gen), b = randn({8}, gen);
  const Tensor lw = randn({8}, gen);
  const Tensor t =
      from_vector(std::vector<int64_t>{0, 3, 1, 7, 2, 5}, {6}, {.dtype = DType::int64});
  auto run = [&](Device d) {
    Tensor xd = x.to(d), wd = w.to(d).requires_grad_(), bd = b.to(d).requires_grad_();
    Tensor lwd = lw.to(d).requires_grad_();
    const Tensor h = layer_norm(relu(add(matmul(xd, wd), bd)), {8}, lwd, Tensor());
    const std::vector<Tensor> parts = chunk(h, 2, 1);  // the second chunk's gradient is implied 0
    const Tensor loss = add(cross_entropy(h, t.to(d)), mean(mul(parts[0], parts[0])));
    EXPECT_EQ(h.device(), d);
    EXPECT_EQ(loss.device(), d);
    loss.backward();
    EXPECT_EQ(wd.grad().device(), d);
    EXPECT_EQ(bd.grad().device(), d);
    EXPECT_EQ(lwd.grad().device(), d);
    return std::vector<std::vector<float>>{loss.to_vector<float>(), wd.grad().to_vector<float>(),
                                           bd.grad().to_vector<float>(),
                                           lwd.grad().to_vector<float>()};
  };
  ASSERT_TRUE(default_device().is_cpu());
  const auto cpu = run(Device::cpu());
  const auto guarded = run(Device::guarded());
  EXPECT_EQ(guarded, cpu);
}

TEST(GuardedDevice, MixedDevicesAreRefused) {
  const Tensor a = ones({3});
  const Tensor b = ones({3}, {.device = Device::guarded()});
  try {
    (void)common_device({&a, &b});
    FAIL() << "mixed devices were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("guarded"), std::string::npos) << e.what();
  }
  // A device without a backend built, or with no GPU present, is refused the same way.
  if (!cuda_available()) {
    EXPECT_THROW(ones({2}, {.device = Device::cuda()}), std::invalid_argument);
  }
}

TEST(GuardedDevice, TensorDatasetBatchesStayOnTheDevice) {
  Generator gen(3);
  const Tensor x = randn({10, 3}, gen);
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, {10},
                               {.dtype = DType::int64});
  train::TensorDataset cpu(x, y, {.batch_size = 4, .seed = 5});
  train::TensorDataset guarded(x.to(Device::guarded()), y.to(Device::guarded()),
                               {.batch_size = 4, .seed = 5});
  for (int i = 0; i < 3; ++i) {
    const train::Batch a = cpu.next(), b = guarded.next();
    EXPECT_EQ(b.input.device(), Device::guarded());
    EXPECT_EQ(b.input.to_vector<float>(), a.input.to_vector<float>());
    EXPECT_EQ(b.target.to_vector<int64_t>(), a.target.to_vector<int64_t>());
  }
}

// One short training run, on the cpu or (guarded) on the guarded device.
struct Run {
  train::TrainResult result;
  std::vector<std::pair<std::string, std::string>> files;  // name, bytes of each .safetensors
};

Run train_on(train::TrainConfig c, bool guarded, const fs::path& dir) {
  c.save_dir = dir.string();
  Run run;
  {
    const DefaultDeviceGuard device(guarded ? Device::guarded() : Device::cpu());
    train::Trainer t(c);
    run.result = t.fit();
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    run.files.emplace_back(fs::relative(e.path(), dir).string(), test::read_text(e.path()));
  }
  std::sort(run.files.begin(), run.files.end());
  return run;
}

std::vector<uint64_t> bits(const std::vector<double>& v) {
  std::vector<uint64_t> out;
  for (double d : v) out.push_back(std::bit_cast<uint64_t>(d));
  return out;
}

void expect_identical(const train::TrainConfig& c) {
  TempDir tmp;
  const Run cpu = train_on(c, false, tmp.path() / "cpu");
  const Run guarded = train_on(c, true, tmp.path() / "guarded");
  ASSERT_EQ(cpu.result.steps, c.steps);
  EXPECT_EQ(bits(guarded.result.losses), bits(cpu.result.losses));
  EXPECT_EQ(std::bit_cast<uint64_t>(guarded.result.final_loss),
            std::bit_cast<uint64_t>(cpu.result.final_loss));
  EXPECT_EQ(guarded.result.skipped_steps, cpu.result.skipped_steps);
  EXPECT_EQ(std::bit_cast<uint64_t>(guarded.result.loss_scale),
            std::bit_cast<uint64_t>(cpu.result.loss_scale));
  EXPECT_EQ(guarded.result.val_loss.has_value(), cpu.result.val_loss.has_value());
  if (cpu.result.val_loss && guarded.result.val_loss) {
    EXPECT_EQ(std::bit_cast<uint64_t>(*guarded.result.val_loss),
              std::bit_cast<uint64_t>(*cpu.result.val_loss));
  }
  EXPECT_EQ(guarded.result.test_accuracy, cpu.result.test_accuracy);
  ASSERT_FALSE(cpu.files.empty());
  ASSERT_EQ(guarded.files.size(), cpu.files.size());
  for (size_t i = 0; i < cpu.files.size(); ++i) {
    EXPECT_EQ(guarded.files[i].first, cpu.files[i].first);
    EXPECT_TRUE(guarded.files[i].second == cpu.files[i].second)
        << cpu.files[i].first << " differs between the guarded device and the cpu";
  }
}

// The gpt at its default width (4 layers, 256 wide) on fortunes-free synthetic text, batch 4,
// context 32, 3 steps, one thread (the access scope is per thread: the guarded backend's kernels
// run on the calling thread).
train::TrainConfig gpt(const std::string& precision) {
  train::TrainConfig c;
  c.model.name = "gpt";
  c.model.context = 32;
  c.data = train::kSyntheticData;
  c.batch = 4;
  c.steps = 3;
  c.test_limit = 4;
  c.seed = 1;
  c.threads = 1;
  c.precision = precision;
  return c;
}

class GuardedGpt : public ::testing::TestWithParam<const char*> {};

TEST_P(GuardedGpt, TrainsBitIdenticalToTheCpu) {
  expect_identical(gpt(GetParam()));
}

std::string test_name(std::string n) {
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

// fp16: dynamic loss scaling (GradScaler's unscale and inf check run in the backend). fp8,
// fp8-current, mxfp8: the FP8 linear layers' quantize, amax, scale-update and epilogue kernels.
INSTANTIATE_TEST_SUITE_P(Recipes, GuardedGpt,
                         ::testing::Values("fp32", "bf16", "fp16", "fp8", "fp8-current", "mxfp8",
                                           "fp16-pure", "bf16-pure", "tf32"),
                         [](const auto& info) { return test_name(info.param); });

// The mlp at width 64, batch 16, 3 steps.
train::TrainConfig mlp(const std::string& precision) {
  train::TrainConfig c = gpt(precision);
  c.model.name = "mlp";
  c.model.context = 0;
  c.batch = 16;
  c.model.width = 64;
  c.test_limit = 32;
  return c;
}

class GuardedMlp : public ::testing::TestWithParam<const char*> {};

// The low-bit QAT recipes (int4-qat ... binary-act): the backend's lowbit_codes and its
// straight-through gradient, LowBitActivation's observer buffers through the host-access paths.
// int8-qat: the observers' min/max reductions and fake quantization run in the backend; the
// converted int8 model (a cpu inference model, oneDNN u8s8) is built from the host copy of the
// trained weights and evaluated on the cpu, so its accuracy is compared too.
TEST_P(GuardedMlp, TrainsBitIdenticalToTheCpu) {
  expect_identical(mlp(GetParam()));
}

// The cnn: int8-qat's per-channel weight observers and batch norm, the FP8 convolutions; the
// low-bit codes of its convolutions (int4-qat, binary-act).
class GuardedCnn : public ::testing::TestWithParam<const char*> {};

TEST_P(GuardedCnn, TrainsBitIdenticalToTheCpu) {
  train::TrainConfig c = mlp(GetParam());
  c.model.name = "cnn";
  c.model.width = 0;
  expect_identical(c);
}

INSTANTIATE_TEST_SUITE_P(Recipes, GuardedMlp,
                         ::testing::Values("int8-qat", "fp8", "fp8-current", "mxfp8", "fp16",
                                           "fp16-o2", "bf16-pure", "fp64", "auto", "int4-qat",
                                           "int2-qat", "ternary", "binary", "binary-act"),
                         [](const auto& info) { return test_name(info.param); });

INSTANTIATE_TEST_SUITE_P(Recipes, GuardedCnn,
                         ::testing::Values("int8-qat", "fp8", "mxfp8", "fp16-o2", "bf16-pure",
                                           "int4-qat", "binary-act"),
                         [](const auto& info) { return test_name(info.param); });

// The image models: batch norm, pooling, convolutions (cnn) and the fused AdamW with bf16
// autocast's weight shadows (mlp).
TEST(GuardedTraining, ImageModelsMatchTheCpu) {
  for (const auto& [model, precision] : {std::pair{"mlp", "bf16"}, std::pair{"cnn", "fp32"}}) {
    SCOPED_TRACE(std::string(model) + " " + precision);
    train::TrainConfig c = gpt(precision);
    c.model.name = model;
    c.model.context = 0;
    c.batch = 16;
    c.test_limit = 32;
    expect_identical(c);
  }
}

TEST(GuardedTraining, ClippingAndSgdMatchTheCpu) {
  train::TrainConfig c = gpt("fp16-o2");
  c.clip = 0.5;  // the gradient norm's sum of squares runs in the backend
  c.optimizer = "sgd";
  expect_identical(c);
}

}  // namespace
}  // namespace mixp
