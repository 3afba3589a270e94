#include "mixp/train/metrics.h"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <numeric>

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

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

}  // namespace mixp::train
