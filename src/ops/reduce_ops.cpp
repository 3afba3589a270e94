// Reductions: sum, mean, max over dims (keepdim or not), and sum_to (the gradient of a broadcast).
#include "backend/narrow.h"
#include "ops/dispatch.h"

namespace mixp {
using namespace detail;

namespace {
// keepdim shape of reducing `dims` (empty = all) of `shape`, and the final shape.
void reduced_shapes(const Shape& shape, const Shape& dims, bool keepdim, const char* op,
                    Shape& kept, Shape& final_shape) {
  bool red[kMaxDims] = {};
  if (dims.empty()) {
    for (int i = 0; i < shape.size(); ++i) red[i] = true;
  } else {
    for (int64_t d : dims) red[wrap_dim(d, shape.size(), op)] = true;
  }
  kept = shape;
  final_shape = Shape();
  for (int i = 0; i < shape.size(); ++i) {
    if (red[i]) kept[i] = 1;
    if (!red[i])
      final_shape.push_back(shape[i]);
    else if (keepdim)
      final_shape.push_back(1);
  }
}

Tensor reduce_op(OpId id, ReduceOp rop, const Tensor& x0, const Shape& dims, bool keepdim) {
  const char* nm = op_name(id).data();
  check_defined(x0, nm, "x");
  Tensor in[1] = {x0};
  apply_cast_policy(id, in);
  const Tensor& x = in[0];
  Shape kept, final_shape;
  reduced_shapes(x.shape(), dims, keepdim, nm, kept, final_shape);
  if (rop == ReduceOp::max && x.numel() == 0)
    throw std::invalid_argument("mixp::max: empty tensor " + x.shape().str());
  const DType rd = result_dtype({&x});
  const DType c = compute_of(rd);
  // sum/mean of a 16-bit tensor: the backend widens it on the fly (no fp32 copy).
  const bool direct = rop != ReduceOp::max && c == DType::fp32 && kern::is_narrow(x.dtype());
  const Tensor xc = direct ? x : as_compute(x, c);
  Tensor kc = new_tensor(kept, c, x.device());
  backend_for(kc, xc).reduce(rop, kc, xc);
  Tensor out =
      finish(raw_view(kc, final_shape, contiguous_strides(final_shape), kc.storage_offset()), rd);
  if (should_record({&x})) {
    const Shape in_shape = x.shape();
    Tensor keep_x = rop == ReduceOp::max ? xc.detach() : Tensor();
    Tensor keep_y = rop == ReduceOp::max ? kc.detach() : Tensor();
    const double count =
        kept.numel() ? static_cast<double>(x.numel()) / static_cast<double>(kept.numel()) : 1.0;
    record(id, c, {&x}, {&out}, [rop, in_shape, kept, keep_x, keep_y, count](BackwardContext& ctx) {
      const Tensor g = raw_reshape(ctx.grad(), kept);
      switch (rop) {
        case ReduceOp::sum:
          ctx.grad_inputs[0] = raw_contiguous(raw_expand(g, in_shape));
          break;
        case ReduceOp::mean:
          ctx.grad_inputs[0] = mul(raw_expand(g, in_shape), 1.0 / count);
          break;
        case ReduceOp::max: {
          Tensor gi = new_tensor(in_shape, g.dtype(), g.device());
          backend_for(gi, g, keep_x, keep_y).reduce_max_backward(gi, g, keep_x, keep_y);
          ctx.grad_inputs[0] = gi;
          break;
        }
      }
    });
  }
  return out;
}
}  // namespace

Tensor sum(const Tensor& x) {
  return reduce_op(OpId::sum, ReduceOp::sum, x, Shape(), false);
}
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_op(OpId::sum, ReduceOp::sum, x, dims, keepdim);
}
Tensor mean(const Tensor& x) {
  return reduce_op(OpId::mean, ReduceOp::mean, x, Shape(), false);
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_op(OpId::mean, ReduceOp::mean, x, dims, keepdim);
}
Tensor max(const Tensor& x) {
  return reduce_op(OpId::max, ReduceOp::max, x, Shape(), false);
}
Tensor max(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_op(OpId::max, ReduceOp::max, x, dims, keepdim);
}

Tensor argmax(const Tensor& x0, int64_t dim, bool keepdim) {
  check_defined(x0, "argmax", "x");
  Tensor in[1] = {x0};
  apply_cast_policy(OpId::argmax, in);
  const Tensor& x = in[0];
  const DKind kind = traits(x.dtype()).kind;
  if (kind != DKind::floating && kind != DKind::integer && kind != DKind::boolean) {
    throw std::invalid_argument(fmt::format(
        "mixp::argmax: {} values are not ordered element-wise; dequantize first", name(x.dtype())));
  }
  if (x.dim() == 0) {  // dim 0 or -1, as PyTorch: the index 0
    wrap_dim(dim, 1, "argmax");
    return zeros(Shape{}, {.dtype = DType::int64, .device = x.device()});
  }
  const int d = wrap_dim(dim, x.dim(), "argmax");
  if (x.shape()[d] == 0) {
    throw std::invalid_argument(
        fmt::format("mixp::argmax: dim {} of {} is empty; the maximum of no elements has no index",
                    dim, x.shape().str()));
  }
  Shape kept = x.shape();
  kept[d] = 1;
  Tensor out = new_tensor(kept, DType::int64, x.device());
  if (out.numel() > 0) backend_for(out, x).argmax(out, x, d);
  if (keepdim) return out;
  Shape final_shape;
  for (int i = 0; i < x.dim(); ++i)
    if (i != d) final_shape.push_back(x.shape()[i]);
  return raw_view(out, final_shape, contiguous_strides(final_shape), out.storage_offset());
}

Tensor argmax(const Tensor& x) {
  check_defined(x, "argmax", "x");
  if (x.numel() == 0) {
    throw std::invalid_argument("mixp::argmax: empty tensor " + x.shape().str() +
                                "; the maximum of no elements has no index");
  }
  return argmax(raw_reshape(x, Shape{x.numel()}), 0, false);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int lead = x.dim() - shape.size();
  if (lead < 0) shape_error("sum_to", "the target has more dims", x.shape(), shape);
  Shape dims;
  for (int i = 0; i < x.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && x.shape()[i] != 1) {
      dims.push_back(i);
    } else if (shape[i - lead] != x.shape()[i]) {
      shape_error("sum_to", "the shapes are not broadcast-compatible", x.shape(), shape);
    }
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

}  // namespace mixp
