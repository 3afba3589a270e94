// End-to-end: `mixp formats` values and --table, JSON shapes and values (docs/architecture.md 4.3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/cli_runner.h"

namespace mixp::test {
namespace {

using nlohmann::json;

// The entry for `format` in values[i].formats.
json entry(const json& j, size_t i, const std::string& format) {
  for (const json& f : j.at("values").at(i).at("formats")) {
    if (f.at("format") == format) return f;
  }
  ADD_FAILURE() << "no format " << format;
  return json::object();
}

TEST(FormatsCli, PiJson) {
  const CliResult r = run_cli("formats --json 3.14159265");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  const json j = r.json();
  ASSERT_EQ(j.at("values").size(), 1u);
  EXPECT_EQ(j["values"][0]["input"].get<double>(), 3.14159265);
  // Default list, in order.
  std::vector<std::string> names;
  for (const json& f : j["values"][0]["formats"]) names.push_back(f.at("format"));
  EXPECT_EQ(names, (std::vector<std::string>{"fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3",
                                             "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "int8",
                                             "int4", "nf4"}));
  const json f32 = entry(j, 0, "fp32");
  EXPECT_EQ(f32["value"].get<double>(), 3.1415927410125732);
  EXPECT_EQ(f32["bits"], "0x40490fdb");
  EXPECT_EQ(f32["status"], "inexact");
  const json b16 = entry(j, 0, "bf16");
  EXPECT_EQ(b16["value"].get<double>(), 3.140625);
  EXPECT_EQ(b16["bits"], "0x4049");
  EXPECT_EQ(b16["status"], "inexact");
  EXPECT_NEAR(b16["abs_error"].get<double>(), 3.14159265 - 3.140625, 1e-15);
  EXPECT_NEAR(b16["rel_error"].get<double>(), (3.14159265 - 3.140625) / 3.14159265, 1e-15);
  const json f16 = entry(j, 0, "fp16");
  EXPECT_EQ(f16["value"].get<double>(), 3.140625);
  EXPECT_EQ(f16["bits"], "0x4248");
  for (const json& f : j["values"][0]["formats"]) {
    for (const char* key : {"format", "value", "bits", "abs_error", "rel_error", "status"}) {
      EXPECT_TRUE(f.contains(key)) << key;
    }
  }
}

TEST(FormatsCli, PiText) {
  const CliResult r = run_cli("formats 3.14159265");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3.1415927410125732"), std::string::npos);
  EXPECT_NE(r.out.find("0x4049"), std::string::npos);
  EXPECT_NE(r.out.find("0x4248"), std::string::npos);
  EXPECT_NE(r.out.find("0|10000000|1001001"), std::string::npos);  // bf16 sign|exponent|mantissa
}

TEST(FormatsCli, OverflowAndSaturate) {
  const std::string list = "--formats fp32,bf16,fp16,fp8_e4m3,fp8_e5m2,fp4_e2m1,int8 ";
  json j = run_cli("formats --json " + list + "70000").json();
  EXPECT_EQ(entry(j, 0, "fp32")["status"], "exact");
  EXPECT_EQ(entry(j, 0, "fp16")["value"], "inf");
  EXPECT_EQ(entry(j, 0, "fp16")["status"], "overflow");
  EXPECT_EQ(entry(j, 0, "fp16")["bits"], "0x7c00");
  EXPECT_EQ(entry(j, 0, "fp8_e4m3")["value"], "nan");
  EXPECT_EQ(entry(j, 0, "fp8_e4m3")["status"], "overflow");
  EXPECT_EQ(entry(j, 0, "fp8_e5m2")["value"], "inf");
  EXPECT_EQ(entry(j, 0, "fp4_e2m1")["value"].get<double>(), 6.0);
  EXPECT_EQ(entry(j, 0, "int8")["value"].get<double>(), 127.0);
  EXPECT_EQ(entry(j, 0, "int8")["status"], "overflow");
  j = run_cli("formats --json --saturate " + list + "70000").json();
  EXPECT_EQ(j["overflow"], "saturate");
  EXPECT_EQ(entry(j, 0, "fp16")["value"].get<double>(), 65504.0);
  EXPECT_EQ(entry(j, 0, "fp16")["bits"], "0x7bff");
  EXPECT_EQ(entry(j, 0, "fp16")["status"], "overflow");
  EXPECT_EQ(entry(j, 0, "fp8_e4m3")["value"].get<double>(), 448.0);
  EXPECT_EQ(entry(j, 0, "fp8_e5m2")["value"].get<double>(), 57344.0);
}

TEST(FormatsCli, Underflow) {
  const json j = run_cli("formats --json 1e-9").json();
  EXPECT_EQ(entry(j, 0, "fp32")["status"], "inexact");
  EXPECT_EQ(entry(j, 0, "bf16")["status"], "inexact");
  EXPECT_EQ(entry(j, 0, "fp16")["status"], "underflow");
  EXPECT_EQ(entry(j, 0, "fp16")["value"].get<double>(), 0.0);
  EXPECT_EQ(entry(j, 0, "fp16")["rel_error"].get<double>(), 1.0);
  EXPECT_EQ(entry(j, 0, "fp8_e4m3")["status"], "underflow");
}

TEST(FormatsCli, NegativeAndSpecialValues) {
  const CliResult r =
      run_cli("formats --json --formats bf16,fp8_e4m3 -1.5 -inf -.5 nan -0x1p-3 -1e-9");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = r.json();
  ASSERT_EQ(j["values"].size(), 6u);
  EXPECT_EQ(j["values"][0]["input"].get<double>(), -1.5);
  EXPECT_EQ(entry(j, 0, "bf16")["bits"], "0xbfc0");
  EXPECT_EQ(entry(j, 0, "bf16")["status"], "exact");
  EXPECT_EQ(j["values"][1]["input"], "-inf");
  EXPECT_EQ(j["values"][1]["text"], "-inf");
  EXPECT_EQ(entry(j, 1, "bf16")["value"], "-inf");
  EXPECT_EQ(entry(j, 1, "bf16")["status"], "exact");
  EXPECT_EQ(entry(j, 1, "fp8_e4m3")["status"], "overflow");  // E4M3FN has no inf
  EXPECT_EQ(j["values"][2]["input"].get<double>(), -0.5);
  EXPECT_EQ(j["values"][3]["input"], "nan");
  EXPECT_EQ(entry(j, 3, "bf16")["status"], "nan");
  EXPECT_EQ(entry(j, 3, "bf16")["abs_error"], "nan");
  EXPECT_EQ(j["values"][4]["input"].get<double>(), -0.125);
  EXPECT_EQ(entry(j, 5, "fp8_e4m3")["status"], "underflow");
  // After "--" as well, and with options after the values.
  const CliResult r2 = run_cli("formats --formats fp16 -- -inf");
  EXPECT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_NE(r2.out.find("-inf"), std::string::npos);
  const CliResult r3 = run_cli("formats -2.5 --json --formats int8");
  ASSERT_EQ(r3.exit_code, 0) << r3.err;
  EXPECT_EQ(entry(r3.json(), 0, "int8")["value"].get<double>(), -2.0);
}

TEST(FormatsCli, RoundingModes) {
  json j = run_cli("formats --json --round toward-zero --formats bf16,fp16 3.14159265").json();
  EXPECT_EQ(j["round"], "toward-zero");
  EXPECT_EQ(entry(j, 0, "bf16")["value"].get<double>(), 3.140625);
  j = run_cli("formats --json --round toward-zero --formats fp16 70000").json();
  EXPECT_EQ(entry(j, 0, "fp16")["value"].get<double>(),
            65504.0);  // IEEE: RTZ overflow -> max finite
  const CliResult a =
      run_cli("formats --json --round stochastic --seed 7 --formats bf16 0.1 0.1 0.1");
  const CliResult b =
      run_cli("formats --json --round stochastic --seed 7 --formats bf16 0.1 0.1 0.1");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);  // reproducible from the seed
}

TEST(FormatsCli, BadUsage) {
  for (const char* args :
       {"formats 1.2.3", "formats --json 1 abc", "formats --json --formats fp17 1",
        "formats --round sideways 1", "formats", "formats --table 1", "formats --formats e8m0 1",
        "formats --json --formats , 1"}) {
    const CliResult r = run_cli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
    EXPECT_NE(r.err.find("mixp formats: error:"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  EXPECT_NE(run_cli("formats 1.2.3").err.find("'1.2.3'"), std::string::npos);
  EXPECT_NE(run_cli("formats --json 1 abc").err.find("'abc'"), std::string::npos);
  EXPECT_NE(run_cli("formats --formats fp17 1").err.find("bf16"),
            std::string::npos);  // lists known
}

TEST(FormatsCli, TableJson) {
  const CliResult r = run_cli("formats --table --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = r.json();
  ASSERT_GE(j.at("formats").size(), 13u);
  json fp16, e4m3, fp4;
  for (const json& f : j["formats"]) {
    for (const char* key : {"format", "bits", "exponent_bits", "mantissa_bits", "bias",
                            "max_finite", "min_normal", "min_subnormal", "epsilon",
                            "decimal_digits", "has_inf", "nan", "block_size", "scale_type"}) {
      EXPECT_TRUE(f.contains(key)) << f["format"] << " " << key;
    }
    if (f["format"] == "fp16") fp16 = f;
    if (f["format"] == "fp8_e4m3") e4m3 = f;
    if (f["format"] == "fp4_e2m1") fp4 = f;
  }
  EXPECT_EQ(fp16["bits"], 16);
  EXPECT_EQ(fp16["exponent_bits"], 5);
  EXPECT_EQ(fp16["mantissa_bits"], 10);
  EXPECT_EQ(fp16["bias"], 15);
  EXPECT_EQ(fp16["max_finite"].get<double>(), 65504.0);
  EXPECT_EQ(fp16["min_subnormal"].get<double>(), 5.960464477539063e-08);
  EXPECT_EQ(fp16["inf"], "0x7c00");
  EXPECT_EQ(fp16["nan"], "0x7e00");
  EXPECT_EQ(e4m3["has_inf"], false);
  EXPECT_EQ(e4m3["max_finite"].get<double>(), 448.0);
  EXPECT_EQ(fp4["block_size"], 32);
  EXPECT_EQ(fp4["scale_type"], "e8m0");
  const json sub = run_cli("formats --table --json --formats bf16,nf4").json();
  EXPECT_EQ(sub["formats"].size(), 2u);
  const CliResult text = run_cli("formats --table");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("65504"), std::string::npos);
}

// The block-scaled rows of the recipes (issue 32), against hand computations: bits per value
// with the scales, ranges from E2M1 {0.5 .. 6}, E4M3 {2^-9 .. 448}, E8M0 {2^-127 .. 2^127}.
TEST(FormatsCli, TableBlockScaledRows) {
  const json j = run_cli("formats --table --json").json();
  ASSERT_EQ(j["block_scaled"].size(), 5u);
  std::map<std::string, json> rows;
  for (const json& r : j["block_scaled"])
    rows[r["format"].get<std::string>() + " " + r["tile"].get<std::string>()] = r;
  EXPECT_EQ(rows.at("nvfp4 1x16")["bits_per_value"].get<double>(), 4.0 + 8.0 / 16);
  EXPECT_EQ(rows.at("nvfp4 16x16")["bits_per_value"].get<double>(), 4.0 + 8.0 / 256);
  EXPECT_EQ(rows.at("mxfp4 1x32")["bits_per_value"].get<double>(), 4.25);
  EXPECT_EQ(rows.at("fp8-block 1x128")["bits_per_value"].get<double>(), 8.25);
  EXPECT_EQ(rows.at("fp8-block 128x128")["bits_per_value"].get<double>(), 8.0 + 32.0 / 16384);
  const json& nv = rows.at("nvfp4 16x16");
  EXPECT_EQ(nv["relative_to_amax"], true);
  EXPECT_EQ(nv["max"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(nv["min_positive"].get<double>(), 0.5 * std::ldexp(1.0, -9) / 2688.0);
  EXPECT_EQ(nv["block_dynamic_range"].get<double>(), 12.0);
  EXPECT_EQ(nv["block_scale"], "fp8_e4m3");
  const json& mx = rows.at("mxfp4 1x32");
  EXPECT_EQ(mx["min_positive"].get<double>(), std::ldexp(1.0, -128));
  EXPECT_EQ(mx["max"].get<double>(), static_cast<double>(std::numeric_limits<float>::max()));
  EXPECT_EQ(mx["block_scale"], "e8m0");
  const json& f8 = rows.at("fp8-block 128x128");
  EXPECT_EQ(f8["block_dynamic_range"].get<double>(), 448.0 * 512.0);
  EXPECT_EQ(f8["element"], "fp8_e4m3");
  // --formats picks rows by recipe name, alone or with dtypes; the text table shows them.
  const json only = run_cli("formats --table --json --formats nvfp4").json();
  EXPECT_EQ(only["formats"].size(), 0u);
  EXPECT_EQ(only["block_scaled"].size(), 2u);
  EXPECT_EQ(
      run_cli("formats --table --json --formats bf16,fp8-block").json()["block_scaled"].size(), 2u);
  EXPECT_EQ(run_cli("formats --table --json --formats bf16").json()["block_scaled"].size(), 0u);
  const CliResult text = run_cli("formats --table");
  EXPECT_NE(text.out.find("Block-scaled formats"), std::string::npos);
  EXPECT_NE(text.out.find("4.0312"), std::string::npos) << text.out;
  EXPECT_EQ(run_cli("formats --formats nvfp4 1").exit_code, 2);  // values: not a dtype
}

TEST(FormatsCli, HelpHasExamples) {
  const CliResult r = run_cli("formats --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
  EXPECT_NE(r.out.find("unit scale"), std::string::npos);
}

}  // namespace
}  // namespace mixp::test
