// Line-oriented output files (the step log of `mixp train --log`, `--inspect out=...`): one
// complete line per write, flushed, so that `tail -f` and a killed run see every finished line.
// A write that fails (a full disk, a file-size limit) is cut back to the last complete line, so
// that the file never ends in half a JSON object, and the error says why (strerror) and that the
// file was cut (docs/cli.md, "Output files"). Whole files go through io/atomic_file.h instead.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace mixp {

class LineFile {
 public:
  // Opens `path` for writing (truncated) or appending. `what` names the file in errors ("the log
  // file", "--inspect out="). When appending to a file that ends in half a line (a run killed
  // mid-write), that half line is cut first. Throws IoError (io/atomic_file.h) with strerror when
  // the file cannot be opened.
  LineFile(std::filesystem::path path, bool append, std::string what);
  ~LineFile();
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;

  // Writes `line` and a newline, then flushes. On failure cuts the file back to where the line
  // began and throws IoError: "cannot write to <what> <path>: No space left on device (the file
  // was cut back to its last complete line)".
  void write_line(std::string_view line);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  long long end_ = 0;  // the end of the last complete line
};

}  // namespace mixp
