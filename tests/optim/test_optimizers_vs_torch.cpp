// SGD / Adam / AdamW against torch.optim trajectories (tests/golden/optim/optim_fixture.json,
// made by gen_optim_fixture.py with torch 1.13 on the CPU): same initial values, same gradients,
// same learning rate per step; every parameter value after every step, and the final states,
// must agree to fp32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "mixp/autograd/grad_mode.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/sgd.h"
#include "mixp/tensor/factories.h"
#include "common/test_paths.h"

namespace mixp::optim {
namespace {

using nlohmann::json;

const json& fixture() {
  static const json j = [] {
    std::ifstream f(std::string(MIXP_TEST_DATA) + "/optim/optim_fixture.json");
    if (!f)
      throw std::runtime_error(
          "optim_fixture.json is missing; run tests/golden/optim/gen_optim_fixture.py");
    return json::parse(f);
  }();
  return j;
}

std::unique_ptr<Optimizer> make(const json& c, const std::vector<Tensor>& params) {
  const json& o = c["options"];
  const std::string kind = c["optimizer"];
  if (kind == "sgd") {
    SGDOptions s;
    s.lr = o["lr"];
    s.momentum = o.value("momentum", 0.0);
    s.dampening = o.value("dampening", 0.0);
    s.nesterov = o.value("nesterov", false);
    s.weight_decay = o.value("weight_decay", 0.0);
    return std::make_unique<SGD>(params, s);
  }
  AdamOptions a;
  a.lr = o["lr"];
  if (o.contains("betas")) {
    a.beta1 = o["betas"][0];
    a.beta2 = o["betas"][1];
  }
  a.eps = o.value("eps", 1e-8);
  if (o.contains("weight_decay")) a.weight_decay = o["weight_decay"].get<double>();
  if (kind == "adam") return std::make_unique<Adam>(params, a);
  return std::make_unique<AdamW>(params, a);
}

// fp32 tolerance: PyTorch's vectorized add-with-alpha uses FMA, so single values differ by an ulp
// (observed: at most 1-2 ulps, ~3e-8 on values near 0.3). Each step rounds a handful of fp32
// operations (relative 2^-24 each); over six steps and through the 1/sqrt(v) of Adam (which
// amplifies relative error when v is tiny) the differences stay below a few ulps of the value. 1e-6
// relative plus 1e-7 absolute leaves margin.
void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-7 + 1e-6 * std::fabs(want[i])) << what << " element " << i;
  }
}

class VsTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(VsTorch, Trajectory) {
  const json* cp = nullptr;
  for (const json& c : fixture()["cases"]) {
    if (c["name"] == GetParam()) cp = &c;
  }
  ASSERT_NE(cp, nullptr) << GetParam();
  const json& c = *cp;
  std::vector<Tensor> params;
  for (const json& p : c["params"]) {
    const std::vector<int64_t> shape = p["shape"];
    params.push_back(
        from_vector(p["init"].get<std::vector<double>>(), Shape(shape.begin(), shape.end()))
            .requires_grad_());
  }
  auto opt = make(c, params);
  const size_t steps = c["grads"].size();
  for (size_t s = 0; s < steps; ++s) {
    opt->set_lr(c["lrs"][s]);
    for (size_t i = 0; i < params.size(); ++i) {
      const json& g = c["grads"][s][i];
      params[i].set_grad(
          g.is_null() ? Tensor() : from_vector(g.get<std::vector<double>>(), params[i].shape()));
    }
    opt->step();
    for (size_t i = 0; i < params.size(); ++i) {
      expect_close(params[i].to_double_vector(), c["expected"][s][i].get<std::vector<double>>(),
                   "step " + std::to_string(s) + " param " + std::to_string(i));
    }
  }
  // Final optimizer state, by PyTorch's slot names.
  const StateDict sd = opt->state_dict();
  for (auto& [key, values] : c["state"].items()) {
    const std::string idx = key.substr(0, key.find('.')), slot = key.substr(key.find('.') + 1);
    if (slot == "step") {
      const double* s = sd.find_scalar(idx + ".step");
      ASSERT_NE(s, nullptr) << key;
      EXPECT_EQ(*s, values.get<double>()) << key;
      continue;
    }
    const Tensor* t = sd.find_tensor(idx + "." + slot);
    ASSERT_NE(t, nullptr) << "state " << key << " missing in mixp's state dict";
    expect_close(t->to_double_vector(), values.get<std::vector<double>>(), "state " + key);
  }
}

INSTANTIATE_TEST_SUITE_P(Optim, VsTorch,
                         ::testing::Values("sgd_plain", "sgd_momentum", "sgd_momentum_wd",
                                           "sgd_nesterov", "sgd_dampening", "adam", "adam_wd",
                                           "adamw", "adamw_wd", "adamw_skip", "sgd_momentum_skip"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace mixp::optim
