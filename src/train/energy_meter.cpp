// RAPL package energy through powercap sysfs (see include/mixp/train/energy_meter.h).
#include "mixp/train/energy_meter.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <system_error>

namespace mixp::train {
namespace {

namespace fs = std::filesystem;

// Reads a whole small sysfs file; errno-style reason on failure.
bool read_small_file(const fs::path& p, std::string& out, std::string& why) {
  errno = 0;
  std::ifstream f(p);
  if (!f) {
    why = "cannot read " + p.string() + ": " + std::strerror(errno ? errno : EACCES);
    return false;
  }
  std::getline(f, out);
  if (f.bad()) {
    why = "cannot read " + p.string() + ": " + std::strerror(errno ? errno : EIO);
    return false;
  }
  return true;
}

bool read_u64(const fs::path& p, uint64_t& value, std::string& why) {
  std::string text;
  if (!read_small_file(p, text, why)) return false;
  try {
    size_t used = 0;
    value = std::stoull(text, &used);
    return true;
  } catch (const std::exception&) {
    why = p.string() + " does not hold a number: '" + text.substr(0, 40) + "'";
    return false;
  }
}

}  // namespace

uint64_t counter_delta(uint64_t previous, uint64_t current, uint64_t max_range) {
  if (current >= previous) return current - previous;
  // Wrapped (or reset): without a range that covers `previous`, only the part after the wrap is
  // known.
  if (max_range == 0 || previous > max_range) return current;
  return (max_range - previous) + current;
}

EnergyMeter::EnergyMeter(fs::path root) : root_(std::move(root)) {
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) {
    reason_ = "no " + root_.string() +
              " (not Linux, or no powercap/RAPL driver; usual in containers and VMs)";
    return;
  }
  static const std::regex package_zone(R"(intel-rapl:\d+)");
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (std::regex_match(n, package_zone)) candidates.push_back(it->path());
  }
  std::sort(candidates.begin(), candidates.end());
  std::string first_error;
  for (const fs::path& dir : candidates) {
    std::string name, why;
    if (!read_small_file(dir / "name", name, why)) {
      if (first_error.empty()) first_error = why;
      continue;
    }
    // Package zones only: "psys" (platform) already contains the packages.
    if (name.rfind("package", 0) != 0) continue;
    Zone z;
    z.name = name;
    z.energy_file = dir / "energy_uj";
    uint64_t range = 0;
    if (read_u64(dir / "max_energy_range_uj", range, why)) z.max_range_uj = range;
    if (!read_u64(z.energy_file, z.last_uj, why)) {
      if (first_error.empty()) {
        first_error = why;
        if (why.find("ermission") != std::string::npos) {
          first_error += " (since Linux 5.10, CVE-2020-8694, energy_uj is readable by root only)";
        }
      }
      continue;
    }
    zones_.push_back(std::move(z));
  }
  if (zones_.empty()) {
    reason_ = !first_error.empty()
                  ? first_error
                  : "no RAPL package zones (intel-rapl:N named package-N) under " + root_.string() +
                        " (driver not loaded, or not exposed to this container)";
  }
}

std::string EnergyMeter::source() const {
  return available() ? "rapl" : "unavailable";
}

std::vector<std::string> EnergyMeter::zone_names() const {
  std::vector<std::string> out;
  for (const Zone& z : zones_) out.push_back(z.name);
  return out;
}

void EnergyMeter::start() {
  accumulated_uj_ = 0;
  read_counters(/*accumulate=*/false);
}

void EnergyMeter::sample() {
  read_counters(/*accumulate=*/true);
}

void EnergyMeter::read_counters(bool accumulate) {
  std::string why;
  for (Zone& z : zones_) {
    uint64_t v = 0;
    if (!read_u64(z.energy_file, v, why)) {
      zones_.clear();  // a sum over only some packages is not reported
      reason_ = why;
      return;
    }
    if (accumulate) accumulated_uj_ += double(counter_delta(z.last_uj, v, z.max_range_uj));
    z.last_uj = v;
  }
}

std::optional<double> EnergyMeter::joules() {
  if (!available()) return std::nullopt;
  sample();
  if (!available()) return std::nullopt;
  return accumulated_uj_ * 1e-6;
}

}  // namespace mixp::train
