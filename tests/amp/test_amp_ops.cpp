// The 16-bit backend paths (bf16 native on oneDNN, fp16 emulated exactly) against the ref oracle,
// 16-bit pointwise kernels, TF32 rounding of fp32 GEMM inputs, and the memory a bf16 model saves.
#include <gtest/gtest.h>

#include <string>

#include "backend/cpu/cpu_bf16.h"
#include "mixp/mixp.h"
#include "ops/op_test_util.h"

namespace mixp::testing {
namespace {

class Gemm16 : public ::testing::TestWithParam<DType> {};

// The 16-bit GEMM paths round their output once from an fp32 (cpu) or double (ref) accumulator;
// both see the same exactly representable inputs, so they differ only where the two
// accumulations straddle a rounding boundary of the output format: kTolBf16 (see
// op_test_util.h) for bf16; fp16 has 3 more mantissa bits.
double tol16(DType dt) {
  return dt == DType::bf16 ? kTolBf16 : kTolBf16 / 8;
}

TEST_P(Gemm16, MatmulLinearBmmMatchRef) {
  const DType dt = GetParam();
  const double tol = tol16(dt);
  expect_cpu_matches_ref(
      "matmul", [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); },
      {rnd({2, 5, 33}, 1, dt), rnd({33, 17}, 2, dt)}, tol);
  expect_cpu_matches_ref(
      "linear+bias", [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
      {rnd({7, 40}, 3, dt), rnd({24, 40}, 4, dt), rnd({24}, 5, dt)}, tol);
  expect_cpu_matches_ref(
      "linear+relu",
      [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2], Activation::relu); },
      {rnd({7, 40}, 6, dt), rnd({24, 40}, 7, dt), rnd({24}, 8, dt)}, tol);
  expect_cpu_matches_ref(
      "bmm", [](const std::vector<Tensor>& v) { return bmm(v[0], v[1]); },
      {rnd({3, 6, 20}, 9, dt), rnd({3, 20, 11}, 10, dt)}, tol);
  expect_cpu_matches_ref(
      "bmm transposed",
      [](const std::vector<Tensor>& v) { return bmm(v[0].transpose(1, 2), v[1]); },
      {rnd({3, 20, 6}, 11, dt), rnd({3, 20, 11}, 12, dt)}, tol);
}

TEST_P(Gemm16, Conv2dAndAttentionMatchRef) {
  const DType dt = GetParam();
  const double tol = tol16(dt);
  expect_cpu_matches_ref(
      "conv2d", [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 1, 1); },
      {rnd({2, 3, 7, 7}, 1, dt), rnd({5, 3, 3, 3}, 2, dt), rnd({5}, 3, dt)}, tol);
  expect_cpu_matches_ref(
      "conv2d stride 2",
      [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), 2, 0); },
      {rnd({2, 4, 8, 8}, 4, dt), rnd({6, 4, 3, 3}, 5, dt)}, tol);
  expect_cpu_matches_ref(
      "conv1d", [](const std::vector<Tensor>& v) { return conv1d(v[0], v[1], v[2], 2, 1, 2); },
      {rnd({2, 3, 19}, 6, dt), rnd({5, 3, 3}, 7, dt), rnd({5}, 8, dt)}, tol);
  expect_cpu_matches_ref(
      "attention",
      [](const std::vector<Tensor>& v) {
        return scaled_dot_product_attention(v[0], v[1], v[2], true);
      },
      {rnd({2, 2, 9, 8}, 6, dt), rnd({2, 2, 9, 8}, 7, dt), rnd({2, 2, 9, 8}, 8, dt)}, tol);
}

TEST_P(Gemm16, OutputsAndGradientsStay16Bit) {
  const DType dt = GetParam();
  Tensor x = rnd({4, 8}, 1, dt).requires_grad_(), w = rnd({6, 8}, 2, dt).requires_grad_();
  Tensor y = linear(x, w);
  EXPECT_EQ(y.dtype(), dt);
  sum(y).backward();
  EXPECT_EQ(x.grad().dtype(), DType::fp32);  // 16-bit leaves accumulate in fp32
  // The product of two 16-bit values is exact in fp32: a K=1 GEMM rounds once.
  const Tensor a = rnd({5, 1}, 3, dt), b = rnd({1, 7}, 4, dt);
  const Tensor p = matmul(a, b);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 7; ++j) {
      const float exact = static_cast<float>(a.at({i, 0}) * b.at({0, j}));
      const Tensor e = full({1}, exact).to(dt, Round::nearest_even);
      EXPECT_EQ(p.at({i, j}), e.at({0})) << i << "," << j;
    }
}

TEST_P(Gemm16, PointwiseKernelsMatchRef) {
  const DType dt = GetParam();
  const double tol = tol16(dt);
  for (auto [nm, f] : std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>>{
           {"relu", relu},
           {"gelu", gelu},
           {"gelu tanh", +[](const Tensor& t) { return gelu(t, GeluApprox::tanh); }},
           {"tanh", tanh},
           {"sigmoid", sigmoid},
           {"neg", neg},
           {"sin", +[](const Tensor& t) { return sin(t); }},
           {"cos", +[](const Tensor& t) { return cos(t); }}}) {
    expect_cpu_matches_ref(
        nm, [f](const std::vector<Tensor>& v) { return f(v[0]); }, {rnd({37, 129}, 1, dt)}, tol);
  }
  expect_cpu_matches_ref(
      "add", [](const std::vector<Tensor>& v) { return add(v[0], v[1]); },
      {rnd({33, 70}, 2, dt), rnd({33, 70}, 3, dt)}, tol);
  expect_cpu_matches_ref(
      "mul broadcast", [](const std::vector<Tensor>& v) { return mul(v[0], v[1]); },
      {rnd({33, 70}, 4, dt), rnd({70}, 5, dt)}, tol);
  expect_cpu_matches_ref(
      "div", [](const std::vector<Tensor>& v) { return div(v[0], add(mul(v[1], v[1]), 1.0)); },
      {rnd({33, 70}, 6, dt), rnd({33, 70}, 7, dt)}, tol);
  expect_cpu_matches_ref(
      "scalar", [](const std::vector<Tensor>& v) { return rsub(2.0, mul(add(v[0], 0.5), 3.0)); },
      {rnd({1000}, 8, dt)}, tol);
  // 16-bit pointwise ops return their dtype and save 16-bit tensors
  const Tensor x = rnd({64, 64}, 9, dt);
  EXPECT_EQ(gelu(x).dtype(), dt);
  EXPECT_EQ(add(x, x).dtype(), dt);
}

INSTANTIATE_TEST_SUITE_P(Bf16Fp16, Gemm16, ::testing::Values(DType::bf16, DType::fp16),
                         [](const auto& info) { return std::string(name(info.param)); });

// ---- TF32: the inputs of fp32 GEMMs are rounded by the named rounding, products are exact.
float tf32(float v, Round r) {
  return tfloat32::from_float(v, r, Overflow::ieee).to_float();
}

TEST(Tf32, RoundsEveryGemmInputExactly) {
  // A K = 1 GEMM has no accumulation: each output is one product of two tf32 values, exact in
  // fp32, so the result must equal tf32(a) * tf32(b) bit for bit.
  const Tensor a = rnd({9, 1}, 1), b = rnd({1, 11}, 2);
  for (Round r : {Round::nearest_even, Round::nearest_away, Round::toward_zero}) {
    Tensor p;
    {
      Tf32Guard g(true, r);
      p = matmul(a, b);
    }
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < 11; ++j) {
        const float want =
            tf32(static_cast<float>(a.at({i, 0})), r) * tf32(static_cast<float>(b.at({0, j})), r);
        ASSERT_EQ(static_cast<float>(p.at({i, j})), want) << i << "," << j;
      }
  }
  // Off: plain fp32 products.
  const Tensor p = matmul(a, b);
  EXPECT_EQ(static_cast<float>(p.at({0, 0})),
            static_cast<float>(a.at({0, 0})) * static_cast<float>(b.at({0, 0})));
}

TEST(Tf32, TiesRoundAsNamed) {
  // 1 + 2^-11 is halfway between two tf32 values (10 mantissa bits): even -> 1, away -> 1 + 2^-10.
  const float tie = 1.0f + 0x1p-11f;
  const Tensor a = full({1, 1}, tie), b = full({1, 1}, 1.0);
  auto run = [&](Round r) {
    Tf32Guard g(true, r);
    return static_cast<float>(matmul(a, b).at({0, 0}));
  };
  EXPECT_EQ(run(Round::nearest_even), 1.0f);
  EXPECT_EQ(run(Round::nearest_away), 1.0f + 0x1p-10f);
  EXPECT_EQ(run(Round::toward_zero), 1.0f);
  EXPECT_EQ(static_cast<float>(matmul(a, b).at({0, 0})), tie);
}

TEST(Tf32, GlobalSettingLinearConvAndBackward) {
  const Tensor x = rnd({6, 16}, 1), w = rnd({5, 16}, 2);
  const Tensor exact = linear(x, w);
  set_float32_matmul_precision("high");
  EXPECT_TRUE(allow_tf32());
  const Tensor t = linear(x, w);
  set_float32_matmul_precision("highest");
  EXPECT_FALSE(allow_tf32());
  // vs a double reference on tf32-rounded inputs: only the fp32 accumulation order differs
  Tensor xr = x.to(DType::tf32, Round::nearest_even).to(DType::fp64),
         wr = w.to(DType::tf32, Round::nearest_even).to(DType::fp64);
  const Tensor ref = linear(xr, wr);
  EXPECT_LT(normalized_error(t, ref), 1e-6);
  EXPECT_GT(normalized_error(exact, ref), 1e-5);  // and tf32 really changed something
  EXPECT_THROW(set_float32_matmul_precision("fast"), std::invalid_argument);
  EXPECT_THROW(Tf32Guard(true, Round::stochastic), std::invalid_argument);
  // conv: same check
  const Tensor cx = rnd({1, 3, 6, 6}, 3), cw = rnd({4, 3, 3, 3}, 4);
  Tensor ct;
  {
    Tf32Guard g(true);
    ct = conv2d(cx, cw, Tensor(), 1, 1);
  }
  const Tensor cref =
      conv2d(cx.to(DType::tf32, Round::nearest_even).to(DType::fp64),
             cw.to(DType::tf32, Round::nearest_even).to(DType::fp64), Tensor(), 1, 1);
  EXPECT_LT(normalized_error(ct, cref), 1e-6);
  // backward GEMMs use the setting captured at forward time
  Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_();
  Tensor y;
  {
    Tf32Guard g(true);
    y = linear(xl, wl);
  }
  const Tensor gy = rnd({6, 5}, 5);
  y.backward(gy);
  const Tensor gref =
      matmul(gy.to(DType::tf32, Round::nearest_even).to(DType::fp64), wr);  // dx = gy @ w
  EXPECT_LT(normalized_error(xl.grad(), gref), 1e-6);
}

TEST(Tf32, MediumUsesBf16Inputs) {
  const Tensor a = rnd({4, 1}, 1), b = rnd({1, 3}, 2);
  Tensor p;
  {
    Tf32Guard g(MatmulPrecision::medium);
    p = matmul(a, b);
  }
  EXPECT_EQ(p.dtype(), DType::fp32);
  const float want =
      bfloat16::from_float(static_cast<float>(a.at({1, 0})), Round::nearest_even, Overflow::ieee)
          .to_float() *
      bfloat16::from_float(static_cast<float>(b.at({0, 2})), Round::nearest_even, Overflow::ieee)
          .to_float();
  EXPECT_EQ(static_cast<float>(p.at({1, 2})), want);
}

// ---- Saved activations stay 16-bit: the memory held between forward and backward (what autograd
// saved, plus the cast cache) falls, and so does the peak of the whole step.
struct StepMemory {
  int64_t saved = 0;  // requested bytes held after the forward, above what existed before it
  int64_t peak = 0;   // allocator peak over forward + backward, above the same base
};

StepMemory mlp_memory(bool bf16) {
  // The caching allocator serves a request from a cached block up to twice its size and counts
  // the block: start each measurement from an empty cache so fp32's blocks do not inflate bf16's.
  empty_cache();
  Generator gen(7);
  // Batch large enough that activations, not weights, dominate (at batch 128 the fp32 weight
  // gradients of a 784-512-512-10 MLP outweigh its activations, and the bf16 weight copies
  // autocast adds cancel the saving).
  const int64_t B = 1024;
  std::vector<Tensor> ws, bs;
  for (auto [o, i] :
       std::vector<std::pair<int64_t, int64_t>>{{512, 256}, {512, 512}, {512, 512}, {10, 512}}) {
    ws.push_back(mul(randn({o, i}, gen), 0.03).detach().requires_grad_());
    bs.push_back(zeros({o}).requires_grad_());
  }
  const Tensor x = randn({B, 256}, gen);
  const Tensor y = randint(0, 10, Shape{B}, gen);
  // Parameters and their gradients exist before the step (as in training); measure the rest.
  for (size_t i = 0; i < ws.size(); ++i) {
    ws[i].set_grad(zeros_like(ws[i]));
    bs[i].set_grad(zeros_like(bs[i]));
  }
  reset_peak_memory();
  const int64_t base = allocator_stats().allocated_bytes;
  const int64_t base_requested = allocator_stats().requested_bytes;
  StepMemory m;
  {
    Tensor loss;
    {
      amp::Autocast ac(DType::bf16, bf16);
      Tensor h = x;
      for (size_t i = 0; i + 1 < ws.size(); ++i) h = linear(h, ws[i], bs[i], Activation::relu);
      h = gelu(h);  // a pointwise op saving its input
      loss = cross_entropy(linear(h, ws.back(), bs.back()), y);
    }
    // Requested bytes: the tensors themselves (the caching allocator may serve a 16-bit tensor
    // from a larger block an fp32 temporary left behind).
    m.saved = allocator_stats().requested_bytes - base_requested;
    loss.backward();
  }
  m.peak = allocator_stats().peak_allocated_bytes - base;
  return m;
}

TEST(AmpMemory, Bf16MlpStepUsesLessMemory) {
  const StepMemory fp32 = mlp_memory(false), bf16 = mlp_memory(true);
  RecordProperty("fp32_saved", std::to_string(fp32.saved));
  RecordProperty("bf16_saved", std::to_string(bf16.saved));
  RecordProperty("fp32_peak", std::to_string(fp32.peak));
  RecordProperty("bf16_peak", std::to_string(bf16.peak));
  // Saved activations halve (8.4 MB -> 4.2 MB here); the bf16 weight copies (1.3 MB) and the bf16
  // copy of the input (0.5 MB) are added: 0.69x.
  EXPECT_LT(static_cast<double>(bf16.saved), 0.75 * static_cast<double>(fp32.saved))
      << fp32.saved << " vs " << bf16.saved;
  // The peak adds the backward's temporaries; the emulated path (no bf16 dot products, e.g.
  // ONEDNN_MAX_CPU_ISA=AVX2) also holds fp32 copies of GEMM operands for a moment.
  if (cpu::native_bf16()) {
    EXPECT_LT(static_cast<double>(bf16.peak), 0.8 * static_cast<double>(fp32.peak))
        << fp32.peak << " vs " << bf16.peak;
  }
}

}  // namespace
}  // namespace mixp::testing
