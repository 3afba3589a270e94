// Available memory and the shortfall message (study/memory_check.h); plan_training_memory is in
// memory_plan.cpp, next to the planner it shares its pricing with.
#include "mixp/study/memory_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "mixp/backend/platform.h"

namespace mixp::study {

namespace {

// A cgroup file's number; nullopt for "max" (no limit) or an unreadable file.
std::optional<uint64_t> read_number(const char* path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(s);
}

// What the cgroup lets this process still allocate, when it is limited.
std::optional<uint64_t> cgroup_room() {
  struct Files {
    const char *limit, *usage;
  };
  for (const Files& f : {Files{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                         Files{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                               "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const auto limit = read_number(f.limit), usage = read_number(f.usage);
    // cgroup v1 writes "no limit" as a number near 2^63.
    if (limit && usage && *limit < (uint64_t{1} << 62))
      return *limit > *usage ? *limit - *usage : 0;
  }
  return std::nullopt;
}

std::string human(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

}  // namespace

uint64_t available_memory_bytes() {
  uint64_t avail = host_info().available_bytes;
  if (const auto room = cgroup_room()) avail = avail == 0 ? *room : std::min(avail, *room);
  return avail;
}

std::optional<std::string> memory_shortfall(const train::TrainConfig& c, const MemoryNeed& need,
                                            uint64_t available) {
  if (available == 0 || need.peak_bytes <= 0 || uint64_t(need.peak_bytes) <= available) {
    return std::nullopt;
  }
  const bool lm = train::is_language_model(c.model.name);
  std::string run = fmt::format("batch {}", c.batch);
  if (lm) run += fmt::format(" x {} tokens", c.model.context);
  if (c.grad_accum > 1) run += fmt::format(", {} accumulated", c.grad_accum);
  run += ", " + (c.precision.empty() ? std::string("fp32") : c.precision);
  return fmt::format(
      "not enough memory: training {} ({}) needs {} ({} of activations, {} of parameters, "
      "gradients and optimizer states; `mixp plan` shows the breakdown), {} available; a "
      "smaller --batch{} needs less",
      c.model.name, run, human(double(need.peak_bytes)), human(double(need.activation_bytes)),
      human(double(need.persistent_bytes)), human(double(available)),
      lm ? ", --context or --checkpointing" : "");
}

}  // namespace mixp::study
