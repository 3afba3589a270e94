// Finite-difference gradient check (docs/architecture.md 6.4), for fp64 inputs.
//
// With L(x) = sum(v * fn(x)) for a fixed random v (seeded), the analytic gradient dL/dx from
// backward() is compared with central differences (L(x + eps e_j) - L(x - eps e_j)) / (2 eps) for
// every element j of every input that requires grad. A random projection v makes one backward
// check J^T v, which catches wrong Jacobian entries with probability 1.
// Pass when |analytic - numeric| <= atol + rtol * |numeric| for every element.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "mixp/autograd/grad_mode.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string message;  // the first failing element, when !ok
  explicit operator bool() const { return ok; }
};

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 1234;
};

inline GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                 std::vector<Tensor> inputs, const GradcheckOptions& opt = {}) {
  GradcheckResult res;
  for (Tensor& t : inputs) {
    if (t.defined() && t.requires_grad() && t.dtype() != DType::fp64) {
      res.ok = false;
      res.message = "gradcheck needs fp64 inputs, got " + std::string(name(t.dtype()));
      return res;
    }
    if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
  }
  Generator gen(opt.seed);
  Tensor out = fn(inputs);
  const Tensor v = uniform(out.shape(), 0.5, 1.5, gen, {.dtype = DType::fp64});
  auto loss = [&](const std::vector<Tensor>& xs) {
    NoGradGuard ng;
    return sum(mul(fn(xs), v)).item();
  };
  sum(mul(out, v)).backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    const Tensor g = x.grad();
    const Tensor xc = x.contiguous();
    std::vector<double> analytic = g.defined()
                                       ? g.to_double_vector()
                                       : std::vector<double>(static_cast<size_t>(x.numel()), 0.0);
    // Perturb a private copy so that views/aliases of x elsewhere are not touched.
    for (int64_t j = 0; j < x.numel(); ++j) {
      Tensor xp = xc.detach().clone();
      std::vector<Tensor> args = inputs;
      double* p = xp.data<double>();
      const double orig = p[j];
      p[j] = orig + opt.eps;
      args[k] = xp;
      const double lp = loss(args);
      p[j] = orig - opt.eps;
      const double lm = loss(args);
      const double numeric = (lp - lm) / (2 * opt.eps);
      const double a = analytic[static_cast<size_t>(j)];
      const double err = std::fabs(a - numeric);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (res.ok && !(err <= opt.atol + opt.rtol * std::fabs(numeric))) {
        res.ok = false;
        res.message = "input " + std::to_string(k) + " element " + std::to_string(j) +
                      ": analytic " + std::to_string(a) + " vs numeric " + std::to_string(numeric);
      }
    }
  }
  return res;
}

}  // namespace mixp
