// What a run costs: step times, memory and energy (docs/architecture.md 3.9, train/study).
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mixp::train {

// Durations of optimizer steps. The first step of a run pays for one-time work (oneDNN primitive
// creation, the caching allocator filling up, cold caches), so it is kept out of the median.
class StepTimes {
 public:
  void add(double ms) { ms_.push_back(ms); }
  int64_t count() const { return int64_t(ms_.size()); }
  // Median of every step but the first (of the only step when there is one); 0 when empty.
  double median_ms() const;
  // Sum of all steps, the first included.
  double total_ms() const;
  const std::vector<double>& all() const { return ms_; }

 private:
  std::vector<double> ms_;
};

// Peak resident set size of this process so far (getrusage ru_maxrss), in bytes.
int64_t peak_rss_bytes();

// Energy of the CPU packages from Linux RAPL through powercap:
//   <root>/intel-rapl:N/energy_uj (microjoules, a counter that wraps at max_energy_range_uj).
// Only the top-level package zones (intel-rapl:N, not the intel-rapl:N:M subzones, which the
// package already contains) are summed. Unreadable (not Linux, no RAPL, no permission: recent
// kernels make energy_uj readable by root only) means available() is false and the caller reports
// energy as unavailable instead of a made-up number.
class EnergyMeter {
 public:
  static constexpr const char* kDefaultRoot = "/sys/class/powercap";
  explicit EnergyMeter(std::filesystem::path root = kDefaultRoot);

  bool available() const { return !zones_.empty(); }
  // "rapl" when available, else "unavailable".
  std::string source() const;
  // Starts (or restarts) measuring from now.
  void start();
  // Joules since start(), accumulated over any number of counter wraparounds as long as sample()
  // is called at least once per wrap period (minutes at full load; the Trainer samples every
  // step). nullopt when unavailable.
  std::optional<double> joules();
  // Reads the counters and adds what they advanced since the last read.
  void sample();

 private:
  struct Zone {
    std::filesystem::path energy_file;
    uint64_t max_range_uj = 0;  // the counter wraps to 0 after this value
    uint64_t last_uj = 0;
  };
  static std::optional<uint64_t> read_u64(const std::filesystem::path& p);
  std::vector<Zone> zones_;
  double accumulated_uj_ = 0;
};

// CPU time of this process (all threads), in milliseconds since an arbitrary origin. On a machine
// shared with other work a step's wall time includes the time slices the process waited for;
// its CPU time does not (with --threads 1 it is the work done).
double process_cpu_ms();

// Monotonic wall clock, in milliseconds since an arbitrary origin.
inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace mixp::train
