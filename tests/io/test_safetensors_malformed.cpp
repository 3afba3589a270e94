// Malformed .safetensors input and unwritable SafeTensorsFile values: each is rejected with a
// one-line SafeTensorsError that says what is wrong and where; a failed write leaves no file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "common/temp_dir.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"
#include "common/test_paths.h"

namespace mixp {
namespace {

using test::read_text;
using test::TempDir;
using test::write_text;
using ::testing::HasSubstr;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// A file image: size prefix, the header as given, then `buffer_bytes` zero bytes.
std::string image(const std::string& header, size_t buffer_bytes) {
  return le64(header.size()) + header + std::string(buffer_bytes, '\0');
}

std::span<const std::byte> span_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Parses `bytes` and returns the error message ("" when it parsed).
std::string error_of(const std::string& bytes) {
  try {
    parse_safetensors(span_of(bytes), "src.safetensors");
  } catch (const SafeTensorsError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
    EXPECT_EQ(msg.rfind("src.safetensors: ", 0), 0u) << "message does not name the source: " << msg;
    return msg;
  }
  return "";
}

const char* kF32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

TEST(SafeTensorsMalformed, ValidBaseCaseParses) {
  EXPECT_EQ(error_of(image(std::string(R"({"a":)") + kF32x2 + "}", 8)), "");
}

TEST(SafeTensorsMalformed, TooShortForTheSizeField) {
  EXPECT_THAT(error_of(""),
              HasSubstr("file is 0 bytes, shorter than the 8-byte header-size field"));
  EXPECT_THAT(error_of(std::string("\x02\0\0", 3)), HasSubstr("file is 3 bytes"));
}

TEST(SafeTensorsMalformed, HeaderSizeAbsurd) {
  EXPECT_THAT(error_of(le64(100'000'001) + "{}"), HasSubstr("more than the 100000000-byte limit"));
  EXPECT_THAT(error_of(le64(~0ULL) + "{}"), HasSubstr("more than the 100000000-byte limit"));
}

TEST(SafeTensorsMalformed, HeaderSizePastEndOfFile) {
  EXPECT_THAT(error_of(le64(100) + "{}  "),
              HasSubstr("says 100 bytes but only 4 bytes follow it; the file is truncated"));
}

TEST(SafeTensorsMalformed, HeaderNotAnObject) {
  EXPECT_THAT(error_of(image("[1, 2]  ", 0)), HasSubstr("does not start with '{'"));
  EXPECT_THAT(error_of(image(" {}", 0)), HasSubstr("does not start with '{'"));
  EXPECT_THAT(error_of(le64(0)), HasSubstr("does not start with '{'"));
}

TEST(SafeTensorsMalformed, InvalidJson) {
  const std::string msg = error_of(image(R"({"a": {"dtype": "F32",)", 0));
  EXPECT_THAT(msg, HasSubstr("header is not valid JSON near file byte"));
  EXPECT_THAT(error_of(image(R"({"a" 1})", 0)), HasSubstr("not valid JSON near file byte 13"));
  EXPECT_THAT(error_of(image("{} x", 0)), HasSubstr("not valid JSON"));
  // Invalid UTF-8: rejected, and the message (which quotes the bad token) stays clean ASCII.
  const std::string bad_utf8 = error_of(image("{\"\xff\": 1}", 0));
  EXPECT_THAT(bad_utf8, HasSubstr("not valid JSON"));
  EXPECT_THAT(bad_utf8, HasSubstr("\\xff"));
  EXPECT_EQ(bad_utf8.find('\xff'), std::string::npos);
  EXPECT_THAT(error_of(image(std::string("{}\0\0", 4), 0)),
              HasSubstr("not valid JSON: NUL byte at file byte 10"));
  EXPECT_THAT(error_of(image(std::string("{\"a\0\": 1}", 9), 0)),
              HasSubstr("NUL byte at file byte 11"));
}

TEST(SafeTensorsMalformed, EntryShape) {
  EXPECT_THAT(error_of(image(R"({"w": 3})", 0)),
              HasSubstr("entry 'w' is a number, not an object with \"dtype\""));
  EXPECT_THAT(error_of(image(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4)),
              HasSubstr("tensor 'w' has no \"dtype\""));
  EXPECT_THAT(error_of(image(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4)),
              HasSubstr("tensor 'w' has no \"shape\""));
  EXPECT_THAT(error_of(image(R"({"w": {"dtype": "F32", "shape": [1]}})", 4)),
              HasSubstr("tensor 'w' has no \"data_offsets\""));
  EXPECT_THAT(error_of(image(R"({"w": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}})", 4)),
              HasSubstr("tensor 'w': \"dtype\" is a number, not a string"));
}

TEST(SafeTensorsMalformed, UnknownDtypeListsTheSupportedOnes) {
  const std::string msg =
      error_of(image(R"({"w": {"dtype": "F8_E8M0", "shape": [1], "data_offsets": [0, 1]}})", 1));
  EXPECT_THAT(msg, HasSubstr("tensor 'w' has dtype 'F8_E8M0', which mixp does not support"));
  EXPECT_THAT(msg, HasSubstr("F64, F32, BF16, F16, F8_E4M3, F8_E5M2, I8, U8, I32, I64, BOOL"));
  EXPECT_THAT(
      error_of(image(R"({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})", 4)),
      HasSubstr("dtype 'f32'"));
}

TEST(SafeTensorsMalformed, BadShapes) {
  EXPECT_THAT(
      error_of(image(R"({"w": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 4]}})", 4)),
      HasSubstr("shape[1] of tensor 'w' is -3, which is negative"));
  EXPECT_THAT(
      error_of(image(R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 4]}})", 4)),
      HasSubstr("shape[0] of tensor 'w' is a non-integer number"));
  EXPECT_THAT(
      error_of(image(R"({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 4]}})", 4)),
      HasSubstr("shape[0] of tensor 'w' is a string"));
  EXPECT_THAT(error_of(image(R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 4]}})", 4)),
              HasSubstr("\"shape\" is a number, not an array"));
  EXPECT_THAT(
      error_of(image(
          R"({"w": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 4]}})", 4)),
      HasSubstr("too large"));
  EXPECT_THAT(
      error_of(image(
          R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
          4)),
      HasSubstr("size overflows 64 bits"));
}

TEST(SafeTensorsMalformed, BadOffsets) {
  EXPECT_THAT(error_of(image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4)),
              HasSubstr("\"data_offsets\" is an array of length 1, not [begin, end]"));
  EXPECT_THAT(error_of(image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": "0-4"}})", 4)),
              HasSubstr("\"data_offsets\" is a string"));
  EXPECT_THAT(
      error_of(image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4)),
      HasSubstr("data_offsets[0] of tensor 'w' is -4, which is negative"));
  EXPECT_THAT(error_of(image(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})", 4)),
              HasSubstr("tensor 'w' has data_offsets [4, 0]: begin is after end"));
}

TEST(SafeTensorsMalformed, SizeDisagreesWithDtypeAndShape) {
  EXPECT_THAT(
      error_of(image(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20)),
      HasSubstr("tensor 'w' has data_offsets [0, 20] (20 bytes) but dtype F32 and shape [2, 3] "
                "need 24 bytes"));
}

TEST(SafeTensorsMalformed, OffsetsPastTheBuffer) {
  const std::string header = R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
  const std::string msg = error_of(image(header, 12));  // 4 bytes missing: a truncated download
  EXPECT_THAT(msg, HasSubstr("tensor 'w' ends at data offset 16"));
  EXPECT_THAT(msg, HasSubstr("the data buffer has only 12 bytes; the file is truncated"));
}

TEST(SafeTensorsMalformed, OverlappingTensors) {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                             R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  EXPECT_THAT(error_of(image(header, 12)),
              HasSubstr("tensors 'a' [0, 8] and 'b' [4, 12] overlap in the data buffer"));
  const std::string same = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                           R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  EXPECT_THAT(error_of(image(same, 8)), HasSubstr("overlap"));
}

TEST(SafeTensorsMalformed, HolesAndTrailingBytes) {
  const std::string hole = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )"
                           R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})";
  EXPECT_THAT(error_of(image(hole, 12)), HasSubstr("data bytes [4, 8) (file bytes ["));
  EXPECT_THAT(error_of(image(hole, 12)), HasSubstr("before tensor 'b' belong to no tensor"));
  const std::string leading = R"({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  EXPECT_THAT(error_of(image(leading, 8)), HasSubstr("data bytes [0, 4)"));
  const std::string one = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  EXPECT_THAT(error_of(image(one, 7)), HasSubstr("the last 3 bytes of the file"));
  EXPECT_THAT(error_of(image("{}", 1)), HasSubstr("the last 1 bytes of the file"));
}

TEST(SafeTensorsMalformed, Metadata) {
  EXPECT_THAT(error_of(image(R"({"__metadata__": [1]})", 0)),
              HasSubstr("\"__metadata__\" is an array, not an object of strings"));
  EXPECT_THAT(error_of(image(R"({"__metadata__": {"k": 1}})", 0)),
              HasSubstr("\"__metadata__\" value for key 'k' is a number, not a string"));
  EXPECT_THAT(error_of(image(R"({"__metadata__": {"k": {"x": "y"}}})", 0)),
              HasSubstr("value for key 'k' is an object"));
  // null means "no metadata" (the reference's Option accepts it).
  EXPECT_EQ(error_of(image(R"({"__metadata__": null})", 0)), "");
}

TEST(SafeTensorsMalformed, DuplicateKeys) {
  const std::string dup = std::string(R"({"a": )") + kF32x2 + R"(, "a": )" + kF32x2 + "}";
  EXPECT_THAT(error_of(image(dup, 8)), HasSubstr("header has two entries named 'a'"));
  EXPECT_THAT(
      error_of(image(
          R"({"a": {"dtype": "F32", "dtype": "F16", "shape": [2], "data_offsets": [0, 8]}})", 8)),
      HasSubstr("entry 'a' has the key 'dtype' twice"));
  EXPECT_THAT(error_of(image(R"({"__metadata__": {"k": "1", "k": "2"}})", 0)),
              HasSubstr("the key 'k' twice"));
}

TEST(SafeTensorsMalformed, DeepNestingIsRefusedEarly) {
  const std::string deep =
      R"({"a": {"shape": )" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  EXPECT_THAT(error_of(image(deep, 0)), HasSubstr("nests deeper than a safetensors header can"));
}

TEST(SafeTensorsMalformed, ExtraEntryKeysAreIgnoredLikeTheReference) {
  const std::string h =
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "comment": "x"}})";
  EXPECT_EQ(error_of(image(h, 8)), "");
}

TEST(SafeTensorsMalformed, NamesWithControlCharactersStayOnOneLine) {
  const std::string h = R"({"bad\nname": {"dtype": "Q", "shape": [], "data_offsets": [0, 0]}})";
  EXPECT_THAT(error_of(image(h, 0)), HasSubstr("tensor 'bad\\x0aname' has dtype 'Q'"));
}

TEST(SafeTensorsMalformed, EveryTruncationOfTheFixtureIsRejected) {
  const std::string full =
      read_text(std::filesystem::path(MIXP_TEST_DATA) / "io" / "fixture.safetensors");
  ASSERT_GT(full.size(), 600u);
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_NE(error_of(full.substr(0, n)), "");
  }
  EXPECT_EQ(error_of(full), "");
}

TEST(SafeTensorsMalformed, FileErrorsNameThePath) {
  TempDir dir;
  write_text(dir / "bad.safetensors",
             image(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8));
  try {
    read_safetensors(dir / "bad.safetensors");
    FAIL();
  } catch (const SafeTensorsError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "bad.safetensors").string() + ": tensor 'w' ends at"));
  }
  EXPECT_THROW(read_safetensors_header(dir / "bad.safetensors"), SafeTensorsError);
  try {
    read_safetensors(dir / "missing.safetensors");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing.safetensors"));
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
  EXPECT_THROW(read_safetensors(dir.path()), IoError);  // a directory
}

// ---------------------------------------------------------------------------------------------
// Writing.

std::string write_error(const SafeTensorsFile& f) {
  try {
    validate_for_write(f);
  } catch (const SafeTensorsError& e) {
    EXPECT_THROW(serialize_safetensors(f), SafeTensorsError);
    return e.what();
  }
  return "";
}

SafeTensor f32(std::string name, std::vector<int64_t> shape, size_t bytes) {
  return SafeTensor{std::move(name), DType::fp32, std::move(shape), std::vector<std::byte>(bytes)};
}

TEST(SafeTensorsWrite, RejectsWhatCannotBeWritten) {
  SafeTensorsFile f;
  f.tensors = {f32("a", {2}, 8)};
  EXPECT_EQ(write_error(f), "");

  f.tensors = {f32("a", {2, 3}, 20)};
  EXPECT_THAT(write_error(f),
              HasSubstr("tensor 'a' holds 20 bytes but dtype F32 and shape [2, 3] need 24"));
  f.tensors = {f32("a", {-1}, 0)};
  EXPECT_THAT(write_error(f), HasSubstr("tensor 'a' has a negative extent in shape [-1]"));
  f.tensors = {f32("a", {1 << 30, 1 << 30, 1 << 30}, 0)};
  EXPECT_THAT(write_error(f), HasSubstr("too large"));
  f.tensors = {f32("a", {1}, 4), f32("a", {1}, 4)};
  EXPECT_THAT(write_error(f), HasSubstr("two tensors are named 'a'"));
  f.tensors = {f32("__metadata__", {1}, 4)};
  EXPECT_THAT(write_error(f), HasSubstr("may not be called \"__metadata__\""));
  f.tensors = {f32("bad\xff", {1}, 4)};
  EXPECT_THAT(write_error(f), HasSubstr("tensor name 'bad\\xff' is not valid UTF-8"));
  f.tensors = {SafeTensor{"t", DType::tf32, {1}, std::vector<std::byte>(4)}};
  EXPECT_THAT(write_error(f),
              HasSubstr("tensor 't' has dtype tf32, which has no safetensors encoding"));
  f.tensors = {SafeTensor{"q", DType::fp4_e2m1, {2}, std::vector<std::byte>(2)}};
  EXPECT_THAT(write_error(f), HasSubstr("no safetensors encoding"));
  f.tensors.clear();
  f.metadata = {{"k", "\xc0\xaf"}};  // overlong encoding of '/'
  EXPECT_THAT(write_error(f), HasSubstr("metadata value for key 'k' is not valid UTF-8"));
}

TEST(SafeTensorsWrite, FailedValidationLeavesNoFileAndKeepsTheOldOne) {
  TempDir dir;
  SafeTensorsFile bad;
  bad.tensors = {f32("a", {2}, 7)};
  EXPECT_THROW(write_safetensors(dir / "out.safetensors", bad), SafeTensorsError);
  EXPECT_TRUE(dir.entries().empty());

  write_text(dir / "out.safetensors", "previous");
  EXPECT_THROW(write_safetensors(dir / "out.safetensors", bad), SafeTensorsError);
  EXPECT_EQ(read_text(dir / "out.safetensors"), "previous");
  EXPECT_EQ(dir.entries(), std::set<std::string>({"out.safetensors"}));
}

TEST(SafeTensorsWrite, MissingOutputDirectoryIsAnIoError) {
  TempDir dir;
  SafeTensorsFile f;
  f.tensors = {f32("a", {2}, 8)};
  EXPECT_THROW(write_safetensors(dir / "nope" / "out.safetensors", f), IoError);
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace mixp
