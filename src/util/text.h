// Small string helpers the option parsers and error messages share (policy strings, recipe
// options, --layer-precision, the study's precision lists). Private to libmixp.
#pragma once

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

// s without leading and trailing whitespace.
inline std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

// s in ASCII lower case: option values are matched case-insensitively.
inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace mixp::detail
