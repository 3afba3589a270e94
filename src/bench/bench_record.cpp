#include "mixp/bench/bench_record.h"

#include <fmt/format.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "mixp/format/cpu_features.h"
#include "mixp/io/atomic_file.h"

namespace mixp::bench {

namespace {
constexpr const char* kFormat = "mixp-bench-gemm";
constexpr int kVersion = 1;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string this_cpu() {
  const CpuFeatures& f = cpu_features();
  return f.model.empty() ? f.vendor : f.model;
}
}  // namespace

const SavedGemmResult* SavedGemmBench::find(std::string_view dtype) const {
  for (const auto& r : results) {
    if (r.dtype == dtype) return &r;
  }
  return nullptr;
}

std::string SavedGemmBench::day() const {
  return date.substr(0, std::min<size_t>(date.size(), 10));
}

std::filesystem::path gemm_bench_record_path() {
  const char* own = std::getenv("MIXP_CACHE_DIR");
  if (own && *own) return std::filesystem::path(own) / "bench-gemm.json";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "mixp" / "bench-gemm.json";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "mixp" / "bench-gemm.json";
  return {};
}

SavedGemmBench make_gemm_bench_record(const std::vector<GemmBenchResult>& results,
                                      const GemmBenchConfig& config, int threads) {
  SavedGemmBench s;
  s.date = utc_now();
  s.cpu = this_cpu();
  s.threads = threads;
  s.n = config.n;
  s.repeat = config.repeat;
  for (const auto& r : results) {
    s.results.push_back({.dtype = std::string(name(r.dtype)),
                         .gflops = r.gflops,
                         .peak_gflops = r.peak_gflops,
                         .fraction_of_peak = r.fraction_of_peak,
                         .speedup_vs_fp32 = r.speedup_vs_fp32,
                         .emulated = r.emulated,
                         .path = r.path,
                         .implementation = r.implementation});
  }
  return s;
}

std::string gemm_bench_record_to_json(const SavedGemmBench& s) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["date"] = s.date;
  j["cpu"] = s.cpu;
  j["threads"] = s.threads;
  j["n"] = s.n;
  j["repeat"] = s.repeat;
  nlohmann::ordered_json rs = nlohmann::ordered_json::array();
  for (const auto& r : s.results) {
    rs.push_back({{"dtype", r.dtype},
                  {"gflops", r.gflops},
                  {"peak_gflops", r.peak_gflops},
                  {"fraction_of_peak", r.fraction_of_peak},
                  {"speedup_vs_fp32", r.speedup_vs_fp32 ? nlohmann::ordered_json(*r.speedup_vs_fp32)
                                                        : nlohmann::ordered_json(nullptr)},
                  {"emulated", r.emulated},
                  {"path", r.path},
                  {"implementation", r.implementation}});
  }
  j["results"] = std::move(rs);
  return j.dump(2) + "\n";
}

SavedGemmBench gemm_bench_record_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("bench record: not JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", "") != kFormat) {
    throw std::invalid_argument("bench record: not a mixp bench gemm record");
  }
  if (j.value("version", 0) > kVersion) {
    throw std::invalid_argument("bench record: written by a newer mixp");
  }
  try {
    SavedGemmBench s;
    s.date = j.at("date").get<std::string>();
    s.cpu = j.at("cpu").get<std::string>();
    s.threads = j.value("threads", 0);
    s.n = j.value("n", int64_t(0));
    s.repeat = j.value("repeat", 0);
    for (const auto& r : j.at("results")) {
      SavedGemmResult x;
      x.dtype = r.at("dtype").get<std::string>();
      x.gflops = r.at("gflops").get<double>();
      x.peak_gflops = r.value("peak_gflops", 0.0);
      x.fraction_of_peak = r.value("fraction_of_peak", 0.0);
      if (r.contains("speedup_vs_fp32") && r["speedup_vs_fp32"].is_number()) {
        x.speedup_vs_fp32 = r["speedup_vs_fp32"].get<double>();
      }
      x.emulated = r.value("emulated", false);
      x.path = r.value("path", "");
      x.implementation = r.value("implementation", "");
      s.results.push_back(std::move(x));
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("bench record: ") + e.what());
  }
}

void save_gemm_bench_record(const SavedGemmBench& record, std::filesystem::path path) {
  if (path.empty()) path = gemm_bench_record_path();
  if (path.empty()) throw IoError("cannot save the bench result: no HOME or XDG_CACHE_HOME");
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    throw IoError(fmt::format("cannot create {}: {}", path.parent_path().string(), ec.message()));
  }
  write_text_atomic(path, gemm_bench_record_to_json(record));
}

std::optional<SavedGemmBench> load_gemm_bench_record(std::filesystem::path path) {
  if (path.empty()) path = gemm_bench_record_path();
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    SavedGemmBench s = gemm_bench_record_from_json(ss.str());
    if (s.cpu != this_cpu()) return std::nullopt;
    return s;
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

std::optional<std::string> cite_gemm_speedup(const SavedGemmBench& s, std::string_view dtype) {
  const SavedGemmResult* r = s.find(dtype);
  const SavedGemmResult* f = s.find("fp32");
  if (!r || !f || !(f->gflops > 0) || !(r->gflops > 0)) return std::nullopt;
  const double ratio = r->gflops / f->gflops;
  return fmt::format(
      "{} GEMM measured {:.1f}x fp32 on this machine{} (mixp bench gemm, n={}, "
      "{} thread{}, {})",
      dtype, ratio, r->emulated ? ", emulated" : "", s.n, s.threads, s.threads == 1 ? "" : "s",
      s.day());
}

std::vector<std::string> gemm_evidence(const std::optional<SavedGemmBench>& record,
                                       std::string_view recommended) {
  if (!record) {
    return {
        "Not measured on this machine yet: `mixp bench gemm` measures each format's GEMM "
        "speed here (saved for doctor to cite), and `mixp compare` trains a model in each "
        "precision."};
  }
  std::vector<std::string> out;
  const std::string_view subject = recommended == "fp32" ? "bf16" : recommended;
  if (auto c = cite_gemm_speedup(*record, subject)) out.push_back(*c + ".");
  std::string others;
  for (const auto& r : record->results) {
    if (r.dtype == "fp32" || r.dtype == subject) continue;
    const SavedGemmResult* f = record->find("fp32");
    if (!f || !(f->gflops > 0)) break;
    others += fmt::format("{}{} {:.1f}x{}", others.empty() ? "" : ", ", r.dtype,
                          r.gflops / f->gflops, r.emulated ? " (emulated)" : "");
  }
  if (!others.empty()) {
    out.push_back(fmt::format("Also measured against fp32 ({}): {}.", record->day(), others));
  }
  if (out.empty()) {
    out.push_back("The saved `mixp bench gemm` result has no " + std::string(subject) +
                  " or fp32 entry; run `mixp bench gemm` to measure them.");
  }
  return out;
}

}  // namespace mixp::bench
