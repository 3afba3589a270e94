// Peak resident set size per run, inside one process. getrusage's ru_maxrss only ever grows, so
// a study's later runs would all report the largest earlier peak. Linux (since 4.0) resets the
// "high water mark" VmHWM to the current RSS when "5" is written to /proc/self/clear_refs
// (Documentation/admin-guide/mm/soft-dirty.rst, proc(5)); VmHWM in /proc/self/status then is the
// peak since that moment.
#pragma once
#include <cstdint>
#include <optional>

namespace mixp::study::detail {

// Resets the peak; false when the kernel does not allow it (not Linux, /proc not mounted).
bool reset_peak_rss();
// VmHWM in bytes; nullopt when /proc/self/status cannot be read.
std::optional<int64_t> peak_rss_since_reset();

}  // namespace mixp::study::detail
