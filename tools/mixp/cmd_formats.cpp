// `mixp formats`: how values are stored in each number format, and the formats' facts (--table).
// The work is mixp::describe_value / mixp::format_facts (include/mixp/format/describe.h).
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "flag_range.h"
#include "mixp/format/describe.h"
#include "mixp/format/recipe_facts.h"
#include "output.h"

namespace mixp::cli {
namespace {

struct FormatsArgs {
  bool json = false;
  bool table = false;
  bool saturate = false;
  std::string formats;
  std::string round = "nearest-even";
  uint64_t seed = 0;
  std::vector<std::string> values;
};

// The training recipes' block-scaled formats, named in --formats of --table (not dtypes).
bool is_recipe_name(const std::string& n) {
  return n == "nvfp4" || n == "mxfp4" || n == "fp8-block" || n == "fp8_block";
}

// The rows of block_scaled_facts() that --table shows: all by default, else those named.
std::vector<BlockScaledFacts> chosen_block_rows(const FormatsArgs& a) {
  std::vector<BlockScaledFacts> out;
  for (BlockScaledFacts& f : block_scaled_facts()) {
    bool keep = a.formats.empty();
    for (const std::string& n : split_list(a.formats))
      keep = keep ||
             (is_recipe_name(n) && (n == f.name || (n == "fp8_block" && f.name == "fp8-block")));
    if (keep) out.push_back(std::move(f));
  }
  return out;
}

std::vector<DType> chosen_formats(const FormatsArgs& a, bool table) {
  std::vector<DType> out;
  if (a.formats.empty()) {
    const auto d = describe_default_formats();
    out.assign(d.begin(), d.end());
    if (table) out.push_back(DType::e8m0);  // the MX block scale belongs in the table
    return out;
  }
  bool recipes = false;
  for (const std::string& n : split_list(a.formats)) {
    if (table && is_recipe_name(n)) {
      recipes = true;
      continue;
    }
    const auto t = find_dtype(n);
    if (!t) {
      throw UsageError("--formats: unknown format '" + n + "'; known formats: " + dtype_names() +
                       (table ? " and the block-scaled nvfp4, mxfp4, fp8-block" : ""));
    }
    if (!table && !is_describable(*t)) {
      throw UsageError("--formats: '" + n + "' does not store values on its own (it is a " +
                       (*t == DType::e8m0 ? "block scale" : "flag type") + "); see --table");
    }
    out.push_back(*t);
  }
  if (out.empty() && !recipes) throw UsageError("--formats: the list is empty");
  return out;
}

bool is_unit_scale(DType t) {
  const DKind k = traits(t).kind;
  return k == DKind::integer || k == DKind::codebook;
}

void run_values(const FormatsArgs& a) {
  if (a.values.empty()) throw UsageError("give at least one VALUE (or --table); see --help");
  const std::vector<DType> formats = chosen_formats(a, false);
  Round round;
  try {
    round = parse_round(a.round);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--round: ") + e.what());
  }
  const Overflow overflow = a.saturate ? Overflow::saturate : Overflow::ieee;
  // Parse everything before printing anything: a bad value leaves stdout empty.
  std::vector<double> inputs;
  std::vector<std::string> texts;  // as typed, without the space main.cpp puts before "-inf"
  for (const std::string& v : a.values) {
    texts.push_back(v.substr(std::min(v.find_first_not_of(' '), v.size())));
    const auto x = parse_real(v);
    if (!x) {
      throw UsageError(
          "cannot read VALUE '" + texts.back() +
          "' as a number (use decimal like -1.5e-3, hex-float like 0x1.8p3, inf or nan)");
    }
    inputs.push_back(*x);
  }

  std::vector<std::vector<StoredValue>> results;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto& row = results.emplace_back();
    for (DType t : formats)
      row.push_back(describe_value(t, inputs[i], round, overflow, sr_bits(a.seed, i)));
  }

  if (a.json) {
    Json values = Json::array();
    for (size_t i = 0; i < inputs.size(); ++i) {
      Json fs = Json::array();
      for (const StoredValue& s : results[i]) {
        fs.push_back({{"format", name(s.format)},
                      {"value", json_number(s.value)},
                      {"bits", bits_hex(s.format, s.bits)},
                      {"fields", bit_fields(s.format, s.bits)},
                      {"abs_error", json_number(s.abs_error)},
                      {"rel_error", json_number(s.rel_error)},
                      {"status", to_string(s.status)},
                      {"unit_scale", is_unit_scale(s.format)}});
      }
      values.push_back({{"input", json_number(inputs[i])}, {"text", texts[i]}, {"formats", fs}});
    }
    print_json(
        {{"values", values}, {"round", to_string(round)}, {"overflow", to_string(overflow)}});
    return;
  }

  bool any_unit_scale = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i > 0) std::cout << "\n";
    std::cout << texts[i] << "\n";
    TextTable tt({"format", "stored value", "bits", "abs error", "rel error", "status",
                  "sign|exponent|mantissa"});
    for (const StoredValue& s : results[i]) {
      std::string fmt_name(name(s.format));
      if (is_unit_scale(s.format)) {
        fmt_name += "*";
        any_unit_scale = true;
      }
      tt.add({fmt_name, shortest(s.value), bits_hex(s.format, s.bits),
              fmt::format("{:.3g}", s.abs_error), fmt::format("{:.3g}", s.rel_error),
              std::string(to_string(s.status)), bit_fields(s.format, s.bits)});
    }
    tt.print(std::cout);
  }
  std::cout << "\nrounding " << to_string(round) << ", overflow " << to_string(overflow) << "\n";
  if (any_unit_scale) {
    std::cout << "* at unit scale: integer and nf4 tensors carry a scale per block or tensor "
                 "(`mixp convert --to int8|int4|nf4` computes it)\n";
  }
}

std::string opt_text(const std::optional<double>& v) {
  return v ? fmt::format("{:.6g}", *v) : "-";
}
template <class T>
Json opt_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

void run_table(const FormatsArgs& a) {
  if (!a.values.empty()) throw UsageError("--table takes no VALUE arguments");
  const std::vector<DType> formats = chosen_formats(a, true);
  const std::vector<BlockScaledFacts> block_rows = chosen_block_rows(a);
  std::vector<FormatFacts> facts;
  for (DType t : formats) facts.push_back(format_facts(t));
  const auto hex = [](const FormatFacts& f, const std::optional<uint64_t>& b) {
    return b ? bits_hex(f.format, *b) : std::string();
  };
  if (a.json) {
    Json out = Json::array();
    for (const FormatFacts& f : facts) {
      out.push_back({{"format", name(f.format)},
                     {"kind", f.kind},
                     {"bits", f.bits},
                     {"exponent_bits", opt_json(f.exponent_bits)},
                     {"mantissa_bits", opt_json(f.mantissa_bits)},
                     {"bias", opt_json(f.bias)},
                     {"max_finite", f.max_finite},
                     {"min_normal", opt_json(f.min_normal)},
                     {"min_subnormal", f.min_positive},
                     {"epsilon", opt_json(f.epsilon)},
                     {"decimal_digits", f.decimal_digits},
                     {"has_inf", f.inf_bits.has_value()},
                     {"inf", f.inf_bits ? Json(hex(f, f.inf_bits)) : Json(nullptr)},
                     {"has_nan", f.nan_bits.has_value()},
                     {"nan", f.nan_bits ? Json(hex(f, f.nan_bits)) : Json(nullptr)},
                     {"nan_encodings", f.nan_rule},
                     {"block_size", f.block_size},
                     {"scale_type", f.scale_dtype ? Json(name(*f.scale_dtype)) : Json(nullptr)},
                     {"safetensors", f.safetensors.empty() ? Json(nullptr) : Json(f.safetensors)}});
    }
    Json blocks = Json::array();
    for (const BlockScaledFacts& f : block_rows) {
      blocks.push_back({{"format", f.name},
                        {"tile", fmt::format("{}x{}", f.tile_rows, f.tile_cols)},
                        {"element", name(f.element)},
                        {"block_scale", f.block_scale},
                        {"tensor_scale", f.tensor_scale},
                        {"bits_per_value", f.bits_per_value},
                        {"max", f.max_value},
                        {"min_positive", f.min_positive},
                        {"relative_to_amax", f.relative_to_amax},
                        {"block_dynamic_range", f.block_dynamic_range},
                        {"tensor_dynamic_range", f.tensor_dynamic_range}});
    }
    print_json({{"formats", out}, {"block_scaled", blocks}});
    return;
  }
  TextTable tt({"format", "bits", "E", "M", "bias", "max finite", "min normal", "min subnormal",
                "epsilon", "digits", "inf", "NaN", "block", "NaN encodings"});
  const auto opt_int = [](const std::optional<int>& v) { return v ? std::to_string(*v) : "-"; };
  for (const FormatFacts& f : facts) {
    std::string block = "-";
    if (f.block_size > 0) block = fmt::format("{} x {}", f.block_size, name(*f.scale_dtype));
    tt.add({std::string(name(f.format)), std::to_string(f.bits), opt_int(f.exponent_bits),
            opt_int(f.mantissa_bits), opt_int(f.bias), fmt::format("{:.6g}", f.max_finite),
            opt_text(f.min_normal), fmt::format("{:.6g}", f.min_positive), opt_text(f.epsilon),
            fmt::format("{:.2f}", f.decimal_digits), f.inf_bits ? hex(f, f.inf_bits) : "none",
            f.nan_bits ? hex(f, f.nan_bits) : "none", block, std::string(f.nan_rule)});
  }
  if (!facts.empty()) {
    tt.print(std::cout);
    std::cout << "\nE/M: exponent/mantissa bits; digits: log10(2^(M+1)); min subnormal: smallest "
                 "positive value;\nint4/nf4 and the MX elements (fp6, fp4) are stored with a "
                 "scale per block.\n";
  }
  if (block_rows.empty()) return;
  if (!facts.empty()) std::cout << "\n";
  std::cout << "Block-scaled formats of the training recipes (--precision; docs/fp4.md):\n";
  TextTable bt({"format", "tile", "element", "block scale", "tensor scale", "bits/value", "max",
                "min positive", "block range", "tensor range"});
  for (const BlockScaledFacts& f : block_rows) {
    const auto val = [&](double v) {
      return f.relative_to_amax ? fmt::format("{:.3g} amax", v) : fmt::format("{:.3g}", v);
    };
    bt.add({f.name, fmt::format("{}x{}", f.tile_rows, f.tile_cols), std::string(name(f.element)),
            std::string(f.block_scale), std::string(f.tensor_scale),
            fmt::format("{:.5g}", f.bits_per_value), val(f.max_value), val(f.min_positive),
            fmt::format("2^{:.1f}", std::log2(f.block_dynamic_range)),
            fmt::format("2^{:.1f}", std::log2(f.tensor_dynamic_range))});
  }
  bt.print(std::cout);
  std::cout << "\nbits/value includes the block scales (nvfp4's per-tensor fp32 adds 32 bits per "
               "tensor);\nnvfp4 scales each tensor so that its amax is the largest value; "
               "range: max / min positive.\n";
}

RegisterCommand reg(10, [](CLI::App& app) {
  auto args = std::make_shared<FormatsArgs>();
  auto* sub = app.add_subcommand(
      "formats", "how each value is stored in each number format; --table: the formats' facts");
  sub->add_flag("--json", args->json, "print one JSON object on stdout");
  sub->add_flag("--table", args->table,
                "print range, precision and encoding of every format instead of converting values");
  sub->add_option(
      "--formats", args->formats,
      "comma-separated formats to show (default: fp64,fp32,tf32,bf16,fp16,fp8_e4m3,fp8_e5m2,"
      "fp6_e2m3,fp6_e3m2,fp4_e2m1,int8,int4,nf4)");
  sub->add_option("--round", args->round,
                  "rounding: nearest-even (default), toward-zero, stochastic, nearest-away");
  sub->add_flag("--saturate", args->saturate,
                "clamp overflow to the largest finite value instead of the format's inf/NaN");
  sub->add_option("--seed", args->seed,
                  "seed of the random bits for --round stochastic (default 0)");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  shared_flag_ranges(*sub);  // --seed
  sub->add_option("values", args->values,
                  "numbers: decimal (3.14159265, -1e-9), hex-float (0x1.8p3), inf, -inf, nan");
  sub->footer(
      "Each value is rounded from its double directly into each format (no double rounding).\n"
      "Status: exact | inexact | overflow | underflow (non-zero became zero) | nan.\n"
      "int8, int4 and nf4 are shown at unit scale (marked *): in a tensor they carry a scale per\n"
      "block (int4/nf4: 64 values) or per tensor, which `mixp convert --to int8|int4|nf4` "
      "computes;\n"
      "the same holds for the MX element types fp6/fp4 (`mixp convert --to mxfp4`). Integers "
      "always\n"
      "saturate. JSON writes inf/NaN as the strings \"inf\", \"-inf\", \"nan\".\n\n"
      "Examples:\n"
      "  mixp formats 3.14159265\n"
      "  mixp formats --formats fp32,bf16,fp16,fp8_e4m3,fp8_e5m2 70000 1e-7 -1.5\n"
      "  mixp formats --saturate --formats fp8_e4m3 500\n"
      "  mixp formats --round toward-zero --json 0.1\n"
      "  mixp formats --table\n"
      "  mixp formats -- -inf        (or just: mixp formats -inf)\n");
  sub->callback([args] { args->table ? run_table(*args) : run_values(*args); });
});

}  // namespace
}  // namespace mixp::cli
