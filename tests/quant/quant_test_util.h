// Helpers for the quant tests: the torch fixture and small models.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/qat.h"
#include "mixp/tensor/factories.h"
#include "common/test_paths.h"

namespace mixp::quant::testing {

inline const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(MIXP_TEST_DATA) + "/quant/quant_fixture.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
  }();
  return j;
}

inline std::vector<float> floats(const nlohmann::json& a) {
  std::vector<float> v;
  for (const auto& x : a) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

// A one-layer gpt 16 wide: a model the quantizers refuse (it is not a Sequential of layers).
inline std::shared_ptr<nn::Module> tiny_gpt() {
  return nn::make_model({.name = "gpt",
                         .width = 16,
                         .layers = 1,
                         .heads = 2,
                         .context = 8,
                         .vocab = 11,
                         .mlp_width = 32});
}

// Trains a low-bit QAT model (lowbit_qat.h) `steps` Adam steps (lr 1e-2) on one random batch of
// `batch` 28x28 images drawn from g, then readies it for conversion: observers off, batch norms
// frozen, eval mode. Returns the batch.
inline Tensor train_lowbit_then_freeze(nn::Module& model, Generator& g, int64_t batch, int steps) {
  const Tensor x = randn(Shape{batch, 1, 28, 28}, g);
  const Tensor target = randint(0, 10, Shape{batch}, g, {.dtype = DType::int64});
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    cross_entropy(model.forward(x), target).backward();
    opt.step();
  }
  set_lowbit_observers_enabled(model, false);
  freeze_batch_norm(model);
  model.eval();
  return x;
}

}  // namespace mixp::quant::testing
