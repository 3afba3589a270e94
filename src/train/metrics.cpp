#include "mixp/train/metrics.h"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <regex>

namespace mixp::train {

double StepTimes::median_ms() const {
  if (ms_.empty()) return 0.0;
  std::vector<double> v(ms_.size() > 1 ? ms_.begin() + 1 : ms_.begin(), ms_.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double StepTimes::total_ms() const {
  return std::accumulate(ms_.begin(), ms_.end(), 0.0);
}

int64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return int64_t(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
}

std::optional<uint64_t> EnergyMeter::read_u64(const std::filesystem::path& p) {
  std::ifstream in(p);
  uint64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

EnergyMeter::EnergyMeter(std::filesystem::path root) {
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return;
  // Package zones only: "intel-rapl:0", not the subzones "intel-rapl:0:1" (core, uncore, dram
  // parts of the same package) nor the "intel-rapl" control type itself.
  static const std::regex package(R"(intel-rapl:\d+)");
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    if (std::regex_match(e.path().filename().string(), package)) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    Zone z;
    z.energy_file = d / "energy_uj";
    const auto now = read_u64(z.energy_file);
    if (!now) continue;  // no permission: leave the zone out
    z.max_range_uj = read_u64(d / "max_energy_range_uj").value_or(0);
    z.last_uj = *now;
    zones_.push_back(z);
  }
}

std::string EnergyMeter::source() const {
  return available() ? "rapl" : "unavailable";
}

void EnergyMeter::start() {
  accumulated_uj_ = 0;
  for (auto& z : zones_) z.last_uj = read_u64(z.energy_file).value_or(z.last_uj);
}

void EnergyMeter::sample() {
  for (auto& z : zones_) {
    const auto now = read_u64(z.energy_file);
    if (!now) continue;
    uint64_t delta;
    if (*now >= z.last_uj) {
      delta = *now - z.last_uj;
    } else {
      // The counter wrapped: it ran up to max_range_uj and restarted from 0. Without a known
      // range the part before the wrap cannot be known; count only what follows it.
      delta = z.max_range_uj >= z.last_uj ? (z.max_range_uj - z.last_uj) + *now : *now;
    }
    accumulated_uj_ += double(delta);
    z.last_uj = *now;
  }
}

std::optional<double> EnergyMeter::joules() {
  if (!available()) return std::nullopt;
  sample();
  return accumulated_uj_ * 1e-6;
}

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

}  // namespace mixp::train
