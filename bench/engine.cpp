// Engine benchmarks: mixp::matmul vs oneDNN's matmul called directly (the ratio
// docs/architecture.md 7 asks for), and forward+backward of the three target models' building
// blocks.
//   build/release/mixp_engine --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "mixp/mixp.h"

namespace {
using namespace mixp;

void BM_MixpMatmul(benchmark::State& st) {
  const int64_t n = st.range(0);
  Generator g(1);
  const Tensor a = randn({n, n}, g), b = randn({n, n}, g);
  NoGradGuard ng;
  for (auto _ : st) benchmark::DoNotOptimize(matmul(a, b).data_ptr());
  st.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MixpMatmul)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

void BM_OnednnMatmul(benchmark::State& st) {
  const int64_t n = st.range(0);
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  memory::desc md({n, n}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), eng);
  dnnl::matmul prim(pd);
  Generator g(1);
  const Tensor a = randn({n, n}, g), b = randn({n, n}, g);
  Tensor c = empty({n, n});
  memory ma(md, eng, a.data_ptr()), mb(md, eng, b.data_ptr()), mc(md, eng, c.data_ptr());
  for (auto _ : st) {
    prim.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    s.wait();
  }
  st.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_OnednnMatmul)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// 784-512-512-10 MLP, batch 128: forward + backward (no optimizer).
void BM_MlpStep(benchmark::State& st) {
  Generator g(1);
  Tensor w1 = normal({512, 784}, 0, 0.03, g).requires_grad_(), b1 = zeros({512}).requires_grad_();
  Tensor w2 = normal({512, 512}, 0, 0.04, g).requires_grad_(), b2 = zeros({512}).requires_grad_();
  Tensor w3 = normal({10, 512}, 0, 0.04, g).requires_grad_(), b3 = zeros({10}).requires_grad_();
  const Tensor x = randn({128, 784}, g), y = randint(0, 10, {128}, g);
  for (auto _ : st) {
    Tensor h = linear(x, w1, b1, Activation::relu);
    h = linear(h, w2, b2, Activation::relu);
    Tensor loss = cross_entropy(linear(h, w3, b3), y);
    loss.backward();
  }
}
BENCHMARK(BM_MlpStep)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

// The small CNN of docs/architecture.md 5b, batch 128: forward + backward.
void BM_CnnStep(benchmark::State& st) {
  Generator g(1);
  Tensor c1 = normal({32, 1, 3, 3}, 0, 0.3, g).requires_grad_(), cb1 = zeros({32}).requires_grad_();
  Tensor c2 = normal({64, 32, 3, 3}, 0, 0.06, g).requires_grad_(),
         cb2 = zeros({64}).requires_grad_();
  Tensor g1 = ones({32}).requires_grad_(), be1 = zeros({32}).requires_grad_(), rm1 = zeros({32}),
         rv1 = ones({32});
  Tensor g2 = ones({64}).requires_grad_(), be2 = zeros({64}).requires_grad_(), rm2 = zeros({64}),
         rv2 = ones({64});
  Tensor w1 = normal({128, 3136}, 0, 0.02, g).requires_grad_(), b1 = zeros({128}).requires_grad_();
  Tensor w2 = normal({10, 128}, 0, 0.09, g).requires_grad_(), b2 = zeros({10}).requires_grad_();
  const Tensor x = randn({128, 1, 28, 28}, g), y = randint(0, 10, {128}, g);
  for (auto _ : st) {
    Tensor h = max_pool2d(relu(batch_norm(conv2d(x, c1, cb1, 1, 1), rm1, rv1, g1, be1, true)), 2);
    h = max_pool2d(relu(batch_norm(conv2d(h, c2, cb2, 1, 1), rm2, rv2, g2, be2, true)), 2);
    h = linear(h.flatten(1), w1, b1, Activation::relu);
    cross_entropy(linear(h, w2, b2), y).backward();
  }
}
BENCHMARK(BM_CnnStep)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

// One pre-LN GPT block (width 256, 4 heads, context 128, MLP 1024), batch 16: forward + backward.
void BM_GptBlock(benchmark::State& st) {
  const int64_t B = 16, T = 128, C = 256, H = 4;
  Generator g(1);
  Tensor ln1w = ones({C}).requires_grad_(), ln1b = zeros({C}).requires_grad_();
  Tensor ln2w = ones({C}).requires_grad_(), ln2b = zeros({C}).requires_grad_();
  Tensor wqkv = normal({3 * C, C}, 0, 0.02, g).requires_grad_(),
         bqkv = zeros({3 * C}).requires_grad_();
  Tensor wo = normal({C, C}, 0, 0.02, g).requires_grad_(), bo = zeros({C}).requires_grad_();
  Tensor wfc = normal({4 * C, C}, 0, 0.02, g).requires_grad_(),
         bfc = zeros({4 * C}).requires_grad_();
  Tensor wpr = normal({C, 4 * C}, 0, 0.02, g).requires_grad_(), bpr = zeros({C}).requires_grad_();
  const Tensor x0 = randn({B, T, C}, g);
  for (auto _ : st) {
    Tensor x = x0.detach().requires_grad_();
    Tensor qkv = linear(layer_norm(x, {C}, ln1w, ln1b), wqkv, bqkv);
    auto parts = chunk(qkv, 3, 2);
    auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, C / H}).transpose(1, 2); };
    Tensor a =
        scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true);
    a = a.transpose(1, 2).reshape({B, T, C});
    x = add(x, linear(a, wo, bo));
    x = add(x, linear(gelu(linear(layer_norm(x, {C}, ln2w, ln2b), wfc, bfc), GeluApprox::tanh), wpr,
                      bpr));
    mean(x).backward();
  }
}
BENCHMARK(BM_GptBlock)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

// Per-op overhead: a tiny add with and without recording.
void BM_TinyAdd(benchmark::State& st) {
  Tensor a = ones({4}).requires_grad_(st.range(0) != 0), b = ones({4});
  for (auto _ : st) benchmark::DoNotOptimize(add(a, b).data_ptr());
}
BENCHMARK(BM_TinyAdd)->Arg(0)->Arg(1);

// Forward + backward of a tiny chain: engine overhead per node.
void BM_TinyChainBackward(benchmark::State& st) {
  Tensor a = ones({4}).requires_grad_();
  for (auto _ : st) {
    Tensor y = a;
    for (int i = 0; i < 10; ++i) y = mul(y, 1.01);
    sum(y).backward();
  }
}
BENCHMARK(BM_TinyChainBackward);

}  // namespace

BENCHMARK_MAIN();
