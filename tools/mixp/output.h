// Printing helpers shared by the subcommands: JSON numbers that may be non-finite, aligned text
// tables, comma-separated lists. Printing only; no logic a library user would need.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace mixp::cli {

// Keys keep the order they were written in, so the JSON reads like the text output.
using Json = nlohmann::ordered_json;

// JSON has no inf or NaN; mixp writes them as the strings "inf", "-inf" and "nan" (what Python's
// float() and numpy read back), never as null, so a reader can tell overflow from a missing value.
inline Json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

// One JSON object on stdout (docs/architecture.md 4.1).
inline void print_json(const Json& j) {
  std::cout << j.dump(2) << "\n";
}

// Shortest text that reads back to the same double ("3.140625", "1e-09", "inf", "nan").
inline std::string shortest(double v) {
  return fmt::format("{}", v);
}

// A table printed with columns padded to their widest cell; the last column is not padded.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& os, std::string_view indent = "  ") const {
    std::vector<size_t> w;
    for (const auto& r : rows_) {
      if (w.size() < r.size()) w.resize(r.size(), 0);
      for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    }
    for (const auto& r : rows_) {
      std::string line(indent);
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
      }
      os << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "a,b, c" -> {"a", "b", "c"}; empty items are dropped.
inline std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = s.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace mixp::cli
