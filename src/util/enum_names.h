// One table of an enum's names, from which its to_string, its parser and the list of choices an
// error message shows all read, so that each name is written once (docs/architecture.md 6.12).
// Private to libmixp.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mixp::detail {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of v; `missing` for a value the table lacks.
template <class E, size_t N>
constexpr const char* name_of(const EnumName<E> (&table)[N], E v, const char* missing = "?") {
  for (const EnumName<E>& e : table) {
    if (e.value == v) return e.name;
  }
  return missing;
}

// The value named name exactly, or nullopt.
template <class E, size_t N>
constexpr std::optional<E> value_of(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& e : table) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

// Every name, in the table's order.
template <class E, size_t N>
std::vector<std::string> names_of(const EnumName<E> (&table)[N]) {
  std::vector<std::string> v;
  v.reserve(N);
  for (const EnumName<E>& e : table) v.emplace_back(e.name);
  return v;
}

}  // namespace mixp::detail
