// IDX reading from plain and gzip files, and each corrupt case giving a message that says what and
// where. Fixtures are written to a temp folder by write_idx (and raw bytes for the broken ones).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <numeric>

#include "common/temp_dir.h"
#include "data/data_error.h"
#include "mixp/data/idx.h"
#include "mixp/data/image_dataset.h"

namespace mixp::data {
namespace {

using testing::data_error;
using ::testing::HasSubstr;
using mixp::test::read_bytes;
using mixp::test::TempDir;
using mixp::test::write_bytes;

std::vector<uint8_t> pixels(int64_t count, int64_t rows, int64_t cols) {
  std::vector<uint8_t> p(size_t(count * rows * cols));
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t((i * 7 + i / 13) % 256);
  return p;
}

TEST(Idx, PlainAndGzipRoundTrip) {
  TempDir d;
  const std::vector<int64_t> dims{5, 3, 4};
  const auto payload = pixels(5, 3, 4);
  for (bool gz : {false, true}) {
    const auto path = d / (gz ? "a.gz" : "a");
    write_idx(path, IdxType::u8, dims, payload, gz);
    const auto raw = read_bytes(path);
    ASSERT_GE(raw.size(), 2u);
    EXPECT_EQ(raw[0] == 0x1f && raw[1] == 0x8b, gz);
    const IdxArray a = read_idx(path);
    EXPECT_EQ(a.type, IdxType::u8);
    EXPECT_EQ(a.magic(), 0x00000803u);
    EXPECT_EQ(a.dims, dims);
    EXPECT_EQ(a.element_count(), 60);
    EXPECT_EQ(std::vector<uint8_t>(a.payload().begin(), a.payload().end()), payload);
  }
}

TEST(Idx, MultiMemberGzipAndZeroPadding) {
  TempDir d;
  const std::vector<int64_t> dims{300};
  std::vector<uint8_t> payload(300);
  std::iota(payload.begin(), payload.end(), uint8_t(0));
  write_idx(d / "one.gz", IdxType::u8, dims, payload, true);
  // gzip(1) accepts concatenated members; split the file into two members by hand.
  std::vector<uint8_t> plain{0, 0, 8, 1, 0, 0, 1, 44};
  plain.insert(plain.end(), payload.begin(), payload.end());
  std::vector<uint8_t> both;
  for (auto [lo, hi] : {std::pair<size_t, size_t>{0, 100}, {100, plain.size()}}) {
    write_bytes(d / "part",
                std::vector<uint8_t>(plain.begin() + long(lo), plain.begin() + long(hi)));
    gzFile f = gzopen((d / "part.gz").c_str(), "wb");
    const auto part = read_bytes(d / "part");
    gzwrite(f, part.data(), unsigned(part.size()));
    gzclose(f);
    const auto gz = read_bytes(d / "part.gz");
    both.insert(both.end(), gz.begin(), gz.end());
  }
  both.insert(both.end(), 16, 0);  // tape-style zero padding is ignored
  write_bytes(d / "two.gz", both);
  const IdxArray a = read_idx(d / "two.gz");
  EXPECT_EQ(std::vector<uint8_t>(a.payload().begin(), a.payload().end()), payload);
}

TEST(Idx, EmptyAndMissingFile) {
  TempDir d;
  write_bytes(d / "empty", {});
  EXPECT_THAT(data_error([&] { read_idx(d / "empty"); }), HasSubstr("too short for an IDX header"));
  EXPECT_THAT(data_error([&] { read_idx(d / "nope"); }), HasSubstr("does not exist"));
  EXPECT_THAT(data_error([&] { read_idx(d.path()); }), HasSubstr("is a folder"));
}

TEST(Idx, BadMagic) {
  TempDir d;
  write_bytes(d / "bad", {0x00, 0x00, 0x07, 0x03, 0, 0, 0, 1});
  const std::string m = data_error([&] { read_idx(d / "bad"); });
  EXPECT_THAT(m, HasSubstr("bad IDX magic number 0x00000703 at byte 0"));
  EXPECT_THAT(m, HasSubstr("0x00000803"));
  EXPECT_THAT(m, HasSubstr((d / "bad").string()));
  write_bytes(d / "text", {'h', 'e', 'l', 'l', 'o'});
  EXPECT_THAT(data_error([&] { read_idx(d / "text"); }), HasSubstr("not an IDX file"));
}

TEST(Idx, TruncatedPayloadAndTrailingBytes) {
  TempDir d;
  write_idx(d / "ok", IdxType::u8, std::vector<int64_t>{4, 2, 2}, pixels(4, 2, 2), false);
  auto bytes = read_bytes(d / "ok");
  bytes.resize(bytes.size() - 3);
  write_bytes(d / "short", bytes);
  std::string m = data_error([&] { read_idx(d / "short"); });
  EXPECT_THAT(m, HasSubstr("4x2x2 elements of 1 bytes = 16 payload bytes after the 16-byte header, "
                           "but the file has 13"));
  EXPECT_THAT(m, HasSubstr("truncated"));
  bytes.resize(bytes.size() + 10, 0);  // now 7 bytes too many
  write_bytes(d / "long", bytes);
  m = data_error([&] { read_idx(d / "long"); });
  EXPECT_THAT(m, HasSubstr("the file has 23"));
  EXPECT_THAT(m, HasSubstr("trailing bytes or its dimensions are wrong"));
  write_bytes(d / "hdr", {0, 0, 8, 3, 0, 0, 0, 4});  // 3 dims announced, 1 present
  EXPECT_THAT(data_error([&] { read_idx(d / "hdr"); }), HasSubstr("truncated IDX header"));
}

TEST(Idx, HugeDimensionsDoNotOverflow) {
  TempDir d;
  write_bytes(d / "huge", {0,    0,    8,    4,    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                           0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1});
  EXPECT_THAT(data_error([&] { read_idx(d / "huge"); }), HasSubstr("more than 2^62"));
}

TEST(Idx, TruncatedGzip) {
  TempDir d;
  write_idx(d / "ok.gz", IdxType::u8, std::vector<int64_t>{50, 28, 28}, pixels(50, 28, 28), true);
  const auto full = read_bytes(d / "ok.gz");
  for (size_t keep : {size_t(5), size_t(20), full.size() / 2, full.size() - 1}) {
    write_bytes(d / "cut.gz", std::vector<uint8_t>(full.begin(), full.begin() + long(keep)));
    const std::string m = data_error([&] { read_idx(d / "cut.gz"); });
    EXPECT_THAT(m, HasSubstr("gzip data ends early")) << "keep " << keep;
    EXPECT_THAT(m, HasSubstr("all " + std::to_string(keep) + " compressed bytes read"));
    EXPECT_THAT(m, HasSubstr("cut.gz"));
  }
}

TEST(Idx, CorruptGzip) {
  TempDir d;
  write_idx(d / "ok.gz", IdxType::u8, std::vector<int64_t>{50, 28, 28}, pixels(50, 28, 28), true);
  const auto full = read_bytes(d / "ok.gz");
  // A damaged CRC-32 in the trailer: the data inflates but fails the check.
  auto crc = full;
  crc[crc.size() - 6] ^= 0x55;
  write_bytes(d / "crc.gz", crc);
  std::string m = data_error([&] { read_idx(d / "crc.gz"); });
  EXPECT_THAT(m, HasSubstr("corrupt gzip data, detected at compressed byte"));
  EXPECT_THAT(m, HasSubstr("incorrect data check"));
  // Garbage in the middle of the deflate stream: zlib reports invalid codes or distances, or the
  // CRC catches it; either way a DataError about the gzip data of this file.
  auto mid = full;
  for (size_t i = mid.size() / 2; i < mid.size() / 2 + 16; ++i) mid[i] = uint8_t(0xA5 ^ i);
  write_bytes(d / "mid.gz", mid);
  m = data_error([&] { read_idx(d / "mid.gz"); });
  EXPECT_THAT(m, HasSubstr("gzip data"));
  EXPECT_THAT(m, HasSubstr("mid.gz"));
  // Bad header flags byte.
  auto hdr = full;
  hdr[2] = 0x07;  // compression method must be 8 (deflate)
  write_bytes(d / "hdr.gz", hdr);
  EXPECT_THAT(data_error([&] { read_idx(d / "hdr.gz"); }),
              HasSubstr("corrupt gzip data, detected at compressed byte"));
  // Non-gzip bytes after the stream.
  auto tail = full;
  tail.push_back('x');
  write_bytes(d / "tail.gz", tail);
  EXPECT_THAT(data_error([&] { read_idx(d / "tail.gz"); }),
              HasSubstr("1 unexpected bytes after the end of the gzip data"));
}

}  // namespace
}  // namespace mixp::data
