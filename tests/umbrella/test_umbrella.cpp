// include/mixp/mixp.h is the whole public API: it compiles on its own (it is the first include of
// this file) and every header under include/mixp is reachable from it, directly or through a
// module umbrella, so a new public header cannot be forgotten.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "mixp/mixp.h"
#include "common/test_paths.h"

namespace {

namespace fs = std::filesystem;
const fs::path kInclude = fs::path(MIXP_SOURCE_DIR) / "include";

// The "mixp/..." headers that `header` includes.
std::vector<std::string> includes_of(const std::string& header) {
  std::ifstream in(kInclude / header);
  static const std::regex re(R"re(^\s*#\s*include\s*["<](mixp/[^">]+)[">])re");
  std::vector<std::string> out;
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, re)) out.push_back(m[1]);
  }
  return out;
}

TEST(Umbrella, ReachesEveryPublicHeader) {
  std::set<std::string> reached, todo{"mixp/mixp.h"};
  while (!todo.empty()) {
    const std::string h = *todo.begin();
    todo.erase(todo.begin());
    if (!reached.insert(h).second) continue;
    for (const auto& inc : includes_of(h)) {
      ASSERT_TRUE(fs::exists(kInclude / inc)) << h << " includes " << inc << ", which is missing";
      if (!reached.count(inc)) todo.insert(inc);
    }
  }
  int headers = 0;
  for (const auto& e : fs::recursive_directory_iterator(kInclude / "mixp")) {
    if (e.path().extension() != ".h") continue;
    ++headers;
    const std::string rel = fs::relative(e.path(), kInclude).generic_string();
    EXPECT_TRUE(reached.count(rel)) << rel << " is not reachable from mixp/mixp.h: add it there";
  }
  EXPECT_GT(headers, 50);
}

// A few names from every module, to show the umbrella gives a user all of them.
TEST(Umbrella, DeclaresEveryModule) {
  EXPECT_EQ(
      mixp::bfloat16::from_double(1.0, mixp::Round::nearest_even, mixp::Overflow::ieee).to_float(),
      1.0f);
  [[maybe_unused]] mixp::train::TrainConfig train_config;
  [[maybe_unused]] mixp::amp::GradScaler* scaler = nullptr;
  [[maybe_unused]] mixp::study::StudyConfig* study = nullptr;
  [[maybe_unused]] mixp::bench::SavedGemmBench* bench = nullptr;
  [[maybe_unused]] mixp::quant::Int8Linear* int8_linear = nullptr;
  [[maybe_unused]] mixp::nn::Linear* linear = nullptr;
  [[maybe_unused]] mixp::optim::Adam* adam = nullptr;
  SUCCEED();
}

}  // namespace
