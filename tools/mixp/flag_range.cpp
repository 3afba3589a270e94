// The numeric flags' range validator (flag_range.h).
#include "flag_range.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace mixp::cli {
namespace {

// main.cpp's protect_negative_numbers gives negative values a leading space; strtod skips it.
std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b);
}

// A decimal integer (optional sign, digits only), as a long double so that overflow is
// detected rather than clamped; false when the text is not one.
bool read_integer(const std::string& text, long double& out) {
  const std::string t = trimmed(text);
  size_t i = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
  if (i == t.size()) return false;
  for (size_t j = i; j < t.size(); ++j) {
    if (t[j] < '0' || t[j] > '9') return false;
  }
  out = std::strtold(t.c_str(), nullptr);  // exact for the ranges checked (below 2^64)
  return true;
}

std::string integer_error(const std::string& text, long double lo, long double hi) {
  return fmt::format("must be an integer from {:.0Lf} to {:.0Lf}, got '{}'", lo, hi,
                     trimmed(text));
}

CLI::Validator integer_validator(long double lo, long double hi) {
  CLI::Validator v(
      [lo, hi](std::string& text) -> std::string {
        long double x = 0;
        if (!read_integer(text, x) || !(x >= lo && x <= hi)) return integer_error(text, lo, hi);
        // CLI11 reads it with strtoll/strtoull in base 0, where a leading 0 means octal: drop
        // leading zeros so that "010" is ten.
        text = trimmed(text);
        const bool neg = !text.empty() && text[0] == '-';
        size_t b = (neg || (!text.empty() && text[0] == '+')) ? 1 : 0;
        while (b + 1 < text.size() && text[b] == '0') ++b;
        text = (neg ? "-" : "") + text.substr(b);
        return {};
      },
      fmt::format("[{:.0Lf}, {:.0Lf}]", lo, hi));
  return v;
}

}  // namespace

CLI::Option* int_range(CLI::Option* option, int64_t lo, int64_t hi) {
  return option->check(integer_validator(static_cast<long double>(lo), static_cast<long double>(hi)));
}

CLI::Option* uint_range(CLI::Option* option, uint64_t hi) {
  return option->check(integer_validator(0.0L, static_cast<long double>(hi)));
}

CLI::Option* real_range(CLI::Option* option, double lo, double hi, bool lo_open) {
  const std::string range = fmt::format("{}{:g}, {:g}]", lo_open ? "(" : "[", lo, hi);
  CLI::Validator v(
      [lo, hi, lo_open, range](std::string& text) -> std::string {
        const std::string t = trimmed(text);
        char* end = nullptr;
        const double x = t.empty() ? NAN : std::strtod(t.c_str(), &end);
        const bool parsed = !t.empty() && end == t.c_str() + t.size();
        if (!parsed || !std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
          return fmt::format("must be a number in {}, got '{}'", range, t);
        }
        return {};
      },
      range);
  return option->check(v);
}

}  // namespace mixp::cli

namespace mixp::cli {

void shared_flag_ranges(CLI::App& command) {
  auto opt = [&](const char* flag) -> CLI::Option* {
    for (CLI::Option* o : command.get_options()) {
      if (o->check_name(flag)) return o;
    }
    return nullptr;
  };
  struct IntRange {
    const char* flag;
    int64_t lo, hi;
  };
  // Generous bounds: what a run could ask for on a large machine. Memory that a value asks for
  // is checked separately before training (memory_check.h).
  constexpr int64_t kCount = 1'000'000'000;  // steps, samples: more than any run here takes
  const IntRange ints[] = {
      {"--batch", 1, (int64_t{1} << 31) - 1},
      {"--epochs", 1, 1'000'000},
      {"--steps", 1, kCount},
      {"--grad-accum", 1, 1 << 20},
      {"--threads", 1, 4096},
      {"--width", 1, 1 << 20},
      {"--layers", 1, 4096},
      {"--heads", 1, 4096},
      {"--kv-heads", 1, 4096},
      {"--context", 1, 1 << 20},
      {"--mlp-width", 1, 1 << 22},
      {"--vocab", 1, 1 << 24},
      {"--train-limit", 1, int64_t{1} << 53},
      {"--test-limit", 1, int64_t{1} << 53},
  };
  for (const IntRange& r : ints) {
    if (CLI::Option* o = opt(r.flag)) int_range(o, r.lo, r.hi);
  }
  // Any finite fp32 learning rate: a huge one is how people provoke divergence on purpose (issue
  // 28's own reproductions use --lr 1e6); the range refuses only what cannot be an fp32 rate.
  if (CLI::Option* o = opt("--lr")) real_range(o, 0, 0x1.fffffep127, /*lo_open=*/true);
  if (CLI::Option* o = opt("--seed")) uint_range(o, UINT64_MAX);
}

}  // namespace mixp::cli
