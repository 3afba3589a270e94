// Helpers for the quant tests: the torch fixture and small models.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace mixp::quant::testing {

inline const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(MIXP_TEST_DATA) + "/quant/quant_fixture.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
  }();
  return j;
}

inline std::vector<float> floats(const nlohmann::json& a) {
  std::vector<float> v;
  for (const auto& x : a) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

}  // namespace mixp::quant::testing
