// The training-step kernels of the ref backend: plain element loops through load_element /
// store_element (tensor/element.h), written from the contracts in backend.h and independent of
// the cpu backend's tiered loops (backend/cpu/step_kernels.h; the 16-bit xhat: ref_norm.cpp,
// cpu_norm.cpp), which tests/backend/test_step_kernels.cpp compares with them: bit for bit where
// the arithmetic is defined element by element (the unscale, found_inf, the 16-bit xhat, the
// optimizer update), within a relative 1e-12 for the sum of squares (the cpu sums in 16 fp64
// partial sums, this loop in one). optimizer_update: every value widened through load_element, the
// rule in the values' precision (fp32, or fp64 for fp64 parameters) written out as optim/adam.h and
// optim/sgd.h state it, each result rounded once with store_element (stochastic bits
// sr_bits(seed, i), each narrow state slot k on its own stream, as the cpu backend's chunks do).
#include <cmath>
#include <stdexcept>

#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"
#include "mixp/format/convert.h"
#include "mixp/format/rounding.h"
#include "mixp/tensor/element.h"
#include "mixp/tensor/generator.h"

namespace mixp {

void RefBackend::unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) {
  if (!grad.is_contiguous() || found_inf.dtype() != DType::fp32 || found_inf.numel() != 1)
    throw std::logic_error("mixp: unscale_check needs a contiguous gradient and an fp32 flag");
  const DType d = grad.dtype();
  if (d != DType::fp32 && d != DType::fp64 && !is_elementwise_float(d)) {
    throw std::invalid_argument(std::string("mixp: unscale_check takes a floating gradient, got ") +
                                std::string(mixp::name(d)));
  }
  void* p = grad.data_ptr();
  const auto inv = static_cast<float>(inv_scale);  // the scale's inverse in fp32, as torch
  bool bad = false;
  for (int64_t i = 0; i < grad.numel(); ++i) {
    const double v = load_element(p, d, i);
    if (!std::isfinite(v)) bad = true;
    if (inv == 1.0f) continue;
    // fp64 multiplies in fp64; every other format in fp32 (exact widening), rounded back once.
    const double r = d == DType::fp64 ? v * static_cast<double>(inv)
                                      : static_cast<double>(static_cast<float>(v) * inv);
    store_element(p, d, i, r, Round::nearest_even, Overflow::ieee, 0);
  }
  if (bad) kern::ptr<float>(found_inf)[0] = 1.0f;
}

void RefBackend::sum_squares(Tensor& dst, const Tensor& src) {
  if (!src.is_contiguous() || (src.dtype() != DType::fp32 && src.dtype() != DType::fp64))
    throw std::logic_error("mixp: sum_squares needs a contiguous fp32 or fp64 tensor");
  double acc = 0.0;
  for (int64_t i = 0; i < src.numel(); ++i) {
    const double v = load_element(src.data_ptr(), src.dtype(), i);
    acc += v * v;
  }
  kern::ptr<double>(dst)[0] = acc;
}

namespace {

// One element's Adam/AdamW or SGD step in T on w (the value), g and the states st[0..1].
template <class T>
void step_rule(const UpdateRule& r, T& w, T g, T* st) {
  const double* s = r.s;
  if (r.kind == UpdateRule::Kind::adam) {
    const T b1 = T(s[0]), b2 = T(s[1]), one_m_b1 = T(s[2]), one_m_b2 = T(s[3]), eps = T(s[4]);
    const T l2_wd = T(s[5]), decay = T(s[6]), neg_step = T(s[7]), bc2_sqrt = T(s[8]);
    const T gi = g + l2_wd * w;  // L2 decay (Adam) into the gradient
    const T wi = w * decay;      // decoupled decay (AdamW)
    const T m = st[0] * b1 + one_m_b1 * gi;
    const T v = st[1] * b2 + one_m_b2 * (gi * gi);
    st[0] = m;
    st[1] = v;
    w = wi + (neg_step * m) / (std::sqrt(v) / bc2_sqrt + eps);
    return;
  }
  const T lr = T(s[0]), wd = T(s[1]), mom = T(s[2]), damp1 = T(s[3]);
  const T d = r.sgd_weight_decay ? g + wd * w : g;
  T dir = d;
  if (r.sgd_momentum) {
    const T b = r.sgd_first ? d : st[0] * mom + damp1 * d;
    st[0] = b;
    dir = r.sgd_nesterov ? d + mom * b : b;
  }
  w = w - lr * dir;
}

void store(const Tensor& t, int64_t i, double v, Round round, Overflow overflow, uint64_t seed) {
  store_element(t.data_ptr(), t.dtype(), i, v, round, overflow,
                round == Round::stochastic ? sr_bits(seed, static_cast<uint64_t>(i)) : 0);
}

double load(const Tensor& t, int64_t i) {
  return load_element(t.data_ptr(), t.dtype(), i);
}

}  // namespace

void RefBackend::optimizer_update(const ParamUpdate& u, const UpdateRule& rule) {
  const size_t nslots = u.slots.size();
  if (nslots > 2) throw std::logic_error("mixp: too many optimizer state slots");
  const int64_t n = u.values.numel();
  if (!u.chunked && u.values.dtype() == DType::fp64) {
    for (int64_t i = 0; i < n; ++i) {
      double w = load(u.values, i), st[2] = {};
      for (size_t k = 0; k < nslots; ++k) st[k] = load(u.slots[k], i);
      step_rule<double>(rule, w, load(u.grad, i), st);
      store(u.values, i, w, Round::nearest_even, Overflow::ieee, 0);
      for (size_t k = 0; k < nslots; ++k)
        store(u.slots[k], i, st[k], Round::nearest_even, Overflow::ieee, 0);
    }
    return;
  }
  // fp32 arithmetic: the value is the master, or the (widened) parameter.
  const bool narrow_param = u.chunked && u.values.dtype() != DType::fp32;
  const Tensor& value = u.chunked && u.master.defined() ? u.master : u.values;
  // Narrow states round to nearest-even, or stochastically on a stream of their own per slot when
  // the write-back does.
  const Round state_round =
      u.chunked && u.write_back == Round::stochastic ? Round::stochastic : Round::nearest_even;
  for (int64_t i = 0; i < n; ++i) {
    const auto old = static_cast<float>(load(value, i));
    float w = old, st[2] = {};
    for (size_t k = 0; k < nslots; ++k) st[k] = static_cast<float>(load(u.slots[k], i));
    step_rule<float>(rule, w, static_cast<float>(load(u.grad, i)), st);
    for (size_t k = 0; k < nslots; ++k) {
      store(u.slots[k], i, st[k], state_round, Overflow::ieee,
            Generator::splitmix64(u.seed + 0x9E3779B97F4A7C15ULL * (k + 1)));
    }
    if (!narrow_param) {
      // fp32 values (or master) updated in place (exact), and the weight shadow rewritten.
      store(value, i, w, Round::nearest_even, Overflow::ieee, 0);
      if (u.shadow.defined()) store(u.shadow, i, w, kShadowRound, kShadowOverflow, 0);
      continue;
    }
    if (!u.comp.defined()) {
      if (u.master.defined()) store(u.master, i, w, Round::nearest_even, Overflow::ieee, 0);
      store(u.values, i, w, u.write_back, u.overflow, u.seed);
      continue;
    }
    // Kahan: y = (w_new - p) + comp; p' = round(p + y); comp' = y - (p' - p), kept finite.
    const float y = (w - old) + static_cast<float>(load(u.comp, i));
    const float sum = old + y;
    if (u.master.defined()) store(u.master, i, sum, Round::nearest_even, Overflow::ieee, 0);
    store(u.values, i, sum, u.write_back, u.overflow, u.seed);
    const float rem = y - (static_cast<float>(load(u.values, i)) - old);
    store(u.comp, i, std::isfinite(rem) ? rem : 0.0f, Round::nearest_even, Overflow::saturate, 0);
  }
}

}  // namespace mixp
