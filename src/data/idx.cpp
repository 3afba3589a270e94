// IDX and gzip reading. Gzip is inflated with zlib's inflate() directly rather than gzread() so
// that errors can name the compressed byte offset and tell truncation (input ran out) from
// corruption (zlib's Z_DATA_ERROR, which includes a CRC-32 or length mismatch in the gzip trailer).
#include "mixp/data/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <fstream>
#include <new>

#include "mixp/data/error.h"

namespace mixp::data {
namespace fs = std::filesystem;

namespace {

constexpr const char* kReinstallHint =
    "re-download the file, or for Fashion-MNIST reinstall it with "
    "`apt-get install --reinstall dataset-fashion-mnist`";

std::vector<uint8_t> read_raw(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw DataError(fmt::format("'{}' does not exist", path.string()));
  }
  if (fs::is_directory(path, ec)) {
    throw DataError(fmt::format("'{}' is a folder, expected a file", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(fmt::format("cannot open '{}' for reading (permissions?)", path.string()));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(size > 0 ? static_cast<size_t>(size) : 0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw DataError(fmt::format("error reading '{}' ({} bytes expected)", path.string(), size));
  }
  return bytes;
}

bool is_gzip(std::span<const uint8_t> b) {
  return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

bool known_type(uint8_t t) {
  switch (t) {
    case 0x08:
    case 0x09:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x0E:
      return true;
    default:
      return false;
  }
}

}  // namespace

size_t idx_type_size(IdxType t) {
  switch (t) {
    case IdxType::u8:
    case IdxType::i8:
      return 1;
    case IdxType::i16:
      return 2;
    case IdxType::i32:
    case IdxType::f32:
      return 4;
    case IdxType::f64:
      return 8;
  }
  return 0;
}

int64_t IdxArray::element_count() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

// Inflates `in`. `limit`: with `prefix_only`, stop after that many bytes (the IDX header); else
// the data may inflate to at most that many bytes, and more is an error naming `limit_why` (a
// gzip bomb is never inflated beyond what the IDX header declares).
std::vector<uint8_t> inflate_gzip(std::span<const uint8_t> in, const std::string& name,
                                  size_t limit, bool prefix_only, const std::string& limit_why) {
  z_stream zs{};
  // 15 + 16: 32 KiB window, gzip wrapper only (the caller checked the magic).
  if (inflateInit2(&zs, 15 + 16) != Z_OK) {
    throw DataError(fmt::format("{}: zlib inflateInit2 failed (out of memory?)", name));
  }
  struct Guard {
    z_stream* z;
    ~Guard() { inflateEnd(z); }
  } guard{&zs};

  std::vector<uint8_t> out;
  // The gzip trailer's ISIZE (uncompressed size mod 2^32) is a good first guess (+1 so that the
  // final inflate() call still has room and reports the end of the stream). A truncated file ends
  // in arbitrary bytes, so only believe ISIZE up to a 16:1 ratio; doubling handles the rest.
  if (in.size() >= 18) {
    const uint8_t* t = in.data() + in.size() - 4;
    const uint64_t isize =
        uint32_t(t[0]) | (uint32_t(t[1]) << 8) | (uint32_t(t[2]) << 16) | (uint32_t(t[3]) << 24);
    const uint64_t guess = isize <= uint64_t(in.size()) * 16 ? isize : uint64_t(in.size()) * 4;
    out.resize(static_cast<size_t>(std::min<uint64_t>(guess, limit)) + 1);
  }
  if (out.size() < 4096) out.resize(std::min<size_t>(4096, limit + 1));

  size_t in_pos = 0;    // bytes of `in` handed to zlib so far
  size_t produced = 0;  // bytes of `out` filled
  auto consumed = [&] { return in_pos - zs.avail_in; };
  for (;;) {
    if (zs.avail_in == 0 && in_pos < in.size()) {
      const size_t chunk = std::min<size_t>(in.size() - in_pos, UINT_MAX);
      zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
      zs.avail_in = static_cast<uInt>(chunk);
      in_pos += chunk;
    }
    if (produced == out.size()) {
      out.resize(
          static_cast<size_t>(std::min<uint64_t>(uint64_t(out.size()) * 2, uint64_t(limit) + 1)));
    }
    const size_t room = std::min<size_t>(out.size() - produced, UINT_MAX);
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(room);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (prefix_only && produced >= limit) {
      out.resize(limit);
      return out;
    }
    if (produced > limit) {
      throw DataError(fmt::format(
          "{}: the gzip data decompress to more than the {} bytes {}; the file is corrupted or "
          "not what its header says (decompression stopped there); {}",
          name, limit, limit_why, kReinstallHint));
    }
    if (ret == Z_STREAM_END) {
      // End of one gzip member. Another member may follow (gzip(1) concatenation); zero padding
      // (tape blocks) is ignored like gzip(1) does; anything else is an error.
      const size_t at = consumed();
      std::span<const uint8_t> rest = in.subspan(at);
      if (rest.empty() || std::all_of(rest.begin(), rest.end(), [](uint8_t b) { return b == 0; })) {
        break;
      }
      if (!is_gzip(rest)) {
        throw DataError(
            fmt::format("{}: {} unexpected bytes after the end of the gzip data at byte {}; {}",
                        name, rest.size(), at, kReinstallHint));
      }
      inflateReset(&zs);
      continue;
    }
    if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) {
      throw DataError(
          fmt::format("{}: corrupt gzip data, detected at compressed byte {} of {} ({}); {}", name,
                      consumed(), in.size(), zs.msg ? zs.msg : "invalid data", kReinstallHint));
    }
    if (ret == Z_MEM_ERROR) {
      throw DataError(fmt::format("{}: out of memory while decompressing", name));
    }
    // Z_OK or Z_BUF_ERROR: if all input is used up and zlib still had room to write, the stream
    // stopped before its end marker and trailer: the file is truncated.
    if (zs.avail_in == 0 && in_pos == in.size() && zs.avail_out > 0) {
      throw DataError(fmt::format(
          "{}: gzip data ends early: all {} compressed bytes read ({} bytes decompressed) before "
          "the end of the stream, so the file is truncated; {}",
          name, in.size(), produced, kReinstallHint));
    }
  }
  out.resize(produced);
  return out;
}

}  // namespace

std::vector<uint8_t> gunzip(std::span<const uint8_t> in, const std::string& name) {
  return inflate_gzip(in, name, SIZE_MAX - 1, false, "");
}

std::vector<uint8_t> read_maybe_gzip(const fs::path& path) {
  std::vector<uint8_t> raw = read_raw(path);
  if (!is_gzip(raw)) return raw;
  return gunzip(raw, fmt::format("'{}'", path.string()));
}

IdxArray parse_idx(std::vector<uint8_t> bytes, const std::string& name) {
  if (bytes.size() < 4) {
    throw DataError(
        fmt::format("{}: only {} bytes, too short for an IDX header (4 bytes of magic "
                    "number); the file is empty or truncated",
                    name, bytes.size()));
  }
  const uint32_t magic = be32(bytes.data());
  if (bytes[0] != 0 || bytes[1] != 0 || !known_type(bytes[2]) || bytes[3] == 0) {
    throw DataError(fmt::format(
        "{}: bad IDX magic number 0x{:08X} at byte 0 (expected 0x000008NN for ubyte data with NN "
        "dimensions, e.g. 0x00000803 for images and 0x00000801 for labels); this is not an IDX "
        "file{}",
        name, magic, bytes[0] == 0x1f ? " (or a gzip file whose first bytes are damaged)" : ""));
  }
  IdxArray a;
  a.type = static_cast<IdxType>(bytes[2]);
  const size_t ndims = bytes[3];
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    throw DataError(
        fmt::format("{}: truncated IDX header: {} dimensions need {} header bytes but "
                    "the file has {}",
                    name, ndims, header, bytes.size()));
  }
  // Multiply with an overflow guard: 4 dims of up to 2^32 - 1 overflow 64 bits.
  const size_t esize = idx_type_size(a.type);
  constexpr uint64_t kHuge = uint64_t(1) << 62;
  uint64_t expected = esize;
  std::string shape;
  for (size_t i = 0; i < ndims; ++i) {
    const uint32_t d = be32(bytes.data() + 4 + 4 * i);
    a.dims.push_back(d);
    expected = (d != 0 && expected > kHuge / d) ? kHuge : expected * d;
    shape += fmt::format("{}{}", i ? "x" : "", d);
  }
  const size_t have = bytes.size() - header;
  if (expected != have) {
    throw DataError(fmt::format(
        "{}: IDX header (magic 0x{:08X}) says {} elements of {} bytes = {} payload bytes after the "
        "{}-byte header, but the file has {}; {}",
        name, magic, shape, esize,
        expected == kHuge ? std::string("more than 2^62") : std::to_string(expected), header, have,
        have < expected ? "the file is truncated or its dimensions are wrong"
                        : "it has trailing bytes or its dimensions are wrong"));
  }
  a.payload_offset = header;
  a.bytes = std::move(bytes);
  return a;
}

IdxArray read_idx(const fs::path& path) {
  const std::string name = fmt::format("'{}'", path.string());
  try {
    std::vector<uint8_t> raw = read_raw(path);
    if (!is_gzip(raw)) return parse_idx(std::move(raw), name);
    // The header first (at most 4 + 4 * 255 bytes), checked, then the rest inflated only up to
    // the size that header declares (one byte more tells a longer stream).
    std::vector<uint8_t> head = inflate_gzip(raw, name, 4 + 4 * 255, true, "");
    uint64_t total = SIZE_MAX - 1;
    if (head.size() >= 4 && head[0] == 0 && head[1] == 0 && known_type(head[2]) && head[3] != 0 &&
        head.size() >= 4 + 4 * size_t(head[3])) {
      uint64_t n = idx_type_size(static_cast<IdxType>(head[2]));
      constexpr uint64_t kHuge = uint64_t(1) << 62;
      for (size_t i = 0; i < head[3]; ++i) {
        const uint32_t d = be32(head.data() + 4 + 4 * i);
        n = (d != 0 && n > kHuge / d) ? kHuge : n * d;
      }
      total = std::min<uint64_t>(4 + 4 * uint64_t(head[3]) + n, SIZE_MAX - 1);
    } else {
      return parse_idx(std::move(head), name);  // reports the bad header, naming the file
    }
    const std::string why =
        fmt::format("its IDX header declares ({} header + payload bytes)", total);
    return parse_idx(inflate_gzip(raw, name, size_t(total), false, why), name);
  } catch (const std::bad_alloc&) {
    throw DataError(
        fmt::format("{}: out of memory while reading it; the file is larger than this "
                    "machine can hold, or its header declares a wrong size",
                    name));
  }
}

void write_idx(const fs::path& path, IdxType type, std::span<const int64_t> dims,
               std::span<const uint8_t> payload, bool gzip) {
  if (dims.empty() || dims.size() > 255) {
    throw std::invalid_argument(
        fmt::format("write_idx('{}'): {} dimensions, need 1..255", path.string(), dims.size()));
  }
  std::vector<uint8_t> out{0, 0, uint8_t(type), uint8_t(dims.size())};
  uint64_t n = idx_type_size(type);
  for (int64_t d : dims) {
    if (d < 0 || d > int64_t(UINT32_MAX)) {
      throw std::invalid_argument(
          fmt::format("write_idx('{}'): dimension {} out of range", path.string(), d));
    }
    n *= uint64_t(d);
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(uint32_t(d) >> s));
  }
  if (n != payload.size()) {
    throw std::invalid_argument(fmt::format("write_idx('{}'): dims need {} payload bytes, got {}",
                                            path.string(), n, payload.size()));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) throw DataError(fmt::format("cannot create '{}'", path.string()));
    size_t off = 0;
    bool ok = true;
    while (ok && off < out.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(out.size() - off, 1u << 30));
      ok = gzwrite(f, out.data() + off, chunk) == int(chunk);
      off += chunk;
    }
    if (gzclose(f) != Z_OK || !ok) {
      throw DataError(fmt::format("error writing '{}' (disk full?)", path.string()));
    }
    return;
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw DataError(fmt::format("cannot create '{}'", path.string()));
  f.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size()));
  if (!f.flush()) throw DataError(fmt::format("error writing '{}' (disk full?)", path.string()));
}

}  // namespace mixp::data
