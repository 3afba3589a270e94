// The autocast cast-policy table, keyed by OpId, never by strings (docs/architecture.md 3.6, 6.8).
//
// Under an Autocast region (autocast.h) every op front end hands its floating inputs to the
// policy of its OpId before it looks at dtypes:
//
//   lower_precision  every floating input that is not fp64 is cast to the region's dtype (bf16 or
//                    fp16); GEMM-like ops, which then run on the 16-bit paths of the backend
//                    (bf16 x bf16 -> fp32 accumulation on oneDNN; fp16 emulated exactly).
//   fp32             every floating input narrower than fp32 is widened (exactly) to fp32:
//                    numerically sensitive ops (exp/log/pow, softmax, norms, losses, sums).
//   promote          inputs of different floating dtypes are widened to the widest of them
//                    (bf16 + fp16 -> fp32, any fp64 -> fp64); equal dtypes are left alone.
//   banned           unsafe in fp16: throws BannedOpError naming the safe alternative. Under bf16
//                    (fp32's exponent range: the overflow that makes the op unsafe cannot happen)
//                    a banned op runs as fp32, as in PyTorch's CPU (bf16) autocast.
//   none             nothing is cast: the op runs in its inputs' dtype (layout ops, relu, gelu,
//                    tanh, sigmoid, sin, cos, dropout, max, argmax, pooling, embedding, scalar
//                    add/mul).
//
// The table follows PyTorch's autocast lists (aten/src/ATen/autocast_mode.cpp): the CUDA lists
// for the policy of each op, since they are the ones people know and train with, and the CPU
// (bf16) list where CUDA is silent. docs/amp.md compares every entry with both PyTorch lists and
// says why where mixp differs (batch_norm, mean, sqrt, rdiv).
#pragma once
#include <array>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mixp/autograd/op_list.h"
#include "mixp/format/dtype.h"

namespace mixp::amp {

enum class CastPolicy : uint8_t { lower_precision, fp32, promote, banned, none };

constexpr std::string_view to_string(CastPolicy p) noexcept {
  switch (p) {
    case CastPolicy::lower_precision:
      return "lower_precision";
    case CastPolicy::fp32:
      return "fp32";
    case CastPolicy::promote:
      return "promote";
    case CastPolicy::banned:
      return "banned";
    case CastPolicy::none:
      return "none";
  }
  return "?";
}

// The policy of `op` as written in the op table (fp16 semantics: banned ops are banned): the
// policy column of MIXP_OP_LIST (mixp/autograd/op_list.h, where each choice is explained), so an
// op cannot be added without one.
constexpr CastPolicy cast_policy(OpId op) noexcept {
  switch (op) {
#define MIXP_X(id, name, kind, policy) \
  case OpId::id:                       \
    return CastPolicy::policy;
    MIXP_OP_LIST(MIXP_X)
#undef MIXP_X
  }
  return CastPolicy::none;
}

// The policy applied under an autocast region of `dtype`: banned ops run as fp32 under bf16.
constexpr CastPolicy cast_policy(OpId op, DType dtype) noexcept {
  const CastPolicy p = cast_policy(op);
  if (p == CastPolicy::banned && dtype != DType::fp16) return CastPolicy::fp32;
  return p;
}

// The whole table, indexed by static_cast<int>(OpId).
inline constexpr std::array<CastPolicy, kNumOps> kCastPolicyTable = [] {
  std::array<CastPolicy, kNumOps> t{};
  for (int i = 0; i < kNumOps; ++i) t[static_cast<size_t>(i)] = cast_policy(static_cast<OpId>(i));
  return t;
}();

// The safe replacement of a banned op (empty for ops that are not banned).
constexpr std::string_view banned_alternative(OpId op) noexcept {
  switch (op) {
    case OpId::binary_cross_entropy:
      return "binary_cross_entropy_with_logits";
    default:
      return {};
  }
}

// Thrown when a banned op runs under fp16 autocast. what() names the op and its alternative.
class BannedOpError : public std::runtime_error {
 public:
  explicit BannedOpError(OpId op);
  OpId op() const noexcept { return op_; }

 private:
  OpId op_;
};

}  // namespace mixp::amp
