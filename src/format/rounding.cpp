#include "mixp/format/rounding.h"

#include <stdexcept>
#include <string>

#include "util/enum_names.h"
#include "util/text.h"

namespace mixp {

namespace {
constexpr detail::EnumName<Round> kRoundNames[] = {{Round::nearest_even, "nearest-even"},
                                                   {Round::toward_zero, "toward-zero"},
                                                   {Round::stochastic, "stochastic"},
                                                   {Round::nearest_away, "nearest-away"}};
constexpr detail::EnumName<ConvertStatus> kStatusNames[] = {{ConvertStatus::exact, "exact"},
                                                            {ConvertStatus::inexact, "inexact"},
                                                            {ConvertStatus::overflow, "overflow"},
                                                            {ConvertStatus::underflow, "underflow"},
                                                            {ConvertStatus::nan, "nan"}};
}  // namespace

std::string_view to_string(Round r) {
  return detail::name_of(kRoundNames, r);
}

std::string_view to_string(Overflow o) {
  return o == Overflow::ieee ? "ieee" : "saturate";
}

std::string_view to_string(ConvertStatus s) {
  return detail::name_of(kStatusNames, s);
}

Round parse_round(std::string_view s) {
  std::string k(s);
  for (char& c : k) c = (c == '_') ? '-' : c;
  if (const auto r = detail::value_of(kRoundNames, k)) return *r;
  if (k == "rne" || k == "nearest") return Round::nearest_even;
  if (k == "rtz" || k == "truncate") return Round::toward_zero;
  if (k == "sr") return Round::stochastic;
  if (k == "rna") return Round::nearest_away;
  throw std::invalid_argument("unknown rounding mode '" + std::string(s) + "'; use " +
                              detail::join_or(detail::names_of(kRoundNames)));
}

}  // namespace mixp
