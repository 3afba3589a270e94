// How one value is stored in a format: the stored value, its bits, the error and what happened
// (exact, inexact, overflow, underflow, NaN). `mixp formats` prints this; anyone teaching or
// debugging number formats can call it directly. Also the static facts of each format (range,
// precision, special encodings) behind `mixp formats --table`.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "mixp/format/dtype.h"
#include "mixp/format/rounding.h"

namespace mixp {

// Parses a number as a user types it: decimal ("3.14159265", "-1e-9"), C99 hex-float ("0x1.8p3",
// "-0x1p-24"), "inf"/"infinity"/"nan" in any case, each with an optional sign, surrounded by
// optional white space. Decimal input is correctly rounded to double (from_chars); magnitudes
// beyond double's range give +-inf, below it +-0, as strtod does. nullopt when the text is not one
// complete number.
std::optional<double> parse_real(std::string_view text);

// The formats `mixp formats` shows by default, in this order:
// fp64 fp32 tf32 bf16 fp16 fp8_e4m3 fp8_e5m2 fp6_e2m3 fp6_e3m2 fp4_e2m1 int8 int4 nf4.
std::span<const DType> describe_default_formats();

// True for the formats describe_value accepts: every floating format, the integers, nf4.
// (e8m0 holds only block scales and bool no numbers.)
bool is_describable(DType t);

struct StoredValue {
  DType format;
  double input;
  double value;   // the stored value, decoded exactly; integers/nf4 at unit scale
  uint64_t bits;  // the element's bits, right-aligned; tf32 in its 32-bit fp32 layout;
                  // int8/int4 two's complement; nf4 the code index 0..15
  ConvertStatus status;
  double abs_error;  // |value - input|; 0 for inf stored as the same inf; NaN when NaN is involved
  double rel_error;  // abs_error / |input|; 0 when input and value are both 0
};

// Stores x in `t` the way mixp's converters do: floating formats round from the double directly
// (no double rounding through fp32) with `round` and `overflow`; `random_bits` is read by
// Round::stochastic only (float_codec.h gives the rule).
//
// Integer formats and nf4 are shown at unit scale, i.e. as if the block/tensor scale were 1:
// integers round with `round` and always saturate to their range (status overflow when the
// rounded value does not fit); nf4 takes the nearest of its 16 code values (ties to the lower
// code; toward_zero takes the neighbour nearer zero, stochastic picks a neighbour with probability
// proportional to closeness) and saturates at +-1. A NaN input stores 0 in formats without NaN
// (fp6, fp4, integers, nf4) with status nan. Throws std::invalid_argument for e8m0 and bool.
StoredValue describe_value(DType t, double x, Round round, Overflow overflow, uint32_t random_bits);

// Width of the element's bit pattern as shown: 64, 32 (fp32 and tf32), 16, 8, 6 or 4.
int display_bits(DType t);
// "0x4049": lower-case hex, as many digits as display_bits(t) needs.
std::string bits_hex(DType t, uint64_t bits);
// The bits in groups: floats "sign|exponent|mantissa" ("0|10000000|1001001" for bf16 pi; tf32
// shows its 10 mantissa bits), integers and nf4 as one binary group ("11111101").
std::string bit_fields(DType t, uint64_t bits);

// The static facts of a format, for tables. Optional fields are absent where they do not apply
// (an integer has no exponent; a format without inf has no inf encoding).
struct FormatFacts {
  DType format;
  std::string_view kind;             // "floating", "integer", "codebook", "scale", "boolean"
  int bits;                          // bits of one element
  std::optional<int> exponent_bits;  // floating and scale formats
  std::optional<int> mantissa_bits;  // explicit (stored) mantissa bits
  std::optional<int> bias;
  double max_finite;                 // integers: the largest value; nf4: 1 (times the block scale)
  std::optional<double> min_normal;  // floating formats
  double min_positive;               // smallest positive value (min subnormal for floats)
  std::optional<double> epsilon;     // spacing above 1: 2^-mantissa_bits for floats, 1 for integers
  double decimal_digits;             // log10(2^(mantissa_bits+1)) for floats
  std::optional<uint64_t> inf_bits;  // +inf
  std::optional<uint64_t> nan_bits;  // the canonical (quiet, positive) NaN mixp produces
  std::string_view nan_rule;         // which patterns are NaN, in words ("none" where none are)
  int block_size;                    // 0 unless the format is used only with a per-block scale
  std::optional<DType> scale_dtype;  // the block scale's type when block_size > 0
  std::string_view safetensors;      // the .safetensors dtype string, "" where there is none
};
FormatFacts format_facts(DType t);

}  // namespace mixp
