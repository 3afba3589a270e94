// Small helpers shared by the io/ sources (internal; not installed).
#pragma once
#include <atomic>
#include <filesystem>
#include <string>
#include <string_view>

namespace mixp::io_detail {

// "cannot <op> <quoted path>: <strerror(err)>" plus "; <hint>" for common errno values. One line.
std::string os_error(std::string_view op, const std::filesystem::path& path, int err);
// Six random characters [a-z0-9] for temporary names; thread-safe.
std::string random_suffix();
// fsync(2) of a file, or of a directory so that renames and creations inside it are durable.
// Throws IoError naming the step ("open", "fsync"; "... directory" for a directory).
void fsync_path(const std::filesystem::path& path, bool directory);
inline void fsync_directory(const std::filesystem::path& dir) {
  fsync_path(dir, /*directory=*/true);
}
// Throws IoError unless `path` can become a file (want_directory=false) or a directory: its
// parent must be an existing directory and `path` must not exist as the other kind.
void check_output_path(const std::filesystem::path& path, bool want_directory);
// The directory holding `path` ("." for a bare file name).
std::filesystem::path parent_or_dot(const std::filesystem::path& path);
// True when `s` is well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` in single quotes for an error message: control characters and quotes escaped so the
// message stays on one line (and, when `s` is not valid UTF-8, bytes >= 0x80 too, so the message
// is); longer than `max_chars` is cut with "...".
std::string quote(std::string_view s, size_t max_chars = 120);
inline std::string quote_path(const std::filesystem::path& p) {
  return quote(p.native());
}

// Test hook: when set, AtomicDirectory::commit takes the rename-aside fallback instead of
// renameat2(RENAME_EXCHANGE), so tests can cover both paths.
std::atomic<bool>& disable_rename_exchange_for_tests();

}  // namespace mixp::io_detail
