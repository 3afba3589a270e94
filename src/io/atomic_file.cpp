// Atomic file writes: temp file in the same directory, write, fsync, rename, fsync directory.
// Why each step: rename(2) within one filesystem atomically replaces the name; fsync before the
// rename makes sure the name never points at data still in the page cache only (ext4/xfs may
// otherwise show a zero-length file after a crash); fsync of the directory makes the rename
// itself durable. See the header for the contract.
#include "mixp/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "io/io_util.h"

namespace mixp {

using io_detail::os_error;
using io_detail::quote;
using io_detail::quote_path;
namespace fs = std::filesystem;

namespace {

constexpr size_t kBufferBytes = 1 << 16;  // batch small writes; larger ones bypass the buffer
constexpr int kCreateAttempts = 64;       // O_EXCL collisions are astronomically rare

// Writes all of `n` bytes, retrying on EINTR and short writes. Returns 0 or an errno value.
int write_all(int fd, const std::byte* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// AtomicFileWriter

AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)) {
  io_detail::check_output_path(path_, /*want_directory=*/false);
  const fs::path dir = io_detail::parent_or_dot(path_);
  const std::string base = path_.filename().native();
  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    fs::path candidate = dir / (base + ".tmp-" + io_detail::random_suffix());
    // 0666 so the umask decides the final permissions, as for a file created by open(2).
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      fd_ = fd;
      temp_ = std::move(candidate);
      buffer_.reserve(kBufferBytes);
      return;
    }
    if (errno != EEXIST) throw IoError(os_error("create temporary file", candidate, errno));
  }
  throw IoError("cannot create a temporary file next to " + quote_path(path_) +
                ": every candidate name was taken; remove stale *.tmp-* files there");
}

AtomicFileWriter::~AtomicFileWriter() {
  abort();
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::exchange(other.temp_, {})),
      fd_(std::exchange(other.fd_, -1)),
      committed_(other.committed_),
      written_(other.written_),
      buffer_(std::move(other.buffer_)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    abort();
    path_ = std::move(other.path_);
    temp_ = std::exchange(other.temp_, {});
    fd_ = std::exchange(other.fd_, -1);
    committed_ = other.committed_;
    written_ = other.written_;
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

void AtomicFileWriter::abort() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
  }
  buffer_.clear();
}

void AtomicFileWriter::flush_buffer() {
  if (buffer_.empty()) return;
  if (const int err = write_all(fd_, buffer_.data(), buffer_.size())) {
    abort();
    throw IoError(os_error("write", path_, err));
  }
  buffer_.clear();
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) {
    throw IoError("cannot write " + quote_path(path_) + ": the atomic writer is already " +
                  (committed_ ? "committed" : "aborted"));
  }
  written_ += bytes.size();
  if (buffer_.size() + bytes.size() <= kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    return;
  }
  flush_buffer();
  if (bytes.size() < kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  } else if (const int err = write_all(fd_, bytes.data(), bytes.size())) {
    abort();
    throw IoError(os_error("write", path_, err));
  }
}

void AtomicFileWriter::write(std::string_view text) {
  write(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) {
    throw IoError("cannot commit " + quote_path(path_) + ": the atomic writer is already " +
                  (committed_ ? "committed" : "aborted"));
  }
  flush_buffer();
  if (::fsync(fd_) != 0) {
    const int err = errno;
    abort();
    throw IoError(os_error("fsync", path_, err));
  }
  // close() can report a deferred write error (NFS, quota); treat it like a failed write.
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int err = errno;
    abort();
    throw IoError(os_error("close", path_, err));
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abort();
    throw IoError(os_error("rename the temporary file onto", path_, err));
  }
  temp_.clear();
  committed_ = true;
  // The new content is in place; a failed directory fsync only weakens durability after a power
  // cut, but we still report it because the caller asked for a durable write.
  io_detail::fsync_directory(io_detail::parent_or_dot(path_));
}

void write_file_atomic(const fs::path& path, std::span<const std::byte> bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

void write_text_atomic(const fs::path& path, std::string_view text) {
  AtomicFileWriter w(path);
  w.write(text);
  w.commit();
}

void write_file_atomic_with(const fs::path& path,
                            const std::function<void(AtomicFileWriter&)>& fill) {
  AtomicFileWriter w(path);
  fill(w);  // an exception here unwinds through ~AtomicFileWriter, which removes the temporary
  w.commit();
}

}  // namespace mixp
