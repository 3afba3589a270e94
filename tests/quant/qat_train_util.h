// Helpers of the QAT training tests (test_qat_train.cpp, test_lowbit_train.cpp): small models on
// synthetic data, and a recipe-specific metric of a result.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mixp/train/trainer.h"

namespace mixp::train::qat_testing {

// mlp (width 64) or cnn (width 8, mlp width 32) on `train_limit` synthetic samples, one thread.
inline TrainConfig small(const std::string& model, const std::string& precision,
                         int64_t train_limit, int64_t test_limit) {
  TrainConfig c;
  c.model.name = model;
  if (model == "cnn") {
    c.model.width = 8;
    c.model.mlp_width = 32;
  } else {
    c.model.width = 64;
  }
  c.data = kSyntheticData;
  c.train_limit = train_limit;
  c.test_limit = test_limit;
  c.batch = 64;
  c.precision = precision;
  c.threads = 1;
  c.seed = 3;
  return c;
}

// The recipe metric `k` of a result (TrainResult::extra_metrics); a test failure when absent.
inline double extra(const TrainResult& r, const std::string& k) {
  for (const auto& [n, v] : r.extra_metrics)
    if (n == k) return v;
  ADD_FAILURE() << "no " << k;
  return NAN;
}

}  // namespace mixp::train::qat_testing
