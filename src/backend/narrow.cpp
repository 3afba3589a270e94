#include "backend/narrow.h"

#include <algorithm>
#include <memory>

namespace mixp::kern {

Tensor convert_view(Backend& be, const Tensor& t, DType to, Round round, DType label) {
  if (!t.defined() || (t.dtype() == to && label == to)) return t;
  const int64_t n = t.numel();
  int64_t span = n > 0 ? 1 : 0;
  bool nonneg = true;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.strides()[d] < 0) nonneg = false;
    if (t.shape()[d] > 1) span += (t.shape()[d] - 1) * t.strides()[d];
  }
  Tensor out;
  if (nonneg && n > 0 && span <= 2 * n + 64) {
    // Convert the covered span as one flat run, then view it with t's strides.
    auto src_impl = std::make_shared<TensorImpl>();
    src_impl->storage = t.storage();
    src_impl->offset = t.storage_offset();
    src_impl->shape = Shape{span};
    src_impl->strides = Shape{1};
    src_impl->dtype = t.dtype();
    src_impl->device = t.device();
    const Tensor flat_src(std::move(src_impl));
    Tensor flat = Tensor::empty(Shape{span}, {.dtype = to});
    be.convert(flat, flat_src, round, Overflow::ieee, 0);
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = flat.storage();
    impl->offset = flat.storage_offset();
    impl->shape = t.shape();
    impl->strides = t.strides();
    impl->dtype = to;
    impl->device = t.device();
    out = Tensor(std::move(impl));
  } else {
    out = Tensor::empty(t.shape(), {.dtype = to});
    if (n > 0) be.convert(out, t, round, Overflow::ieee, 0);
  }
  if (label != to) out.impl()->dtype = label;
  return out;
}

}  // namespace mixp::kern
