// The fused classifier (llm.c's fused_classifier, train_gpt2.c): cross-entropy over the first
// `classes` columns of padded logits whose gradient is written over the logits' own buffer, so a
// language model's [tokens, vocabulary] logits and their gradient are one tensor at the step's
// memory peak (docs/benchmarks.md, "GPT-2 124M memory at B8 T256").
#include <fmt/format.h>

#include "ops/dispatch.h"

namespace mixp {
using namespace detail;

Tensor cross_entropy_in_place(const Tensor& logits0, const Tensor& targets, int64_t classes) {
  constexpr const char* kOp = "cross_entropy_in_place";
  check_float(logits0, kOp, "logits");
  check_defined(targets, kOp, "targets");
  Tensor in[1] = {logits0};
  apply_cast_policy(OpId::cross_entropy_in_place, in);  // none: 16-bit logits are read as they are
  const Tensor& logits = in[0];
  if (logits.dim() != 2)
    shape_error(kOp, "logits must be [N, C]", logits.shape(), targets.shape());
  if (targets.dim() != 1 || targets.shape()[0] != logits.shape()[0])
    shape_error(kOp, "targets must be [N] class indices", logits.shape(), targets.shape());
  if (targets.dtype() != DType::int64 && targets.dtype() != DType::int32) {
    throw std::invalid_argument(fmt::format(
        "mixp::cross_entropy_in_place: targets must be int64 or int32 class indices, got {}",
        name(targets.dtype())));
  }
  const DType dt = logits.dtype();
  if (dt != DType::fp32 && dt != DType::bf16 && dt != DType::fp16 && dt != DType::fp64) {
    throw std::invalid_argument(fmt::format(
        "mixp::cross_entropy_in_place: logits must be fp32, bf16, fp16 or fp64 (their buffer "
        "receives the gradient), got {}; convert them first or use cross_entropy",
        name(dt)));
  }
  if (!logits.is_contiguous()) {
    throw std::invalid_argument(
        "mixp::cross_entropy_in_place: logits must be contiguous (the gradient is written over "
        "them); call contiguous() first or use cross_entropy");
  }
  const int64_t cols = logits.shape()[1];
  if (classes < 1 || classes > cols) {
    throw std::invalid_argument(fmt::format(
        "mixp::cross_entropy_in_place: classes must be in [1, {}] (the logits' columns), got {}",
        cols, classes));
  }
  const DType c = compute_of(dt);
  Tensor loss = new_tensor(Shape{}, c, logits.device());
  Tensor lse = new_tensor(Shape{logits.shape()[0]}, c, logits.device());
  backend_for(loss, lse, logits, targets).cross_entropy_in_place(loss, lse, logits, targets, classes);
  if (should_record({&logits})) {
    Tensor sl = logits.detach(), st = targets.detach(), slse = lse.detach();
    record(OpId::cross_entropy_in_place, c, {&logits}, {&loss},
           [sl, st, slse, classes](BackwardContext& ctx) mutable {
             // The gradient goes over the saved logits when nothing else can see them: this is
             // the only backward through the node and no other tensor (the caller's logits, a
             // view, a node that saved them) shares their storage. Otherwise it goes into a copy,
             // with the same values: the op never changes a tensor someone else reads.
             Tensor d;
             if (ctx.last_use() && sl.storage().use_count() == 1) {
               d = std::move(sl);
               d.bump_version();
             } else {
               d = new_tensor(sl.shape(), sl.dtype(), sl.device());
               backend_for(d, sl).copy(d, sl);
             }
             const Tensor& g = ctx.grad();
             backend_for(d, g, st, slse).cross_entropy_in_place_backward(d, g, st, slse, classes);
             ctx.grad_inputs[0] = std::move(d);
           });
  }
  return loss;
}

}  // namespace mixp
