// Int8 GEMM and convolution with a fused requantizing epilogue, for the int8 inference layers of
// quant/int8_model.h (Int8Linear, Int8Conv2d, int8_conv2d_s32). Implemented by the cpu backend on
// oneDNN (src/backend/cpu/int8_primitive.cpp): a narrow interface, so that quant reaches no
// backend/cpu/ header (docs/architecture.md 2.2).
//
// A primitive is built once per shape (quant caches them by batch size) and keeps the weights
// reordered into the layout oneDNN chose for it. run() computes, per output channel o,
//   acc = sum src * w (+ bias[o], fp32, in accumulator units)      exact int32 products
//   y   = act(scales[o] * acc) (+ dst_zero_point)                   rounded to the dst type
// with act = relu when asked; an empty `scales` leaves acc unscaled (the s32 result of
// int8_conv2d_s32).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp {

enum class Int8Dst { u8, s32, f32 };

struct Int8Epilogue {
  std::vector<float> scales;   // per output channel; empty: none
  bool relu = false;
  int32_t dst_zero_point = 0;  // u8 results only; 0: none
};

class Int8Primitive {
 public:
  // src [M, K] u8 row-major times w [O, K] s8 row-major (transposed), bias fp32 [1, O] ->
  // dst [M, O] row-major.
  static Int8Primitive linear(int64_t M, int64_t K, int64_t O, const Tensor& w, Int8Dst dst,
                              const Int8Epilogue& ep);
  // src [N, H, W, C] u8 (NHWC) convolved with w [O, C, KH, KW] s8 (stride sh, sw; zero padding
  // ph, pw before and as much as the output size needs after; dilation 1), bias fp32 [O] when
  // `bias` -> dst [N, OH, OW, O] (u8, s32: NHWC, for the next int8 layer) or [N, O, OH, OW]
  // (f32: NCHW, as the rest of mixp).
  static Int8Primitive conv2d(const Shape& src, const Tensor& w, int64_t OH, int64_t OW,
                              int64_t ph, int64_t pw, int64_t sh, int64_t sw, Int8Dst dst,
                              bool bias, const Int8Epilogue& ep);

  // Contiguous host tensors of the shapes above; bias undefined when built without one.
  void run(const Tensor& src, const Tensor& bias, const Tensor& dst);

  Int8Primitive(Int8Primitive&&) noexcept;
  Int8Primitive& operator=(Int8Primitive&&) noexcept;
  ~Int8Primitive();

 private:
  struct Impl;
  explicit Int8Primitive(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixp
