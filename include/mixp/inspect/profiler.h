// The op profiler (`mixp train --profile`, docs/inspect.md): time, calls, FLOPs, bytes and
// achieved GFLOP/s per kernel, dtype and phase (forward, backward, optimizer, communication),
// as a table and as a Chrome trace (chrome://tracing, Perfetto). Casts are kernels of their own
// ("convert fp32->bf16"), so the time a mixed-precision run spends converting is in the table.
//
// It is a kernel observer (mixp/backend/kernel_observer.h): the time of a kernel is measured
// around the backend call on the calling thread (steady clock), nested kernels count in their
// caller. Time spent outside kernels (allocation, autograd bookkeeping, Python-free glue) is the
// difference between the wall time given to table() and the kernels' total.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "mixp/backend/kernel_observer.h"

namespace mixp::inspect {

struct ProfileRow {
  std::string op;     // "matmul", "unary:gelu", "convert"
  std::string dtype;  // the output's dtype; casts "fp32->bf16"
  KernelPhase phase = KernelPhase::forward;
  int64_t calls = 0;
  double ns = 0;
  double flops = 0;
  double bytes = 0;  // read + written
};

class Profiler final : public KernelObserver {
 public:
  // `trace_events`: how many kernel calls to keep for the Chrome trace (the first ones; 0: none).
  explicit Profiler(int64_t trace_events = 500000);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  void install();
  void uninstall();

  void before(const KernelCall& call) override;
  void after(const KernelCall& call) override;

  // Time that ran outside the backend's kernels but belongs in the table (the optimizer's fused
  // update loops write parameters directly): a row of its own and a trace event from `start`.
  void add_span(const std::string& op, const std::string& dtype, KernelPhase phase,
                std::chrono::steady_clock::time_point start, double ns);
  // Kernel time recorded so far in one phase.
  double phase_ns(KernelPhase phase) const;

  // Rows sorted by time, largest first.
  std::vector<ProfileRow> rows() const;
  double total_ns() const;
  // The table: op, dtype, phase, calls, time, share, GFLOP/s, GB/s; then time per phase, the
  // share of casts, and (when wall_ms > 0) the time outside kernels. `top`: rows shown (0: all).
  std::string table(double wall_ms = 0, size_t top = 25) const;
  // Writes the Chrome trace JSON ({"traceEvents": [...]}, complete events "X", microseconds).
  // Throws std::runtime_error when the file cannot be written.
  void write_trace(const std::filesystem::path& path) const;
  int64_t trace_events_dropped() const { return dropped_; }

 private:
  ProfileRow& row(const std::string& op, const std::string& dtype, KernelPhase phase,
                  uint32_t* index);
  struct Event {
    uint32_t row;
    double ts_us, dur_us;
  };
  using Clock = std::chrono::steady_clock;
  std::map<std::tuple<std::string, std::string, int>, uint32_t> index_;
  std::vector<ProfileRow> rows_;
  std::vector<Event> events_;
  int64_t max_events_;
  int64_t dropped_ = 0;
  Clock::time_point origin_ = Clock::now();
  Clock::time_point start_{};
  bool installed_ = false;
};

}  // namespace mixp::inspect
