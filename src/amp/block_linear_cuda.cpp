// block_scaled_linear on a cuda device (src/amp/fp8_detail.h; docs/cuda.md "Block-scaled
// recipes"): the host path's operands and roles (block_linear.cpp: fprop x . w^T, dgrad g . W,
// wgrad g^T . x with the RHT along the tokens), each quantized on the device and multiplied by
// cuda_block_gemm_nt (mixp/backend/cuda_block.h: cuBLASLt's block-scaled kernels where the GPU
// has them, else the bf16 GEMM of the dequantized operands). Differences from the host path, all
// giving the same operand values:
//   - dgrad quantizes W^T [K, N] itself; with square weight tiles (16x16, 128x128) that is the
//     forward's quantization transposed (the same tiles, amaxes and global amax), without them
//     the host's column-wise operand;
//   - fp8-block's column-wise operands are the transposes (cuda_block_columns), which the host's
//     fp8_columns equals (block_scaled.h, fp8_block_columns_factors).
// Stochastic rounding's seed is the host path's value_seed of the operand's values, read back to
// the host for the hash (a copy per gradient operand; a device hash would remove it).
#include <vector>

#include "amp/fp8_detail.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/cuda_block.h"
#include "mixp/tensor/factories.h"
#include "ops/dispatch.h"

namespace mixp::amp::detail {

namespace {

// t (fp32 contiguous, cuda) with the seed of its values when o rounds stochastically.
BlockScaledOptions seeded(const BlockScaledOptions& o, const Tensor& t, const BlockLinearCudaPlan& p,
                          uint64_t role) {
  BlockScaledOptions s = o;
  if (s.round == Round::stochastic) {
    const std::vector<float> v = t.to(Device::cpu()).to_vector<float>();
    s.seed = p.seed(v.data(), v.size(), role);
  }
  return s;
}

Tensor f32_rows(const Tensor& t) {
  return mixp::detail::raw_contiguous(mixp::detail::as_compute(t.detach(), DType::fp32));
}

}  // namespace

Tensor block_scaled_linear_cuda(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                                const BlockLinearCudaPlan& plan) {
  const bool rec = mixp::detail::should_record({&x, &w, &b});
  const bool need_dx = rec && x.requires_grad();
  const bool need_dw = rec && w.requires_grad();
  const bool relu = act == Activation::relu;
  const int64_t K = w.size(1), N = w.size(0);
  Tensor x2 = f32_rows(mixp::detail::raw_reshape(mixp::detail::raw_contiguous(x),
                                                 Shape{K ? x.numel() / K : 0, K}));
  const Tensor wf = f32_rows(w);
  const int64_t M = x2.size(0);
  Tensor y, keep_xc, keep_wt;
  {
    NoGradGuard ng;
    if (need_dw) keep_xc = cuda_block_columns(x2, plan.rht);  // [K, Mp]
    if (need_dx) keep_wt = wf.t().contiguous();                // [K, N]
    y = cuda_block_gemm_nt(x2, wf, plan.act, plan.weight);
    Tensor bf = b.defined() ? f32_rows(b) : Tensor();
    backend_for(y, bf).scale_bias_act(y, y, bf, 1.0f, relu ? Activation::relu : Activation::none);
  }
  Tensor out = linear_output(y, x.shape(), N);
  if (!rec) return out;

  Tensor keep_y = relu ? y.detach() : Tensor();
  const Shape x_shape = x.shape();
  mixp::detail::record(
      OpId::linear, DType::fp32, {&x, &w, &b}, {&out},
      [keep_xc, keep_wt, keep_y, plan, x_shape, M, N](BackwardContext& ctx) {
        Tensor g = linear_output_grad(ctx.grad(), keep_y, M, N);
        if (ctx.needs(2)) ctx.grad_inputs[2] = sum(g, Shape{0}, false);
        if (!ctx.needs(0) && !ctx.needs(1)) return;
        const Tensor gf = f32_rows(g);
        if (ctx.needs(0)) {  // dx [M, K] = g [M, N] . (W^T [K, N])^T, blocks along N
          const Tensor dx = cuda_block_gemm_nt(gf, keep_wt, seeded(plan.grad, gf, plan, plan.role_g),
                                               plan.weight);
          ctx.grad_inputs[0] = mixp::detail::raw_reshape(dx, x_shape);
        }
        if (ctx.needs(1)) {  // dw [N, K] = g^T [N, Mp] . (x^T [K, Mp])^T, blocks along M
          const Tensor gc = cuda_block_columns(gf, plan.rht);
          ctx.grad_inputs[1] =
              cuda_block_gemm_nt(gc, keep_xc, seeded(plan.grad, gc, plan, plan.role_gc), plan.act);
        }
      });
  return out;
}

}  // namespace mixp::amp::detail
