// The IDX file format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/, "FILE
// FORMATS"), read from plain or gzip-compressed files:
//
//   bytes 0-1   0x00 0x00
//   byte  2     element type: 0x08 ubyte, 0x09 sbyte, 0x0B int16, 0x0C int32, 0x0D float32,
//               0x0E float64 (all big-endian)
//   byte  3     number of dimensions D
//   4*D bytes   the dimensions, big-endian uint32, slowest first
//   payload     prod(dims) elements, row-major, big-endian
//
// So images are magic 0x00000803 (ubyte, 3 dims: count, rows, cols) and labels 0x00000801 (ubyte,
// 1 dim: count). Gzip is recognised by its magic bytes 1f 8b, not by the file name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace mixp::data {

enum class IdxType : uint8_t {
  u8 = 0x08,
  i8 = 0x09,
  i16 = 0x0B,
  i32 = 0x0C,
  f32 = 0x0D,
  f64 = 0x0E,
};

// Bytes per element of an IDX type.
size_t idx_type_size(IdxType t);

struct IdxArray {
  IdxType type = IdxType::u8;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // the whole (decompressed) file: header then payload
  size_t payload_offset = 0;   // where the elements start in `bytes`

  uint32_t magic() const { return (uint32_t(type) << 8) | uint32_t(dims.size()); }
  int64_t element_count() const;
  std::span<const uint8_t> payload() const {
    return {bytes.data() + payload_offset, bytes.size() - payload_offset};
  }
};

// The file's bytes, gunzipped when it starts with the gzip magic (multi-member gzip is accepted,
// as gzip(1) does). Truncated or corrupt gzip, and non-gzip bytes after the last member, throw
// DataError naming the file and the compressed byte offset.
std::vector<uint8_t> read_maybe_gzip(const std::filesystem::path& path);

// Decompresses a gzip buffer (as above); `name` is used in error messages.
std::vector<uint8_t> gunzip(std::span<const uint8_t> compressed, const std::string& name);

// Reads and validates an IDX file: the two zero bytes, a known type code, at least one dimension,
// and a payload of exactly prod(dims) * element size bytes (truncated files and trailing bytes
// both throw, with the sizes found).
IdxArray read_idx(const std::filesystem::path& path);

// Parses an IDX file already in memory; `name` is used in error messages.
IdxArray parse_idx(std::vector<uint8_t> bytes, const std::string& name);

// Writes an IDX file (gzip-compressed when `gzip` is true). `payload` must be prod(dims) elements
// of `type`, already big-endian. Used by tests and fixture generators.
void write_idx(const std::filesystem::path& path, IdxType type, std::span<const int64_t> dims,
               std::span<const uint8_t> payload, bool gzip);

}  // namespace mixp::data
