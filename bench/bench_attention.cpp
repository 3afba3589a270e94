// The cpu backend's attention kernel (src/backend/cpu/cpu_attention.cpp) at GPT-2 124M's shapes
// (12 heads of 64, T = 256) and batch 8: forward, and forward + backward, bf16 and fp32, causal.
// GFLOP/s counts the GEMMs on the causal half of the square (2 GEMMs forward, 5 backward:
// S recomputed, dP, dV, dQ, dK), as FlashAttention's papers count.
//   build/release/mixp_bench_attention --benchmark_filter=Bf16
#include <benchmark/benchmark.h>

#include "mixp/mixp.h"

namespace {
using namespace mixp;

void run(benchmark::State& st, DType dt, bool backward) {
  const int64_t B = st.range(0), H = 12, T = st.range(1), D = 64;
  Generator gen(1);
  auto make = [&] {
    Tensor t = randn({B, H, T, D}, gen, {.dtype = dt});
    if (backward) t.requires_grad_(true);
    return t;
  };
  const Tensor q = make(), k = make(), v = make();
  const Tensor g = randn({B, H, T, D}, gen, {.dtype = dt});
  for (auto _ : st) {
    Tensor y = scaled_dot_product_attention(q, k, v, true);
    if (backward) y.backward(g);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  const double gemm_flops = 2.0 * static_cast<double>(B * H) * T * T * D / 2.0;
  st.counters["GFLOP/s"] = benchmark::Counter(gemm_flops * (backward ? 7 : 2) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void Bf16Forward(benchmark::State& st) {
  run(st, DType::bf16, false);
}
void Bf16ForwardBackward(benchmark::State& st) {
  run(st, DType::bf16, true);
}
void Fp32Forward(benchmark::State& st) {
  run(st, DType::fp32, false);
}
void Fp32ForwardBackward(benchmark::State& st) {
  run(st, DType::fp32, true);
}
}  // namespace

BENCHMARK(Bf16Forward)->Args({8, 256})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Bf16ForwardBackward)->Args({8, 256})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Fp32Forward)->Args({8, 256})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Fp32ForwardBackward)->Args({8, 256})->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
