// DataSource's defaults (include/mixp/train/data_source.h).
#include "mixp/train/data_source.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mixp/train/train_config.h"

namespace mixp::train {

std::string DataSource::state() const {
  return nlohmann::json{{"epoch", epoch()}, {"position", position()}}.dump();
}

void DataSource::restore(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  const int64_t e = j.at("epoch").get<int64_t>(), p = j.at("position").get<int64_t>();
  if (e < epoch() || (e == epoch() && p < position()) || p < 0 || p >= batches_per_epoch()) {
    throw TrainError(fmt::format(
        "cannot restore the data order at epoch {} position {}: this source stands at epoch {} "
        "position {} of {} batches and can only move forward (override DataSource::restore to "
        "jump)",
        e, p, epoch(), position(), batches_per_epoch()));
  }
  // Replays the order: the source's batches are a pure function of its construction.
  while (epoch() < e || position() < p) (void)next();
}

Batch DataSource::eval_batch(int64_t index) {
  throw std::out_of_range(
      fmt::format("DataSource::eval_batch({}): this data source has no evaluation set", index));
}

}  // namespace mixp::train
