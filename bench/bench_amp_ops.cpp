// AMP op paths: one training step (forward under autocast + loss, backward, plain SGD update) of
// the built-in mlp (784-512-512-10, batch 128) and gpt (4 layers, width 256, 4 heads, context 128,
// batch 16) in fp32, bf16 autocast and fp16 autocast, same shapes; plus fp32 with TF32 emulation.
// Counters: peak_MB is the allocator's peak during the step above what existed before it
// (parameters, their gradients, inputs).
//   build/release/mixp_bench_amp_ops --benchmark_filter=Mlp
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "mixp/mixp.h"
#include "mixp/nn/models.h"

namespace {
using namespace mixp;

enum Mode : int64_t { kFp32 = 0, kBf16 = 1, kFp16 = 2, kTf32 = 3 };
const char* mode_name(int64_t m) {
  switch (m) {
    case kFp32:
      return "fp32";
    case kBf16:
      return "bf16";
    case kFp16:
      return "fp16";
    default:
      return "tf32";
  }
}

void sgd(const std::vector<Tensor>& params, double lr) {
  NoGradGuard ng;
  for (const Tensor& p : params) {
    Tensor w = p;
    if (!w.grad().defined()) continue;
    w.add_(w.grad(), -lr);
    w.grad().zero_();
  }
}

template <class Fwd>
void run_steps(benchmark::State& st, nn::Module& model, Fwd&& loss_of) {
  const int64_t mode = st.range(0);
  const std::vector<Tensor> params = model.parameters();
  auto step = [&] {
    Tensor loss;
    {
      amp::Autocast ac(mode == kFp16 ? DType::fp16 : DType::bf16, mode == kBf16 || mode == kFp16);
      Tf32Guard tf(mode == kTf32);
      loss = loss_of();
    }
    loss.backward();
    sgd(params, 1e-3);
  };
  step();  // warm-up: primitives, allocator blocks, gradient buffers
  step();
  empty_cache();
  step();
  reset_peak_memory();
  const int64_t base = allocator_stats().allocated_bytes;
  step();
  const double peak = static_cast<double>(allocator_stats().peak_allocated_bytes - base);
  for (auto _ : st) step();
  st.counters["peak_MB"] = peak / 1e6;
  st.SetLabel(mode_name(mode));
}

void BM_AmpMlpStep(benchmark::State& st) {
  auto model = nn::make_model(nn::ModelConfig{.name = "mlp", .seed = 1});
  Generator g(2);
  const Tensor x = randn({128, 784}, g), y = randint(0, 10, {128}, g);
  run_steps(st, *model, [&] { return cross_entropy(model->forward(x), y); });
}
// On a shared machine the minimum over repetitions is the robust statistic
// (--benchmark_repetitions=N prints it as _min).
double min_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// Each precision, timed in wall-clock milliseconds with the minimum over repetitions.
void every_precision(benchmark::internal::Benchmark* b) {
  b->Arg(kFp32)
      ->Arg(kBf16)
      ->Arg(kFp16)
      ->Arg(kTf32)
      ->Unit(benchmark::kMillisecond)
      ->MeasureProcessCPUTime()
      ->UseRealTime()
      ->ComputeStatistics("min", min_of);
}

BENCHMARK(BM_AmpMlpStep)->Apply(every_precision);

void BM_AmpGptStep(benchmark::State& st) {
  auto model = nn::make_model(nn::ModelConfig{.name = "gpt", .vocab = 96, .seed = 1});
  Generator g(2);
  const Tensor idx = randint(0, 96, {16, 128}, g), tgt = randint(0, 96, {16 * 128}, g);
  run_steps(st, *model, [&] {
    return cross_entropy(model->forward(idx).reshape({16 * 128, 96}), tgt);
  });
}
BENCHMARK(BM_AmpGptStep)->Apply(every_precision)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
