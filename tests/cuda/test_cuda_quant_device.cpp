// The scaling, quantization and statistics kernels on cuda:0 (src/backend/cuda/cuda_quant.cu)
// against the cpu backend: bit for bit everywhere but the binary cross entropy (exp/log/log1p
// from the GPU's libdevice: within 1e-6 in fp32, 1e-12 in fp64); and the FP8, MX and QAT
// recipes training a few steps on cuda against the cpu. Without a GPU every test is skipped with
// the reason. The same element rules are checked on the CPU against the ref backend in
// test_cuda_quant_math.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "mixp/backend/backend.h"
#include "mixp/ops/ops.h"

namespace mixp {
namespace {

using namespace cuda_test;

Backend& cpu() {
  return get_backend(BackendKind::cpu);
}
Backend& gpu() {
  return backend_for(kGpu);
}

// Values over many binades with zeros, inf and NaN.
Tensor spread(const Shape& s, uint64_t seed, bool specials) {
  Tensor x = mul(host_randn(s, seed), 40.0).contiguous();
  float* p = x.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; i += 97) p[i] *= 1e-6f;
  if (n > 10) p[3] = -0.0f;
  if (specials && n > 100) {
    p[50] = NAN;
    p[90] = INFINITY;
  }
  return x;
}
Tensor empty_on(const Shape& s, DType t, Device d) {
  return Tensor::empty(s, {.dtype = t, .device = d});
}

TEST(CudaQuantDevice, AmaxMinmaxAndCountNonfiniteEqualTheCpu) {
  REQUIRE_GPU();
  for (bool specials : {false, true}) {
    Tensor x = spread(Shape{33, 257}, 1, specials), dx = x.to(kGpu);
    Tensor a = empty_on(Shape{1}, DType::fp32, Device::cpu()),
           da = empty_on(Shape{1}, DType::fp32, kGpu);
    cpu().amax(a, x);
    gpu().amax(da, dx);
    expect_same_bits(da, a, "amax");
    for (auto [c, inner] : {std::pair<int64_t, int64_t>{1, 33 * 257}, {33, 257}, {257, 1}}) {
      Tensor mn = empty_on(Shape{c}, DType::fp32, Device::cpu()), mx = mn.clone();
      Tensor dmn = empty_on(Shape{c}, DType::fp32, kGpu),
             dmx = empty_on(Shape{c}, DType::fp32, kGpu);
      const Tensor& xs = x;
      cpu().minmax(mn, mx, xs, c, inner);
      gpu().minmax(dmn, dmx, xs.to(kGpu), c, inner);
      expect_same_bits(dmn, mn, "minmax min, channels " + std::to_string(c));
      expect_same_bits(dmx, mx, "minmax max, channels " + std::to_string(c));
    }
    for (DType t : {DType::fp32, DType::bf16, DType::fp16}) {
      Tensor v = x.to(t, Round::nearest_even, Overflow::ieee, 0);
      Tensor cnt = empty_on(Shape{2}, DType::int64, Device::cpu()),
             dcnt = empty_on(Shape{2}, DType::int64, kGpu);
      cpu().count_nonfinite(cnt, v.transpose(0, 1));
      gpu().count_nonfinite(dcnt, v.to(kGpu).transpose(0, 1));
      expect_same_bits(dcnt, cnt, std::string("count_nonfinite ") + std::string(name(t)));
    }
  }
}

TEST(CudaQuantDevice, QuantizeEqualsTheCpuBitForBit) {
  REQUIRE_GPU();
  Tensor x = spread(Shape{40, 70}, 2, true), dx = x.to(kGpu);
  for (DType f : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    QuantizeSpec s;
    s.kind = QuantizeSpec::Kind::fp8_tensor;
    s.format = f;
    s.scale = 3.5f;
    Tensor q = empty_on(x.shape(), DType::bf16, Device::cpu()),
           dq = empty_on(x.shape(), DType::bf16, kGpu);
    Tensor a = empty_on(Shape{1}, DType::fp32, Device::cpu()),
           da = empty_on(Shape{1}, DType::fp32, kGpu);
    cpu().quantize(s, q, a, x);
    gpu().quantize(s, dq, da, dx);
    expect_same_bits(dq, q, "fp8_tensor");
    expect_same_bits(da, a, "fp8_tensor amax");
    for (int block : {32, 16}) {
      s.kind = QuantizeSpec::Kind::fp8_mx;
      s.block = block;
      Tensor none, dnone;
      cpu().quantize(s, q, none, x);
      gpu().quantize(s, dq, dnone, dx);
      expect_same_bits(dq, q, "fp8_mx block " + std::to_string(block));
    }
  }
  std::vector<QuantizeSpec::IntParams> params;
  for (int c = 0; c < 40; ++c) {
    const float sc = 0.05f * static_cast<float>(c + 1);
    params.push_back({sc, 1.0f / sc, static_cast<float>(c % 3), -128.0f, 127.0f});
  }
  QuantizeSpec s;
  s.kind = QuantizeSpec::Kind::int_fake;
  s.params = params;
  s.channels = 40;
  s.inner = 70;
  Tensor y = empty_on(x.shape(), DType::fp32, Device::cpu()),
         dy = empty_on(x.shape(), DType::fp32, kGpu);
  Tensor m = empty_on(x.shape(), DType::uint8, Device::cpu()),
         dm = empty_on(x.shape(), DType::uint8, kGpu);
  cpu().quantize(s, y, m, x);
  gpu().quantize(s, dy, dm, dx);
  expect_same_bits(dy, y, "int_fake");
  expect_same_bits(dm, m, "int_fake mask");

  // The gradient through the mask, and the fp8 GEMM epilogue.
  Tensor g = spread(x.shape(), 3, true), dg = g.to(kGpu);
  cpu().mask_grad(y, g, m);
  gpu().mask_grad(dy, dg, dm);
  expect_same_bits(dy, y, "mask_grad uint8");
  cpu().mask_grad(y, g, x);
  gpu().mask_grad(dy, dg, dx);
  expect_same_bits(dy, y, "mask_grad relu");
  Tensor bias = spread(Shape{70}, 4, false);
  for (Activation act : {Activation::none, Activation::relu}) {
    cpu().scale_bias_act(y, g, bias, 0.125f, act);
    gpu().scale_bias_act(dy, dg, bias.to(kGpu), 0.125f, act);
    expect_same_bits(dy, y, "scale_bias_act");
  }
}

TEST(CudaQuantDevice, LowBitCodesEqualTheCpuBitForBit) {
  REQUIRE_GPU();
  using Kind = LowBitCodesSpec::Kind;
  Tensor w = mul(host_randn(Shape{48, 300}, 5), 0.05).contiguous(), dw = w.to(kGpu);
  for (Kind k : {Kind::weight_int, Kind::weight_ternary, Kind::weight_binary, Kind::act_int,
                 Kind::act_sign}) {
    LowBitCodesSpec s;
    s.kind = k;
    s.qmin = k == Kind::act_int ? 0.0f : -2.0f;
    s.qmax = k == Kind::act_int ? 3.0f : 1.0f;
    s.scale = 0.02f;
    Tensor c = empty_on(w.shape(), DType::fp32, Device::cpu()),
           dc = empty_on(w.shape(), DType::fp32, kGpu);
    Tensor sc = empty_on(Shape{48}, DType::fp32, Device::cpu()),
           dsc = empty_on(Shape{48}, DType::fp32, kGpu);
    Tensor m = empty_on(w.shape(), DType::uint8, Device::cpu()),
           dm = empty_on(w.shape(), DType::uint8, kGpu);
    cpu().lowbit_codes(s, c, sc, m, w);
    gpu().lowbit_codes(s, dc, dsc, dm, dw);
    const std::string what = "lowbit kind " + std::to_string(static_cast<int>(k));
    expect_same_bits(dc, c, what + " codes");
    expect_same_bits(dm, m, what + " mask");
    if (k != Kind::act_int && k != Kind::act_sign) expect_same_bits(dsc, sc, what + " scales");
    Tensor g = host_randn(w.shape(), 6), inv = add(host_randn(Shape{48}, 7), 3.0).contiguous();
    Tensor d = empty_on(w.shape(), DType::fp32, Device::cpu()),
           dd = empty_on(w.shape(), DType::fp32, kGpu);
    cpu().lowbit_codes_backward(d, g, m, inv, 300);
    gpu().lowbit_codes_backward(dd, g.to(kGpu), dm, inv.to(kGpu), 300);
    expect_same_bits(dd, d, what + " backward");
  }
}

TEST(CudaQuantDevice, Fp8ScaleUpdateAndBinaryCrossEntropyMatchTheCpu) {
  REQUIRE_GPU();
  Tensor h = from_vector(std::vector<float>{3.0f, 0.5f, 7.0f, 0.0f}, Shape{4});
  Tensor s = from_vector(std::vector<float>{2.0f}, Shape{1}),
         si = from_vector(std::vector<float>{0.5f}, Shape{1});
  Tensor dh = h.to(kGpu), ds = s.to(kGpu), dsi = si.to(kGpu);
  for (const Fp8ScaleUpdate& u :
       {Fp8ScaleUpdate{.roll = false, .amax = 9.0f}, Fp8ScaleUpdate{.roll = true},
        Fp8ScaleUpdate{.roll = true, .most_recent = true, .margin = 1}}) {
    cpu().fp8_scale_update(h, s, si, u);
    gpu().fp8_scale_update(dh, ds, dsi, u);
    expect_same_bits(dh, h, "history");
    expect_same_bits(ds, s, "scale");
    expect_same_bits(dsi, si, "scale_inv");
  }
  for (DType dt : {DType::fp32, DType::fp64}) {
    for (bool logits : {false, true}) {
      Tensor x = logits ? host_randn(Shape{999}, 8) : sigmoid(host_randn(Shape{999}, 8));
      Tensor t = sigmoid(host_randn(Shape{999}, 9));
      x = x.to(dt);
      t = t.to(dt);
      Tensor loss = empty_on(Shape{}, dt, Device::cpu()), dloss = empty_on(Shape{}, dt, kGpu);
      cpu().binary_cross_entropy(loss, x, t, logits);
      gpu().binary_cross_entropy(dloss, x.to(kGpu), t.to(kGpu), logits);
      const double tol = dt == DType::fp32 ? 1e-6 : 1e-12;
      EXPECT_LT(rel_error(dloss, loss), tol) << name(dt) << " logits " << logits;
      Tensor gl = from_vector(std::vector<double>{0.5}, Shape{1}).to(dt);
      Tensor dx = empty_on(x.shape(), dt, Device::cpu()),
             dt_ = empty_on(x.shape(), dt, Device::cpu());
      Tensor ddx = empty_on(x.shape(), dt, kGpu), ddt = empty_on(x.shape(), dt, kGpu);
      cpu().binary_cross_entropy_backward(dx, dt_, gl, x, t, logits);
      gpu().binary_cross_entropy_backward(ddx, ddt, gl.to(kGpu), x.to(kGpu), t.to(kGpu), logits);
      EXPECT_LT(rel_error(ddx, dx), tol) << "dx";
      EXPECT_LT(rel_error(ddt, dt_), tol) << "dtarget";
    }
  }
}

// The recipes whose kernels these are train a few steps of the mlp on cuda like on the cpu.
TEST(CudaQuantDevice, Fp8MxAndQatRecipesTrainOnCudaLikeOnTheCpu) {
  REQUIRE_GPU();
  for (const char* p : {"fp8", "fp8-current", "mxfp8", "int8-qat", "int4-qat", "ternary", "binary",
                        "binary-act", "fp16", "bf16"}) {
    expect_trains_like_the_cpu(
        std::string("train --model mlp --data synthetic --steps 3 --batch 16 ") +
            "--seed 3 --json --precision " + p,
        p);
  }
}

}  // namespace
}  // namespace mixp
