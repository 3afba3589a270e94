#include "mixp/train/callbacks.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "mixp/io/atomic_file.h"

namespace mixp::train {

namespace {
// JSON has no NaN or infinity: a non-finite value is written as null (a diverged step's loss).
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}
}  // namespace

JsonlLogCallback::JsonlLogCallback(const std::filesystem::path& path, bool append)
    : file_(path, append, "the log file") {}

JsonlLogCallback::~JsonlLogCallback() = default;

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
  // Written and flushed per line, so that `tail -f` and a crashed run both see every completed
  // step; a failed write leaves whole lines only (io/line_file.h).
  file_.write_line(format(info));
}

void JsonlLogCallback::on_train_end() {}

}  // namespace mixp::train
