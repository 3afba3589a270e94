#include "mixp/train/callbacks.h"

#include <cerrno>
#include <cmath>
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
  j["samples"] = s.samples;
  if (s.tokens > 0) j["tokens"] = s.tokens;
  j["elapsed_s"] = s.elapsed_s;
  return j.dump();
}

void JsonlLogCallback::on_step_end(const StepInfo& info) {
  const std::string line = format(info) + "\n";
  // Flushed per line so that `tail -f` and a crashed run both see every completed step.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    throw IoError("cannot write to the log file " + path_.string() + ": " + std::strerror(errno));
  }
}

void JsonlLogCallback::on_train_end() {
  if (file_ && std::fflush(file_) != 0) {
    throw IoError("cannot write to the log file " + path_.string() + ": " + std::strerror(errno));
  }
}

}  // namespace mixp::train
