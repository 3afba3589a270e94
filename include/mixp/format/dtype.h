// The dtype registry: one X-macro list generates `enum class DType`, the constexpr traits table
// and the name lookups (docs/architecture.md 3.1; ggml's type_traits). Add a format here and every
// switch over DType that lacks it fails to compile with -Wswitch.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "mixp/format/float_codec.h"

namespace mixp {

enum class DKind : uint8_t {
  floating,  // binary floating point (fp64 ... fp4)
  integer,   // two's complement or unsigned integers
  codebook,  // values are indices into a fixed table (nf4)
  scale,     // power-of-two scale (e8m0)
  boolean,
};

// X(id, name, bits, exp_bits, man_bits, bias, kind, specials, is_signed, block, scale, safetensors)
//   block/scale: block size and scale type for formats used only with a per-block scale (0 = none).
//   safetensors: the dtype string in a .safetensors header ("" where the format has none).
#define MIXP_DTYPE_LIST(X)                                                                  \
  X(fp64, "fp64", 64, 11, 52, 1023, floating, ieee, true, 0, fp32, "F64")                   \
  X(fp32, "fp32", 32, 8, 23, 127, floating, ieee, true, 0, fp32, "F32")                     \
  X(tf32, "tf32", 32, 8, 10, 127, floating, ieee, true, 0, fp32, "")                        \
  X(bf16, "bf16", 16, 8, 7, 127, floating, ieee, true, 0, fp32, "BF16")                     \
  X(fp16, "fp16", 16, 5, 10, 15, floating, ieee, true, 0, fp32, "F16")                      \
  X(fp8_e4m3, "fp8_e4m3", 8, 4, 3, 7, floating, fn, true, 0, fp32, "F8_E4M3")               \
  X(fp8_e5m2, "fp8_e5m2", 8, 5, 2, 15, floating, ieee, true, 0, fp32, "F8_E5M2")            \
  X(fp6_e2m3, "fp6_e2m3", 6, 2, 3, 1, floating, finite, true, 32, e8m0, "")                 \
  X(fp6_e3m2, "fp6_e3m2", 6, 3, 2, 3, floating, finite, true, 32, e8m0, "")                 \
  X(fp4_e2m1, "fp4_e2m1", 4, 2, 1, 1, floating, finite, true, 32, e8m0, "")                 \
  X(e8m0, "e8m0", 8, 8, 0, 127, scale, finite, false, 0, fp32, "")                          \
  X(int8, "int8", 8, 0, 0, 0, integer, finite, true, 0, fp32, "I8")                         \
  X(uint8, "uint8", 8, 0, 0, 0, integer, finite, false, 0, fp32, "U8")                      \
  X(int4, "int4", 4, 0, 0, 0, integer, finite, true, 64, fp32, "")                          \
  X(nf4, "nf4", 4, 0, 0, 0, codebook, finite, true, 64, fp32, "")                           \
  X(int32, "int32", 32, 0, 0, 0, integer, finite, true, 0, fp32, "I32")                     \
  X(int64, "int64", 64, 0, 0, 0, integer, finite, true, 0, fp32, "I64")                     \
  X(boolean, "bool", 8, 0, 0, 0, boolean, finite, false, 0, fp32, "BOOL")

enum class DType : uint8_t {
#define MIXP_X(id, ...) id,
  MIXP_DTYPE_LIST(MIXP_X)
#undef MIXP_X
};

inline constexpr int kNumDTypes = 0
#define MIXP_X(...) +1
    MIXP_DTYPE_LIST(MIXP_X)
#undef MIXP_X
    ;

struct DTypeTraits {
  DType id;
  std::string_view name;
  int bits;          // bits of one element (4 and 6 for sub-byte formats)
  int exp_bits;      // floating/scale formats only
  int man_bits;      // explicit mantissa bits
  int bias;          // exponent bias
  DKind kind;
  Specials specials;
  bool is_signed;
  int block_size;    // elements sharing one scale, for block-only formats; 0 otherwise
  DType scale_dtype; // the block scale's type when block_size > 0
  std::string_view safetensors;
  double max_finite;     // largest finite value (integers: largest value; nf4: 1.0)
  double min_normal;     // smallest positive normal (floats); 1 for integers
  double min_subnormal;  // smallest positive value
  int storage_bytes;     // bytes one element occupies in a plain (unpacked) tensor
  bool has_inf() const { return kind == DKind::floating && specials == Specials::ieee; }
  bool has_nan() const { return specials != Specials::finite || kind == DKind::scale; }
  bool is_float() const { return kind == DKind::floating; }
  // Decimal digits of precision, log10(2^(man_bits+1)); epsilon = 2^-man_bits.
  double decimal_digits() const;
  double epsilon() const;
  // The encoder description for formats that float_codec handles (every floating one but fp64).
  FloatFormat float_format() const { return FloatFormat{exp_bits, man_bits, bias, specials}; }
};

const DTypeTraits& traits(DType t);
inline std::string_view name(DType t) { return traits(t).name; }
std::span<const DTypeTraits> all_dtypes();

// Lookup by registry name ("bf16"); also accepts common aliases (float32, half, bfloat16, e4m3...).
std::optional<DType> find_dtype(std::string_view name);
// Like find_dtype, but throws std::invalid_argument listing the known names.
DType parse_dtype(std::string_view name);
// Comma-separated list of registry names, for error messages and --help.
std::string dtype_names(bool floating_only = false);
std::optional<DType> dtype_from_safetensors(std::string_view s);

// C++ value type <-> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::fp64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::fp32; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::int8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::uint8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::int64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace mixp

