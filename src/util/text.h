// Small string helpers the option parsers and error messages share (policy strings, recipe
// options, --layer-precision, the study's precision lists). Private to libmixp.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace mixp::detail {

// "a, b, c": how error messages list the alternatives.
inline std::string join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += sep;
    s += x;
  }
  return s;
}

// "a", "a or b", "a, b or c": how error messages offer the choices.
inline std::string join_or(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += i + 1 == v.size() ? " or " : ", ";
    s += v[i];
  }
  return s;
}

// s without leading and trailing whitespace.
inline std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

// "a, b,,c" -> {"a", "b", "c"}: the items of a comma-separated list without their surrounding
// spaces; empty items are dropped.
inline std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= s.size();) {
    const size_t end = std::min(s.find(',', start), s.size());
    std::string_view item = s.substr(start, end - start);
    start = end + 1;
    item.remove_prefix(std::min(item.find_first_not_of(' '), item.size()));
    item.remove_suffix(item.size() - (item.find_last_not_of(' ') + 1));  // npos + 1 == 0
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

// s in ASCII lower case: option values are matched case-insensitively.
inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace mixp::detail
