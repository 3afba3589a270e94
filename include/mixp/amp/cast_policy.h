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

// The policy of `op` as written in the table (fp16 semantics: banned ops are banned).
// The switch has no default, so -Wswitch flags an op added to op_list.h without a policy.
constexpr CastPolicy cast_policy(OpId op) noexcept {
  using P = CastPolicy;
  switch (op) {
    // GEMM-like: PyTorch lower_precision_fp (CUDA and CPU: mm/matmul/linear/bmm/conv2d,
    // scaled_dot_product_attention; lstm_cell on CUDA).
    case OpId::matmul:
    case OpId::linear:
    case OpId::bmm:
    case OpId::conv2d:
    case OpId::attention:
    case OpId::lstm_cell:
    case OpId::conv1d:  // both lists; composite in mixp (conv2d with H = 1)
      return P::lower_precision;
    // Binary pointwise: PyTorch relies on type promotion (TensorIterator), which is what promote
    // does explicitly here.
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
      return P::promote;
    case OpId::add_scalar:
    case OpId::mul_scalar:
    case OpId::rsub_scalar:
      return P::none;
    case OpId::pow_scalar:
      return P::fp32;  // CUDA fp32 list: pow
    case OpId::rdiv_scalar:
      return P::fp32;  // s / x is a scaled reciprocal: CUDA fp32 list has reciprocal
    case OpId::neg:
      return P::none;
    case OpId::exp:
    case OpId::log:
      return P::fp32;  // CUDA fp32 list: exp, log
    case OpId::sqrt:
      return P::none;  // in no PyTorch list (rsqrt is, sqrt is not)
    case OpId::relu:
    case OpId::gelu:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::dropout:
      return P::none;
    case OpId::sin:
    case OpId::cos:
      return P::none;  // in no PyTorch list (sinh, cosh are CUDA fp32; sin, cos are not)
    case OpId::rope:
      return P::none;  // computes in fp32 itself and returns x's dtype (ops.h, rope)
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::layer_norm:
    case OpId::rms_norm:  // as layer_norm (PyTorch's CUDA fp32 list has rms_norm; HF's
                          // LlamaRMSNorm computes in fp32 whatever the input dtype)
      return P::fp32;  // CUDA fp32 list
    // PyTorch CUDA lists no policy for batch_norm: cuDNN takes fp16 x with fp32 weight and
    // statistics. mixp's kernels compute in fp32 either way; fp32 also keeps the running
    // statistics (updated in place, fp32 buffers) from mixing with a 16-bit input. See docs/amp.md.
    case OpId::batch_norm:
      return P::fp32;
    case OpId::cross_entropy:  // CUDA/CPU fp32 list: cross_entropy_loss (nll_loss, log_softmax)
    case OpId::mse_loss:
      return P::fp32;
    // mixp's fused classifier computes in fp32 from 16-bit logits itself (exact widening, the
    // same numbers as cross_entropy's fp32 cast): a cast here would copy the [tokens, vocabulary]
    // logits it exists to keep single.
    case OpId::cross_entropy_in_place:
      return P::none;
    case OpId::sum:  // CUDA fp32 list (fp32_set_opt_dtype)
    case OpId::mean:
      return P::fp32;  // not listed by PyTorch; mixp: a loss-like reduction (docs/amp.md)
    case OpId::max:
      return P::none;  // exact in any dtype
    case OpId::argmax:
      return P::none;  // in no PyTorch list; the same index in any dtype the input is exact in
    case OpId::max_pool2d:
    case OpId::avg_pool2d:
    case OpId::embedding:
      return P::none;
    case OpId::reshape:
    case OpId::transpose:
    case OpId::permute:
    case OpId::slice:
    case OpId::expand:
      return P::none;
    case OpId::cat:
    case OpId::stack:
      return P::promote;  // CUDA/CPU promote list
    case OpId::contiguous:
    case OpId::to:
      return P::none;
    case OpId::binary_cross_entropy:
      return P::banned;  // CUDA banned list
    case OpId::binary_cross_entropy_with_logits:
      return P::fp32;  // CUDA/CPU fp32 list
    // In no PyTorch list; its scale/zero-point arithmetic is fp32 (PyTorch's kernels compute in
    // float for every input type), so autocast hands it fp32 inputs (docs/quantization.md).
    case OpId::fake_quantize:
      return P::fp32;
  }
  return P::none;
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
