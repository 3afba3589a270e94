// FolderLock: an exclusive flock(2) on `<dir>.lock`, re-entrant within the process, and the
// clean-up of what a killed writer left next to the folder (contract in io/atomic_file.h).
//
// Removing the lock file on release is safe because a locker checks, once it holds the lock,
// that the path still names the file it locked (same device and inode); one that locked a file
// which was unlinked meanwhile starts again.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "io/io_util.h"
#include "mixp/io/atomic_file.h"

namespace mixp {

using io_detail::os_error;
using io_detail::quote_path;
namespace fs = std::filesystem;

namespace {

struct Held {
  int fd = -1;
  int count = 0;
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Held>& registry() {
  static std::map<std::string, Held> r;
  return r;
}

fs::path normalized(const fs::path& dir) {
  fs::path d = dir;
  if (!d.empty() && !d.has_filename()) d = d.parent_path();
  std::error_code ec;
  fs::path abs = fs::absolute(d, ec);
  return (ec ? d : abs).lexically_normal();
}

std::string read_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return {};
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char c : s) {
    if (c < '0' || c > '9') return {};
  }
  return s;
}

bool is_dir_no_follow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// `<base>.tmp-XXXXXX` / `<base>.old-XXXXXX` (six characters [a-z0-9], io_detail::random_suffix).
bool is_sibling(const std::string& name, const std::string& base, const char* tag) {
  const std::string prefix = base + tag;
  if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    const char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

// What a killed AtomicDirectory left next to `dir`; best effort, errors are ignored (the write
// that follows reports anything that matters).
void clean_stale_siblings(const fs::path& dir) {
  const fs::path parent = io_detail::parent_or_dot(dir);
  const std::string base = dir.filename().native();
  std::vector<fs::path> staging, old;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().native();
    if (!is_dir_no_follow(it->path())) continue;
    if (is_sibling(name, base, ".tmp-")) staging.push_back(it->path());
    if (is_sibling(name, base, ".old-")) old.push_back(it->path());
  }
  for (const auto& p : staging) fs::remove_all(p, ec);
  struct stat st {};
  if (!old.empty() && ::lstat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    // The fallback swap was killed between its two renames: the previous folder is the newest
    // `.old-` one; put it back.
    size_t newest = 0;
    fs::file_time_type best{};
    for (size_t i = 0; i < old.size(); ++i) {
      const auto t = fs::last_write_time(old[i], ec);
      if (!ec && (i == 0 || t > best)) {
        best = t;
        newest = i;
      }
    }
    if (::rename(old[newest].c_str(), dir.c_str()) == 0) old.erase(old.begin() + long(newest));
  }
  for (const auto& p : old) fs::remove_all(p, ec);
}

}  // namespace

FolderLock::FolderLock(const fs::path& dir) {
  const fs::path target = normalized(dir);
  lock_file_ = target;
  lock_file_ += ".lock";
  const std::string key = lock_file_.native();
  std::lock_guard<std::mutex> g(registry_mutex());
  auto& reg = registry();
  if (auto it = reg.find(key); it != reg.end()) {
    ++it->second.count;
    held_ = true;
    return;
  }
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int fd = ::open(lock_file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) throw IoError(os_error("create the lock file", lock_file_, errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string pid = read_pid(fd);
      ::close(fd);
      if (err == EWOULDBLOCK || err == EAGAIN) {
        throw FolderBusyError("cannot write " + quote_path(target) + ": another process" +
                              (pid.empty() ? std::string() : " (pid " + pid + ")") +
                              " is writing it (it holds the lock file " + quote_path(lock_file_) +
                              "); wait for it to finish, or choose another folder");
      }
      throw IoError(os_error("lock", lock_file_, err));
    }
    struct stat mine {
    }, now{};
    if (::fstat(fd, &mine) != 0 || ::stat(lock_file_.c_str(), &now) != 0 ||
        mine.st_dev != now.st_dev || mine.st_ino != now.st_ino) {
      ::close(fd);  // the previous holder removed the file we locked: lock the new one
      continue;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) == 0) {
      [[maybe_unused]] const ssize_t w = ::pwrite(fd, pid.data(), pid.size(), 0);
    }
    reg[key] = Held{fd, 1};
    held_ = true;
    clean_stale_siblings(target);
    return;
  }
  throw IoError("cannot lock " + quote_path(target) + ": its lock file " + quote_path(lock_file_) +
                " keeps being replaced");
}

FolderLock::~FolderLock() {
  release();
}

FolderLock::FolderLock(FolderLock&& other) noexcept
    : lock_file_(std::move(other.lock_file_)), held_(std::exchange(other.held_, false)) {}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    release();
    lock_file_ = std::move(other.lock_file_);
    held_ = std::exchange(other.held_, false);
  }
  return *this;
}

void FolderLock::release() noexcept {
  if (!held_) return;
  held_ = false;
  std::lock_guard<std::mutex> g(registry_mutex());
  auto& reg = registry();
  auto it = reg.find(lock_file_.native());
  if (it == reg.end() || --it->second.count > 0) return;
  ::unlink(lock_file_.c_str());  // while still holding the lock (see the top of this file)
  ::close(it->second.fd);
  reg.erase(it);
}

}  // namespace mixp
