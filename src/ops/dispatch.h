// Internal helpers shared by the op front ends: dtype promotion, conversion to the compute dtype,
// raw (unrecorded) views, and recording a FunctionNode.
#pragma once
#include <fmt/format.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "mixp/autograd/grad_mode.h"
#include "mixp/autograd/node.h"
#include "mixp/backend/backend.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::detail {

inline bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

// Under strict dtypes (ops.h), throws std::invalid_argument naming the op and the first two
// floating inputs (by `names`, in order) whose dtypes differ.
void check_strict_dtypes(OpId op, std::initializer_list<const Tensor*> inputs,
                         std::initializer_list<const char*> names);

// Result dtype of a floating op (see ops.h): equal float dtypes stay, fp64 wins, other mixes and
// non-float inputs give fp32.
DType result_dtype(std::initializer_list<const Tensor*> inputs);
inline DType compute_of(DType result) {
  return result == DType::fp64 ? DType::fp64 : DType::fp32;
}

// `t` in dtype c, converted without recording (exact for every widening to fp32/fp64).
Tensor as_compute(const Tensor& t, DType c);
// `t` converted to `result` (nearest-even, IEEE overflow) without recording.
Tensor finish(const Tensor& t, DType result);

// A view sharing t's storage, not recorded.
Tensor raw_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset);
// t broadcast to `shape` as a stride-0 view (not recorded); t's shape must broadcast to it.
Tensor raw_expand(const Tensor& t, const Shape& shape);
// Contiguous t (t itself when it already is), not recorded.
Tensor raw_contiguous(const Tensor& t);
// t with a new shape of the same numel: a view when t is contiguous, else a copy; not recorded.
Tensor raw_reshape(const Tensor& t, const Shape& shape);

// An op's output or temporary: on the device of the op's inputs (docs/architecture.md 3.5), never
// on the default device.
inline Tensor new_tensor(const Shape& shape, DType dt, Device device) {
  return Tensor::empty(shape, {.dtype = dt, .device = device});
}

// Records `fn` as the backward of `outputs` with edges to `inputs` (undefined inputs get no edge).
void record(OpId op, DType compute, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs, BackwardFn fn);

void record(OpId op, DType compute, std::span<const Tensor> inputs,
            std::initializer_list<Tensor*> outputs, BackwardFn fn);

// Records `out` as src.to(out.dtype()) (what Tensor::to records, when grad mode and src ask for
// it): for a caller that made the converted values another way (autocast's weight shadows).
void record_to(const Tensor& src, Tensor& out);

// The dtype gradients of a non-leaf tensor of dtype `dt` travel in: its own dtype for fp64, fp32,
// bf16 and fp16 (as PyTorch); fp32 for narrower formats (an unscaled fp8 gradient would lose
// most of its values; FP8 recipes quantize gradients explicitly, with scaling) and for tf32.
DType grad_dtype_of(DType dt);

void check_defined(const Tensor& t, const char* op, const char* arg);
[[noreturn]] void shape_error(const char* op, const std::string& what, const Shape& a,
                              const Shape& b);
void check_float(const Tensor& t, const char* op, const char* arg);

// Suspends (or re-enables) the autocast hook for its lifetime: the engine runs backward functions
// with it suspended (backward runs in the forward's dtypes); checkpoint's recomputation
// re-enables it.
class CastPolicyScope {
 public:
  explicit CastPolicyScope(bool suspended);
  ~CastPolicyScope();
  CastPolicyScope(const CastPolicyScope&) = delete;
  CastPolicyScope& operator=(const CastPolicyScope&) = delete;

 private:
  bool prev_;
};

}  // namespace mixp::detail
