// prepare_qat / convert_to_int8 on the built-in models: names kept, observer and BN switches,
// Conv+BN folding (exact in fp64), the converted int8 model against the fake-quant model, save and
// load, and the errors (convert before calibration, unsupported models).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "mixp/io/safetensors.h"
#include "mixp/mixp.h"
#include "mixp/nn/batch_norm2d.h"
#include "mixp/nn/conv2d.h"
#include "mixp/nn/models.h"
#include "mixp/quant/int8_model.h"
#include "mixp/quant/qat.h"
#include "mixp/quant/qat_modules.h"
#include "quant_test_util.h"

namespace mixp::quant {
namespace {

std::shared_ptr<nn::Module> small_cnn(uint64_t seed = 1) {
  return nn::make_model({.name = "cnn", .width = 8, .mlp_width = 16, .seed = seed});
}
std::shared_ptr<nn::Module> small_mlp(uint64_t seed = 1) {
  return nn::make_model({.name = "mlp", .width = 32, .layers = 2, .seed = seed});
}

// Images roughly like normalized Fashion-MNIST: mostly background (-0.81), some bright pixels.
Tensor images(int64_t n, Generator& g) {
  Tensor u = rand({n, 1, 28, 28}, g);
  std::vector<float> v = u.to_vector<float>();
  for (float& x : v) x = x < 0.5f ? -0.81f : (x - 0.5f) * 5.0f - 0.81f;
  return from_vector(v, Shape{n, 1, 28, 28});
}

// A few training-mode passes (observers and BN statistics move), then eval mode.
void warm_up(nn::Module& m, Generator& g, int passes = 4) {
  m.train(true);
  for (int i = 0; i < passes; ++i) {
    NoGradGuard ng;
    m.forward(images(32, g));
  }
  m.eval();
}

TEST(Qat, PrepareKeepsParameterNamesAndIdentities) {
  for (auto make : {small_mlp, small_cnn}) {
    auto m = make(1);
    const nn::NamedTensors before = m->named_parameters();
    prepare_qat(*m);
    const nn::NamedTensors after = m->named_parameters();
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(before[i].first, after[i].first);
      EXPECT_TRUE(before[i].second.is_same(after[i].second)) << before[i].first;
    }
    EXPECT_TRUE(is_prepared(*m));
    EXPECT_THROW(prepare_qat(*m), std::invalid_argument);  // twice
  }
  auto cnn = small_cnn();
  prepare_qat(*cnn);
  // The fused groups' fake quantization: input on conv1, outputs after the ReLUs, none after the
  // head (its logits stay fp32).
  std::vector<std::string> names;
  for (const auto& [n, b] : cnn->named_buffers()) names.push_back(n);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_TRUE(has("conv1.input_fake_quant.scale"));
  EXPECT_TRUE(has("conv1.weight_fake_quant.min_val"));
  EXPECT_TRUE(has("relu1.activation_post_process.zero_point"));
  EXPECT_TRUE(has("relu2.activation_post_process.max_val"));
  EXPECT_TRUE(has("fc1.activation_post_process.scale"));
  EXPECT_TRUE(has("bn1.running_mean"));
  EXPECT_FALSE(has("head.activation_post_process.scale"));
  EXPECT_EQ(cnn->buffer("conv1.weight_fake_quant.scale").shape(), (Shape{8}));  // per channel
}

TEST(Qat, TrainsWithStraightThroughGradients) {
  auto m = small_cnn();
  prepare_qat(*m);
  Generator g(2);
  const Tensor x = images(8, g);
  const Tensor y =
      from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, Shape{8}, {.dtype = DType::int32});
  cross_entropy(m->forward(x), y).backward();
  for (const auto& [n, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_GT(sum(mul(p.grad(), p.grad())).item(), 0.0) << n;
  }
}

TEST(Qat, ConvertNeedsCalibratedObservers) {
  auto m = small_mlp();
  prepare_qat(*m);
  try {
    convert_to_int8(*m);
    FAIL() << "convert of an uncalibrated model succeeded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("convert needs calibrated observers: run training or "
                                         "`mixp quantize --calibrate N` first"),
              std::string::npos)
        << e.what();
  }
  auto plain = small_mlp();
  EXPECT_THROW(convert_to_int8(*plain), std::invalid_argument);  // not prepared
}

// A custom model (docs/custom-models.md): a Module holding its layers itself, one of them inside
// a nested container, with a LayerNorm and GELU that int8 inference does not run.
class NestedNet : public nn::Module {
 public:
  explicit NestedNet(Generator& g) : Module("custom") {
    body_ = register_module("body", std::make_shared<nn::Sequential>());
    body_->add("fc1", std::make_shared<nn::Linear>(12, 16, g));
    body_->add("act", std::make_shared<nn::GELU>());
    norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(16));
    head_ = register_module("head", std::make_shared<nn::Linear>(16, 5, g));
  }
  Tensor forward(const Tensor& x) override { return (*head_)((*norm_)((*body_)(x))); }

 private:
  std::shared_ptr<nn::Sequential> body_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::Linear> head_;
};

// QAT takes any Module tree (issue 28 item 12): its Linear layers are found by type wherever they
// sit and trained through fake quantization, as the FP8 path finds its layers. Parameters keep
// their names; each layer gets weight, input and (but the last) output fake quantization.
TEST(Qat, PreparesAnyModuleTree) {
  Generator g(5);
  auto net = std::make_shared<NestedNet>(g);
  const auto before = net->named_parameters();
  const Tensor x = randn({8, 12}, g);
  Tensor y_float;
  {
    NoGradGuard ng;
    y_float = net->forward(x);
  }
  prepare_qat(*net);
  EXPECT_TRUE(is_prepared(*net));
  EXPECT_FALSE(is_int8_convertible(*net));  // trains with fake quantization only
  const auto after = net->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_TRUE(after[i].second.is_same(before[i].second)) << after[i].first;
  }
  for (const char* b : {"body.fc1.qat.weight_fake_quant.scale", "body.fc1.qat.input_fake_quant.scale",
                        "body.fc1.qat.activation_post_process.scale",
                        "head.qat.weight_fake_quant.scale", "head.qat.input_fake_quant.scale"}) {
    EXPECT_NO_THROW(net->buffer(b)) << b;
  }
  EXPECT_THROW(net->buffer("head.qat.activation_post_process.scale"), std::out_of_range);
  // Training passes go through the fake quantizers: the observers see data, the output moves off
  // the float model's by about a quantization step, and gradients reach the shared parameters.
  net->train(true);
  Tensor y = net->forward(x);
  std::string missing;
  EXPECT_TRUE(observers_calibrated(*net, &missing)) << missing;
  const std::vector<float> a = y.to_vector<float>(), b = y_float.to_vector<float>();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::abs(a[i] - b[i])));
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.5);
  sum(mul(y, y)).backward();
  EXPECT_TRUE(net->parameter("body.fc1.weight").grad().defined());
  EXPECT_TRUE(net->parameter("head.weight").grad().defined());
  // The built-in Sequential models still become int8 models.
  auto mlp = small_mlp();
  prepare_qat(*mlp);
  EXPECT_TRUE(is_int8_convertible(*mlp));
}

TEST(Qat, SwitchesObserversAndBatchNorm) {
  auto m = small_cnn();
  prepare_qat(*m);
  Generator g(3);
  warm_up(*m, g, 2);
  m->train(true);
  set_observers_enabled(*m, false);
  freeze_batch_norm(*m);
  const std::vector<float> scale0 =
      m->buffer("relu1.activation_post_process.scale").to_vector<float>();
  const std::vector<float> mean0 = m->buffer("bn1.running_mean").to_vector<float>();
  {
    NoGradGuard ng;
    m->forward(images(16, g));
  }
  EXPECT_EQ(m->buffer("relu1.activation_post_process.scale").to_vector<float>(), scale0);
  EXPECT_EQ(m->buffer("bn1.running_mean").to_vector<float>(), mean0);  // frozen: not updated
  freeze_batch_norm(*m, false);
  {
    NoGradGuard ng;
    m->forward(images(16, g));
  }
  EXPECT_NE(m->buffer("bn1.running_mean").to_vector<float>(), mean0);
}

// PyTorch's fuse_conv_bn_weights: conv then batch norm (eval) equals the folded conv. In fp64 the
// two differ only by rounding of a few operations (measured ~1e-15; bound 1e-12).
TEST(Qat, ConvBnFoldingIsExactInFp64) {
  Generator g(4);
  const Tensor x = randn({2, 3, 9, 9}, g, {.dtype = DType::fp64});
  const Tensor w = randn({5, 3, 3, 3}, g, {.dtype = DType::fp64});
  const Tensor b = randn({5}, g, {.dtype = DType::fp64});
  Tensor rm = randn({5}, g, {.dtype = DType::fp64});
  Tensor rv = add(rand({5}, g, {.dtype = DType::fp64}), 0.5);
  const Tensor gamma = randn({5}, g, {.dtype = DType::fp64});  // negative ones included
  const Tensor beta = randn({5}, g, {.dtype = DType::fp64});
  const double eps = 1e-5;
  const Tensor ref = batch_norm(conv2d(x, w, b, 1, 1), rm, rv, gamma, beta, false, 0.1, eps);
  const FoldedConv f = fold_conv_bn(w, b, rm, rv, gamma, beta, eps);
  EXPECT_EQ(f.weight.dtype(), DType::fp64);
  const Tensor got = conv2d(x, f.weight, f.bias, 1, 1);
  const std::vector<double> a = ref.to_double_vector(), c = got.to_double_vector();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - c[i]));
  EXPECT_LT(worst, 1e-12);
}

// Logits of the converted int8 model against the fake-quant model they were converted from.
// Both compute the same function of the same codes; they differ in rounding only: the fake-quant
// model accumulates fp32 products in fp32 and applies batch norm as its own op, the int8 model
// sums exactly in int32 and scales once. A requantized activation may therefore land one code
// apart where it sits within fp32 rounding of a tie, and that step propagates. Tolerance: the
// predicted class agrees on at least 98% of the rows and the mean absolute logit difference is
// below 2% of the logits' standard deviation (measured: see the test output).
void expect_close(nn::Module& fq, nn::Module& q, const Tensor& x) {
  NoGradGuard ng;
  const Tensor a = fq.forward(x), b = q.forward(x);
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const int64_t n = a.size(0), c = a.size(1);
  double diff = 0, mean = 0, var = 0, worst = 0;
  for (float v : av) mean += v;
  mean /= double(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    diff += std::abs(av[i] - bv[i]);
    worst = std::max(worst, double(std::abs(av[i] - bv[i])));
    var += (av[i] - mean) * (av[i] - mean);
  }
  diff /= double(av.size());
  const double sd = std::sqrt(var / double(av.size()));
  int64_t agree = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto arg = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + i * c, v.begin() + (i + 1) * c) - (v.begin() + i * c);
    };
    agree += arg(av) == arg(bv);
  }
  std::cout << "    mean |logit diff| " << diff << " (max " << worst << ", logit sd " << sd
            << "), argmax agreement " << agree << "/" << n << "\n";
  EXPECT_LT(diff, 0.02 * sd);
  EXPECT_GE(agree, n * 98 / 100);
}

TEST(Qat, ConvertedCnnMatchesFakeQuantModel) {
  auto m = small_cnn(5);
  prepare_qat(*m);
  Generator g(5);
  warm_up(*m, g);
  set_observers_enabled(*m, false);
  auto q = convert_to_int8(*m);
  EXPECT_EQ(q->layers().size(), 8u);  // quantize, conv1, pool1, conv2, pool2, flatten, fc1, head
  expect_close(*m, *q, images(64, g));
}

TEST(Qat, ConvertedMlpMatchesFakeQuantModel) {
  auto m = small_mlp(6);
  prepare_qat(*m);
  Generator g(6);
  warm_up(*m, g);
  set_observers_enabled(*m, false);
  auto q = convert_to_int8(*m);
  expect_close(*m, *q, images(64, g));
  // Flat [N, 784] input too.
  NoGradGuard ng;
  const Tensor x = images(4, g);
  EXPECT_EQ(q->forward(x.reshape({4, 784})).to_vector<float>(), q->forward(x).to_vector<float>());
}

TEST(Qat, PtqCalibrationThenConvert) {
  auto m = small_cnn(7);
  Generator g(7);
  warm_up(*m, g);  // BN statistics of an "fp32-trained" model
  prepare_ptq(*m);
  EXPECT_FALSE(m->is_training());
  {
    NoGradGuard ng;
    for (int i = 0; i < 3; ++i) m->forward(images(32, g));  // calibration: observers only
  }
  EXPECT_TRUE(observers_calibrated(*m));
  auto q = convert_to_int8(*m);
  // The calibrated model with fake quantization on is what the int8 model computes.
  set_observers_enabled(*m, false);
  set_fake_quant_enabled(*m, true);
  expect_close(*m, *q, images(64, g));
}

TEST(Qat, SaveAndLoadInt8Model) {
  auto m = small_cnn(8);
  prepare_qat(*m);
  Generator g(8);
  warm_up(*m, g);
  auto q = convert_to_int8(*m);
  const auto path = std::filesystem::temp_directory_path() /
                    ("mixp_int8_" + std::to_string(::getpid()) + ".safetensors");
  save_int8_model(*q, path);
  auto r = load_int8_model(path);
  std::filesystem::remove(path);
  ASSERT_EQ(r->layers().size(), q->layers().size());
  NoGradGuard ng;
  const Tensor x = images(20, g);
  EXPECT_EQ(r->forward(x).to_vector<float>(), q->forward(x).to_vector<float>());
  const SafeTensorsFile f = [&] {
    save_int8_model(*q, path);
    auto ff = read_safetensors(path);
    std::filesystem::remove(path);
    return ff;
  }();
  ASSERT_NE(f.find("conv1.weight"), nullptr);
  EXPECT_EQ(f.find("conv1.weight")->dtype, DType::int8);
  EXPECT_EQ(f.find("conv1.weight_scale")->shape, (std::vector<int64_t>{8}));
  EXPECT_NE(f.metadata.at("mixp.int8_model").find("\"conv2d\""), std::string::npos);
}

TEST(Qat, LoadRejectsOtherFiles) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("mixp_notint8_" + std::to_string(::getpid()) + ".safetensors");
  SafeTensorsFile f;
  f.tensors.push_back({"x", DType::fp32, {1}, std::vector<std::byte>(4)});
  write_safetensors(path, f);
  EXPECT_THROW(load_int8_model(path), SafeTensorsError);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mixp::quant
