#include "mixp/io/line_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "mixp/io/atomic_file.h"

namespace mixp {

LineFile::LineFile(std::filesystem::path path, bool append, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? 0 : O_TRUNC), 0666);
  if (fd_ < 0) {
    throw IoError("cannot open " + what_ + " " + path_.string() + " for writing: " +
                  std::strerror(errno) + "; check that its folder exists and is writable");
  }
  if (append) {
    // A run killed mid-line left half a line: cut it, so the file holds whole lines only.
    const off_t size = ::lseek(fd_, 0, SEEK_END);
    off_t keep = size < 0 ? 0 : size;
    char c = 0;
    while (keep > 0 && ::pread(fd_, &c, 1, keep - 1) == 1 && c != '\n') --keep;
    if (keep != size && ::ftruncate(fd_, keep) != 0) keep = size;
    end_ = keep;
  }
}

LineFile::~LineFile() {
  if (fd_ >= 0) ::close(fd_);
}

void LineFile::write_line(std::string_view line) {
  // One write(2) per line (no stdio buffer that could hold half a line after a failure): what
  // the file holds is always whole lines plus, after a failed write, a tail cut off below.
  std::string buf;
  buf.reserve(line.size() + 1);
  buf.append(line);
  buf += '\n';
  size_t done = 0;
  int err = 0;
  while (done < buf.size()) {
    const ssize_t n =
        ::pwrite(fd_, buf.data() + done, buf.size() - done, off_t(end_) + off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += size_t(n);
  }
  if (err == 0) {
    end_ += static_cast<long long>(done);
    return;
  }
  const bool cut = ::ftruncate(fd_, off_t(end_)) == 0;
  throw IoError("cannot write to " + what_ + " " + path_.string() + ": " + std::strerror(err) +
                (cut ? " (the file was cut back to its last complete line)" : ""));
}

}  // namespace mixp
