// The scalar math of the pointwise op family (Backend::unary, unary_backward, binary, scalar,
// dropout), written once for the ref backend (templated over float/double), the cuda kernels
// (MIXP_HD: nvcc compiles it as device code, src/backend/cuda/math/pointwise_math.h) and the cpu
// backend's scalar tiers (the GELU's sigmoid form, src/backend/cpu/vec_kernels.inc). The cpu's
// AVX-512 tier has its own vector form (src/backend/cpu/vec_avx512.cpp). A new unary code is one
// case in unary_fwd and unary_bwd here (docs/architecture.md, "How to add an op").
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/math/host_device.h"
#include "mixp/backend/op_codes.h"
#include "mixp/format/rounding.h"

namespace mixp::kern {

// --- GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
inline constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
inline constexpr double kGeluCoeff = 0.044715;

template <class T>
MIXP_HD T gelu_fwd(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}
// d/dx of the tanh-approximated GELU.
template <class T>
MIXP_HD T gelu_grad(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  const T t = std::tanh(u);
  const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoeff) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

// The same GELU in sigmoid form, the cpu backend's (vec_kernels.inc, with its own fp32 exp):
// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), so gelu(x) = x / (1 + exp(-2u)): one exp and one
// division, no select, and no cancellation in 1 + tanh(u) for negative x (the tanh form loses the
// relative accuracy of the left tail there). A saturating exp gives exp(-2u) = +inf for very
// negative x, and x / inf = -0, the limit. `exp` is a callable of the caller's tier (a lambda, so
// each cpu tier instantiates its own copy: vec_kernels.inc).
template <class Exp>
inline float gelu_sigmoid_fwd(float x, Exp exp) {
  const float u2 = -2.0f * float(kSqrt2OverPi) * (x + float(kGeluCoeff) * x * x * x);
  return x / (1.0f + exp(u2));
}
// Its derivative: with s = 1 / (1 + e), e = exp(-2u): 0.5 (1 + t) = s and 0.5 (1 - t^2) =
// 2 s (1 - s) = 2 e s^2, so gelu'(x) = s + 2 x e s^2 u'(x), where
// u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2). e is capped at FLT_MAX so that e s stays finite
// (not inf * 0) in the far left tail.
template <class Exp>
inline float gelu_sigmoid_grad(float x, Exp exp) {
  constexpr float kS2P = float(kSqrt2OverPi), kGC = float(kGeluCoeff);
  const float x2 = x * x;
  const float u2 = -2.0f * kS2P * (x + kGC * x2 * x);
  float e = exp(u2);
  e = e > 3.4e38f ? 3.4e38f : e;
  const float s = 1.0f / (1.0f + e);
  const float du = kS2P * (1.0f + 3.0f * kGC * x2);
  const float es = e * s;  // 1 - s, without its cancellation; <= 1
  return s + (2.0f * x * du) * es * s;
}

// --- Exact GELU (PyTorch's default, approximate='none'): 0.5 x (1 + erf(x / sqrt 2)), and its
// derivative 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi). sin, cos and the exact GELU
// are evaluated in double for fp32 too (one rounding of the result): the reference is the oracle
// of the cpu kernels (vec_kernels.inc), which compute these in double as well.
inline constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
// `erf`: std::erf here; the cpu tiers pass their vectorizable double erf (vec_kernels.inc).
template <class Erf>
MIXP_HD double gelu_erf_fwd(double x, Erf erf) {
  return 0.5 * x * (1.0 + erf(x * kSqrt1_2));
}
struct StdErf {
  MIXP_HD double operator()(double v) const { return std::erf(v); }
};
MIXP_HD double gelu_erf_fwd(double x) {
  return gelu_erf_fwd(x, StdErf{});
}
MIXP_HD double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * kSqrt1_2)) + x * std::exp(-0.5 * x * x) * kInvSqrt2Pi;
}

// --- the unary codes (mixp/backend/op_codes.h)
template <class T>
MIXP_HD T unary_fwd(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::exp:
      return std::exp(x);
    case UnaryOp::log:
      return std::log(x);
    case UnaryOp::sqrt:
      return std::sqrt(x);
    case UnaryOp::relu:
      return x > T(0) ? x : T(0);
    case UnaryOp::gelu:
      return gelu_fwd(x);
    case UnaryOp::tanh:
      return std::tanh(x);
    case UnaryOp::sigmoid:
      return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::sin:
      return static_cast<T>(std::sin(static_cast<double>(x)));
    case UnaryOp::cos:
      return static_cast<T>(std::cos(static_cast<double>(x)));
    case UnaryOp::gelu_erf:
      return static_cast<T>(gelu_erf_fwd(static_cast<double>(x)));
  }
  return x;
}

// g * op'(x) given x (src) and y (dst); which of them an op reads is op_codes.h's
// backward_reads column.
template <class T>
MIXP_HD T unary_bwd(UnaryOp op, T g, T x, T y) {
  switch (op) {
    case UnaryOp::neg:
      return -g;
    case UnaryOp::exp:
      return g * y;
    case UnaryOp::log:
      return g / x;
    case UnaryOp::sqrt:
      return g / (T(2) * y);
    case UnaryOp::relu:
      return y > T(0) ? g : T(0);
    case UnaryOp::gelu:
      return g * gelu_grad(x);
    case UnaryOp::tanh:
      return g * (T(1) - y * y);
    case UnaryOp::sigmoid:
      return g * y * (T(1) - y);
    case UnaryOp::sin:
      return g * static_cast<T>(std::cos(static_cast<double>(x)));
    case UnaryOp::cos:
      return -g * static_cast<T>(std::sin(static_cast<double>(x)));
    case UnaryOp::gelu_erf:
      return g * static_cast<T>(gelu_erf_grad(static_cast<double>(x)));
  }
  return g;
}
inline bool unary_bwd_needs_src(UnaryOp op) {
  return unary_backward_reads(op) == UnaryReads::src;
}
inline bool unary_bwd_needs_dst(UnaryOp op) {
  return unary_backward_reads(op) == UnaryReads::dst;
}

template <class T>
MIXP_HD T binary_fwd(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
  }
  return a;
}

template <class T>
MIXP_HD T scalar_fwd(ScalarOp op, T x, T s) {
  switch (op) {
    case ScalarOp::add:
      return x + s;
    case ScalarOp::mul:
      return x * s;
    case ScalarOp::pow:
      return std::pow(x, s);
    case ScalarOp::rsub:
      return s - x;
    case ScalarOp::rdiv:
      return s / x;
  }
  return x;
}

// Dropout keep decision for element i: keep iff hash(seed, i) >= p * 2^32.
inline uint32_t dropout_threshold(double p) {
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}
MIXP_HD bool dropout_keep(uint64_t seed, uint64_t i, uint32_t threshold) {
  return sr_bits(seed, i) >= threshold;
}

}  // namespace mixp::kern
