// Helpers for comparing the cpu backend with the ref oracle (docs/architecture.md 6.3): run the
// same op on both backends, forward and backward, and compare by normalized error
// ||a - b|| / ||b||.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "mixp/mixp.h"

namespace mixp::testing {

// Tolerances on the normalized error ||cpu - ref||_2 / ||ref||_2.
// fp32: the cpu kernels accumulate in fp32 (ref in double) and use a polynomial exp with <= 2 ulp
// error. fp32 accumulation of K terms has a normalized error around sqrt(K) * 2^-24, about 4e-6
// for K = 4096, the largest reduction in these tests; 2e-5 gives a 5x margin.
inline constexpr double kTolFp32 = 2e-5;
// bf16 outputs: both backends round the same fp32 result to bf16 (relative error <= 2^-9 = 2e-3
// per element); results that straddle a rounding boundary differ by one bf16 ulp (2^-8 relative),
// which for a few elements stays well below 4e-3 normalized.
inline constexpr double kTolBf16 = 4e-3;

inline double normalized_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct RunResult {
  Tensor out;
  std::vector<Tensor> grads;
};

// Runs fn on fresh leaf copies of `inputs` (those that are floating point require grad) on the
// given backend, then backward with upstream gradient `gout` (if differentiable).
inline RunResult run_on(BackendKind kind, const OpFn& fn, const std::vector<Tensor>& inputs,
                        const Tensor& gout, bool backward = true) {
  BackendGuard guard(kind);
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      leaves.push_back(t);
      continue;
    }
    // Keep the input's layout (views stay views): detach shares storage.
    Tensor l = t.detach();
    if (backward && l.is_floating_point()) l.requires_grad_(true);
    leaves.push_back(l);
  }
  RunResult r;
  r.out = fn(leaves);
  if (backward && r.out.requires_grad()) {
    r.out.backward(gout.defined() ? gout.to(r.out.dtype(), Round::nearest_even) : Tensor());
    for (const Tensor& l : leaves)
      r.grads.push_back(l.defined() && l.requires_grad() ? l.grad() : Tensor());
  }
  return r;
}

// Within its scope, expect_cpu_matches_ref accepts a cpu run that used reference kernels (a case
// that tests the cpu backend's dispatch to its fallback, not a cpu kernel). Say why.
class AllowRefFallback {
 public:
  explicit AllowRefFallback(const char* why) : prev_(flag()) { flag() = why; }
  ~AllowRefFallback() { flag() = prev_; }
  AllowRefFallback(const AllowRefFallback&) = delete;
  AllowRefFallback& operator=(const AllowRefFallback&) = delete;
  static const char*& flag() {
    static const char* why = nullptr;
    return why;
  }

 private:
  const char* prev_;
};

// Compares fn under cpu and ref: the output and every input gradient. The cpu run must not use
// any RefBackend kernel (ref_kernel_calls()): an op the cpu backend does not implement for these
// inputs would otherwise be compared with itself and pass whatever happens to its cpu kernel.
inline void expect_cpu_matches_ref(const std::string& what, const OpFn& fn,
                                   const std::vector<Tensor>& inputs, double tol = kTolFp32,
                                   bool backward = true, uint64_t seed = 99) {
  SCOPED_TRACE(what);
  Tensor probe;
  {
    NoGradGuard ng;
    BackendGuard g(BackendKind::ref);
    probe = fn(inputs);
  }
  Generator gen(seed);
  const Tensor gout = randn(probe.shape(), gen);
  const uint64_t ref_before = ref_kernel_calls();
  const RunResult a = run_on(BackendKind::cpu, fn, inputs, gout, backward);
  const uint64_t ref_used = ref_kernel_calls() - ref_before;
  if (AllowRefFallback::flag() == nullptr) {
    EXPECT_EQ(ref_used, 0u) << "the cpu run fell back to " << ref_used
                            << " reference kernel call(s), the last RefBackend::"
                            << last_ref_kernel() << ": this case compares ref with ref";
  }
  const RunResult b = run_on(BackendKind::ref, fn, inputs, gout, backward);
  ASSERT_EQ(a.out.shape(), b.out.shape());
  EXPECT_EQ(a.out.dtype(), b.out.dtype());
  EXPECT_LE(normalized_error(a.out, b.out), tol) << "forward";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_EQ(a.grads[i].defined(), b.grads[i].defined()) << "grad " << i;
    if (!a.grads[i].defined()) continue;
    EXPECT_EQ(a.grads[i].shape(), inputs[i].shape());
    EXPECT_LE(normalized_error(a.grads[i], b.grads[i]), tol) << "grad of input " << i;
  }
}

inline Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::fp32, double scale = 1.0) {
  Generator g(seed);
  Tensor t = randn(s, g, {.dtype = DType::fp64});
  if (scale != 1.0) {
    NoGradGuard ng;
    t.mul_(scale);
  }
  return t.to(dt, Round::nearest_even);
}

}  // namespace mixp::testing
