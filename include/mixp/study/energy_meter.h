// Measured energy of the CPU packages from Linux RAPL through the powercap sysfs interface
// (Documentation/power/powercap/powercap.rst):
//
//   <root>/intel-rapl:N/name                  "package-N" for a CPU package ("psys" = platform)
//   <root>/intel-rapl:N/energy_uj             microjoules, monotonic until it wraps
//   <root>/intel-rapl:N/max_energy_range_uj   the counter wraps to 0 after this value
//   <root>/intel-rapl:N:M/...                 subzones (core, uncore, dram) of package N
//
// Only the package zones are summed: the core/uncore subzones are parts of their package (adding
// them would count that energy twice), and psys covers the whole platform including the
// packages. AMD CPUs expose the same intel-rapl files. The intel-rapl-mmio:N zones mirror the MSR
// ones and are ignored.
//
// Often unavailable, and then says why: not Linux or no RAPL driver (no powercap folder, as in
// most containers and VMs), or no permission (since Linux 5.10, CVE-2020-8694, energy_uj is
// readable by root only). The caller then falls back to the estimate (energy_model.h) and labels
// it as such; it never reports a made-up measurement.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mixp::study {

class RaplEnergyMeter {
 public:
  static constexpr const char* kDefaultRoot = "/sys/class/powercap";

  // Finds the package zones under `root` and reads each counter once (so an unreadable counter
  // makes the meter unavailable now rather than at the first sample). Never throws.
  explicit RaplEnergyMeter(std::filesystem::path root = kDefaultRoot);

  bool available() const { return !zones_.empty(); }
  // Why available() is false ("" when it is true), for logs and the report.
  const std::string& unavailable_reason() const { return reason_; }
  // The zone names summed, e.g. {"package-0", "package-1"}.
  std::vector<std::string> zone_names() const;

  // Starts (or restarts) measuring from the counters' current values.
  void start();
  // Reads every counter and adds what it advanced since the previous read, across a wraparound
  // (value below the previous one: (max_energy_range_uj - previous) + value). Call it at least
  // once per wrap period (tens of minutes at full load on a server; the Trainer samples every
  // step). A counter that became unreadable makes the meter unavailable from then on.
  void sample();
  // Joules since start() (sampling first). nullopt when unavailable.
  std::optional<double> joules();

 private:
  struct Zone {
    std::string name;
    std::filesystem::path energy_file;
    uint64_t max_range_uj = 0;
    uint64_t last_uj = 0;
  };
  std::filesystem::path root_;
  std::vector<Zone> zones_;
  std::string reason_;
  double accumulated_uj_ = 0;
};

// The advance of a counter from `previous` to `current` that wraps after `max_range` (0 = unknown
// range: a decrease then counts as 0, the safe choice). Exposed for tests.
uint64_t counter_delta(uint64_t previous, uint64_t current, uint64_t max_range);

}  // namespace mixp::study
