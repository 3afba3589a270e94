// The one parser of mixp's comma-separated key=value option lists, and of their values:
//
//   policy strings         bf16:compute=fp16,ln_save=fp32           (amp/policy.cpp)
//   FP8 recipe options     fp8:amax_history=16,margin=1             (train/fp8_recipe.cpp)
//   per-layer rules        --layer-precision embed=fp32,head=fp8    (amp/layer_precision.cpp)
//
// and of the recipe spec they follow ("base:key=value,..."). Every error names the list, the key
// and what the key takes. Errors are KeyValueError (std::invalid_argument); each module turns it
// into its own error type at its API boundary (amp::PolicyError, train::ConfigError). Private to
// libmixp.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mixp::detail {

class KeyValueError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct KeyValue {
  std::string key;    // trimmed; lower case when the syntax says so
  std::string value;  // trimmed, as written
};

// How a list is named in messages, and which keys it takes.
struct KeyValueSyntax {
  std::string_view list = {};     // "policy string", "--layer-precision"
  std::string_view entry = {};    // the form of one entry: "key=value", "layer=dtype"
  std::string_view example = {};  // "'bf16:params=fp32,compute=bf16'"
  std::string_view noun = {};     // how a key is called: "policy key" (unknown/twice messages)
  std::span<const std::string> keys = {};  // the keys it takes; empty: any key
  bool lower_keys = false;                 // keys are case-insensitive (returned in lower case)
};

// Splits "a=1, b = 2" into ordered pairs. An empty text gives none; a trailing comma is allowed.
// Throws KeyValueError for an empty entry between commas, an entry without '=' or without a key,
// when syntax.keys is not empty, for a key it does not list, and for a key given twice.
std::vector<KeyValue> split_key_values(std::string_view text, const KeyValueSyntax& syntax);

// A recipe spec split at its first ':' (when that comes before any '='): "bf16:compute=fp16" is
// {"bf16", "compute=fp16", true}; "compute=fp16" (keys alone) is {"", "compute=fp16", false};
// "bf16" is {"bf16", "", false}. Both parts trimmed.
struct SpecParts {
  std::string base;
  std::string options;
  bool has_colon = false;
};
SpecParts split_spec(std::string_view spec);

// "<noun> '<key>' takes <takes>, got '<value>'<note>".
[[noreturn]] void throw_value_error(std::string_view noun, std::string_view key,
                                    std::string_view value, std::string_view takes,
                                    std::string_view note = "");

// The index of `value` among `choices` (case-insensitive). A choice may list aliases after its
// name, separated by '|' ("on|true|1|yes"); messages show the names only ("takes on or off").
size_t parse_choice(std::string_view noun, std::string_view key, std::string_view value,
                    std::initializer_list<std::string_view> choices, std::string_view note = "");
// on/true/1/yes or off/false/0/no.
bool parse_on_off(std::string_view noun, std::string_view key, std::string_view value);
// A whole decimal integer in [lo, hi].
int64_t parse_integer(std::string_view noun, std::string_view key, std::string_view value,
                      int64_t lo, int64_t hi);
// A positive number that is finite in fp32.
double parse_positive(std::string_view noun, std::string_view key, std::string_view value);

}  // namespace mixp::detail
