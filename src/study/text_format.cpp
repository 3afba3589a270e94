#include "study/text_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace mixp::study::detail {
namespace {

// The report's one minus sign (docs/report.md, "The files"): U+2212, also in an exponent.
std::string unicode_minus(std::string s) {
  for (size_t i = s.find('-'); i != std::string::npos; i = s.find('-', i + 3)) {
    s.replace(i, 1, "\u2212");
  }
  return s;
}

}  // namespace

std::string format_ratio(double x) {
  if (!std::isfinite(x)) return "–";
  if (x >= 9.95) return fmt::format("{:.0f}x", x);
  if (x >= 0.095) return fmt::format("{:.1f}x", x);
  return fmt::format("{:.2f}x", x);
}

std::string format_percent(double fraction, int decimals) {
  if (!std::isfinite(fraction)) return "–";
  std::string s = fmt::format("{:.{}f}%", fraction * 100.0, decimals);
  return unicode_minus(s);
}

std::string format_accuracy(double fraction) {
  if (!std::isfinite(fraction)) return "–";
  return fmt::format("{:.2f}%", fraction * 100.0);
}

std::string format_signed(double v, int decimals, bool unicode_minus) {
  if (!std::isfinite(v)) return "–";
  std::string mag = fmt::format("{:.{}f}", std::fabs(v), decimals);
  bool zero = mag.find_first_not_of("0.") == std::string::npos;
  if (zero) return mag;
  if (v < 0) return (unicode_minus ? std::string("\u2212") : std::string("-")) + mag;
  return "+" + mag;
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes) || bytes < 0) return "–";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  if (bytes >= 100) return fmt::format("{:.0f} {}", bytes, units[u]);
  if (bytes >= 10) return fmt::format("{:.1f} {}", bytes, units[u]);
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "–";
  if (s < 1.0) return fmt::format("{:.0f} ms", s * 1000.0);
  if (s < 60.0) return fmt::format("{:.{}f} s", s, s < 10 ? 2 : 1);
  int64_t total = int64_t(std::llround(s));
  if (total < 3600) return fmt::format("{} min {:02d} s", total / 60, int(total % 60));
  return fmt::format("{} h {:02d} min", total / 3600, int((total % 3600) / 60));
}

std::string format_number(double v, int sig) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "−inf");
  double a = std::fabs(v);
  if (a != 0 && (a >= 1e7 || a < 1e-4)) return unicode_minus(fmt::format("{:.{}g}", v, sig));
  int digits_before = a >= 1 ? int(std::floor(std::log10(a))) + 1 : 1;
  int decimals = std::max(0, sig - digits_before);
  if (a < 1 && a > 0) decimals = std::max(decimals, int(-std::floor(std::log10(a))) + sig - 1);
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return unicode_minus(s);
}

std::string format_sig(double v, int sig) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "−inf");
  double a = std::fabs(v);
  if (a == 0) return "0";
  int digits_before = int(std::floor(std::log10(a))) + 1;
  int decimals = std::clamp(sig - digits_before, 0, 9);
  return unicode_minus(fmt::format("{:.{}f}", v, decimals));
}

std::string format_joules(double j) {
  if (!std::isfinite(j)) return "–";
  double a = std::fabs(j);
  if (a >= 1e6) return format_number(j / 1e6, 3) + " MJ";
  if (a >= 1e3) return format_number(j / 1e3, 3) + " kJ";
  if (a >= 1) return format_number(j, 3) + " J";
  if (a >= 1e-3) return format_number(j * 1e3, 3) + " mJ";
  if (a >= 1e-6) return format_number(j * 1e6, 3) + " µJ";
  if (a == 0) return "0 J";
  return format_number(j * 1e9, 3) + " nJ";
}

std::string format_loss(double v) {
  if (!std::isfinite(v)) return "NaN";
  // Four significant digits, trailing zeros kept: losses sit in columns (0.3500 beside 0.3187).
  const double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 1e7 || a < 1e-4) return fmt::format("{:.4g}", v);
  const int digits_before = a >= 1 ? int(std::floor(std::log10(a))) + 1 : 1;
  int decimals = std::max(0, 4 - digits_before);
  if (a < 1) decimals = std::max(decimals, int(-std::floor(std::log10(a))) + 3);
  return fmt::format("{:.{}f}", v, decimals);
}

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  int c = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (c && c % 3 == 0) out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++c;
  }
  return n < 0 ? "-" + out : out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string md_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace mixp::study::detail
