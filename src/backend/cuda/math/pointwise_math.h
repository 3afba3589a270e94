// The element functions of the CUDA pointwise kernels (cuda_pointwise.cu), in fp32 with the same
// operations and order as the ref backend's (src/backend/kernel_util.h): sin, cos and the exact
// GELU in double, one rounding of the result. tests/cuda/test_cuda_math.cpp compares them with the
// ref backend on the CPU: bit for bit where the operation is IEEE-exact (neg, add, sub, mul, div,
// sqrt, relu, the scalar ops but pow), within a few ulps where a libm function is involved (the
// GPU's libdevice and glibc round exp/log/tanh differently).
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/cuda/math/host_device.h"
#include "mixp/format/rounding.h"

namespace mixp::cuda_math {

// The op codes are the values of mixp::UnaryOp / BinaryOp / ScalarOp (backend/backend.h); the
// static_asserts in cuda_backend.cpp keep them equal.
enum UnaryCode : int { u_neg, u_exp, u_log, u_sqrt, u_relu, u_gelu, u_tanh, u_sigmoid, u_sin, u_cos,
                       u_gelu_erf };
enum BinaryCode : int { b_add, b_sub, b_mul, b_div };
enum ScalarCode : int { s_add, s_mul, s_pow, s_rsub, s_rdiv };

inline constexpr float kSqrt2OverPiF = static_cast<float>(0.7978845608028654);
inline constexpr float kGeluCoeffF = static_cast<float>(0.044715);
inline constexpr float kGelu3CoeffF = static_cast<float>(3 * 0.044715);
inline constexpr double kSqrt1_2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;

MIXP_HD float gelu_fwd(float x) {
  const float u = kSqrt2OverPiF * (x + kGeluCoeffF * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}
MIXP_HD float gelu_grad(float x) {
  const float u = kSqrt2OverPiF * (x + kGeluCoeffF * x * x * x);
  const float t = std::tanh(u);
  const float du = kSqrt2OverPiF * (1.0f + kGelu3CoeffF * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
MIXP_HD double gelu_erf_fwd(double x) {
  return 0.5 * x * (1.0 + std::erf(x * kSqrt1_2));
}
MIXP_HD double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * kSqrt1_2)) + x * std::exp(-0.5 * x * x) * kInvSqrt2Pi;
}

MIXP_HD float unary_fwd(int op, float x) {
  switch (op) {
    case u_neg: return -x;
    case u_exp: return std::exp(x);
    case u_log: return std::log(x);
    case u_sqrt: return std::sqrt(x);
    case u_relu: return x > 0.0f ? x : 0.0f;
    case u_gelu: return gelu_fwd(x);
    case u_tanh: return std::tanh(x);
    case u_sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case u_sin: return static_cast<float>(std::sin(static_cast<double>(x)));
    case u_cos: return static_cast<float>(std::cos(static_cast<double>(x)));
    case u_gelu_erf: return static_cast<float>(gelu_erf_fwd(static_cast<double>(x)));
  }
  return x;
}

// g * op'(x), given x (src) and y (dst), as kern::unary_bwd.
MIXP_HD float unary_bwd(int op, float g, float x, float y) {
  switch (op) {
    case u_neg: return -g;
    case u_exp: return g * y;
    case u_log: return g / x;
    case u_sqrt: return g / (2.0f * y);
    case u_relu: return y > 0.0f ? g : 0.0f;
    case u_gelu: return g * gelu_grad(x);
    case u_tanh: return g * (1.0f - y * y);
    case u_sigmoid: return g * y * (1.0f - y);
    case u_sin: return g * static_cast<float>(std::cos(static_cast<double>(x)));
    case u_cos: return -g * static_cast<float>(std::sin(static_cast<double>(x)));
    case u_gelu_erf: return g * static_cast<float>(gelu_erf_grad(static_cast<double>(x)));
  }
  return g;
}

MIXP_HD float binary_fwd(int op, float a, float b) {
  switch (op) {
    case b_add: return a + b;
    case b_sub: return a - b;
    case b_mul: return a * b;
    case b_div: return a / b;
  }
  return a;
}

MIXP_HD float scalar_fwd(int op, float x, float s) {
  switch (op) {
    case s_add: return x + s;
    case s_mul: return x * s;
    case s_pow: return std::pow(x, s);
    case s_rsub: return s - x;
    case s_rdiv: return s / x;
  }
  return x;
}

// Inverted dropout's keep decision (kern::dropout_keep): keep iff sr_bits(seed, i) >= threshold.
MIXP_HD bool dropout_keep(uint64_t seed, uint64_t i, uint32_t threshold) {
  return sr_bits(seed, i) >= threshold;
}

}  // namespace mixp::cuda_math
