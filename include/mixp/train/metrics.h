// What a run costs: step times, memory and energy (docs/architecture.md 3.9, train/study).
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "mixp/train/energy_meter.h"  // EnergyMeter: energy from RAPL

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
