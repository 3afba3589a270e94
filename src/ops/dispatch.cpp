#include "ops/dispatch.h"

#include <fmt/format.h>

#include <atomic>
#include <stdexcept>

#include "backend/kernel_util.h"

namespace mixp {

namespace {
std::atomic<CastPolicyHook> g_hook{nullptr};
std::atomic<SaveDtypeHook> g_save_hook{nullptr};
thread_local bool g_suspended = false;
}  // namespace

void set_cast_policy_hook(CastPolicyHook hook) {
  g_hook.store(hook);
}
CastPolicyHook cast_policy_hook() {
  return g_suspended ? nullptr : g_hook.load(std::memory_order_relaxed);
}

void set_save_dtype_hook(SaveDtypeHook hook) {
  g_save_hook.store(hook);
}
DType saved_activation_dtype(OpId op) {
  const SaveDtypeHook h = g_suspended ? nullptr : g_save_hook.load(std::memory_order_relaxed);
  return h ? h(op) : DType::fp32;
}

namespace {
std::atomic<bool> g_strict_dtypes{false};
thread_local int t_strict_override = -1;  // -1: none; 0/1: StrictDtypesGuard's value
}  // namespace

void set_strict_dtypes(bool on) {
  g_strict_dtypes.store(on, std::memory_order_relaxed);
}
bool strict_dtypes() {
  return t_strict_override >= 0 ? t_strict_override == 1
                                : g_strict_dtypes.load(std::memory_order_relaxed);
}
StrictDtypesGuard::StrictDtypesGuard(bool on) : prev_(t_strict_override) {
  t_strict_override = on ? 1 : 0;
}
StrictDtypesGuard::~StrictDtypesGuard() {
  t_strict_override = prev_;
}

namespace detail {

CastPolicyScope::CastPolicyScope(bool suspended) : prev_(g_suspended) {
  g_suspended = suspended;
}
CastPolicyScope::~CastPolicyScope() {
  g_suspended = prev_;
}

void check_strict_dtypes(OpId op, std::initializer_list<const Tensor*> inputs,
                         std::initializer_list<const char*> names) {
  if (!strict_dtypes()) return;
  const Tensor* first = nullptr;
  const char* first_name = "";
  auto nm = names.begin();
  for (const Tensor* t : inputs) {
    const char* n = nm != names.end() ? *nm++ : "input";
    if (!t->defined() || !t->is_floating_point()) continue;
    if (!first) {
      first = t;
      first_name = n;
    } else if (t->dtype() != first->dtype()) {
      throw std::invalid_argument(fmt::format(
          "{}: {} is {} but {} is {}, and strict dtypes are on (PyTorch: \"mat1 and mat2 must "
          "have the same dtype\"); convert one of them (e.g. x.to(DType::{}, "
          "Round::nearest_even)) or run the model under amp::Autocast",
          op_name(op), first_name, name(first->dtype()), n, name(t->dtype()), name(t->dtype())));
    }
  }
}

DType result_dtype(std::initializer_list<const Tensor*> inputs) {
  bool first = true;
  DType r = DType::fp32;
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    const DType d = t->is_floating_point() ? t->dtype() : DType::fp32;
    if (first) {
      r = d;
      first = false;
    } else if (d != r) {
      r = (d == DType::fp64 || r == DType::fp64) ? DType::fp64 : DType::fp32;
    }
  }
  return r;
}

Tensor as_compute(const Tensor& t, DType c) {
  if (!t.defined() || t.dtype() == c) return t;
  Tensor out = new_tensor(t.shape(), c, t.device());
  backend_for(out, t).copy(out, t);
  return out;
}

Tensor finish(const Tensor& t, DType result) {
  if (t.dtype() == result) return t;
  Tensor out = new_tensor(t.shape(), result, t.device());
  backend_for(out, t).convert(out, t, Round::nearest_even, Overflow::ieee, 0);
  return out;
}

Tensor raw_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  return kern::view_of(t, shape, strides, offset);
}

Tensor raw_expand(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const int n = shape.size(), k = t.dim();
  Shape st = Shape::filled(n, 0);
  for (int i = 0; i < n; ++i) {
    const int j = k - n + i;
    if (j < 0) continue;
    if (t.shape()[j] == shape[i]) {
      st[i] = t.strides()[j];
    } else if (t.shape()[j] != 1) {
      throw std::invalid_argument("mixp::expand: shape " + t.shape().str() +
                                  " cannot be expanded to " + shape.str());
    }
  }
  return raw_view(t, shape, st, t.storage_offset());
}

Tensor raw_contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = new_tensor(t.shape(), t.dtype(), t.device());
  backend_for(out, t).copy(out, t);
  return out;
}

Tensor raw_reshape(const Tensor& t, const Shape& shape) {
  if (shape.numel() != t.numel()) {
    throw std::invalid_argument("mixp::reshape: cannot reshape " + t.shape().str() + " into " +
                                shape.str());
  }
  const Tensor c = raw_contiguous(t);
  return raw_view(c, shape, contiguous_strides(shape), c.storage_offset());
}

DType grad_dtype_of(DType dt) {
  switch (dt) {
    case DType::fp64:
    case DType::fp32:
    case DType::bf16:
    case DType::fp16:
      return dt;
    default:
      return DType::fp32;
  }
}

namespace {
void finish_record(std::shared_ptr<FunctionNode> node, std::initializer_list<Tensor*> outputs) {
  uint32_t k = 0;
  for (Tensor* out : outputs) {
    node->outputs.push_back(OutputMeta{out->shape(), grad_dtype_of(out->dtype()), out->device()});
    TensorImpl* impl = out->impl();
    impl->grad_fn = node;
    impl->output_nr = k++;
    impl->requires_grad = true;
  }
}
}  // namespace

void record(OpId op, DType compute, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs, BackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(op, compute, std::move(fn));
  node->next_edges.reserve(inputs.size());
  node->input_dtypes.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    node->next_edges.push_back(gradient_edge(*t));
    node->input_dtypes.push_back(t->defined() ? grad_dtype_of(t->dtype()) : DType::fp32);
  }
  finish_record(std::move(node), outputs);
}

void record(OpId op, DType compute, std::span<const Tensor> inputs,
            std::initializer_list<Tensor*> outputs, BackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(op, compute, std::move(fn));
  node->next_edges.reserve(inputs.size());
  node->input_dtypes.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next_edges.push_back(gradient_edge(t));
    node->input_dtypes.push_back(t.defined() ? grad_dtype_of(t.dtype()) : DType::fp32);
  }
  finish_record(std::move(node), outputs);
}

void check_defined(const Tensor& t, const char* op, const char* arg) {
  if (!t.defined())
    throw std::invalid_argument(
        fmt::format("mixp::{}: argument '{}' is an undefined tensor", op, arg));
}

void shape_error(const char* op, const std::string& what, const Shape& a, const Shape& b) {
  throw std::invalid_argument(
      fmt::format("mixp::{}: {} (shapes {} and {})", op, what, a.str(), b.str()));
}

void check_float(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  if (!t.is_floating_point()) {
    throw std::invalid_argument(fmt::format(
        "mixp::{}: argument '{}' must be floating point, got {}", op, arg, name(t.dtype())));
  }
}

}  // namespace detail
}  // namespace mixp
