// Helpers for the nn tests: fp64 modules and a finite-difference check of parameter gradients.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/module.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn::testing {

// Converts every floating parameter and buffer to fp64 in place (the TensorImpl keeps its
// identity, so the module's own handles see the change), as a recipe would.
inline void to_fp64(Module& m) {
  auto convert = [](Tensor t) {
    if (!t.is_floating_point() || t.dtype() == DType::fp64) return;
    Tensor c;
    {
      NoGradGuard ng;
      c = t.detach().to(DType::fp64).contiguous();
    }
    TensorImpl* impl = t.impl();
    impl->storage = c.impl()->storage;
    impl->offset = c.impl()->offset;
    impl->shape = c.impl()->shape;
    impl->strides = c.impl()->strides;
    impl->dtype = DType::fp64;
    impl->grad.reset();
  };
  for (auto& [n, p] : m.named_parameters()) convert(p);
  for (auto& [n, b] : m.named_buffers()) convert(b);
}

// L = sum(v * f()), v fixed in [0.5, 1.5); compares dL/dp from backward with central differences
// for every element of every fp64 parameter of `m` (and of `inputs` that require grad).
// f must be deterministic and read the parameters through the module.
inline void check_param_grads(Module& m, const std::function<Tensor()>& f,
                              std::vector<Tensor> inputs = {}, double eps = 1e-6,
                              double atol = 1e-6, double rtol = 1e-5) {
  m.zero_grad();
  for (Tensor& x : inputs) x.set_grad(Tensor());
  Tensor out = f();
  Generator g(99);
  const Tensor v = uniform(out.shape(), 0.5, 1.5, g, {.dtype = DType::fp64});
  sum(mul(out, v)).backward();
  auto loss = [&] {
    NoGradGuard ng;
    return sum(mul(f(), v)).item();
  };
  std::vector<std::pair<std::string, Tensor>> all = m.named_parameters();
  for (size_t i = 0; i < inputs.size(); ++i)
    all.emplace_back("input" + std::to_string(i), inputs[i]);
  for (auto& [name, p] : all) {
    ASSERT_EQ(p.dtype(), DType::fp64) << name;
    ASSERT_TRUE(p.is_contiguous()) << name;
    const Tensor grad = p.grad();
    ASSERT_TRUE(grad.defined()) << name << " got no gradient";
    const std::vector<double> analytic = grad.to_double_vector();
    double* data = static_cast<double*>(p.data_ptr());
    for (int64_t j = 0; j < p.numel(); ++j) {
      const double orig = data[j];
      data[j] = orig + eps;
      const double lp = loss();
      data[j] = orig - eps;
      const double lm = loss();
      data[j] = orig;
      const double numeric = (lp - lm) / (2 * eps);
      const double a = analytic[static_cast<size_t>(j)];
      ASSERT_LE(std::fabs(a - numeric), atol + rtol * std::fabs(numeric))
          << name << " element " << j << ": analytic " << a << " vs numeric " << numeric;
    }
  }
}

}  // namespace mixp::nn::testing
