// Atomic directory replacement for checkpoints (contract in include/mixp/io/atomic_file.h).
// Linux has no atomic "replace a non-empty directory" rename: rename(2) over a non-empty directory
// fails with ENOTEMPTY. renameat2(RENAME_EXCHANGE) (Linux 3.15+, ext4/xfs/btrfs/tmpfs) swaps two
// names atomically, which is exactly what we need; elsewhere we fall back to renaming the old
// directory aside first, which has a short window with no directory at the target name.
#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28 with _GNU_SOURCE)
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <system_error>
#include <utility>

#include "io/io_util.h"
#include "mixp/io/atomic_file.h"

namespace mixp {

using io_detail::os_error;
using io_detail::quote;
using io_detail::quote_path;
namespace fs = std::filesystem;

namespace io_detail {
std::atomic<bool>& disable_rename_exchange_for_tests() {
  static std::atomic<bool> flag{false};
  return flag;
}
}  // namespace io_detail

namespace {

constexpr int kCreateAttempts = 64;

// Makes every file and directory entry under `root` durable before it becomes visible under the
// target name, whatever wrote them (plain ofstream writes included).
void fsync_tree(const fs::path& root) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const auto status = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_regular_file(status)) {
      io_detail::fsync_path(it->path(), /*directory=*/false);
    } else if (fs::is_directory(status)) {
      io_detail::fsync_directory(it->path());
    }
  }
  if (ec) throw IoError(os_error("list", root, ec.value()));
  io_detail::fsync_directory(root);
}

bool exists_no_follow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

// Returns 0 on success or the errno of the exchange; ENOSYS when it is not available at all.
int rename_exchange(const fs::path& a, const fs::path& b) {
#ifdef RENAME_EXCHANGE
  if (io_detail::disable_rename_exchange_for_tests().load()) return ENOSYS;
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0 ? 0 : errno;
#else
  return ENOSYS;
#endif
}

}  // namespace

AtomicDirectory::AtomicDirectory(fs::path target) : target_(std::move(target)) {
  // "out/ckpt/" has an empty filename; normalise so the siblings are "out/ckpt.tmp-...".
  if (!target_.empty() && !target_.has_filename()) target_ = target_.parent_path();
  io_detail::check_output_path(target_, /*want_directory=*/true);
  lock_ = std::make_unique<FolderLock>(target_);  // also removes a killed writer's leftovers
  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    fs::path candidate = target_;
    candidate += ".tmp-" + io_detail::random_suffix();
    if (::mkdir(candidate.c_str(), 0777) == 0) {  // 0777: the umask decides, as for mkdir(1)
      staging_ = std::move(candidate);
      return;
    }
    if (errno != EEXIST) throw IoError(os_error("create staging directory", candidate, errno));
  }
  throw IoError("cannot create a staging directory next to " + quote_path(target_) +
                ": every candidate name was taken; remove stale *.tmp-* directories there");
}

fs::path AtomicDirectory::file(std::string_view name) const {
  const fs::path rel(name);
  bool escapes = rel.empty() || rel.is_absolute();
  for (const auto& part : rel) escapes = escapes || part == "..";
  if (escapes) {
    throw IoError("file name " + quote(name) + " for directory " + quote_path(target_) +
                  " must be relative and must not contain '..'");
  }
  return staging_ / rel;
}

AtomicDirectory::~AtomicDirectory() {
  abort();
}

AtomicDirectory::AtomicDirectory(AtomicDirectory&& other) noexcept
    : target_(std::move(other.target_)),
      staging_(std::exchange(other.staging_, {})),
      committed_(other.committed_),
      lock_(std::move(other.lock_)) {}

AtomicDirectory& AtomicDirectory::operator=(AtomicDirectory&& other) noexcept {
  if (this != &other) {
    abort();
    target_ = std::move(other.target_);
    staging_ = std::exchange(other.staging_, {});
    committed_ = other.committed_;
    lock_ = std::move(other.lock_);
  }
  return *this;
}

void AtomicDirectory::abort() noexcept {
  if (!staging_.empty()) {
    std::error_code ec;
    fs::remove_all(staging_, ec);  // best effort: nothing sensible to do if this fails
    staging_.clear();
  }
  lock_.reset();
}

void AtomicDirectory::commit() {
  if (staging_.empty()) {
    throw IoError("cannot commit directory " + quote_path(target_) + ": already " +
                  (committed_ ? "committed" : "aborted"));
  }
  fsync_tree(staging_);
  const fs::path parent = io_detail::parent_or_dot(target_);

  if (!exists_no_follow(target_)) {
    if (::rename(staging_.c_str(), target_.c_str()) != 0) {
      throw IoError(os_error("rename the staging directory onto", target_, errno));
    }
    staging_.clear();
    committed_ = true;
    lock_.reset();
    io_detail::fsync_directory(parent);
    return;
  }

  // The target exists (the constructor checked that it is a directory; recheck, it may have
  // changed since).
  io_detail::check_output_path(target_, /*want_directory=*/true);
  const int err = rename_exchange(staging_, target_);
  if (err == 0) {
    // staging_ now names the previous content.
    committed_ = true;
    io_detail::fsync_directory(parent);
    abort();
    return;
  }
  if (err != ENOSYS && err != EINVAL && err != ENOTSUP && err != EOPNOTSUPP) {
    throw IoError(os_error("exchange the staging directory with", target_, err));
  }

  // Fallback: old aside, new in, old removed.
  fs::path old;
  for (int attempt = 0; attempt < kCreateAttempts && old.empty(); ++attempt) {
    fs::path candidate = target_;
    candidate += ".old-" + io_detail::random_suffix();
    if (!exists_no_follow(candidate)) old = std::move(candidate);
  }
  if (old.empty()) {
    throw IoError("cannot move " + quote_path(target_) +
                  " aside: every candidate name was taken; remove stale *.old-* directories");
  }
  if (::rename(target_.c_str(), old.c_str()) != 0) {
    throw IoError(os_error("move the previous directory aside to", old, errno));
  }
  if (::rename(staging_.c_str(), target_.c_str()) != 0) {
    const int rename_err = errno;
    ::rename(old.c_str(), target_.c_str());  // put the previous content back; best effort
    throw IoError(os_error("rename the staging directory onto", target_, rename_err));
  }
  staging_.clear();
  committed_ = true;
  io_detail::fsync_directory(parent);
  std::error_code ec;
  fs::remove_all(old, ec);  // the new content is in place; a leftover old copy is only clutter
  lock_.reset();
}

void write_directory_atomic(const fs::path& target,
                            const std::function<void(const fs::path&)>& fill) {
  AtomicDirectory d(target);
  fill(d.staging());  // an exception here unwinds through ~AtomicDirectory (staging removed)
  d.commit();
}

}  // namespace mixp
