// `mixp bench gemm`: GEMM throughput per dtype against the measured instruction peak
// (docs/architecture.md 4.2). The measuring is mixp::bench::run_gemm_bench
// (include/mixp/bench/gemm_bench.h); with --device cuda, mixp::bench::run_cuda_gemm_bench
// (include/mixp/bench/cuda_gemm_bench.h: against the GPU's datasheet peak, docs/cuda.md); this
// file parses and prints only.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "command.h"
#include "flag_range.h"
#include "device_flag.h"
#include "mixp/backend/backend.h"
#include "mixp/format/cpu_features.h"
#include "mixp/bench/bench_record.h"
#include "mixp/bench/cuda_gemm_bench.h"
#include "mixp/bench/gemm_bench.h"

namespace mixp::cli {
namespace {

using Json = nlohmann::ordered_json;

struct GemmOptions {
  int64_t n = 2048;
  std::string dtypes = "all";
  int threads = 0;
  int repeat = 5;
  bool json = false;
  std::string device = "cpu";
  int iters = 10;
};

// GFLOP/s for floats, GOP/s for int8.
const char* unit(DType d) {
  return d == DType::int8 ? "GOP/s" : "GFLOP/s";
}

Json result_json(const bench::GemmBenchResult& r) {
  Json j;
  j["dtype"] = r.format;
  j["n"] = r.n;
  j["gflops"] = r.gflops;
  j["peak_gflops"] = r.peak_gflops;
  j["fraction_of_peak"] = r.fraction_of_peak;
  j["speedup_vs_fp32"] = r.speedup_vs_fp32 ? Json(*r.speedup_vs_fp32) : Json(nullptr);
  j["speedup_vs_int8"] = r.speedup_vs_int8 ? Json(*r.speedup_vs_int8) : Json(nullptr);
  j["path"] = r.path;
  j["implementation"] = r.implementation;
  j["emulated"] = r.emulated;
  j["peak_instruction"] = r.peak.instruction;
  j["peak_native"] = r.peak.native;
  j["peak_tiles"] = r.peak.tiles;
  j["unit"] = unit(r.dtype);
  j["threads"] = r.threads;
  j["repeat"] = r.repeat;
  j["seconds"] = r.seconds;
  return j;
}

void print_table(const std::vector<bench::GemmBenchResult>& rs, const bench::GemmBenchConfig& cfg,
                 int threads) {
  std::cout << fmt::format("GEMM {0} x {0} x {0}, {1} thread{2}, best of {3} ({4})\n", cfg.n,
                           threads, threads == 1 ? "" : "s", cfg.repeat, cpu_features().model);
  // The path texts are long (the fp8 ones describe the whole emulation): they go under the
  // table, one line per dtype, so the table fits a terminal.
  std::vector<std::vector<std::string>> rows = {
      {"dtype", "GFLOP/s", "peak", "fraction", "vs fp32", "vs int8", "kernel / peak instruction"}};
  for (const auto& r : rs) {
    rows.push_back(
        {r.format, fmt::format("{:.1f}", r.gflops),
         fmt::format("{:.1f}", r.peak_gflops), fmt::format("{:.1f}%", 100.0 * r.fraction_of_peak),
         r.speedup_vs_fp32 ? fmt::format("{:.2f}x", *r.speedup_vs_fp32) : std::string("-"),
         r.speedup_vs_int8 ? fmt::format("{:.2f}x", *r.speedup_vs_int8) : std::string("-"),
         r.implementation + (bench::runs_on_amx_tiles(r.implementation) ? " (AMX tiles)" : "") +
             " / " + r.peak.instruction + (r.peak.native ? "" : " (no native instruction)")});
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t i = 0; i < row.size(); ++i) {
      // Numbers right-aligned, text left-aligned; the last column is not padded.
      const bool number = i >= 1 && i <= 5;
      if (i + 1 == row.size())
        line += " " + row[i];
      else
        line += number ? " " + std::string(w[i] - row[i].size(), ' ') + row[i] + " "
                       : " " + row[i] + std::string(w[i] - row[i].size() + 1, ' ');
    }
    std::cout << line << "\n";
  }
  std::cout << "path (what is timed):\n";
  for (const auto& r : rs) {
    std::cout << fmt::format("  {:<{}}  {}\n", r.format, w[0], r.path);
  }
  std::cout << "GFLOP/s is GOP/s for int8 and the rows below 8 bits (int4, int2, binary: peak "
               "and fraction against the int8 instruction). peak: the measured throughput of the instruction the "
               "path runs on, on the same threads (the AMX tile peak, TDPBF16PS / TDPBSSD, "
               "where oneDNN runs the GEMM on tiles).\n";
}

// Keeps the result for `mixp doctor`, which cites it (bench/bench_record.h). Only runs that
// include fp32 are kept (doctor cites ratios to fp32), and only for n >= 1024 (smaller products
// measure call overhead more than throughput). Never fails the command.
void save_record(std::vector<bench::GemmBenchResult> rs, const bench::GemmBenchConfig& cfg,
                 int threads, bool json) {
  // doctor cites dtypes; the rows below 8 bits are not kept.
  std::erase_if(rs, [](const bench::GemmBenchResult& r) { return r.lowbit; });
  bool has_fp32 = false;
  for (const auto& r : rs) has_fp32 = has_fp32 || r.dtype == DType::fp32;
  if (!has_fp32 || cfg.n < 1024) return;
  try {
    const auto path = bench::gemm_bench_record_path();
    bench::save_gemm_bench_record(bench::make_gemm_bench_record(rs, cfg, threads), path);
    if (!json) std::cout << "Saved to " << path.string() << "; `mixp doctor` cites it.\n";
  } catch (const std::exception& e) {
    std::cerr << "mixp bench gemm: warning: the result was not saved for mixp doctor: " << e.what()
              << "\n";
  }
}

// --device cuda[:N]: the CUDA backend's GEMMs (cuBLASLt) against the GPU's datasheet peak.
void run_gemm_cuda(const GemmOptions& o, const Device& dev) {
  if (o.n < 16) throw UsageError("--n must be at least 16 on cuda, got " + std::to_string(o.n));
  if (o.dtypes != "all")
    throw UsageError("--dtypes: on cuda every row is measured (fp32, tf32, bf16, fp16, fp8, int8); "
                     "leave --dtypes out");
  const bench::CudaGemmReport r = bench::run_cuda_gemm_bench(o.n, o.repeat, o.iters, dev.index);
  if (o.json) {
    std::cout << bench::cuda_gemm_report_json(r) << "\n";
  } else {
    std::cout << bench::cuda_gemm_report_text(r);
  }
}

void run_gemm(const GemmOptions& o) {
  const Device dev = parse_device_flag(o.device);
  if (o.repeat < 1)
    throw UsageError("--repeat must be at least 1, got " + std::to_string(o.repeat));
  if (o.iters < 1) throw UsageError("--iters must be at least 1, got " + std::to_string(o.iters));
  if (dev.kind == DeviceKind::cuda) return run_gemm_cuda(o, dev);
  if (o.n < 1) throw UsageError("--n must be at least 1, got " + std::to_string(o.n));
  if (o.repeat < 1)
    throw UsageError("--repeat must be at least 1, got " + std::to_string(o.repeat));
  if (o.threads < 0)
    throw UsageError("--threads must be at least 1, got " + std::to_string(o.threads));
  bench::GemmBenchConfig cfg;
  cfg.n = o.n;
  cfg.repeat = o.repeat;
  cfg.threads = o.threads;
  try {
    cfg.dtypes = bench::parse_gemm_bench_list(o.dtypes, &cfg.lowbit);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--dtypes: ") + e.what());
  }
  const int threads = o.threads > 0 ? o.threads : get_num_threads();
  const std::vector<bench::GemmBenchResult> rs = bench::run_gemm_bench(cfg);
  if (o.json) {
    Json results = Json::array();
    for (const auto& r : rs) results.push_back(result_json(r));
    Json j;
    j["results"] = std::move(results);
    j["n"] = o.n;
    j["threads"] = threads;
    j["repeat"] = o.repeat;
    j["cpu"] = cpu_features().model;
    std::cout << j.dump(2) << "\n";
  } else {
    print_table(rs, cfg, threads);
  }
  save_record(rs, cfg, threads, o.json);
}

void setup(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure throughput: GEMM per dtype vs the measured instruction peak");
  bench->require_subcommand(1);
  auto o = std::make_shared<GemmOptions>();
  CLI::App* gemm = bench->add_subcommand("gemm",
                                         "n x n x n GEMM throughput of mixp's kernels per dtype, "
                                         "as a fraction of the measured peak of the instruction "
                                         "each path runs on (vfmadd231ps / vdpbf16ps / vpdpbusd)");
  gemm->add_option("--n", o->n, "Matrix size n (n x n times n x n)")->capture_default_str();
  gemm->add_option("--dtypes", o->dtypes,
                   "Comma-separated dtypes: fp32, bf16, int8 (uint8 x int8 -> int32), fp16 "
                   "(emulated on fp32), fp8_e4m3, fp8_e5m2 (emulated on bf16), or all (every one "
                   "of them); below 8 bits: int4, int2 (packed B unpacked to int8 per call), "
                   "binary (XNOR + popcount), or lowbit (the three; not part of all)")
      ->capture_default_str();
  gemm->add_option(
      "--threads", o->threads,
      "Threads (default: all the OpenMP runtime gives, i.e. OMP_NUM_THREADS or the cores)");
  gemm->add_option("--repeat", o->repeat,
                   "Timed runs per dtype after one warm-up; the best is reported")
      ->capture_default_str();
  gemm->add_option("--device", o->device,
                   std::string(kDeviceHelp) +
                       "; on cuda: cuBLASLt fp32, tf32, bf16, fp16, fp8 and int8 GEMMs against "
                       "the GPU's datasheet dense peak")
      ->capture_default_str();
  gemm->add_option("--iters", o->iters, "cuda: GEMMs per timed run (between two synchronizations)")
      ->capture_default_str();
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  shared_flag_ranges(*gemm);
  int_range(gemm->get_option("--n"), 1, 32768);
  int_range(gemm->get_option("--repeat"), 1, 10000);
  int_range(gemm->get_option("--iters"), 1, 1'000'000);
  gemm->add_flag("--json", o->json,
                 "Print one JSON object: {\"results\": [{\"dtype\", \"n\", \"gflops\", "
                 "\"peak_gflops\", \"fraction_of_peak\", ...}]}");
  gemm->footer(
      "Examples:\n"
      "  mixp bench gemm --n 2048\n"
      "  mixp bench gemm --n 2048 --dtypes int8,int4,int2,binary   # the rows below 8 bits\n"
      "  mixp bench gemm --device cuda --n 8192                    # a GPU (docs/cuda.md)\n");
  gemm->callback([o] { run_gemm(*o); });
}

const RegisterCommand reg(40, setup);

}  // namespace
}  // namespace mixp::cli
