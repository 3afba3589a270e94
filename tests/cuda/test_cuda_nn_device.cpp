// The cnn's kernels on cuda:0 (conv2d as im2col + cuBLASLt GEMMs, pooling, batch norm,
// reduce_max_backward) against the cpu backend, with their gradients through autograd, and the
// cnn's recipes training a few steps on cuda against the cpu. Skipped with the reason without a
// GPU; the arithmetic is checked on the CPU against the ref backend in test_cuda_nn_math.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/cuda_test_util.h"
#include "mixp/ops/ops.h"

namespace mixp {
namespace {

using namespace cuda_test;

TEST(CudaNnDevice, ConvolutionAndItsGradientsMatchTheCpu) {
  REQUIRE_GPU();
  for (auto [stride, pad] : {std::pair<int64_t, int64_t>{1, 1}, {2, 0}}) {
    Tensor x = host_randn(Shape{4, 3, 12, 10}, 1), w = mul(host_randn(Shape{8, 3, 3, 3}, 2), 0.3),
           b = host_randn(Shape{8}, 3);
    Tensor cx = x.clone().requires_grad_(), cw = w.clone().requires_grad_(),
           cb = b.clone().requires_grad_();
    Tensor gx = x.to(kGpu).requires_grad_(), gw = w.to(kGpu).requires_grad_(),
           gb = b.to(kGpu).requires_grad_();
    Tensor yc = conv2d(cx, cw, cb, stride, pad), yg = conv2d(gx, gw, gb, stride, pad);
    EXPECT_LT(rel_error(yg, yc), 1e-5) << "stride " << stride;
    sum(mul(yc, yc)).backward();
    sum(mul(yg, yg)).backward();
    EXPECT_LT(rel_error(gx.grad(), cx.grad()), 1e-5) << "dx";
    EXPECT_LT(rel_error(gw.grad(), cw.grad()), 1e-5) << "dw";
    EXPECT_LT(rel_error(gb.grad(), cb.grad()), 1e-5) << "db";
  }
  // bf16 operands, fp32 accumulation.
  Tensor x = host_randn(Shape{2, 4, 9, 9}, 4).to(DType::bf16, Round::nearest_even);
  Tensor w = host_randn(Shape{5, 4, 3, 3}, 5).to(DType::bf16, Round::nearest_even);
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  p.compute = DType::bf16;
  EXPECT_LT(rel_error(conv2d(x.to(kGpu), w.to(kGpu), Tensor(), p), conv2d(x, w, Tensor(), p)),
            1e-2);
}

TEST(CudaNnDevice, PoolingBatchNormAndMaxMatchTheCpu) {
  REQUIRE_GPU();
  Tensor x = host_randn(Shape{3, 4, 10, 9}, 6);
  for (bool avg : {false, true}) {
    Tensor cx = x.clone().requires_grad_(), gx = x.to(kGpu).requires_grad_();
    Tensor yc = avg ? avg_pool2d(cx, 3, 2, 1) : max_pool2d(cx, 2);
    Tensor yg = avg ? avg_pool2d(gx, 3, 2, 1) : max_pool2d(gx, 2);
    expect_same_bits(yg, yc, avg ? "avg_pool2d" : "max_pool2d");
    sum(mul(yc, yc)).backward();
    sum(mul(yg, yg)).backward();
    EXPECT_LT(rel_error(gx.grad(), cx.grad()), 1e-6) << (avg ? "avg" : "max") << " backward";
  }
  Tensor w = host_randn(Shape{4}, 7), b = host_randn(Shape{4}, 8);
  Tensor rm = zeros(Shape{4}), rv = ones(Shape{4});
  Tensor grm = rm.to(kGpu), grv = rv.to(kGpu);
  Tensor cx = x.clone().requires_grad_(), gx = x.to(kGpu).requires_grad_();
  Tensor cw = w.clone().requires_grad_(), gw = w.to(kGpu).requires_grad_();
  Tensor yc = batch_norm(cx, rm, rv, cw, b, true),
         yg = batch_norm(gx, grm, grv, gw, b.to(kGpu), true);
  EXPECT_LT(rel_error(yg, yc), 1e-6);
  EXPECT_LT(rel_error(grm, rm), 1e-6);
  EXPECT_LT(rel_error(grv, rv), 1e-6);
  sum(mul(yc, yc)).backward();
  sum(mul(yg, yg)).backward();
  EXPECT_LT(rel_error(gx.grad(), cx.grad()), 1e-5);
  EXPECT_LT(rel_error(gw.grad(), cw.grad()), 1e-5);
  EXPECT_LT(rel_error(batch_norm(x.to(kGpu), grm, grv, gw, Tensor(), false),
                      batch_norm(x, rm, rv, cw, Tensor(), false)),
            1e-6);
  // max's gradient splits among ties.
  Tensor t = from_vector(std::vector<float>{1, 3, 3, 2, 5, 5, 5, 0}, Shape{2, 4});
  Tensor ct = t.clone().requires_grad_(), gt = t.to(kGpu).requires_grad_();
  sum(mul(max(ct, Shape{1}, true), 3.0)).backward();
  sum(mul(max(gt, Shape{1}, true), 3.0)).backward();
  expect_same_bits(gt.grad(), ct.grad(), "max backward");
}

TEST(CudaNnDevice, CnnRecipesTrainOnCudaLikeOnTheCpu) {
  REQUIRE_GPU();
  for (const char* p : {"fp32", "bf16", "int8-qat", "fp8", "mxfp8", "fp16-o2", "bf16-pure",
                        "int4-qat", "binary-act"}) {
    expect_trains_like_the_cpu(
        std::string("train --model cnn --data synthetic --steps 3 --batch 16 ") +
            "--seed 2 --json --precision " + p,
        p);
  }
}

}  // namespace
}  // namespace mixp
