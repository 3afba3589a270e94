// Layout ops: the free-function forms of the views and copies (reshape, view, transpose, permute,
// slice, expand, contiguous: the Tensor methods, whose ops' side is src/ops/tensor_methods.cpp),
// and cat/stack/chunk, whose backward slices the gradient back.
#include "ops/dispatch.h"

namespace mixp {
using namespace detail;

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
