// Profiler (profiler.h): per-kernel time, FLOPs and bytes, a table and a Chrome trace.
#include "mixp/inspect/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>

#include "mixp/format/dtype.h"
#include "mixp/io/atomic_file.h"

namespace mixp::inspect {
namespace {

double bytes_of(const KernelCall& c) {
  double b = 0;
  for (const Tensor* t : c.outputs) b += double(t->nbytes());
  for (const Tensor* t : c.inputs) b += double(t->nbytes());
  return b;
}

std::string dtype_of(const KernelCall& c) {
  const std::string out = c.outputs.empty() ? "-" : std::string(name(c.outputs[0]->dtype()));
  const bool cast = std::string_view(c.kernel) == "convert" || std::string_view(c.kernel) == "copy";
  if (cast && !c.inputs.empty() && c.inputs[0]->dtype() != c.outputs[0]->dtype())
    return std::string(name(c.inputs[0]->dtype())) + "->" + out;
  return out;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

}  // namespace

Profiler::Profiler(int64_t trace_events) : max_events_(trace_events) {}

Profiler::~Profiler() {
  uninstall();
}

void Profiler::install() {
  if (!installed_) add_kernel_observer(this);
  installed_ = true;
}

void Profiler::uninstall() {
  if (installed_) remove_kernel_observer(this);
  installed_ = false;
}

void Profiler::before(const KernelCall&) {
  start_ = Clock::now();
}

ProfileRow& Profiler::row(const std::string& op, const std::string& dtype, KernelPhase phase,
                          uint32_t* index) {
  const auto key = std::make_tuple(op, dtype, int(phase));
  auto it = index_.find(key);
  if (it == index_.end()) {
    it = index_.emplace(key, uint32_t(rows_.size())).first;
    rows_.push_back(ProfileRow{op, dtype, phase});
  }
  *index = it->second;
  return rows_[it->second];
}

void Profiler::after(const KernelCall& c) {
  const Clock::time_point end = Clock::now();
  const std::string op = *c.variant ? fmt::format("{}:{}", c.kernel, c.variant) : c.kernel;
  uint32_t index = 0;
  ProfileRow& r = row(op, dtype_of(c), kernel_phase(), &index);
  const double ns =
      double(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start_).count());
  ++r.calls;
  r.ns += ns;
  r.flops += c.flops;
  r.bytes += bytes_of(c);
  if (int64_t(events_.size()) < max_events_) {
    events_.push_back(
        {index, std::chrono::duration<double, std::micro>(start_ - origin_).count(), ns * 1e-3});
  } else if (max_events_ > 0) {
    ++dropped_;
  }
}

void Profiler::add_span(const std::string& op, const std::string& dtype, KernelPhase phase,
                        Clock::time_point start, double ns) {
  if (!(ns > 0)) return;
  uint32_t index = 0;
  ProfileRow& r = row(op, dtype, phase, &index);
  ++r.calls;
  r.ns += ns;
  if (int64_t(events_.size()) < max_events_) {
    events_.push_back(
        {index, std::chrono::duration<double, std::micro>(start - origin_).count(), ns * 1e-3});
  } else if (max_events_ > 0) {
    ++dropped_;
  }
}

double Profiler::phase_ns(KernelPhase phase) const {
  double t = 0;
  for (const ProfileRow& r : rows_)
    if (r.phase == phase) t += r.ns;
  return t;
}

std::vector<ProfileRow> Profiler::rows() const {
  std::vector<ProfileRow> r = rows_;
  std::sort(r.begin(), r.end(),
            [](const ProfileRow& a, const ProfileRow& b) { return a.ns > b.ns; });
  return r;
}

double Profiler::total_ns() const {
  double t = 0;
  for (const ProfileRow& r : rows_) t += r.ns;
  return t;
}

std::string Profiler::table(double wall_ms, size_t top) const {
  const std::vector<ProfileRow> rs = rows();
  const double total = total_ns();
  std::string s = fmt::format("{:<26} {:<12} {:<9} {:>8} {:>11} {:>7} {:>9} {:>8}\n", "op",
                              "dtype", "phase", "calls", "time ms", "share", "GFLOP/s", "GB/s");
  const size_t n = top == 0 ? rs.size() : std::min(top, rs.size());
  for (size_t i = 0; i < n; ++i) {
    const ProfileRow& r = rs[i];
    const double sec = r.ns * 1e-9;
    s += fmt::format("{:<26} {:<12} {:<9} {:>8} {:>11.2f} {:>6.1f}% {:>9} {:>8.2f}\n", r.op,
                     r.dtype, to_string(r.phase), r.calls, r.ns * 1e-6,
                     total > 0 ? 100 * r.ns / total : 0.0,
                     r.flops > 0 && sec > 0 ? fmt::format("{:.2f}", r.flops / sec * 1e-9) : "-",
                     sec > 0 ? r.bytes / sec * 1e-9 : 0.0);
  }
  if (n < rs.size()) s += fmt::format("... {} more rows\n", rs.size() - n);
  std::array<double, 5> phase{};
  double casts = 0, fp32 = 0;
  for (const ProfileRow& r : rs) {
    phase[size_t(r.phase)] += r.ns;
    if (r.dtype.find("->") != std::string::npos) casts += r.ns;
    if (r.dtype == "fp32") fp32 += r.ns;
  }
  s += fmt::format("kernels and spans {:.1f} ms:", total * 1e-6);
  for (size_t p = 0; p < phase.size(); ++p) {
    if (phase[p] > 0)
      s += fmt::format(" {} {:.1f}%", to_string(KernelPhase(p)), 100 * phase[p] / total);
  }
  s += fmt::format("; casts {:.1f}%, fp32 kernels {:.1f}%\n", total > 0 ? 100 * casts / total : 0.0,
                   total > 0 ? 100 * fp32 / total : 0.0);
  if (wall_ms > 0) {
    s += fmt::format("wall {:.1f} ms: in the table {:.1f}%, outside it {:.1f}%\n", wall_ms,
                     100 * total * 1e-6 / wall_ms, 100 * (1 - total * 1e-6 / wall_ms));
  }
  return s;
}

void Profiler::write_trace(const std::filesystem::path& path) const {
  // Whole or not at all (io/atomic_file.h): a full disk leaves no empty or cut trace, and the
  // IoError names the file and the OS reason.
  try {
    write_file_atomic_with(path, [&](AtomicFileWriter& w) {
      w.write(std::string_view("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"));
      for (size_t i = 0; i < events_.size(); ++i) {
        const Event& e = events_[i];
        const ProfileRow& r = rows_[e.row];
        w.write(fmt::format(
            "{}{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},"
            "\"pid\":1,\"tid\":1,\"args\":{{\"dtype\":\"{}\"}}}}\n",
            i ? "," : "", json_escape(r.op), to_string(r.phase), e.ts_us, e.dur_us,
            json_escape(r.dtype)));
      }
      w.write(std::string_view("]}\n"));
    });
  } catch (const IoError& e) {
    throw IoError(std::string("--profile-trace: ") + e.what());
  }
}

}  // namespace mixp::inspect
