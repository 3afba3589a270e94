// convert_safetensors and the block-tensor storage of quantized_safetensors.h: every target,
// round trips through the file format, pass-through, errors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "mixp/format/block_tensor.h"
#include "mixp/format/convert.h"
#include "mixp/format/float_codec.h"
#include "mixp/io/convert_safetensors.h"
#include "mixp/io/quantized_safetensors.h"

namespace mixp {
namespace {

template <class T>
SafeTensor make(const std::string& name, DType dt, std::vector<int64_t> shape,
                const std::vector<T>& v) {
  SafeTensor t{name, dt, std::move(shape), std::vector<std::byte>(v.size() * sizeof(T))};
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + 0.1f);
  return v;
}

SafeTensorsFile sample() {
  SafeTensorsFile f;
  f.metadata["format"] = "pt";
  f.tensors.push_back(make("w", DType::fp32, {4, 64}, ramp(256, 3.0f)));
  f.tensors.push_back(make("bias", DType::fp32, {64}, ramp(64, 0.01f)));
  f.tensors.push_back(make("ids", DType::int64, {3}, std::vector<int64_t>{1, -2, 3}));
  return f;
}

FileConvertOptions to(const std::string& t) {
  FileConvertOptions o;
  o.to = t;
  return o;
}

// The file as a reader would see it after writing (serialize + parse).
SafeTensorsFile reread(const SafeTensorsFile& f) {
  const std::vector<std::byte> bytes = serialize_safetensors(f);
  return parse_safetensors(bytes);
}

TEST(ConvertTarget, Names) {
  EXPECT_FALSE(resolve_convert_target("bf16").block);
  EXPECT_EQ(resolve_convert_target("bfloat16").name, "bf16");
  EXPECT_EQ(resolve_convert_target("fp4_e2m1").name, "mxfp4");
  EXPECT_TRUE(resolve_convert_target("fp4_e2m1").block);
  EXPECT_EQ(resolve_convert_target("fp6_e3m2").name, "mxfp6_e3m2");
  EXPECT_TRUE(resolve_convert_target("nf4").block);
  EXPECT_TRUE(resolve_convert_target("int8").block);
  EXPECT_TRUE(resolve_convert_target("mxfp8_e4m3").block);
  EXPECT_FALSE(resolve_convert_target("fp8_e4m3").block);
  try {
    resolve_convert_target("fp17");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("mxfp4"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos);
  }
  EXPECT_THROW(resolve_convert_target("e8m0"), std::invalid_argument);
}

TEST(ConvertFile, Bf16ElementTarget) {
  const SafeTensorsFile in = sample();
  const FileConversion c = convert_safetensors(in, to("bf16"));
  const SafeTensorsFile out = reread(c.file);
  EXPECT_EQ(out.metadata.at("format"), "pt");
  ASSERT_EQ(out.tensors.size(), 3u);
  const SafeTensor& w = *out.find("w");
  EXPECT_EQ(w.dtype, DType::bf16);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{4, 64}));
  const std::vector<float> orig = ramp(256, 3.0f);
  double max_err = 0;
  for (size_t i = 0; i < orig.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, w.data.data() + 2 * i, 2);
    EXPECT_EQ(b, encode_float(kBf16, orig[i], Round::nearest_even, Overflow::ieee, 0, nullptr));
    max_err = std::max(max_err, std::fabs(decode_float(kBf16, b) - orig[i]));
  }
  EXPECT_EQ(c.tensors[0].max_abs_error, max_err);
  EXPECT_EQ(c.tensors[0].bytes_before, 1024u);
  EXPECT_EQ(c.tensors[0].bytes_after, 512u);
  EXPECT_EQ(c.tensors[0].from, "F32");
  EXPECT_EQ(c.tensors[0].to, "BF16");
  // Integers pass through.
  EXPECT_EQ(out.find("ids")->dtype, DType::int64);
  EXPECT_EQ(out.find("ids")->data, in.find("ids")->data);
  EXPECT_FALSE(c.tensors[2].converted);
}

TEST(ConvertFile, EveryElementTargetRoundTrips) {
  for (const char* t : {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}) {
    const FileConversion c = convert_safetensors(sample(), to(t));
    const SafeTensorsFile out = reread(c.file);
    const std::vector<float> back = read_tensor_f32(out, "w");
    const std::vector<float> orig = ramp(256, 3.0f);
    double max_err = 0;
    for (size_t i = 0; i < orig.size(); ++i)
      max_err = std::max(max_err, std::fabs(double{back[i]} - orig[i]));
    EXPECT_EQ(max_err, c.tensors[0].max_abs_error) << t;
    EXPECT_LE(max_err, 3.0 * traits(*find_dtype(t)).epsilon()) << t;
  }
  // tf32 is stored as F32 values on the tf32 grid.
  const SafeTensorsFile tf = convert_safetensors(sample(), to("tf32")).file;
  EXPECT_EQ(tf.find("w")->dtype, DType::fp32);
  for (float v : read_tensor_f32(tf, "w")) EXPECT_EQ(std::bit_cast<uint32_t>(v) & 0x1FFFu, 0u);
}

TEST(ConvertFile, OverflowAndSaturate) {
  SafeTensorsFile in;
  in.tensors.push_back(make("x", DType::fp32, {3}, std::vector<float>{1.0f, 70000.0f, -1e6f}));
  FileConversion c = convert_safetensors(in, to("fp16"));
  EXPECT_EQ(c.tensors[0].nonfinite_created, 2u);
  EXPECT_EQ(c.tensors[0].max_abs_error, HUGE_VAL);
  FileConvertOptions sat = to("fp8_e4m3");
  sat.overflow = Overflow::saturate;
  c = convert_safetensors(in, sat);
  EXPECT_EQ(c.tensors[0].nonfinite_created, 0u);
  EXPECT_EQ(read_tensor_f32(c.file, "x")[1], 448.0f);
}

TEST(ConvertFile, F64RoundsFromTheDouble) {
  // 1 + 2^-11 + 2^-40: rounding via fp32 would tie and go to 1 in fp16; from the double it is
  // 1+2^-10.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  SafeTensorsFile in;
  in.tensors.push_back(make("d", DType::fp64, {1}, std::vector<double>{x}));
  const FileConversion c = convert_safetensors(in, to("fp16"));
  EXPECT_EQ(read_tensor_f32(c.file, "d")[0], 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(c.tensors[0].from, "F64");
  const FileConversion wide = convert_safetensors(in, to("fp64"));
  EXPECT_EQ(wide.file.find("d")->data, in.find("d")->data);
  EXPECT_EQ(wide.tensors[0].max_abs_error, 0.0);
}

TEST(ConvertFile, BlockTargetsRoundTripThroughTheFile) {
  for (const std::string& scheme : block_scheme_names()) {
    FileConvertOptions o = to(scheme);
    const FileConversion c = convert_safetensors(sample(), o);
    const SafeTensorsFile out = reread(c.file);
    ASSERT_TRUE(is_block_tensor(out, "w")) << scheme;
    EXPECT_EQ(out.find("w")->dtype, DType::uint8);
    ASSERT_NE(out.find("w.scale"), nullptr) << scheme;
    EXPECT_EQ(logical_tensor_names(out), (std::vector<std::string>{"w", "bias", "ids"})) << scheme;
    // What the file decodes to is exactly what the block library produces.
    BlockSpec spec{scheme, 0, Round::nearest_even, 0};
    const std::vector<float> orig = ramp(256, 3.0f);
    const BlockTensor b = quantize_block(orig, {4, 64}, spec);
    std::vector<float> want(256);
    dequantize_block(b, want);
    std::vector<int64_t> shape;
    const std::vector<float> got = read_tensor_f32(out, "w", &shape);
    EXPECT_EQ(shape, (std::vector<int64_t>{4, 64}));
    EXPECT_EQ(got, want) << scheme;
    const BlockTensor back = get_block_tensor(out, "w");
    EXPECT_EQ(back.scheme, scheme);
    EXPECT_EQ(back.data, b.data);
    EXPECT_EQ(back.scales, b.scales);
    EXPECT_EQ(back.zero_points, b.zero_points);
    EXPECT_EQ(c.tensors[0].to, scheme);
    EXPECT_LT(c.tensors[0].bytes_after, c.tensors[0].bytes_before) << scheme;
  }
  // The description names the scheme, shape, block, element and scale type.
  const SafeTensorsFile mx = convert_safetensors(sample(), to("fp4_e2m1")).file;
  const std::string& d = mx.metadata.at("mixp.w");
  for (const char* s : {"\"scheme\":\"mxfp4\"", "\"shape\":[4,64]", "\"block\":32",
                        "\"element\":\"fp4_e2m1\"", "\"scale_dtype\":\"e8m0\""}) {
    EXPECT_NE(d.find(s), std::string::npos) << d;
  }
  FileConvertOptions b16 = to("mxfp4");
  b16.block_size = 16;
  const SafeTensorsFile mx16 = convert_safetensors(sample(), b16).file;
  EXPECT_NE(mx16.metadata.at("mixp.w").find("\"block\":16"), std::string::npos);
  EXPECT_EQ(mx16.find("w.scale")->shape, (std::vector<int64_t>{4, 4}));
}

TEST(ConvertFile, BlockSourceIsDecodedFirst) {
  const SafeTensorsFile nf4 = reread(convert_safetensors(sample(), to("nf4")).file);
  const FileConversion c = convert_safetensors(nf4, to("fp32"));
  EXPECT_EQ(c.tensors.size(), 3u);
  EXPECT_EQ(c.tensors[0].from, "nf4");
  EXPECT_EQ(c.file.find("w.scale"), nullptr);
  EXPECT_EQ(c.file.metadata.count("mixp.w"), 0u);
  EXPECT_EQ(read_tensor_f32(c.file, "w"), read_tensor_f32(nf4, "w"));
  EXPECT_EQ(c.tensors[0].max_abs_error, 0.0);
}

TEST(ConvertFile, StochasticIsReproducible) {
  FileConvertOptions o = to("bf16");
  o.round = Round::stochastic;
  o.seed = 42;
  EXPECT_EQ(convert_safetensors(sample(), o).file.find("w")->data,
            convert_safetensors(sample(), o).file.find("w")->data);
  o.seed = 43;
  EXPECT_NE(convert_safetensors(sample(), o).file.find("w")->data,
            convert_safetensors(sample(), to("bf16")).file.find("w")->data);
}

TEST(ConvertFile, Errors) {
  FileConvertOptions bad = to("bf16");
  bad.block_size = 32;
  EXPECT_THROW(convert_safetensors(sample(), bad), std::invalid_argument);
  bad = to("mxfp4");
  bad.block_size = -1;
  EXPECT_THROW(convert_safetensors(sample(), bad), std::invalid_argument);
  EXPECT_THROW(convert_safetensors(sample(), to("nonsense")), std::invalid_argument);
  // The scheme's own rules are checked before any tensor is touched.
  bad = to("nf4");
  bad.block_size = 3;  // two 4-bit codes per byte
  EXPECT_THROW(validate_convert_options(bad), std::invalid_argument);
  bad = to("nf4");
  bad.round = Round::toward_zero;
  EXPECT_THROW(validate_convert_options(bad), std::invalid_argument);
  EXPECT_NO_THROW(validate_convert_options(to("mxfp4")));
  EXPECT_NO_THROW(validate_convert_options(to("int8_channel")));
  // NaN cannot be stored by an int8 scheme: the message names the tensor.
  SafeTensorsFile nan;
  nan.tensors.push_back(make("n", DType::fp32, {2},
                             std::vector<float>{1.0f, std::numeric_limits<float>::quiet_NaN()}));
  try {
    convert_safetensors(nan, to("int8"));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'n'"), std::string::npos) << e.what();
  }
  // A companion name that is already taken.
  SafeTensorsFile clash = sample();
  clash.tensors.push_back(make("w.scale", DType::fp32, {1}, std::vector<float>{1.0f}));
  EXPECT_THROW(convert_safetensors(clash, to("nf4")), SafeTensorsError);
}

TEST(BlockTensorStorage, BrokenDescriptionsAreReported) {
  SafeTensorsFile f = convert_safetensors(sample(), to("mxfp4")).file;
  f.metadata["mixp.w"] = "{not json";
  EXPECT_THROW(get_block_tensor(f, "w"), SafeTensorsError);
  f.metadata["mixp.w"] = R"({"scheme":"mxfp4"})";
  EXPECT_THROW(get_block_tensor(f, "w"), SafeTensorsError);
  SafeTensorsFile g = convert_safetensors(sample(), to("mxfp4")).file;
  std::erase_if(g.tensors, [](const SafeTensor& t) { return t.name == "w.scale"; });
  EXPECT_THROW(read_tensor_f32(g, "w"), SafeTensorsError);
  SafeTensorsFile h = convert_safetensors(sample(), to("mxfp4")).file;
  h.find("w")->data.pop_back();
  h.find("w")->shape[0] -= 1;
  EXPECT_THROW(read_tensor_f32(h, "w"), SafeTensorsError);
}

}  // namespace
}  // namespace mixp
