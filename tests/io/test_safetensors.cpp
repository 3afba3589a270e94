// safetensors: round trips of every dtype, byte-exact agreement with the reference writer's own
// test vectors, and the independently written fixture (tests/golden/io/gen_safetensors_fixture.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/temp_dir.h"
#include "mixp/format/minifloat.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"
#include "common/test_paths.h"

namespace mixp {
namespace {

using test::read_text;
using test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::byte> bytes_of(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

template <class T>
std::vector<std::byte> pack(std::initializer_list<T> values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

template <class T>
std::vector<T> unpack(const SafeTensor& t) {
  std::vector<T> out(t.data.size() / sizeof(T));
  std::memcpy(out.data(), t.data.data(), out.size() * sizeof(T));
  return out;
}

void expect_same(const SafeTensorsFile& a, const SafeTensorsFile& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    SCOPED_TRACE(a.tensors[i].name);
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_EQ(a.tensors[i].data, b.tensors[i].data);
  }
}

// One tensor of every dtype that has a safetensors string, with distinct byte patterns.
SafeTensorsFile every_dtype_file() {
  SafeTensorsFile f;
  f.metadata = {{"format", "pt"},
                {"quote\"and\\backslash", "line\nbreak\ttab"},
                {"unicode", "\xc3\xbc\xe2\x9c\x93 \xf0\x9f\x98\x80"},
                {"", "empty key"}};
  int seed = 1;
  for (const auto& t : all_dtypes()) {
    if (t.safetensors.empty()) continue;
    SafeTensor st{"t." + std::string(t.name), t.id, {2, 3}, {}};
    st.data.resize(6 * static_cast<size_t>(t.storage_bytes));
    for (auto& b : st.data) b = static_cast<std::byte>((seed++ * 37) & 0xFF);
    f.tensors.push_back(std::move(st));
  }
  return f;
}

TEST(SafeTensors, SupportedDtypeNames) {
  EXPECT_EQ(safetensors_dtype_names(),
            "F64, F32, BF16, F16, F8_E4M3, F8_E5M2, I8, U8, I32, I64, BOOL");
}

TEST(SafeTensors, RoundTripEveryDtypeWithMetadata) {
  TempDir dir;
  const SafeTensorsFile f = every_dtype_file();
  ASSERT_EQ(f.tensors.size(), 11u);
  write_safetensors(dir / "all.safetensors", f);
  expect_same(read_safetensors(dir / "all.safetensors"), f);

  const auto image = serialize_safetensors(f);
  expect_same(parse_safetensors(image, "image"), f);
  EXPECT_EQ(bytes_of(read_text(dir / "all.safetensors")), image);  // file == in-memory image
  EXPECT_EQ(dir.entries(), std::set<std::string>({"all.safetensors"}));
}

TEST(SafeTensors, RoundTripKeepsGivenOrderScalarsAndEmptyTensors) {
  SafeTensorsFile f;
  f.tensors.push_back({"z", DType::fp32, {}, pack<float>({2.5f})});  // scalar
  f.tensors.push_back({"a", DType::int64, {0}, {}});                 // empty
  f.tensors.push_back({"m", DType::fp16, {1, 0, 3}, {}});            // empty, 3-D
  f.tensors.push_back({"b", DType::uint8, {3}, pack<uint8_t>({1, 2, 255})});
  const auto back = parse_safetensors(serialize_safetensors(f));
  expect_same(back, f);
  EXPECT_EQ(back.find("z")->numel(), 1);
  EXPECT_EQ(back.find("m")->numel(), 0);
}

TEST(SafeTensors, NoTensorsNoMetadata) {
  // Reference (tensor.rs test_empty): "{}" padded with spaces to 8 bytes.
  const auto image = serialize_safetensors({});
  EXPECT_EQ(image, bytes_of(le64(8) + "{}      "));
  const auto back = parse_safetensors(image);
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_TRUE(back.metadata.empty());
}

TEST(SafeTensors, MatchesReferenceWriterByteForByte) {
  // The reference implementation's own test vectors (safetensors/src/tensor.rs:
  // test_serialization, test_serialization_forced_alignement, test_empty with metadata).
  const auto data = pack<float>({0, 1, 2, 3, 4, 5});
  const std::string data_str(reinterpret_cast<const char*>(data.data()), data.size());
  {
    SafeTensorsFile f;
    f.tensors.push_back({"attn.0", DType::fp32, {1, 2, 3}, data});
    const std::string h = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    ASSERT_EQ(h.size(), 64u);
    EXPECT_EQ(serialize_safetensors(f), bytes_of(le64(64) + h + data_str));
  }
  {
    SafeTensorsFile f;
    f.tensors.push_back({"attn0", DType::fp32, {1, 1, 2, 3}, data});
    const std::string h = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
    EXPECT_EQ(serialize_safetensors(f), bytes_of(le64(72) + h + "       " + data_str));
  }
  {
    SafeTensorsFile f;
    f.metadata["framework"] = "pt";
    EXPECT_EQ(serialize_safetensors(f),
              bytes_of(le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     "));
  }
}

TEST(SafeTensors, SortLikeReference) {
  SafeTensorsFile f;
  for (auto [name, dt] : std::vector<std::pair<std::string, DType>>{{"b", DType::fp16},
                                                                    {"u", DType::uint8},
                                                                    {"a", DType::fp16},
                                                                    {"x", DType::fp32},
                                                                    {"l", DType::int64},
                                                                    {"q", DType::fp8_e4m3},
                                                                    {"bf", DType::bf16},
                                                                    {"ok", DType::boolean},
                                                                    {"d", DType::fp64},
                                                                    {"i", DType::int32},
                                                                    {"e5", DType::fp8_e5m2},
                                                                    {"c", DType::int8}}) {
    f.tensors.push_back(
        {name, dt, {1}, std::vector<std::byte>(static_cast<size_t>(traits(dt).storage_bytes))});
  }
  sort_tensors_like_reference(f);
  std::vector<std::string> names;
  for (const auto& t : f.tensors) names.push_back(t.name);
  EXPECT_THAT(names, ElementsAre("l", "d", "x", "i", "bf", "a", "b", "q", "e5", "c", "u", "ok"));
  // Sorted this way and with the header padded to 8 bytes, every tensor is aligned to its size.
  for (const auto& info :
       [&] {
         TempDir dir;
         write_safetensors(dir / "s.safetensors", f);
         return read_safetensors_header(dir / "s.safetensors");
       }()
           .tensors) {
    EXPECT_EQ(info.file_offset % static_cast<uint64_t>(traits(info.dtype).storage_bytes), 0u)
        << info.name;
  }
}

TEST(SafeTensors, FindByName) {
  SafeTensorsFile f = every_dtype_file();
  ASSERT_NE(f.find("t.bf16"), nullptr);
  EXPECT_EQ(f.find("t.bf16")->dtype, DType::bf16);
  EXPECT_EQ(f.find("missing"), nullptr);
  f.find("t.fp32")->shape = {6};
  EXPECT_EQ(std::as_const(f).find("t.fp32")->shape, std::vector<int64_t>{6});
}

// ---------------------------------------------------------------------------------------------
// The fixture from the independent Python writer.

const std::filesystem::path kFixture =
    std::filesystem::path(MIXP_TEST_DATA) / "io" / "fixture.safetensors";

TEST(SafeTensorsFixture, MetadataAndOrder) {
  const auto f = read_safetensors(kFixture);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("producer"), "gen_safetensors_fixture.py");
  EXPECT_EQ(f.metadata.at("note"),
            "\xc3\xbcn\xc3\xaf"
            "code \xe2\x9c\x93");  // "ünïcode ✓"
  std::vector<std::string> names;
  for (const auto& t : f.tensors) names.push_back(t.name);
  // Data-buffer order, not the header's (name) order; the empty tensor sorts before "emb",
  // which starts at the same offset.
  EXPECT_THAT(names,
              ElementsAre("codes", "layer.weight", "empty", "emb", "step", "ids", "layer.bias"));
}

TEST(SafeTensorsFixture, ValuesF32) {
  const auto f = read_safetensors(kFixture);
  const SafeTensor& t = *f.find("layer.weight");
  EXPECT_EQ(t.dtype, DType::fp32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  const auto v = unpack<float>(t);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.25f);
  EXPECT_EQ(v[2], 0.1f);
  EXPECT_EQ(v[3], std::numeric_limits<float>::max());
  EXPECT_EQ(std::bit_cast<uint32_t>(v[4]), 0x80000000u);  // -0.0
  EXPECT_EQ(v[5], std::numeric_limits<float>::denorm_min());
}

TEST(SafeTensorsFixture, ValuesF16AndBF16) {
  const auto f = read_safetensors(kFixture);
  const SafeTensor& h = *f.find("layer.bias");
  EXPECT_EQ(h.dtype, DType::fp16);
  const auto hb = unpack<uint16_t>(h);
  ASSERT_EQ(hb.size(), 4u);
  EXPECT_EQ(half::from_bits(hb[0]).to_float(), 65504.0f);
  EXPECT_EQ(half::from_bits(hb[1]).to_float(), std::ldexp(1.0f, -14));
  EXPECT_EQ(half::from_bits(hb[2]).to_float(), std::ldexp(1.0f, -24));
  EXPECT_EQ(half::from_bits(hb[3]).to_float(), -std::numeric_limits<float>::infinity());

  const SafeTensor& b = *f.find("emb");
  EXPECT_EQ(b.dtype, DType::bf16);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 2}));
  const auto bb = unpack<uint16_t>(b);
  ASSERT_EQ(bb.size(), 4u);
  EXPECT_EQ(bfloat16::from_bits(bb[0]).to_float(), 1.0f);
  EXPECT_EQ(bfloat16::from_bits(bb[1]).to_float(), -3.140625f);
  EXPECT_EQ(bfloat16::from_bits(bb[2]).to_float(), 3.3895313892515355e38f);
  EXPECT_EQ(bfloat16::from_bits(bb[3]).to_float(), std::ldexp(1.0f, -133));
}

TEST(SafeTensorsFixture, ValuesIntegers) {
  const auto f = read_safetensors(kFixture);
  EXPECT_EQ(f.find("codes")->dtype, DType::int8);
  EXPECT_THAT(unpack<int8_t>(*f.find("codes")), ElementsAre(-128, -1, 0, 1, 127));
  const SafeTensor& ids = *f.find("ids");
  EXPECT_EQ(ids.dtype, DType::int64);
  EXPECT_THAT(unpack<int64_t>(ids), ElementsAre(std::numeric_limits<int64_t>::min(), 0,
                                                std::numeric_limits<int64_t>::max()));
  const SafeTensor& step = *f.find("step");
  EXPECT_TRUE(step.shape.empty());
  EXPECT_THAT(unpack<int64_t>(step), ElementsAre(1234567890123));
  const SafeTensor& empty = *f.find("empty");
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(empty.data.empty());
}

TEST(SafeTensorsFixture, HeaderOnlyAndInMemoryAgree) {
  const auto h = read_safetensors_header(kFixture);
  EXPECT_EQ(h.header_bytes, 600u);
  EXPECT_EQ(h.file_bytes, std::filesystem::file_size(kFixture));
  ASSERT_EQ(h.tensors.size(), 7u);
  EXPECT_EQ(h.tensors[0].name, "codes");
  EXPECT_EQ(h.tensors[0].file_offset, 608u);
  EXPECT_EQ(h.tensors[1].file_offset, 613u);
  EXPECT_EQ(h.tensors[1].nbytes, 24u);
  EXPECT_EQ(h.tensors.back().file_offset + h.tensors.back().nbytes, h.file_bytes);

  const auto image = bytes_of(read_text(kFixture));
  expect_same(parse_safetensors(image, "fixture"), read_safetensors(kFixture));
}

TEST(SafeTensorsFixture, RewriteAndReadBack) {
  TempDir dir;
  const auto f = read_safetensors(kFixture);
  write_safetensors(dir / "copy.safetensors", f);
  expect_same(read_safetensors(dir / "copy.safetensors"), f);
}

}  // namespace
}  // namespace mixp
