// The key=value option lists (see key_value.h).
#include "util/key_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "util/text.h"

namespace mixp::detail {

std::vector<KeyValue> split_key_values(std::string_view text, const KeyValueSyntax& syntax) {
  std::vector<KeyValue> out;
  const std::string all = trim(text);
  if (all.empty()) return out;
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t end = all.find(',', pos);
    if (end == std::string::npos) end = all.size();
    const std::string item = trim(std::string_view(all).substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) {
      if (end == all.size()) break;
      throw KeyValueError(
          fmt::format("{} '{}' has an empty entry between commas", syntax.list, all));
    }
    const size_t eq = item.find('=');
    std::string key = eq == std::string::npos ? std::string() : trim(item.substr(0, eq));
    if (key.empty()) {
      throw KeyValueError(fmt::format(
          "{} entry '{}' is not {} (e.g. {}){}", syntax.list, item, syntax.entry, syntax.example,
          syntax.keys.empty() ? std::string()
                              : "; keys: " + join({syntax.keys.begin(), syntax.keys.end()})));
    }
    if (syntax.lower_keys) key = lower(key);
    if (!syntax.keys.empty()) {
      if (std::find(syntax.keys.begin(), syntax.keys.end(), key) == syntax.keys.end()) {
        throw KeyValueError(fmt::format("unknown {} '{}'; keys: {}", syntax.noun, key,
                                        join({syntax.keys.begin(), syntax.keys.end()})));
      }
    }
    // A key given twice is a mistake in every list (--layer-precision fc1=bf16,fc1=fp16 would
    // silently keep one of them): refused whether or not the list names its keys.
    const auto twice =
        std::find_if(out.begin(), out.end(), [&](const KeyValue& kv) { return kv.key == key; });
    if (twice != out.end()) {
      const std::string noun =
          syntax.noun.empty() ? fmt::format("{} key", syntax.list) : std::string(syntax.noun);
      throw KeyValueError(fmt::format("{} '{}' is given twice ({}={} and {})", noun, key, key,
                                      twice->value, item));
    }
    out.push_back({std::move(key), trim(item.substr(eq + 1))});
  }
  return out;
}

SpecParts split_spec(std::string_view spec_in) {
  const std::string spec = trim(spec_in);
  const size_t colon = spec.find(':');
  const size_t eq = spec.find('=');
  if (colon != std::string::npos && (eq == std::string::npos || colon < eq)) {
    return {trim(spec.substr(0, colon)), trim(spec.substr(colon + 1)), true};
  }
  if (eq != std::string::npos) return {"", spec, false};
  return {spec, "", false};
}

void throw_value_error(std::string_view noun, std::string_view key, std::string_view value,
                       std::string_view takes, std::string_view note) {
  throw KeyValueError(fmt::format("{} '{}' takes {}, got '{}'{}", noun, key, takes, value, note));
}

size_t parse_choice(std::string_view noun, std::string_view key, std::string_view value,
                    std::initializer_list<std::string_view> choices, std::string_view note) {
  const std::string v = lower(std::string(value));
  std::vector<std::string> names;
  size_t index = 0;
  for (std::string_view c : choices) {
    names.emplace_back(c.substr(0, c.find('|')));
    size_t pos = 0;
    while (pos <= c.size()) {
      size_t end = c.find('|', pos);
      if (end == std::string_view::npos) end = c.size();
      if (c.substr(pos, end - pos) == v) return index;
      pos = end + 1;
    }
    ++index;
  }
  throw_value_error(noun, key, value, join_or(names), note);
}

bool parse_on_off(std::string_view noun, std::string_view key, std::string_view value) {
  return parse_choice(noun, key, value, {"on|true|1|yes", "off|false|0|no"}) == 0;
}

int64_t parse_integer(std::string_view noun, std::string_view key, std::string_view value,
                      int64_t lo, int64_t hi) {
  int64_t x = 0;
  const char* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, x);
  if (ec != std::errc() || p != end || x < lo || x > hi) {
    throw_value_error(noun, key, value,
                      hi == std::numeric_limits<int64_t>::max()
                          ? fmt::format("an integer >= {}", lo)
                          : fmt::format("an integer in [{}, {}]", lo, hi));
  }
  return x;
}

double parse_positive(std::string_view noun, std::string_view key, std::string_view value) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(std::string(value), &used);
  } catch (...) {
    used = 0;
  }
  if (used != value.size() || !(x > 0) || !std::isfinite(static_cast<float>(x))) {
    throw_value_error(noun, key, value, "a positive number that is finite in fp32");
  }
  return x;
}

}  // namespace mixp::detail
