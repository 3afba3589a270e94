// LayerNorm's 16-bit saved activation (amp::AutocastOptions::low_precision_norm_saves).
//
// Under autocast, layer_norm runs in fp32 (cast policy) and by default keeps its fp32 input for
// backward, as PyTorch does. In a transformer that input is the fp32 residual stream, the largest
// activation autocast does not shrink. With 16-bit saves the op keeps instead the normalized
// input xhat = (x - mean) * rstd, rounded to the autocast dtype, plus rstd in fp32: the backward
// needs only xhat, rstd and the weight (dx = rstd * (d - mean(d) - xhat * mean(d * xhat)),
// d = dy * w; dw = sum dy * xhat; db = sum dy). xhat is O(1) (|xhat| <= sqrt(n)), so rounding it
// costs one 16-bit rounding error per element and none of the cancellation that rounding x itself
// would bring when |mean| >> std.
#pragma once
#include "mixp/tensor/tensor.h"

namespace mixp::detail {

// xhat of a contiguous fp32 x ([rows, n]) with its fp32 mean and rstd ([rows]), computed in fp32
// exactly as the backward kernels compute it ((x - mean) * rstd) and rounded to `low` (bf16 or
// fp16) to nearest-even.
Tensor layer_norm_xhat(const Tensor& x, const Tensor& mean, const Tensor& rstd, DType low);

// LayerNorm's backward from a saved 16-bit xhat: the same kernels as the fp32 backward
// (backend().layer_norm_backward, given xhat widened exactly, mean 0 and rstd 1, which
// reproduces xhat bit for bit), then each row of dx scaled by its rstd. Given the exact fp32
// xhat, dx and db equal the fp32 backward's bit for bit; dw's terms are dy * xhat instead of the
// kernel's (dy * (x - mean)) * rstd, an ulp apart (tests/amp/test_layer_norm_saves.cpp).
void layer_norm_backward_from_xhat(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                   const Tensor& xhat, const Tensor& w, const Tensor& rstd);

}  // namespace mixp::detail
