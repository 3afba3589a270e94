#include "io/io_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "mixp/io/atomic_file.h"

namespace mixp::io_detail {

namespace {
std::string_view errno_hint(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
      return "check the permissions of the file and its directory";
    case EROFS:
      return "the filesystem is read-only; choose another location";
    case ENOSPC:
    case EDQUOT:
      return "the disk is full; free space or choose another location";
    case ENOENT:
      return "check that the path exists";
    case ENOTDIR:
      return "a component of the path is not a directory";
    case EISDIR:
      return "the path is a directory; give a file name";
    default:
      return {};
  }
}
}  // namespace

std::string os_error(std::string_view op, const std::filesystem::path& path, int err) {
  std::string msg = "cannot ";
  msg += op;
  msg += ' ';
  msg += quote_path(path);
  msg += ": ";
  msg += std::strerror(err);
  if (auto hint = errno_hint(err); !hint.empty()) {
    msg += "; ";
    msg += hint;
  }
  return msg;
}

std::string random_suffix() {
  // A per-thread generator seeded from random_device, the clock and a process-wide counter, so
  // two threads or two processes do not walk the same sequence; O_EXCL catches any collision.
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    const auto t =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::seed_seq seq{rd(),
                      rd(),
                      static_cast<unsigned>(t),
                      static_cast<unsigned>(t >> 32),
                      static_cast<unsigned>(counter.fetch_add(1)),
                      static_cast<unsigned>(getpid())};
    return std::mt19937_64(seq);
  }());
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s(6, 'a');
  for (char& c : s) c = kChars[gen() % (sizeof(kChars) - 1)];
  return s;
}

void fsync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  const std::string kind = directory ? " directory" : "";
  if (fd < 0) throw IoError(os_error("open" + kind, path, errno));
  // EINVAL: the filesystem does not support syncing this kind of file (directories on some
  // FUSE/network mounts); there is nothing more we can do there, so it is not an error.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(fd);
    throw IoError(os_error("fsync" + kind, path, err));
  }
  ::close(fd);
}

void check_output_path(const std::filesystem::path& path, bool want_directory) {
  namespace fs = std::filesystem;
  if (path.empty()) throw IoError("cannot write: the output path is empty");
  const fs::path parent = parent_or_dot(path);
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0) {
    throw IoError(os_error("write into directory", parent, errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw IoError("cannot write " + quote_path(path) + ": " + quote_path(parent) +
                  " is not a directory");
  }
  if (::lstat(path.c_str(), &st) == 0) {
    if (!want_directory && S_ISDIR(st.st_mode)) {
      throw IoError("cannot write file " + quote_path(path) +
                    ": a directory of that name exists; give a file name");
    }
    if (want_directory && !S_ISDIR(st.st_mode)) {
      throw IoError("cannot write directory " + quote_path(path) +
                    ": a file of that name exists and is not a directory; remove it or choose "
                    "another name");
    }
  }
}

std::filesystem::path parent_or_dot(const std::filesystem::path& path) {
  auto parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

bool is_valid_utf8(std::string_view s) {
  // Lead byte pattern -> continuation bytes, and the smallest code point that length may encode
  // (anything smaller is an overlong form, which RFC 3629 forbids).
  struct Lead {
    uint8_t mask, value;
    size_t extra;
    uint32_t min;
  };
  static constexpr Lead kLeads[] = {
      {0xE0, 0xC0, 1, 0x80}, {0xF0, 0xE0, 2, 0x800}, {0xF8, 0xF0, 3, 0x10000}};
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const Lead* lead = nullptr;
    for (const auto& l : kLeads) {
      if ((c & l.mask) == l.value) lead = &l;
    }
    if (!lead || i + lead->extra >= s.size()) return false;  // bad lead byte or truncated
    uint32_t cp = c & static_cast<uint8_t>(~lead->mask);
    for (size_t k = 1; k <= lead->extra; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < lead->min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += lead->extra + 1;
  }
  return true;
}

std::string quote(std::string_view s, size_t max_chars) {
  const bool utf8 = is_valid_utf8(s);
  std::string out = "'";
  size_t n = 0;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    // Cut only at a character boundary (not before a UTF-8 continuation byte).
    if (n >= max_chars && (u & 0xC0) != 0x80) {
      out += "...";
      break;
    }
    ++n;
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F || (u >= 0x80 && !utf8)) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

}  // namespace mixp::io_detail
