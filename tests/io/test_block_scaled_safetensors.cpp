// The recipes' block-scaled formats in files (io/block_scaled_safetensors.h, issue 32): `convert
// --to nvfp4|fp8-block|mxfp4 (ceil)` then `--to fp32` gives, byte for byte, the quantizer's
// dequantization of its quantization; the documented layout; corrupt and truncated files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "mixp/format/block_scaled.h"
#include "mixp/io/block_scaled_safetensors.h"
#include "mixp/io/convert_safetensors.h"
#include "mixp/io/quantized_safetensors.h"

namespace mixp {
namespace {

// 40 x 70: neither dimension a multiple of 16, 32 or 128 (partial tiles at both edges); a zero
// row, a tie (0.25 of a scale step is not constructed here, the quantizer tests own that), a big
// outlier so that small blocks use subnormal E4M3 scales.
std::vector<float> weight_values() {
  std::vector<float> v(40 * 70);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] =
        0.8f * std::sin(0.61f * static_cast<float>(i)) * std::exp(-0.002f * static_cast<float>(i));
  for (int c = 0; c < 70; ++c) v[static_cast<size_t>(5 * 70 + c)] = 0.0f;
  v[123] = 900.0f;
  v[2000] = -1e-6f;
  return v;
}

template <class T>
SafeTensor make(const std::string& name, DType dt, std::vector<int64_t> shape,
                const std::vector<T>& v) {
  SafeTensor t{name, dt, std::move(shape), std::vector<std::byte>(v.size() * sizeof(T))};
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

SafeTensorsFile model() {
  SafeTensorsFile f;
  f.metadata["format"] = "pt";
  f.tensors.push_back(make("w", DType::fp32, {40, 70}, weight_values()));
  f.tensors.push_back(make("bias", DType::fp32, {70}, std::vector<float>(70, 0.3f)));
  f.tensors.push_back(make("ids", DType::int64, {2}, std::vector<int64_t>{1, 2}));
  return f;
}

SafeTensorsFile reread(const SafeTensorsFile& f) {
  return parse_safetensors(serialize_safetensors(f), "mem");
}

struct Case {
  const char* to;
  int tile_rows;
  bool pow2;
  BlockScaledOptions q;  // the quantizer the file must equal
};

std::vector<Case> cases() {
  return {{"nvfp4", 0, false, {BlockScheme::nvfp4, 16, false}},
          {"nvfp4", 1, false, {BlockScheme::nvfp4, 1, false}},
          {"fp8-block", 0, false, {BlockScheme::fp8_block, 128, false}},
          {"fp8-block", 1, true, {BlockScheme::fp8_block, 1, true}}};
}

std::vector<std::byte> bytes_of(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(BlockScaledFile, Fp32OfTheFileIsTheQuantizersDequantizeByteForByte) {
  for (const Case& c : cases()) {
    FileConvertOptions o;
    o.to = c.to;
    o.tile_rows = c.tile_rows;
    o.pow2_scales = c.pow2;
    const SafeTensorsFile q = reread(convert_safetensors(model(), o).file);
    FileConvertOptions back;
    back.to = "fp32";
    const FileConversion f = convert_safetensors(q, back);
    const BlockScaledTensor want_q = block_scaled_quantize(weight_values(), 40, 70, c.q);
    std::vector<float> want(40 * 70);
    block_scaled_dequantize(want_q, want);
    const SafeTensor* w = f.file.find("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dtype, DType::fp32);
    EXPECT_EQ(w->shape, (std::vector<int64_t>{40, 70}));
    EXPECT_EQ(w->data, bytes_of(want)) << c.to << " tile " << c.tile_rows;
    EXPECT_EQ(f.tensors[0].from, c.to);
    // The 1-D bias and the integers were kept as they were, and stay so.
    EXPECT_EQ(q.find("bias")->data, model().find("bias")->data);
    EXPECT_EQ(q.find("bias")->dtype, DType::fp32);
    EXPECT_EQ(f.file.find("bias")->data, model().find("bias")->data);
    EXPECT_EQ(f.file.find("ids")->data, model().find("ids")->data);
    EXPECT_TRUE(f.file.metadata.count("mixp.w") == 0);
    // And the stored codes and scales are the quantizer's (not merely an equal decoding).
    const BlockScaledTensor got = get_block_scaled_tensor(q, "w");
    EXPECT_EQ(got.codes, want_q.codes);
    EXPECT_EQ(got.scales, want_q.scales);
    EXPECT_EQ(got.scale_codes, want_q.scale_codes);
    EXPECT_EQ(got.global_amax, want_q.global_amax);
  }
}

TEST(BlockScaledFile, Mxfp4CeilIsTheRecipeQuantizerInMxStorage) {
  FileConvertOptions o;
  o.to = "mxfp4";
  o.scale_mode = "ceil";
  const SafeTensorsFile q = reread(convert_safetensors(model(), o).file);
  ASSERT_TRUE(is_block_tensor(q, "w"));
  EXPECT_FALSE(is_block_scaled_tensor(q, "w"));
  EXPECT_EQ(get_block_tensor(q, "w").scheme, "mxfp4");
  EXPECT_NE(q.metadata.at("mixp.w").find("\"scale_mode\":\"ceil\""), std::string::npos);
  const BlockScaledTensor want_q =
      block_scaled_quantize(weight_values(), 40, 70, {BlockScheme::mxfp4, 1, false});
  std::vector<float> want(40 * 70);
  block_scaled_dequantize(want_q, want);
  FileConvertOptions back;
  back.to = "fp32";
  EXPECT_EQ(convert_safetensors(q, back).file.find("w")->data, bytes_of(want));
  EXPECT_EQ(get_block_tensor(q, "w").scales, want_q.scale_codes);
  // floor (OCP MX, the default) differs from ceil on this tensor.
  FileConvertOptions floor_o;
  floor_o.to = "mxfp4";
  EXPECT_NE(convert_safetensors(model(), floor_o).file.find("w.scale")->data,
            q.find("w.scale")->data);
}

TEST(BlockScaledFile, DocumentedLayout) {
  FileConvertOptions o;
  o.to = "nvfp4";
  const SafeTensorsFile f = reread(convert_safetensors(model(), o).file);
  EXPECT_EQ(f.find("w")->dtype, DType::uint8);
  EXPECT_EQ(f.find("w")->shape, (std::vector<int64_t>{1400}));  // 2800 codes, two per byte
  EXPECT_EQ(f.find("w.scale")->dtype, DType::uint8);
  EXPECT_EQ(f.find("w.scale")->shape, (std::vector<int64_t>{3, 5}));  // ceil(40/16) x ceil(70/16)
  EXPECT_EQ(f.find("w.amax")->dtype, DType::fp32);
  EXPECT_EQ(f.find("w.amax")->shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(logical_tensor_names(f), (std::vector<std::string>{"w", "bias", "ids"}));
  // The storage block reader (weight-only loading) says what the tensor is instead of failing on
  // an unknown scheme.
  try {
    (void)get_block_tensor(f, "w");
    ADD_FAILURE() << "get_block_tensor accepted an nvfp4 tensor";
  } catch (const SafeTensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("nvfp4 training layout"), std::string::npos) << e.what();
  }
  // Element 2i in the low nibble.
  const BlockScaledTensor q = get_block_scaled_tensor(f, "w");
  const auto b0 = static_cast<uint8_t>(f.find("w")->data[0]);
  EXPECT_EQ(b0, static_cast<uint8_t>(q.codes[0] | (q.codes[1] << 4)));
  EXPECT_EQ(f.metadata.at("mixp.w"),
            R"({"scheme":"nvfp4","shape":[40,70],"tile":[16,16],"element":"fp4_e2m1",)"
            R"("scale_dtype":"fp8_e4m3","source_dtype":"F32"})");
  o.to = "fp8-block";
  const SafeTensorsFile g = reread(convert_safetensors(model(), o).file);
  EXPECT_EQ(g.find("w")->shape, (std::vector<int64_t>{2800}));
  EXPECT_EQ(g.find("w.scale")->dtype, DType::fp32);
  EXPECT_EQ(g.find("w.scale")->shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(g.find("w.amax"), nullptr);
  EXPECT_NE(g.metadata.at("mixp.w").find("\"pow2_scales\":false"), std::string::npos);
}

TEST(BlockScaledFile, OptionsThatDoNotApplyAreRefused) {
  const auto refused = [](FileConvertOptions o) {
    EXPECT_THROW(validate_convert_options(o), std::invalid_argument) << o.to;
  };
  FileConvertOptions o;
  o.to = "nvfp4";
  o.tile_rows = 2;
  refused(o);
  o.tile_rows = 0;
  o.block_size = 32;
  refused(o);
  o.block_size = 0;
  o.pow2_scales = true;
  refused(o);
  o = {};
  o.to = "fp8-block";
  o.round = Round::stochastic;  // the fp8 recipe rounds to nearest
  refused(o);
  o = {};
  o.to = "bf16";
  o.scale_mode = "ceil";
  refused(o);
  o.to = "mxfp4";
  o.scale_mode = "up";
  refused(o);
  o.scale_mode = "ceil";
  o.block_size = 16;
  refused(o);
  o = {};
  o.to = "int4";
  o.tile_rows = 16;
  refused(o);
  o.to = "nvfp4";
  o.round = Round::stochastic;
  EXPECT_NO_THROW(validate_convert_options(o));
  EXPECT_TRUE(resolve_convert_target("fp8_block").block_scaled);
  EXPECT_NE(convert_target_names().find("nvfp4, fp8-block"), std::string::npos);
}

// Each corruption of a valid nvfp4 / fp8-block file is refused with a message naming the tensor.
void expect_refused(const SafeTensorsFile& f, const std::string& why) {
  try {
    (void)read_tensor_f32(f, "w");
    ADD_FAILURE() << "accepted: " << why;
  } catch (const SafeTensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
  FileConvertOptions back;
  back.to = "fp32";
  EXPECT_THROW(convert_safetensors(f, back), SafeTensorsError) << why;
}

TEST(BlockScaledFile, CorruptFilesGiveClearErrors) {
  FileConvertOptions o;
  o.to = "nvfp4";
  const SafeTensorsFile nv = convert_safetensors(model(), o).file;
  o.to = "fp8-block";
  const SafeTensorsFile f8 = convert_safetensors(model(), o).file;
  SafeTensorsFile f = nv;
  f.find("w")->data.pop_back();  // codes truncated
  f.find("w")->shape[0] -= 1;
  expect_refused(f, "short codes");
  f = nv;
  std::erase_if(f.tensors, [](const SafeTensor& t) { return t.name == "w.amax"; });
  expect_refused(f, "no amax");
  f = nv;
  f.find("w.amax")->data = bytes_of({std::nanf("")});
  expect_refused(f, "NaN amax");
  f = nv;
  f.find("w.scale")->data[0] = std::byte{0x80};  // a negative E4M3 scale
  expect_refused(f, "negative scale");
  f = nv;
  f.find("w.scale")->dtype = DType::int8;
  expect_refused(f, "scale dtype");
  f = nv;
  f.metadata["mixp.w"] = R"({"scheme":"nvfp4","shape":[40,70],"tile":[8,16],)"
                         R"("element":"fp4_e2m1","scale_dtype":"fp8_e4m3"})";
  expect_refused(f, "tile 8x16");
  f.metadata["mixp.w"] = R"({"scheme":"nvfp4","shape":[40,71],"tile":[16,16],)"
                         R"("element":"fp4_e2m1","scale_dtype":"fp8_e4m3"})";
  expect_refused(f, "shape disagrees with the codes");
  f.metadata["mixp.w"] = R"({"scheme":"nvfp4","shape":[2800]})";
  expect_refused(f, "missing fields");
  f.metadata["mixp.w"] = R"({"scheme":"nvfp4","shape":[2800],"tile":[16,16],)"
                         R"("element":"fp4_e2m1","scale_dtype":"fp8_e4m3"})";
  expect_refused(f, "1-D shape");
  f = f8;
  f.find("w")->data[7] = std::byte{0x7F};  // an E4M3 NaN code
  expect_refused(f, "NaN code");
  f = f8;
  f.find("w.scale")->data = bytes_of({-1.0f});
  expect_refused(f, "negative fp8 scale");
  f = f8;
  f.metadata["mixp.w"] = R"({"scheme":"fp8-block","shape":[40,70],"tile":[128,128],)"
                         R"("element":"fp4_e2m1","scale_dtype":"fp32"})";
  expect_refused(f, "wrong element");
}

TEST(BlockScaledFile, EveryTruncationOfTheFileIsRejected) {
  FileConvertOptions o;
  o.to = "nvfp4";
  SafeTensorsFile small;
  small.tensors.push_back(make("w", DType::fp32, {2, 20}, std::vector<float>(40, 1.5f)));
  const std::vector<std::byte> bytes = serialize_safetensors(convert_safetensors(small, o).file);
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_THROW((void)read_tensor_f32(parse_safetensors(cut, "cut"), "w"), SafeTensorsError) << n;
  }
  std::vector<float> want(40);
  block_scaled_dequantize(
      block_scaled_quantize(std::vector<float>(40, 1.5f), 2, 20, {BlockScheme::nvfp4, 16, false}),
      want);
  EXPECT_EQ(read_tensor_f32(parse_safetensors(bytes, "whole"), "w"), want);
}

}  // namespace
}  // namespace mixp
