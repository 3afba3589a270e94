// test-backend-ops --perf: the per-op benchmark. Walks the op codes of the pointwise and
// reduction kernels (mixp/backend/op_codes.h) plus softmax and layer_norm, and times each kernel
// call directly on a backend (cpu by default; MIXP_BACKEND=ref for the oracle) over rows of
// [rows, n] fp32 or bf16, reporting bytes_per_second (GB/s: bytes read + written once) and
// items_per_second (elements). The correctness side is tests/backend/test_backend_ops.cpp.
//   build/release/mixp_bench_backend_ops --benchmark_filter='unary/gelu'
//   build/release/mixp_bench_backend_ops --benchmark_min_time=0.05   # all, quickly
#include <benchmark/benchmark.h>

#include <string>
#include <utility>

#include "mixp/backend/backend.h"
#include "mixp/tensor/factories.h"

namespace {
using namespace mixp;

constexpr int64_t kRows = 256, kCols = 4096;  // 1M elements: 4 MiB in fp32, past L2

Tensor input(DType dt, double lo, double hi, uint64_t seed) {
  Generator g(seed);
  return uniform({kRows, kCols}, lo, hi, g).to(dt, Round::nearest_even);
}
double bytes(DType dt, int tensors) {
  return double(Tensor::empty({kRows, kCols}, {.dtype = dt}).nbytes()) * tensors;
}

// Times `call` and reports `tensors` full tensors of traffic per call.
template <class F>
void run(benchmark::State& st, DType dt, int tensors, F&& call) {
  for (auto _ : st) {
    call();
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations() * bytes(dt, tensors)));
  st.SetItemsProcessed(st.iterations() * kRows * kCols);
}

// Rates over wall time: the kernels run on all OpenMP threads, the main thread's CPU time
// would overstate them.
template <class F>
void reg(const std::string& name, F&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))->UseRealTime();
}

void register_all() {
  for (DType dt : {DType::fp32, DType::bf16}) {
    const std::string d = std::string(name(dt));
    for (int i = 0; i < kNumUnaryOps; ++i) {
      const auto op = static_cast<UnaryOp>(i);
      const bool pos = op == UnaryOp::log || op == UnaryOp::sqrt;
      reg(("unary/" + std::string(to_string(op)) + "/" + d).c_str(),
                                   [=](benchmark::State& st) {
                                     Tensor x = input(dt, pos ? 0.1 : -4, 4, 1), y = x.clone();
                                     run(st, dt, 2, [&] { backend().unary(op, y, x); });
                                   });
      reg(
          ("unary_backward/" + std::string(to_string(op)) + "/" + d).c_str(),
          [=](benchmark::State& st) {
            Tensor x = input(dt, pos ? 0.1 : -4, 4, 1), y = x.clone(), g = input(dt, -1, 1, 2);
            Tensor gi = x.clone();
            backend().unary(op, y, x);
            const UnaryReads r = unary_backward_reads(op);
            const Tensor xs = r == UnaryReads::src ? x : Tensor();
            const Tensor ys = r == UnaryReads::dst ? y : Tensor();
            run(st, dt, r == UnaryReads::none ? 2 : 3,
                [&] { backend().unary_backward(op, gi, g, xs, ys); });
          });
    }
    for (int i = 0; i < kNumBinaryOps; ++i) {
      const auto op = static_cast<BinaryOp>(i);
      reg(("binary/" + std::string(to_string(op)) + "/" + d).c_str(),
                                   [=](benchmark::State& st) {
                                     Tensor a = input(dt, -2, 2, 1), b = input(dt, 0.5, 2, 2);
                                     Tensor c = a.clone();
                                     run(st, dt, 3, [&] { backend().binary(op, c, a, b); });
                                   });
    }
    for (int i = 0; i < kNumScalarOps; ++i) {
      const auto op = static_cast<ScalarOp>(i);
      reg(("scalar/" + std::string(to_string(op)) + "/" + d).c_str(),
                                   [=](benchmark::State& st) {
                                     Tensor x = input(dt, 0.25, 2, 1), y = x.clone();
                                     run(st, dt, 2, [&] { backend().scalar(op, y, x, 1.5); });
                                   });
    }
    for (int i = 0; i < kNumReduceOps; ++i) {
      const auto op = static_cast<ReduceOp>(i);
      reg(("reduce/" + std::string(to_string(op)) + "/" + d).c_str(),
                                   [=](benchmark::State& st) {
                                     Tensor x = input(dt, -2, 2, 1);
                                     Tensor y = Tensor::empty({kRows, 1}, {.dtype = dt});
                                     run(st, dt, 1, [&] { backend().reduce(op, y, x); });
                                   });
    }
  }
  // The row kernels compute in fp32 (their contract: fp32 or fp64 in and out).
  for (bool log : {false, true}) {
    reg(log ? "softmax/log/fp32" : "softmax//fp32",
                                 [=](benchmark::State& st) {
                                   Tensor x = input(DType::fp32, -4, 4, 1), y = x.clone();
                                   run(st, DType::fp32, 2,
                                       [&] { backend().softmax(y, x, 1, log); });
                                 });
  }
  reg("layer_norm//fp32", [](benchmark::State& st) {
    Tensor x = input(DType::fp32, -3, 3, 1), y = x.clone();
    Tensor w = ones({kCols}), b = zeros({kCols});
    Tensor mean = Tensor::empty({kRows}), rstd = Tensor::empty({kRows});
    run(st, DType::fp32, 2, [&] { backend().layer_norm(y, mean, rstd, x, w, b, 1e-5); });
  });
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
