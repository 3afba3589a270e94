// The one RAPL energy meter: the CPU packages' energy from Linux RAPL through the powercap sysfs
// interface (Documentation/power/powercap/powercap.rst), used by the Trainer (energy_joules of
// `mixp train --json`) and by the study (study/energy_meter.h).
//
//   <root>/intel-rapl:N/name                  "package-N" for a CPU package ("psys" = platform)
//   <root>/intel-rapl:N/energy_uj             microjoules, monotonic until it wraps
//   <root>/intel-rapl:N/max_energy_range_uj   the counter wraps to 0 after this value
//   <root>/intel-rapl:N:M/...                 subzones (core, uncore, dram) of package N
//
// The rule:
// - Domains: the top-level zones intel-rapl:N whose name starts with "package" are summed. The
//   core/uncore/dram subzones are parts of their package (adding them would count that energy
//   twice), and psys covers the whole platform including the packages. AMD CPUs expose the same
//   intel-rapl files. The intel-rapl-mmio:N zones mirror the MSR ones and are ignored.
// - Wraparound: a reading below the previous one means the counter wrapped; the advance is
//   (max_energy_range_uj - previous) + current. Where the range is unknown (unreadable, or below
//   the previous reading) only what follows the wrap, `current`, is counted: a lower bound, never
//   a made-up number. Sampling at least once per wrap period (tens of minutes at full load on a
//   server; the Trainer samples every step) loses nothing.
// - Unavailable: no powercap folder (not Linux, no RAPL driver; most containers and VMs), no
//   package zone, or a counter that cannot be read (since Linux 5.10, CVE-2020-8694, energy_uj
//   is readable by root only). A counter that stops being readable during a run makes the meter
//   unavailable from then on: a sum over only some packages is not reported. unavailable_reason()
//   says which case it was; callers report energy as unavailable (the Trainer) or fall back to
//   the labelled estimate of study/energy_model.h (the study).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mixp::train {

class EnergyMeter {
 public:
  static constexpr const char* kDefaultRoot = "/sys/class/powercap";

  // Finds the package zones under `root` and reads each counter once (so an unreadable counter
  // makes the meter unavailable now rather than at the first sample). Never throws.
  explicit EnergyMeter(std::filesystem::path root = kDefaultRoot);

  bool available() const { return !zones_.empty(); }
  // "rapl" when available, else "unavailable" (energy_source of `mixp train --json`).
  std::string source() const;
  // Why available() is false ("" when it is true), for logs and the report.
  const std::string& unavailable_reason() const { return reason_; }
  // The zone names summed, e.g. {"package-0", "package-1"}.
  std::vector<std::string> zone_names() const;

  // Starts (or restarts) measuring from the counters' current values.
  void start();
  // Reads every counter and adds what it advanced since the previous read (counter_delta).
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
  // Reads every counter into last_uj (adding the advances when `accumulate`); an unreadable one
  // makes the meter unavailable.
  void read_counters(bool accumulate);
  std::filesystem::path root_;
  std::vector<Zone> zones_;
  std::string reason_;
  double accumulated_uj_ = 0;
};

// The advance of a counter from `previous` to `current` that wraps after `max_range` (0 = unknown
// range): see the rule above. Exposed for tests.
uint64_t counter_delta(uint64_t previous, uint64_t current, uint64_t max_range);

}  // namespace mixp::train
