#include "mixp/format/rounding.h"

#include <stdexcept>
#include <string>

namespace mixp {

std::string_view to_string(Round r) {
  switch (r) {
    case Round::nearest_even: return "nearest-even";
    case Round::toward_zero: return "toward-zero";
    case Round::stochastic: return "stochastic";
    case Round::nearest_away: return "nearest-away";
  }
  return "?";
}

std::string_view to_string(Overflow o) {
  return o == Overflow::ieee ? "ieee" : "saturate";
}

std::string_view to_string(ConvertStatus s) {
  switch (s) {
    case ConvertStatus::exact: return "exact";
    case ConvertStatus::inexact: return "inexact";
    case ConvertStatus::overflow: return "overflow";
    case ConvertStatus::underflow: return "underflow";
    case ConvertStatus::nan: return "nan";
  }
  return "?";
}

Round parse_round(std::string_view s) {
  std::string k(s);
  for (char& c : k) c = (c == '_') ? '-' : c;
  if (k == "nearest-even" || k == "rne" || k == "nearest") return Round::nearest_even;
  if (k == "toward-zero" || k == "rtz" || k == "truncate") return Round::toward_zero;
  if (k == "stochastic" || k == "sr") return Round::stochastic;
  if (k == "nearest-away" || k == "rna") return Round::nearest_away;
  throw std::invalid_argument("unknown rounding mode '" + std::string(s) +
                              "'; use nearest-even, toward-zero, stochastic or nearest-away");
}

}  // namespace mixp
