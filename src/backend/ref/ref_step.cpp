// The training-step kernels of the ref backend. unscale_check, sum_squares and layer_norm_xhat
// are plain element loops through load_element / store_element (tensor/element.h), written from
// the contracts in backend.h and independent of the cpu backend's tiered loops
// (backend/cpu/step_kernels.h, cpu_layer_norm_xhat.cpp), which
// tests/backend/test_step_kernels.cpp compares with them: bit for bit where the arithmetic is
// defined element by element (the unscale, found_inf, the 16-bit xhat), within a relative 1e-12
// for the sum of squares (the cpu sums in several fp64 partial sums, this loop in one).
// optimizer_update still shares the cpu backend's loops (step_optimizer.cpp): an independent
// oracle for the fused Adam/SGD with master weights, Kahan and stochastic rounding is still to
// write.
#include <cmath>
#include <stdexcept>

#include "backend/cpu/step_kernels.h"
#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"
#include "mixp/format/convert.h"
#include "mixp/tensor/element.h"

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

void RefBackend::layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                                 const Tensor& rstd) {
  if (!src.is_contiguous() || !dst.is_contiguous())
    throw std::logic_error("mixp: layer_norm_xhat needs contiguous src and dst");
  const int64_t rows = mean.numel(), n = rows ? src.numel() / rows : 0;
  const float* x = kern::ptr<const float>(src);
  const float* m = kern::ptr<const float>(mean);
  const float* r = kern::ptr<const float>(rstd);
  for (int64_t i = 0; i < rows * n; ++i) {
    const float v = (x[i] - m[i / n]) * r[i / n];  // in fp32, then one rounding to dst's dtype
    store_element(dst.data_ptr(), dst.dtype(), i, v, Round::nearest_even, Overflow::ieee, 0);
  }
}

void RefBackend::optimizer_update(const ParamUpdate& u, const UpdateRule& rule) {
  step_kernels::optimizer_update(u, rule);
}

}  // namespace mixp
