// The last `mixp bench gemm` result of this machine, saved so that `mixp doctor` can cite what was
// measured here instead of what the hardware is supposed to do ("bf16 GEMM measured 2.0x fp32 on
// this machine (mixp bench gemm, 2025-11-21)").
//
// File: $MIXP_CACHE_DIR/bench-gemm.json, else $XDG_CACHE_HOME/mixp/bench-gemm.json, else
// ~/.cache/mixp/bench-gemm.json; written atomically (io/atomic_file.h), the folder created when
// missing. Content: {"format": "mixp-bench-gemm", "version": 1, "date": "2025-11-21T10:31:07Z",
// "cpu": brand string, "threads", "n", "repeat", "results": [{"dtype", "gflops", "peak_gflops",
// "fraction_of_peak", "speedup_vs_fp32" (or null), "emulated", "path", "implementation"}]}.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "mixp/bench/gemm_bench.h"

namespace mixp::bench {

struct SavedGemmResult {
  std::string dtype;  // registry name
  double gflops = 0, peak_gflops = 0, fraction_of_peak = 0;
  std::optional<double> speedup_vs_fp32;
  bool emulated = false;
  std::string path, implementation;
};

struct SavedGemmBench {
  std::string date;  // UTC, ISO 8601
  std::string cpu;
  int threads = 0;
  int64_t n = 0;
  int repeat = 0;
  std::vector<SavedGemmResult> results;

  // The result of `dtype`, or nullptr.
  const SavedGemmResult* find(std::string_view dtype) const;
  // The date part, "2025-11-21".
  std::string day() const;
};

// Where the record lives (see the top of this file). Empty when no home or cache folder is known.
std::filesystem::path gemm_bench_record_path();

// The record of a run (date = now, cpu = this machine's brand string).
SavedGemmBench make_gemm_bench_record(const std::vector<GemmBenchResult>& results,
                                      const GemmBenchConfig& config, int threads);
std::string gemm_bench_record_to_json(const SavedGemmBench& record);
// Throws std::invalid_argument naming what is wrong.
SavedGemmBench gemm_bench_record_from_json(const std::string& json);

// Writes the record atomically to `path` (default gemm_bench_record_path()), creating its folder.
// Throws mixp::IoError when it cannot.
void save_gemm_bench_record(const SavedGemmBench& record, std::filesystem::path path = {});
// The saved record, or nullopt when there is none, it cannot be read, or it was measured on
// another CPU (a home folder shared between machines).
std::optional<SavedGemmBench> load_gemm_bench_record(std::filesystem::path path = {});

// What the record says about a dtype against fp32, for advice, e.g.
// "bf16 GEMM measured 2.0x fp32 on this machine (mixp bench gemm, 2025-11-21)". nullopt when the
// record lacks the dtype or fp32.
std::optional<std::string> cite_gemm_speedup(const SavedGemmBench& record, std::string_view dtype);

// What `mixp doctor` says about measurements, for the precision it recommends on the CPU:
// with a record, the citation of that precision against fp32 (for an fp32 recommendation, of bf16,
// which is what the advice turned down) and every other measured ratio; without one, how to
// measure. One sentence per entry.
std::vector<std::string> gemm_evidence(const std::optional<SavedGemmBench>& record,
                                       std::string_view recommended);

}  // namespace mixp::bench
