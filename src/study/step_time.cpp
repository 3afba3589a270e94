// The step-time estimate from measured GEMM throughput (study/step_time.h).
#include "mixp/study/step_time.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/bench/bench_record.h"
#include "mixp/bench/gemm_bench.h"

namespace mixp::study {

DType gemm_bench_row_for(DType compute) {
  switch (compute) {
    case DType::bf16:
      return DType::bf16;
    case DType::fp16:
      return DType::fp16;
    case DType::fp8_e4m3:
      return DType::fp8_e4m3;
    case DType::fp8_e5m2:
      return DType::fp8_e5m2;
    default:
      return DType::fp32;
  }
}

double non_gemm_factor(DType compute) {
  return compute == DType::fp32 || compute == DType::tf32 || compute == DType::fp64
             ? kNonGemmFactorFp32
             : kNonGemmFactor16;
}

GemmThroughput gemm_throughput(DType compute, bool use_record, int threads) {
  GemmThroughput t;
  t.bench_dtype = gemm_bench_row_for(compute);
  const std::string row(name(t.bench_dtype));
  if (use_record) {
    if (const auto rec = bench::load_gemm_bench_record()) {
      if (const auto* r = rec->find(row); r != nullptr && r->gflops > 0) {
        t.gflops = r->gflops;
        t.source = fmt::format("mixp bench gemm record, {} ({} threads)", rec->day(), rec->threads);
        return t;
      }
    }
  }
  bench::GemmBenchConfig cfg;
  cfg.n = 2048;
  cfg.dtypes = {t.bench_dtype};
  cfg.threads = threads;
  cfg.repeat = 3;
  cfg.peak_seconds = 0.01;
  const auto results = bench::run_gemm_bench(cfg);
  if (results.empty() || results.front().gflops <= 0) {
    throw std::runtime_error(fmt::format("measuring the {} GEMM throughput gave no result", row));
  }
  t.gflops = results.front().gflops;
  t.source = fmt::format("measured now ({} GEMM, n = 2048, best of 3)", row);
  return t;
}

double estimate_step_ms(double gemm_flops, const GemmThroughput& t, DType compute) {
  if (t.gflops <= 0) return 0;
  return gemm_flops / (t.gflops * 1e9) * 1e3 * non_gemm_factor(compute);
}

}  // namespace mixp::study
