#include "mixp/train/callbacks.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mixp/io/atomic_file.h"

namespace mixp::train {

namespace {
// JSON has no NaN or infinity: a non-finite value is written as null (a diverged step's loss).
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}
}  // namespace

JsonlLogCallback::JsonlLogCallback(const std::filesystem::path& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (!file_) {
    throw IoError("cannot open the log file " + path.string() + " for writing: " +
                  std::strerror(errno) + "; check that its folder exists and is writable");
  }
  if (append) {
    // A run killed mid-line left half a line: cut it, so the file holds whole lines only.
    const int fd = ::fileno(file_);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    off_t keep = size;
    char c = 0;
    while (keep > 0 && ::pread(fd, &c, 1, keep - 1) == 1 && c != '\n') --keep;
    if (keep != size && ::ftruncate(fd, keep) == 0) std::fseek(file_, 0, SEEK_END);
  }
}

JsonlLogCallback::~JsonlLogCallback() {
  if (file_) std::fclose(file_);
}

std::string JsonlLogCallback::format(const StepInfo& s) {
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["epoch"] = s.epoch;
  j["loss"] = number(s.loss);
  j["loss_scale"] = s.loss_scale;
  j["skipped"] = s.skipped;
  j["skipped_steps"] = s.skipped_steps;
  j["grad_norm"] = number(s.grad_norm);
  j["lr"] = s.lr;
  j["ms"] = s.ms;
  j["cpu_ms"] = s.cpu_ms;
  j["samples"] = s.samples;
  if (s.tokens > 0) j["tokens"] = s.tokens;
  j["elapsed_s"] = s.elapsed_s;
  return j.dump();
}

void JsonlLogCallback::on_step_end(const StepInfo& info) {
  const std::string line = format(info) + "\n";
  // Whole lines only: where the line starts, so that a failed write (a full disk) can be cut
  // back to the last complete line instead of leaving half a JSON object for a reader.
  const long start = std::ftell(file_);
  // Flushed per line so that `tail -f` and a crashed run both see every completed step.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    const int err = errno;
    std::clearerr(file_);
    bool cut = false;
    if (start >= 0) {
      // Drop what stdio still buffers, then cut the file back to `start`.
      cut = ::ftruncate(::fileno(file_), static_cast<off_t>(start)) == 0;
      std::fseek(file_, start, SEEK_SET);
    }
    throw IoError("cannot write to the log file " + path_.string() + ": " + std::strerror(err) +
                  (cut ? " (the log was cut back to its last complete line)" : ""));
  }
}

void JsonlLogCallback::on_train_end() {
  if (file_ && std::fflush(file_) != 0) {
    throw IoError("cannot write to the log file " + path_.string() + ": " + std::strerror(errno));
  }
}

}  // namespace mixp::train
