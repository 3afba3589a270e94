// The op codes of the pointwise and reduction kernels (Backend::unary, binary, scalar, reduce), one
// X-macro list each: the enums, their names (the kernel variants profiles and inspect show,
// observed_backend.cpp) and cuda's codes (src/backend/cuda/math/pointwise_math.h) are expanded
// from these lists, so adding a code is one entry here plus its math (docs/architecture.md, "Add an
// op"). C++17 and free of other mixp headers: nvcc compiles it into the cuda kernels.
#pragma once
#include <cstdint>

namespace mixp {

// X(name, backward_reads): what unary_backward reads besides ddst: src, dst or none.
// gelu: the tanh approximation; gelu_erf: the exact 0.5 x (1 + erf(x / sqrt 2)) (ops.h,
// GeluApprox). Append new codes at the end (the values are cuda's codes too).
#define MIXP_UNARY_OPS(X) \
  X(neg, none)            \
  X(exp, dst)             \
  X(log, src)             \
  X(sqrt, dst)            \
  X(relu, dst)            \
  X(gelu, src)            \
  X(tanh, dst)            \
  X(sigmoid, dst)         \
  X(sin, src)             \
  X(cos, src)             \
  X(gelu_erf, src)
#define MIXP_BINARY_OPS(X) X(add) X(sub) X(mul) X(div)
// add: x + s   mul: x * s   pow: x^s   rsub: s - x   rdiv: s / x
#define MIXP_SCALAR_OPS(X) X(add) X(mul) X(pow) X(rsub) X(rdiv)
#define MIXP_REDUCE_OPS(X) X(sum) X(mean) X(max)

#define MIXP_OPCODE_ENUM_(name, ...) name,
#define MIXP_OPCODE_NAME_(name, ...) #name,
enum class UnaryOp : uint8_t { MIXP_UNARY_OPS(MIXP_OPCODE_ENUM_) };
enum class BinaryOp : uint8_t { MIXP_BINARY_OPS(MIXP_OPCODE_ENUM_) };
enum class ScalarOp : uint8_t { MIXP_SCALAR_OPS(MIXP_OPCODE_ENUM_) };
enum class ReduceOp : uint8_t { MIXP_REDUCE_OPS(MIXP_OPCODE_ENUM_) };

namespace opcode_detail {
inline constexpr const char* kUnary[] = {MIXP_UNARY_OPS(MIXP_OPCODE_NAME_)};
inline constexpr const char* kBinary[] = {MIXP_BINARY_OPS(MIXP_OPCODE_NAME_)};
inline constexpr const char* kScalar[] = {MIXP_SCALAR_OPS(MIXP_OPCODE_NAME_)};
inline constexpr const char* kReduce[] = {MIXP_REDUCE_OPS(MIXP_OPCODE_NAME_)};
template <class E, int N>
constexpr const char* name_of(E op, const char* const (&names)[N]) {
  return static_cast<int>(op) < N ? names[static_cast<int>(op)] : "?";
}
}  // namespace opcode_detail
#undef MIXP_OPCODE_ENUM_
#undef MIXP_OPCODE_NAME_

// How many codes each enum has (the op-table test walks them all).
inline constexpr int kNumUnaryOps = sizeof(opcode_detail::kUnary) / sizeof(const char*);
inline constexpr int kNumBinaryOps = sizeof(opcode_detail::kBinary) / sizeof(const char*);
inline constexpr int kNumScalarOps = sizeof(opcode_detail::kScalar) / sizeof(const char*);
inline constexpr int kNumReduceOps = sizeof(opcode_detail::kReduce) / sizeof(const char*);

// The code's name ("gelu", "add", ...); "?" for a value outside the enum.
constexpr const char* to_string(UnaryOp op) {
  return opcode_detail::name_of(op, opcode_detail::kUnary);
}
constexpr const char* to_string(BinaryOp op) {
  return opcode_detail::name_of(op, opcode_detail::kBinary);
}
constexpr const char* to_string(ScalarOp op) {
  return opcode_detail::name_of(op, opcode_detail::kScalar);
}
constexpr const char* to_string(ReduceOp op) {
  return opcode_detail::name_of(op, opcode_detail::kReduce);
}

// What unary_backward(op, ...) reads besides ddst (the backward_reads column above).
enum class UnaryReads : uint8_t { none, src, dst };
constexpr UnaryReads unary_backward_reads(UnaryOp op) {
  switch (op) {
#define MIXP_OPCODE_READS_(name, reads) \
  case UnaryOp::name:                   \
    return UnaryReads::reads;
    MIXP_UNARY_OPS(MIXP_OPCODE_READS_)
#undef MIXP_OPCODE_READS_
  }
  return UnaryReads::none;
}

}  // namespace mixp
