// End-to-end: `mixp convert` writes what the library reads back, and every failure leaves no
// output file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "common/cli_runner.h"
#include "mixp/io/quantized_safetensors.h"
#include "mixp/io/safetensors.h"

namespace mixp::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

SafeTensor f32_tensor(const std::string& name, std::vector<int64_t> shape,
                      const std::vector<float>& v) {
  SafeTensor t{name, DType::fp32, std::move(shape), std::vector<std::byte>(v.size() * 4)};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

// A small model file: two fp32 weights and an int64 tensor.
std::string write_model(const TempDir& dir, std::vector<float> extra = {}) {
  SafeTensorsFile f;
  f.metadata["format"] = "pt";
  std::vector<float> w(128), b(32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i) - 3.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 1e-3f * static_cast<float>(i);
  f.tensors.push_back(f32_tensor("layer.weight", {4, 32}, w));
  f.tensors.push_back(f32_tensor("layer.bias", {32}, b));
  if (!extra.empty())
    f.tensors.push_back(f32_tensor("extra", {static_cast<int64_t>(extra.size())}, extra));
  SafeTensor ids{"ids", DType::int64, {2}, std::vector<std::byte>(16)};
  const int64_t v[2] = {7, -7};
  std::memcpy(ids.data.data(), v, 16);
  f.tensors.push_back(ids);
  const std::string path = dir / "model.safetensors";
  write_safetensors(path, f);
  return path;
}

TEST(ConvertCli, Bf16Json) {
  TempDir dir;
  const std::string in = write_model(dir), out = dir / "out.safetensors";
  const CliResult r = run_cli("convert '" + in + "' -o '" + out + "' --to bf16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = r.json();
  EXPECT_EQ(j["to"], "bf16");
  ASSERT_EQ(j["tensors"].size(), 3u);
  EXPECT_EQ(j["tensors"][0]["name"], "layer.weight");
  EXPECT_EQ(j["tensors"][0]["from"], "F32");
  EXPECT_EQ(j["tensors"][0]["to"], "BF16");
  EXPECT_EQ(j["tensors"][0]["bytes_before"], 512);
  EXPECT_EQ(j["tensors"][0]["bytes_after"], 256);
  EXPECT_GT(j["tensors"][0]["max_abs_error"].get<double>(), 0.0);
  EXPECT_EQ(j["tensors"][2]["converted"], false);
  const SafeTensorsFile f = read_safetensors(out);
  EXPECT_EQ(f.find("layer.weight")->dtype, DType::bf16);
  EXPECT_EQ(f.find("ids")->dtype, DType::int64);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  const std::vector<float> back = read_tensor_f32(f, "layer.weight");
  EXPECT_NEAR(back[1], 0.05f - 3.0f, 0.01);
}

TEST(ConvertCli, BlockFormatsAndText) {
  TempDir dir;
  const std::string in = write_model(dir);
  for (const char* to : {"mxfp4", "fp4_e2m1", "nf4", "int8", "int8_affine", "mxfp8_e4m3", "int4"}) {
    const std::string out = dir / (std::string(to) + ".safetensors");
    const CliResult r = run_cli("convert '" + in + "' -o '" + out + "' --to " + to);
    ASSERT_EQ(r.exit_code, 0) << to << ": " << r.err;
    EXPECT_NE(r.out.find("layer.weight"), std::string::npos);
    EXPECT_NE(r.out.find("total"), std::string::npos);
    const SafeTensorsFile f = read_safetensors(out);
    EXPECT_TRUE(is_block_tensor(f, "layer.weight")) << to;
    EXPECT_EQ(f.find("layer.weight")->dtype, DType::uint8);
    EXPECT_NE(f.find("layer.weight.scale"), nullptr);
    std::vector<int64_t> shape;
    const std::vector<float> back = read_tensor_f32(f, "layer.weight", &shape);
    EXPECT_EQ(shape, (std::vector<int64_t>{4, 32}));
    EXPECT_NEAR(back[0], -3.0f, 0.6f) << to;
  }
  EXPECT_NE(read_safetensors(dir / "int8_affine.safetensors").find("layer.weight.zero_point"),
            nullptr);
  const CliResult r = run_cli("convert '" + in + "' -o '" + (dir / "b16.safetensors").string() +
                              "' --to mxfp4 --block 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_safetensors(dir / "b16.safetensors")
                .metadata.at("mixp.layer.weight")
                .find("\"block\":16"),
            std::string::npos);
}

TEST(ConvertCli, RoundingSaturateSeed) {
  TempDir dir;
  const std::string in = write_model(dir, {1.0f, 70000.0f});
  // E4M3 has no infinity: an overflow would be stored as NaN, so without --saturate the
  // conversion is refused (exit 2, naming --saturate and E4M3's largest value), and no file is
  // written.
  CliResult r =
      run_cli("convert '" + in + "' -o '" + (dir / "a.safetensors").string() + "' --to fp8_e4m3 --json");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("1 value(s) (the first in tensor 'extra')"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has no infinity: they would be stored as NaN"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Add --saturate to store them as +-448"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "a.safetensors"));
  // E5M2 has one: the overflow is stored as inf, reported as such.
  r = run_cli("convert '" + in + "' -o '" + (dir / "e5.safetensors").string() + "' --to fp8_e5m2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("inf (1 overflowed to inf)"), std::string::npos) << r.out;
  r = run_cli("convert '" + in + "' -o '" + (dir / "e5.safetensors").string() +
              "' --to fp8_e5m2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["tensors"][2]["max_abs_error"], "inf");
  EXPECT_EQ(r.json()["tensors"][2]["nonfinite_created"], 1);
  r = run_cli("convert '" + in + "' -o '" + (dir / "s.safetensors").string() +
              "' --to fp8_e4m3 --saturate --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_tensor_f32(read_safetensors(dir / "s.safetensors"), "extra")[1], 448.0f);
  for (const char* name : {"x1", "x2"}) {
    r = run_cli("convert '" + in + "' -o '" + (dir / name).string() +
                "' --to bf16 --round stochastic --seed 5");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(read_text(dir.path() / "x1"), read_text(dir.path() / "x2"));
  r = run_cli("convert '" + in + "' -o '" + (dir / "tz").string() + "' --to bf16 --round toward-zero");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(ConvertCli, FailuresLeaveNoOutputFile) {
  TempDir dir;
  const std::string in = write_model(dir, {1.0f, std::numeric_limits<float>::quiet_NaN()});
  {
    std::ofstream bad(dir / "bad.safetensors", std::ios::binary);
    bad << "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}       ";
  }
  const std::string out = dir / "out.safetensors";
  const std::vector<std::string> cases = {
      "convert '" + (dir / "missing.safetensors").string() + "' -o '" + out + "' --to bf16",
      "convert '" + (dir / "bad.safetensors").string() + "' -o '" + out + "' --to bf16",
      "convert '" + in + "' -o '" + out + "' --to fp17",
      "convert '" + in + "' -o '" + out + "' --to mxfp4 --block 0",
      "convert '" + in + "' -o '" + out + "' --to mxfp4 --block -4",
      "convert '" + in + "' -o '" + out + "' --to bf16 --block 32",
      "convert '" + in + "' -o '" + out + "' --to nf4 --block 3",
      "convert '" + in + "' -o '" + out + "' --to nf4 --round toward-zero",
      "convert '" + in + "' -o '" + out + "' --to int8",  // NaN cannot be stored in int8
      "convert '" + in + "' -o '" + out + "' --to bf16 --round sideways",
      "convert '" + in + "' -o '" + (dir / "no/such/dir/out.safetensors").string() + "' --to bf16",
      "convert '" + in + "' --to bf16",
      "convert '" + in + "' -o '" + out + "' --to bf16 --json --block x",
      "convert '" + in + "' -o '" + out + "' --to nvfp4 --tile 2x16",
      "convert '" + in + "' -o '" + out + "' --to fp8-block --tile 16x16",
      "convert '" + in + "' -o '" + out + "' --to bf16 --tile 1x16",
      "convert '" + in + "' -o '" + out + "' --to nvfp4 --pow2-scales",
      "convert '" + in + "' -o '" + out + "' --to mxfp4 --scale-mode up",
  };
  for (const std::string& c : cases) {
    const CliResult r = run_cli(c);
    EXPECT_NE(r.exit_code, 0) << c;
    EXPECT_FALSE(fs::exists(out)) << c;
    EXPECT_TRUE(r.out.empty()) << c << ": " << r.out;
    EXPECT_EQ(r.err.rfind("mixp convert: error: ", 0), 0u) << c << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c << ": " << r.err;
  }
  // Nothing but the inputs is left in the directory (no temporaries either).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2);
  EXPECT_NE(run_cli("convert '" + in + "' -o '" + out + "' --to fp17").err.find("mxfp4"),
            std::string::npos);
  EXPECT_EQ(run_cli("convert '" + in + "' -o '" + out + "' --to fp17").exit_code, 2);  // usage
  EXPECT_EQ(run_cli("convert '" + in + "' -o '" + out + "' --to nf4 --block 3").exit_code, 2);
  EXPECT_EQ(run_cli("convert '" + (dir / "missing").string() + "' -o '" + out + "' --to bf16").exit_code, 1);
  EXPECT_NE(run_cli("convert '" + in + "' -o '" + out + "' --to int8").err.find("'extra'"),
            std::string::npos);
}

// The recipes' formats (issue 32; docs/fp4.md "Files and tools"): the weight is quantized, the
// 1-D bias kept, and `--to fp32` of the file decodes it to what the library's reader gives
// (tests/io/test_block_scaled_safetensors.cpp pins that to the quantizer, byte for byte).
TEST(ConvertCli, RecipeFormatsRoundTrip) {
  TempDir dir;
  const std::string in = write_model(dir);
  const std::vector<std::string> runs = {"--to nvfp4", "--to nvfp4 --tile 1x16",
                                         "--to fp8-block --tile 1x128 --pow2-scales",
                                         "--to mxfp4 --scale-mode ceil"};
  for (const std::string& flags : runs) {
    const std::string q = dir / "q.safetensors", back = dir / "back.safetensors";
    CliResult r = run_cli("convert '" + in + "' -o '" + q + "' " + flags + " --json");
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.err;
    const json j = r.json();
    EXPECT_EQ(j["tensors"][0]["to"], flags.substr(5, flags.find(' ', 5) - 5)) << flags;
    const bool mx = flags.find("mxfp4") != std::string::npos;
    EXPECT_EQ(j["tensors"][1]["converted"], mx) << flags;  // the bias [32]
    r = run_cli("convert '" + q + "' -o '" + back + "' --to fp32");
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.err;
    const SafeTensorsFile qf = read_safetensors(q), bf = read_safetensors(back);
    EXPECT_EQ(read_tensor_f32(bf, "layer.weight"), read_tensor_f32(qf, "layer.weight")) << flags;
    EXPECT_EQ(bf.find("layer.weight")->dtype, DType::fp32);
    EXPECT_TRUE(bf.metadata.empty() || !bf.metadata.count("mixp.layer.weight"));
  }
}

TEST(ConvertCli, Help) {
  const CliResult r = run_cli("convert --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
}

}  // namespace
}  // namespace mixp::test
