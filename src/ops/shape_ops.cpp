// Layout ops: views (reshape, transpose, permute, slice, expand, squeeze/unsqueeze), copies
// (contiguous, clone, to), cat/stack/chunk. Views share storage; their backward reshapes,
// transposes, pads or sums the gradient back.
#include "mixp/tensor/element.h"
#include "ops/dispatch.h"

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

Tensor Tensor::view(const Shape& shape0) const {
  check_defined(*this, "view", "x");
  const Shape shape = infer_shape(shape0, numel(), "view", this->shape());
  Shape st;
  if (!view_strides(*this, shape, st)) {
    shape_error("view", "the strides are not compatible with the new shape; use reshape() (copies)",
                this->shape(), shape);
  }
  return record_view(OpId::reshape, *this, raw_view(*this, shape, st, storage_offset()),
                     reshape_back(this->shape()));
}

Tensor Tensor::reshape(const Shape& shape0) const {
  check_defined(*this, "reshape", "x");
  const Shape shape = infer_shape(shape0, numel(), "reshape", this->shape());
  Shape st;
  if (view_strides(*this, shape, st)) {
    return record_view(OpId::reshape, *this, raw_view(*this, shape, st, storage_offset()),
                       reshape_back(this->shape()));
  }
  return contiguous().view(shape);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  check_defined(*this, "transpose", "x");
  const int a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
  if (dim() == 0) return *this;
  Shape sh = shape(), st = strides();
  std::swap(sh[a], sh[b]);
  std::swap(st[a], st[b]);
  return record_view(OpId::transpose, *this, raw_view(*this, sh, st, storage_offset()),
                     [a, b](BackwardContext& ctx) {
                       const Tensor& g = ctx.grad();
                       Shape gs = g.shape(), gst = g.strides();
                       std::swap(gs[a], gs[b]);
                       std::swap(gst[a], gst[b]);
                       ctx.grad_inputs[0] = raw_view(g, gs, gst, g.storage_offset());
                     });
}

Tensor Tensor::permute(const Shape& dims) const {
  check_defined(*this, "permute", "x");
  if (dims.size() != dim()) {
    throw std::invalid_argument(fmt::format("mixp::permute: {} dims given for a tensor of shape {}",
                                            dims.size(), shape().str()));
  }
  Shape perm = dims, sh = shape(), st = strides();
  bool seen[kMaxDims] = {};
  for (int i = 0; i < dim(); ++i) {
    perm[i] = wrap_dim(dims[i], dim(), "permute");
    if (seen[perm[i]]) throw std::invalid_argument("mixp::permute: repeated dim in " + dims.str());
    seen[perm[i]] = true;
    sh[i] = shape()[static_cast<int>(perm[i])];
    st[i] = strides()[static_cast<int>(perm[i])];
  }
  return record_view(OpId::permute, *this, raw_view(*this, sh, st, storage_offset()),
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

Tensor Tensor::slice(int64_t dim0, int64_t start, int64_t end, int64_t step) const {
  check_defined(*this, "slice", "x");
  const int d = wrap_dim(dim0, dim(), "slice");
  if (step <= 0) throw std::invalid_argument("mixp::slice: step must be positive");
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sh = shape(), st = strides();
  sh[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  const Shape in_shape = shape();
  return record_view(OpId::slice, *this,
                     raw_view(*this, sh, st, storage_offset() + start * strides()[d]),
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

Tensor Tensor::select(int64_t dim0, int64_t index) const {
  const int d = wrap_dim(dim0, dim(), "select");
  const int64_t n = shape()[d];
  if (index < -n || index >= n)
    throw std::out_of_range(
        fmt::format("mixp::select: index {} out of range for dim of size {}", index, n));
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::unsqueeze(int64_t dim0) const {
  check_defined(*this, "unsqueeze", "x");
  const int d = wrap_dim(dim0, dim() + 1, "unsqueeze");
  Shape sh = shape(), st = strides();
  sh.insert(d, 1);
  st.insert(d, d < dim() ? strides()[d] * shape()[d] : 1);
  return record_view(OpId::reshape, *this, raw_view(*this, sh, st, storage_offset()),
                     reshape_back(shape()));
}

Tensor Tensor::squeeze(int64_t dim0) const {
  check_defined(*this, "squeeze", "x");
  const int d = wrap_dim(dim0, dim(), "squeeze");
  if (dim() == 0 || shape()[d] != 1) return *this;
  Shape sh = shape(), st = strides();
  sh.erase(d);
  st.erase(d);
  return record_view(OpId::reshape, *this, raw_view(*this, sh, st, storage_offset()),
                     reshape_back(shape()));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  check_defined(*this, "flatten", "x");
  if (dim() == 0) return reshape(Shape{1});
  const int s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  if (s > e) throw std::invalid_argument("mixp::flatten: start_dim after end_dim");
  Shape sh;
  for (int i = 0; i < s; ++i) sh.push_back(shape()[i]);
  int64_t p = 1;
  for (int i = s; i <= e; ++i) p *= shape()[i];
  sh.push_back(p);
  for (int i = e + 1; i < dim(); ++i) sh.push_back(shape()[i]);
  return reshape(sh);
}

Tensor Tensor::expand(const Shape& shape0) const {
  check_defined(*this, "expand", "x");
  Shape shape = shape0;
  if (shape.size() < dim())
    shape_error("expand", "the target has fewer dims", this->shape(), shape0);
  for (int i = 0; i < shape.size(); ++i) {
    const int j = dim() - shape.size() + i;
    if (shape[i] == -1) {
      if (j < 0)
        shape_error("expand", "-1 is not allowed for a new leading dim", this->shape(), shape0);
      shape[i] = this->shape()[j];
    }
    if (j >= 0 && this->shape()[j] != 1 && this->shape()[j] != shape[i]) {
      shape_error("expand", "a non-singleton dim differs", this->shape(), shape0);
    }
  }
  if (shape == this->shape()) return *this;
  const Shape in_shape = this->shape();
  return record_view(
      OpId::expand, *this, raw_expand(*this, shape),
      [in_shape](BackwardContext& ctx) { ctx.grad_inputs[0] = sum_to(ctx.grad(), in_shape); });
}

Tensor Tensor::contiguous() const {
  check_defined(*this, "contiguous", "x");
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  check_defined(*this, "clone", "x");
  Tensor out = new_tensor(shape(), dtype(), device());
  backend_for(out, *this).copy(out, *this);
  if (should_record({this})) {
    record(OpId::contiguous, grad_dtype_of(dtype()), {this}, {&out},
           [](BackwardContext& ctx) { ctx.grad_inputs[0] = ctx.grad(); });
  }
  return out;
}

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

Tensor Tensor::to(DType dt, Round round, Overflow overflow, uint64_t seed) const {
  check_defined(*this, "to", "x");
  if (dt == dtype()) return *this;
  Tensor out = new_tensor(shape(), dt, device());
  backend_for(out, *this).convert(out, *this, round, overflow, seed);
  record_to(*this, out);
  return out;
}

// PyTorch's tensor.to(dtype) (issue 28 item 12): floating targets round to nearest even, integer
// targets truncate toward zero as a C cast does (mixp then saturates where PyTorch wraps). The
// overload above names another rounding or overflow when one is wanted.
Tensor Tensor::to(DType dt) const {
  const Round r = traits(dt).is_float() ? Round::nearest_even : Round::toward_zero;
  return to(dt, r, Overflow::ieee, 0);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  return x.reshape(shape);
}
Tensor view(const Tensor& x, const Shape& shape) {
  return x.view(shape);
}
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  return x.transpose(d0, d1);
}
Tensor permute(const Tensor& x, const Shape& dims) {
  return x.permute(dims);
}
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return x.slice(dim, start, end, step);
}
Tensor expand(const Tensor& x, const Shape& shape) {
  return x.expand(shape);
}
Tensor contiguous(const Tensor& x) {
  return x.contiguous();
}

Tensor cat(std::span<const Tensor> xs0, int64_t dim0) {
  if (xs0.empty()) throw std::invalid_argument("mixp::cat: no tensors given");
  std::vector<Tensor> xs(xs0.begin(), xs0.end());
  for (const Tensor& t : xs) check_defined(t, "cat", "xs");
  apply_cast_policy(OpId::cat, xs);
  const Tensor& first = xs[0];
  const int d = wrap_dim(dim0, first.dim(), "cat");
  Shape out_shape = first.shape();
  int64_t total = 0;
  DType rd = xs[0].dtype();
  for (const Tensor& t : xs) {
    if (t.dim() != first.dim())
      shape_error("cat", "tensors have different ranks", first.shape(), t.shape());
    for (int i = 0; i < t.dim(); ++i) {
      if (i != d && t.shape()[i] != first.shape()[i])
        shape_error("cat", fmt::format("sizes differ in dim {}", i), first.shape(), t.shape());
    }
    total += t.shape()[d];
    if (t.dtype() != rd)
      rd = (t.dtype() == DType::fp64 || rd == DType::fp64) ? DType::fp64 : DType::fp32;
  }
  out_shape[d] = total;
  Tensor out = new_tensor(out_shape, rd, first.device());
  std::vector<int64_t> sizes;
  int64_t off = 0;
  for (const Tensor& t : xs) {
    Shape sh = out_shape;
    sh[d] = t.shape()[d];
    Tensor window = raw_view(out, sh, out.strides(), off * out.strides()[d]);
    backend_for(window, t).copy(window, t);
    off += t.shape()[d];
    sizes.push_back(t.shape()[d]);
  }
  bool rec = false;
  for (const Tensor& t : xs) rec = rec || should_record({&t});
  rec = rec && traits(rd).is_float();
  if (rec) {
    record(OpId::cat, grad_dtype_of(rd), std::span<const Tensor>(xs), {&out},
           [d, sizes](BackwardContext& ctx) {
             const Tensor& g = ctx.grad();
             int64_t o = 0;
             for (size_t i = 0; i < sizes.size(); ++i) {
               if (ctx.needs(static_cast<int>(i))) {
                 Shape sh = g.shape();
                 sh[d] = sizes[i];
                 ctx.grad_inputs[i] =
                     raw_view(g, sh, g.strides(), g.storage_offset() + o * g.strides()[d]);
               }
               o += sizes[i];
             }
           });
  }
  return out;
}
Tensor cat(std::initializer_list<Tensor> xs, int64_t dim) {
  return cat(std::span<const Tensor>(xs.begin(), xs.size()), dim);
}

Tensor stack(std::span<const Tensor> xs, int64_t dim0) {
  if (xs.empty()) throw std::invalid_argument("mixp::stack: no tensors given");
  const int d = wrap_dim(dim0, xs[0].dim() + 1, "stack");
  for (const Tensor& t : xs) {
    check_defined(t, "stack", "xs");
    if (t.shape() != xs[0].shape())
      shape_error("stack", "all tensors must have the same shape", xs[0].shape(), t.shape());
  }
  std::vector<Tensor> us;
  us.reserve(xs.size());
  for (const Tensor& t : xs) us.push_back(t.unsqueeze(d));
  return cat(std::span<const Tensor>(us), d);
}
Tensor stack(std::initializer_list<Tensor> xs, int64_t dim) {
  return stack(std::span<const Tensor>(xs.begin(), xs.size()), dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim0) {
  check_defined(x, "chunk", "x");
  const int d = wrap_dim(dim0, x.dim(), "chunk");
  if (chunks <= 0 || x.shape()[d] % chunks != 0) {
    throw std::invalid_argument(
        fmt::format("mixp::chunk: dim {} of shape {} does not split into {} equal chunks", d,
                    x.shape().str(), chunks));
  }
  const int64_t n = x.shape()[d] / chunks;
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(chunks));
  Shape sh = x.shape();
  sh[d] = n;
  for (int64_t i = 0; i < chunks; ++i)
    out.push_back(raw_view(x, sh, x.strides(), x.storage_offset() + i * n * x.strides()[d]));
  if (should_record({&x})) {
    // One node for all pieces: backward writes each piece's gradient into one buffer (zeros
    // where a piece got none) instead of summing `chunks` zero-padded slices.
    const Shape in_shape = x.shape();
    auto node = std::make_shared<FunctionNode>(
        OpId::slice, grad_dtype_of(x.dtype()), [in_shape, d, n, chunks](BackwardContext& ctx) {
          Tensor gi = new_tensor(in_shape, ctx.grad(0).dtype(), ctx.grad(0).device());
          for (int64_t i = 0; i < chunks; ++i) {
            Shape s = in_shape;
            s[d] = n;
            Tensor window = raw_view(gi, s, gi.strides(), i * n * gi.strides()[d]);
            backend_for(window).copy(window, ctx.grad(static_cast<int>(i)));
          }
          ctx.grad_inputs[0] = gi;
        });
    node->next_edges.push_back(gradient_edge(x));
    node->input_dtypes.push_back(grad_dtype_of(x.dtype()));
    for (int64_t i = 0; i < chunks; ++i) {
      node->outputs.push_back(OutputMeta{sh, grad_dtype_of(x.dtype()), x.device()});
      TensorImpl* impl = out[static_cast<size_t>(i)].impl();
      impl->grad_fn = node;
      impl->output_nr = static_cast<uint32_t>(i);
      impl->requires_grad = true;
    }
  }
  return out;
}

}  // namespace mixp
