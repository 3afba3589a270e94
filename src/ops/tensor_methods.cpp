// The ops' side of the Tensor methods that compute or record autograd nodes (the views, the
// copies and the in-place updates of mixp/tensor/tensor.h) and of full(): src/tensor/
// tensor_methods.cpp defines the methods and runs these through the table registered here
// (tensor/method_hooks.h), so the tensor module never reaches up to the backend or the graph
// (docs/architecture.md 2.2). Views share storage; their backward reshapes, transposes, pads or
// sums the gradient back.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "mixp/tensor/element.h"
#include "ops/dispatch.h"
#include "tensor/method_hooks.h"

namespace mixp {
using namespace detail;

namespace {
// Infers one -1 dim.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0)
        throw std::invalid_argument(
            fmt::format("mixp::{}: only one dim can be -1 in {}", op, shape.str()));
      infer = i;
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) shape_error(op, "cannot infer the -1 dim", from, shape);
    out[infer] = numel / known;
  }
  if (out.numel() != numel) shape_error(op, "element counts differ", from, out);
  return out;
}

// Strides for viewing t as `shape` without copying, if possible (PyTorch's computeStride).
bool view_strides(const Tensor& t, const Shape& shape, Shape& out) {
  if (t.is_contiguous()) {
    out = contiguous_strides(shape);
    return true;
  }
  const Shape& os = t.shape();
  const Shape& ost = t.strides();
  out = Shape::filled(shape.size(), 1);
  int view_d = shape.size() - 1;
  int64_t chunk_base_stride = ost.size() ? ost.back() : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int td = os.size() - 1; td >= 0; --td) {
    tensor_numel *= os[td];
    if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = ost[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor record_view(OpId id, const Tensor& x, Tensor out, BackwardFn fn) {
  if (should_record({&x})) record(id, grad_dtype_of(x.dtype()), {&x}, {&out}, std::move(fn));
  return out;
}

BackwardFn reshape_back(const Shape& in_shape) {
  return
      [in_shape](BackwardContext& ctx) { ctx.grad_inputs[0] = raw_reshape(ctx.grad(), in_shape); };
}
}  // namespace

namespace detail {

void record_to(const Tensor& src, Tensor& out) {
  const DType dt = out.dtype();
  if (!traits(dt).is_float() || !should_record({&src})) return;
  record(OpId::to, grad_dtype_of(dt), {&src}, {&out},
         [](BackwardContext& ctx) { ctx.grad_inputs[0] = ctx.grad(); });
  static_cast<FunctionNode*>(out.grad_fn().get())->reusable = true;  // saves nothing
  // A 16-bit copy of an fp32 leaf (autocast's weight casts): its gradient goes to the leaf's
  // accumulator as it is, which widens it exactly while adding it into the fp32 .grad, instead
  // of materializing an fp32 copy first. Same values.
  if (src.is_leaf() && src.dtype() == DType::fp32 && (dt == DType::bf16 || dt == DType::fp16)) {
    auto* node = static_cast<FunctionNode*>(out.grad_fn().get());
    node->input_dtypes[0] = dt;
    // bf16 only: an fp32 weight gradient written by the GEMM (see linear) may pass through
    // as it is. fp16 keeps PyTorch's 16-bit weight gradients, whose overflow the GradScaler
    // must see.
    node->pass_grad_dtype = dt == DType::bf16;
  }
}

}  // namespace detail

namespace {
// One function per entry of detail::TensorMethods, named as the method it implements.
namespace method {
Tensor view(const Tensor& x, const Shape& shape0) {
  check_defined(x, "view", "x");
  const Shape shape = infer_shape(shape0, x.numel(), "view", x.shape());
  Shape st;
  if (!view_strides(x, shape, st)) {
    shape_error("view", "the strides are not compatible with the new shape; use reshape() (copies)",
                x.shape(), shape);
  }
  return record_view(OpId::reshape, x, raw_view(x, shape, st, x.storage_offset()),
                     reshape_back(x.shape()));
}

Tensor reshape(const Tensor& x, const Shape& shape0) {
  check_defined(x, "reshape", "x");
  const Shape shape = infer_shape(shape0, x.numel(), "reshape", x.shape());
  Shape st;
  if (view_strides(x, shape, st)) {
    return record_view(OpId::reshape, x, raw_view(x, shape, st, x.storage_offset()),
                       reshape_back(x.shape()));
  }
  return x.contiguous().view(shape);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  check_defined(x, "transpose", "x");
  const int a = wrap_dim(d0, x.dim(), "transpose"), b = wrap_dim(d1, x.dim(), "transpose");
  if (x.dim() == 0) return x;
  Shape sh = x.shape(), st = x.strides();
  std::swap(sh[a], sh[b]);
  std::swap(st[a], st[b]);
  return record_view(OpId::transpose, x, raw_view(x, sh, st, x.storage_offset()),
                     [a, b](BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       Shape gs = g.shape(), gst = g.strides();
                       std::swap(gs[a], gs[b]);
                       std::swap(gst[a], gst[b]);
                       ctx.grad_inputs[0] = raw_view(g, gs, gst, g.storage_offset());
                     });
}

Tensor permute(const Tensor& x, const Shape& dims) {
  check_defined(x, "permute", "x");
  if (dims.size() != x.dim()) {
    throw std::invalid_argument(fmt::format("mixp::permute: {} dims given for a tensor of shape {}",
                                            dims.size(), x.shape().str()));
  }
  Shape perm = dims, sh = x.shape(), st = x.strides();
  bool seen[kMaxDims] = {};
  for (int i = 0; i < x.dim(); ++i) {
    perm[i] = wrap_dim(dims[i], x.dim(), "permute");
    if (seen[perm[i]]) throw std::invalid_argument("mixp::permute: repeated dim in " + dims.str());
    seen[perm[i]] = true;
    sh[i] = x.shape()[static_cast<int>(perm[i])];
    st[i] = x.strides()[static_cast<int>(perm[i])];
  }
  return record_view(OpId::permute, x, raw_view(x, sh, st, x.storage_offset()),
                     [perm](BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       Shape gs = g.shape(), gst = g.strides();
                       for (int i = 0; i < perm.size(); ++i) {
                         gs[static_cast<int>(perm[i])] = g.shape()[i];
                         gst[static_cast<int>(perm[i])] = g.strides()[i];
                       }
                       ctx.grad_inputs[0] = raw_view(g, gs, gst, g.storage_offset());
                     });
}

Tensor slice(const Tensor& x, int64_t dim0, int64_t start, int64_t end, int64_t step) {
  check_defined(x, "slice", "x");
  const int d = wrap_dim(dim0, x.dim(), "slice");
  if (step <= 0) throw std::invalid_argument("mixp::slice: step must be positive");
  const int64_t n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sh = x.shape(), st = x.strides();
  sh[d] = (end - start + step - 1) / step;
  st[d] = x.strides()[d] * step;
  const Shape in_shape = x.shape();
  return record_view(OpId::slice, x,
                     raw_view(x, sh, st, x.storage_offset() + start * x.strides()[d]),
                     [in_shape, d, start, step](BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       Tensor gi = zeros(in_shape, {.dtype = g.dtype(), .device = g.device()});
                       Shape st2 = gi.strides();
                       st2[d] *= step;
                       Tensor window = raw_view(gi, g.shape(), st2, start * gi.strides()[d]);
                       backend_for(window, g).copy(window, g);
                       ctx.grad_inputs[0] = gi;
                     });
}

Tensor select(const Tensor& x, int64_t dim0, int64_t index) {
  const int d = wrap_dim(dim0, x.dim(), "select");
  const int64_t n = x.shape()[d];
  if (index < -n || index >= n)
    throw std::out_of_range(
        fmt::format("mixp::select: index {} out of range for dim of size {}", index, n));
  if (index < 0) index += n;
  return x.slice(d, index, index + 1).squeeze(d);
}

Tensor unsqueeze(const Tensor& x, int64_t dim0) {
  check_defined(x, "unsqueeze", "x");
  const int d = wrap_dim(dim0, x.dim() + 1, "unsqueeze");
  Shape sh = x.shape(), st = x.strides();
  sh.insert(d, 1);
  st.insert(d, d < x.dim() ? x.strides()[d] * x.shape()[d] : 1);
  return record_view(OpId::reshape, x, raw_view(x, sh, st, x.storage_offset()),
                     reshape_back(x.shape()));
}

Tensor squeeze(const Tensor& x, int64_t dim0) {
  check_defined(x, "squeeze", "x");
  const int d = wrap_dim(dim0, x.dim(), "squeeze");
  if (x.dim() == 0 || x.shape()[d] != 1) return x;
  Shape sh = x.shape(), st = x.strides();
  sh.erase(d);
  st.erase(d);
  return record_view(OpId::reshape, x, raw_view(x, sh, st, x.storage_offset()),
                     reshape_back(x.shape()));
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined(x, "flatten", "x");
  if (x.dim() == 0) return x.reshape(Shape{1});
  const int s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  if (s > e) throw std::invalid_argument("mixp::flatten: start_dim after end_dim");
  Shape sh;
  for (int i = 0; i < s; ++i) sh.push_back(x.shape()[i]);
  int64_t p = 1;
  for (int i = s; i <= e; ++i) p *= x.shape()[i];
  sh.push_back(p);
  for (int i = e + 1; i < x.dim(); ++i) sh.push_back(x.shape()[i]);
  return x.reshape(sh);
}

Tensor expand(const Tensor& x, const Shape& shape0) {
  check_defined(x, "expand", "x");
  Shape shape = shape0;
  if (shape.size() < x.dim()) shape_error("expand", "the target has fewer dims", x.shape(), shape0);
  for (int i = 0; i < shape.size(); ++i) {
    const int j = x.dim() - shape.size() + i;
    if (shape[i] == -1) {
      if (j < 0)
        shape_error("expand", "-1 is not allowed for a new leading dim", x.shape(), shape0);
      shape[i] = x.shape()[j];
    }
    if (j >= 0 && x.shape()[j] != 1 && x.shape()[j] != shape[i]) {
      shape_error("expand", "a non-singleton dim differs", x.shape(), shape0);
    }
  }
  if (shape == x.shape()) return x;
  const Shape in_shape = x.shape();
  return record_view(OpId::expand, x, raw_expand(x, shape), [in_shape](BackwardContext& ctx) {
    ctx.grad_inputs[0] = sum_to(ctx.grad(), in_shape);
  });
}

Tensor contiguous(const Tensor& x) {
  check_defined(x, "contiguous", "x");
  if (x.is_contiguous()) return x;
  return x.clone();
}

Tensor clone(const Tensor& x) {
  check_defined(x, "clone", "x");
  Tensor out = new_tensor(x.shape(), x.dtype(), x.device());
  backend_for(out, x).copy(out, x);
  if (should_record({&x})) {
    record(OpId::contiguous, grad_dtype_of(x.dtype()), {&x}, {&out},
           [](BackwardContext& ctx) { ctx.grad_inputs[0] = ctx.grad(); });
  }
  return out;
}

Tensor to(const Tensor& x, DType dt, Round round, Overflow overflow, uint64_t seed) {
  check_defined(x, "to", "x");
  if (dt == x.dtype()) return x;
  Tensor out = new_tensor(x.shape(), dt, x.device());
  backend_for(out, x).convert(out, x, round, overflow, seed);
  record_to(x, out);
  return out;
}

void check_inplace(const Tensor& t, const char* what) {
  if (!t.defined())
    throw std::logic_error(std::string("mixp: ") + what + " on an undefined tensor");
  if (t.requires_grad() && GradMode::is_enabled()) {
    throw std::logic_error(std::string("mixp: ") + what +
                           " on a tensor that requires grad while grad mode is on; "
                           "wrap the update in NoGradGuard or use detach()");
  }
}

void fill_(Tensor& x, double value) {
  check_inplace(x, "fill_");
  backend_for(x).fill(x, value);
  x.bump_version();
}

void copy_(Tensor& x, const Tensor& src) {
  check_inplace(x, "copy_");
  const Shape bs = broadcast_shapes(x.shape(), src.shape(), "copy_");
  if (!(bs == x.shape())) {
    throw std::invalid_argument("mixp::copy_: source shape " + src.shape().str() +
                                " does not broadcast to " + x.shape().str());
  }
  backend_for(x).copy(x, src.shape() == x.shape() ? src : src.detach().expand(x.shape()));
  x.bump_version();
}

void add_(Tensor& x, const Tensor& other, double alpha) {
  check_inplace(x, "add_");
  const Shape bs = broadcast_shapes(x.shape(), other.shape(), "add_");
  if (!(bs == x.shape())) {
    throw std::invalid_argument("mixp::add_: shape " + other.shape().str() +
                                " does not broadcast to " + x.shape().str());
  }
  backend_for(x).add_inplace(
      x, other.shape() == x.shape() ? other : other.detach().expand(x.shape()), alpha);
  x.bump_version();
}

void mul_(Tensor& x, double s) {
  check_inplace(x, "mul_");
  if (x.dtype() != DType::fp32 && x.dtype() != DType::fp64) {
    Tensor tmp = x.to(DType::fp32).detach();
    backend_for(tmp, tmp).scalar(ScalarOp::mul, tmp, tmp, s);
    backend_for(x, tmp).copy(x, tmp);
  } else {
    backend_for(x, x).scalar(ScalarOp::mul, x, x, s);
  }
  x.bump_version();
}

void fill(Tensor& x, double value) {
  backend_for(x).fill(x, value);
}
}  // namespace method

constexpr TensorMethods kMethods = {
    .view = &method::view,
    .reshape = &method::reshape,
    .transpose = &method::transpose,
    .permute = &method::permute,
    .slice = &method::slice,
    .select = &method::select,
    .unsqueeze = &method::unsqueeze,
    .squeeze = &method::squeeze,
    .flatten = &method::flatten,
    .expand = &method::expand,
    .contiguous = &method::contiguous,
    .clone = &method::clone,
    .to = &method::to,
    .fill_ = &method::fill_,
    .copy_ = &method::copy_,
    .add_ = &method::add_,
    .mul_ = &method::mul_,
    .fill = &method::fill,
};
const bool g_registered = (set_tensor_methods(&kMethods), true);
}  // namespace

}  // namespace mixp
