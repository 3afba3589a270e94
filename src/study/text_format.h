// Number and text formatting shared by the verdict sentences and the report writers (internal).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mixp::study::detail {

// "1.8x", "12x" (ratios); "–" for a missing value.
std::string format_ratio(double x);
// A fraction as a percentage with `decimals` digits: 0.423 -> "42%" (decimals 0).
std::string format_percent(double fraction, int decimals = 0);
// Accuracy fraction 0.9123 -> "91.23%".
std::string format_accuracy(double fraction);
// Points with sign: -0.1 -> "−0.10", +0.3 -> "+0.30" (U+2212 minus for the report).
std::string format_signed(double v, int decimals, bool unicode_minus = true);
// 12345678 -> "11.8 MiB"; keeps three significant digits.
std::string format_bytes(double bytes);
// Seconds -> "850 ms", "12.3 s", "4 min 05 s".
std::string format_duration(double seconds);
// Joules -> "12.3 J", "1.23 kJ", "4.5 mJ".
std::string format_joules(double joules);
// A plain number with up to `sig` significant digits, no exponent for ordinary magnitudes.
std::string format_number(double v, int sig = 4);
// Exactly `sig` significant digits, zeros kept: 5 -> "5.00", 12.34 -> "12.3", 1234 -> "1234".
std::string format_sig(double v, int sig = 3);
// A loss value: 4 significant digits, "NaN" when not finite.
std::string format_loss(double v);
// The steps of a run in a short form: 1200 -> "1,200".
std::string format_count(int64_t n);

// Escaping for HTML text and attribute values (& < > " ').
std::string html_escape(std::string_view s);
// Escaping for a Markdown table cell (| and newlines).
std::string md_escape(std::string_view s);

}  // namespace mixp::study::detail
