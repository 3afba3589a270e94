// A Linear's weight gradient computed later than its backward (Transformer Engine's
// `delay_wgrad_compute`, Megatron's deferred weight-gradient GEMM): while a
// DeferWeightGradScope for weight w is alive, linear() with w records a backward that computes
// the input's gradient only and stashes the weight-gradient GEMM, with the tensors it reads (the
// output gradient and the saved input), in the scope's DeferredWeightGrad. Whoever holds that
// computes it when it is wanted (compute()), the same GEMM on the same operands: the same values,
// bit for bit. ZeRO stage 3 does this for GPT-2's tied head, whose [vocab, C] fp32 weight
// gradient would otherwise be whole from the head's backward, where a step's memory peaks, to
// the end of backward; it is computed when backward reaches the token embedding instead
// (src/train/trainer_zero3.cpp, docs/distributed.md "What is gathered when").
#pragma once
#include <functional>
#include <memory>

#include "mixp/tensor/tensor.h"

namespace mixp {

class DeferredWeightGrad {
 public:
  // The stashed weight gradient, computed now (the GEMM of linear's backward: fp32 for an fp32
  // weight under autocast), or undefined when nothing was stashed. Once: the operands are
  // dropped.
  Tensor compute();
  bool pending() const { return bool(work_); }
  // linear()'s backward: the computation of its weight's gradient. Throws std::logic_error when
  // one is already pending (the weight was used twice under one scope).
  void stash(std::function<Tensor()> work);

 private:
  std::function<Tensor()> work_;
};

// While alive (on this thread), linear() with weight `w` (the tensor passed to it: a module's
// parameter, compared by identity) defers its weight gradient into `sink`. Nestable.
class DeferWeightGradScope {
 public:
  DeferWeightGradScope(const Tensor& w, std::shared_ptr<DeferredWeightGrad> sink);
  ~DeferWeightGradScope();
  DeferWeightGradScope(const DeferWeightGradScope&) = delete;
  DeferWeightGradScope& operator=(const DeferWeightGradScope&) = delete;

 private:
  const TensorImpl* w_;
  std::shared_ptr<DeferredWeightGrad> sink_;
};

// The innermost scope's sink for `w` on this thread, or null.
std::shared_ptr<DeferredWeightGrad> deferred_weight_grad_for(const Tensor& w);

}  // namespace mixp
