// Non-finite scan. Testing the exponent bits (all ones = inf or NaN) keeps the loop branch-light
// and independent of -ffast-math, under which std::isfinite may be folded to `true`.
#include "mixp/data/check_finite.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "mixp/data/error.h"

namespace mixp::data {

namespace {

template <class F, class U, U kExp>
int64_t find_bad(std::span<const F> v) {
  const size_t n = v.size();
  constexpr size_t kBlock = 1024;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    // Vectorisable OR-reduction over the block first; locate the index only when it fires.
    bool any = false;
    for (size_t i = b; i < e; ++i) any |= (std::bit_cast<U>(v[i]) & kExp) == kExp;
    if (!any) continue;
    for (size_t i = b; i < e; ++i) {
      if ((std::bit_cast<U>(v[i]) & kExp) == kExp) return int64_t(i);
    }
  }
  return -1;
}

template <class F>
void check(std::span<const F> v, std::string_view what, int64_t bad) {
  if (bad < 0) return;
  const F x = v[size_t(bad)];
  throw DataError(fmt::format(
      "{}: {} at index {} (of {}); non-finite inputs make every later NaN diagnosis point at the "
      "wrong place: fix or drop the bad values in the source data",
      what, x != x ? "NaN" : (x > 0 ? "+inf" : "-inf"), bad, v.size()));
}

}  // namespace

int64_t find_nonfinite(std::span<const float> v) {
  return find_bad<float, uint32_t, 0x7F800000u>(v);
}
int64_t find_nonfinite(std::span<const double> v) {
  return find_bad<double, uint64_t, 0x7FF0000000000000ull>(v);
}
void check_finite(std::span<const float> v, std::string_view what) {
  check(v, what, find_nonfinite(v));
}
void check_finite(std::span<const double> v, std::string_view what) {
  check(v, what, find_nonfinite(v));
}

}  // namespace mixp::data
