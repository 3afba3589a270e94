// Reading and validating .safetensors files; the rules are listed in include/mixp/io/safetensors.h
// and follow the reference implementation (huggingface/safetensors, safetensors/src/tensor.rs:
// read_metadata, Metadata::validate).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/io_util.h"
#include "io/safetensors_detail.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"

namespace mixp {

namespace {

using io_detail::quote;
using io_detail::quote_path;
using json = nlohmann::ordered_json;  // keeps header order (see parse_header)

constexpr size_t kMaxJsonErrorChars = 240;  // nlohmann quotes the last token; keep lines short

// Every error starts with the source and stays on one line.
[[noreturn]] void fail(std::string_view source, const std::string& what) {
  throw SafeTensorsError(std::string(source) + ": " + what);
}

std::string type_of(const json& j) {
  if (j.is_number_float()) return "a non-integer number";
  if (j.is_number()) return "a number";
  const std::string_view t = j.type_name();  // object, array, string, boolean, null
  return std::string(t[0] == 'o' || t[0] == 'a' ? "an " : "a ") + std::string(t);
}

std::string fmt_u64(uint64_t v) {
  return std::to_string(v);
}

// Bytes outside printable ASCII as \xNN, so a message built from file content is one clean line.
std::string escape_bytes(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

// The 8-byte little-endian header size, checked against the limit and the file size.
uint64_t check_prefix(std::span<const std::byte> prefix, uint64_t file_bytes,
                      std::string_view source) {
  if (file_bytes < 8) {
    fail(source, "file is " + fmt_u64(file_bytes) +
                     " bytes, shorter than the 8-byte header-size field; it is truncated or not a "
                     "safetensors file");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(prefix[static_cast<size_t>(i)]);
  if (n > kSafeTensorsMaxHeaderBytes) {
    fail(source, "header-size field (file bytes 0-7) says " + fmt_u64(n) +
                     " bytes, more than the " + fmt_u64(kSafeTensorsMaxHeaderBytes) +
                     "-byte limit; the file is corrupted or not a safetensors file");
  }
  if (n > file_bytes - 8) {
    fail(source, "header-size field (file bytes 0-7) says " + fmt_u64(n) + " bytes but only " +
                     fmt_u64(file_bytes - 8) +
                     " bytes follow it; the file is truncated or not a safetensors file");
  }
  return n;
}

// The JSON parser callback: rejects duplicate keys (nlohmann would keep the last silently) and
// nesting deeper than a header needs (top object > entry > shape array), which also bounds the
// work a hostile header can cause.
class HeaderGuard {
 public:
  explicit HeaderGuard(std::string_view source) : source_(source) {}
  bool operator()(int depth, nlohmann::json::parse_event_t event, json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (depth >= 3) {
          fail(source_, "header nests deeper than a safetensors header can (inside the entry " +
                            quote(top_key_) + "); the file is corrupted");
        }
        if (event == E::object_start) keys_.emplace_back();
        break;
      case E::object_end:
        keys_.pop_back();
        break;
      case E::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (depth == 1) top_key_ = key;
        if (!keys_.back().insert(key).second) {
          fail(source_, depth == 1
                            ? "header has two entries named " + quote(key)
                            : "entry " + quote(top_key_) + " has the key " + quote(key) + " twice");
        }
        break;
      }
      default:
        break;
    }
    return true;
  }

 private:
  std::string_view source_;
  std::vector<std::set<std::string>> keys_;
  std::string top_key_;
};

json parse_json(std::span<const std::byte> header, std::string_view source) {
  const auto* p = reinterpret_cast<const char*>(header.data());
  if (header.empty() || p[0] != '{') {
    fail(source, "the " + fmt_u64(header.size()) +
                     "-byte header at file byte 8 does not start with '{'; not a safetensors file");
  }
  // nlohmann's lexer treats a NUL byte as the end of input, so "{}\0junk" would pass; serde_json
  // (the reference) rejects it, and a NUL can never appear in valid JSON text, so reject it here.
  if (const void* nul = std::memchr(p, 0, header.size())) {
    fail(source, "header is not valid JSON: NUL byte at file byte " +
                     fmt_u64(8 + static_cast<uint64_t>(static_cast<const char*>(nul) - p)) +
                     " (headers are padded with spaces, not NULs)");
  }
  HeaderGuard guard(source);
  try {
    return json::parse(p, p + header.size(), std::ref(guard));
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; it means nothing to a user.
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    if (what.size() > kMaxJsonErrorChars) what = what.substr(0, kMaxJsonErrorChars) + "...";
    // nlohmann echoes the offending token, which may hold invalid UTF-8 or control bytes.
    what = escape_bytes(what);
    // e.byte counts from 1 at the first header byte.
    const uint64_t at = 8 + (e.byte > 0 ? e.byte - 1 : 0);
    fail(source, "header is not valid JSON near file byte " + fmt_u64(at) + ": " + what);
  }
}

// A non-negative integer, or an error naming `what` (e.g. "shape[1] of tensor 'w'").
uint64_t get_u64(const json& j, std::string_view source, const std::string& what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) {
    fail(source, what + " is " + std::to_string(j.get<int64_t>()) + ", which is negative");
  }
  fail(source, what + " is " + type_of(j) + ", not a non-negative integer");
}

const json& field(const json& entry, const char* key, std::string_view source,
                  const std::string& name) {
  auto it = entry.find(key);
  if (it == entry.end()) {
    fail(source, "tensor " + quote(name) + " has no \"" + key +
                     "\" (each entry needs \"dtype\", \"shape\" and \"data_offsets\")");
  }
  return *it;
}

struct Entry {
  SafeTensorInfo info;
  uint64_t begin = 0, end = 0;  // relative to the data buffer
};

Entry parse_entry(const std::string& name, const json& entry, std::string_view source) {
  const std::string qname = quote(name);
  if (!entry.is_object()) {
    fail(source, "entry " + qname + " is " + type_of(entry) +
                     ", not an object with \"dtype\", \"shape\" and \"data_offsets\"");
  }
  Entry e;
  e.info.name = name;

  const json& dt = field(entry, "dtype", source, name);
  if (!dt.is_string()) {
    fail(source, "tensor " + qname + ": \"dtype\" is " + type_of(dt) + ", not a string");
  }
  const auto& dts = dt.get_ref<const std::string&>();
  const auto dtype = dtype_from_safetensors(dts);
  if (!dtype) {
    fail(source,
         "tensor " + qname + " has dtype " + quote(dts) +
             ", which mixp does not support; supported dtypes: " + safetensors_dtype_names());
  }
  e.info.dtype = *dtype;

  const json& shape = field(entry, "shape", source, name);
  if (!shape.is_array()) {
    fail(source, "tensor " + qname + ": \"shape\" is " + type_of(shape) +
                     ", not an array of non-negative integers");
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    const std::string what = "shape[" + std::to_string(i) + "] of tensor " + qname;
    const uint64_t extent = get_u64(shape[i], source, what);
    if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(source, what + " is " + fmt_u64(extent) + ", too large");
    }
    e.info.shape.push_back(static_cast<int64_t>(extent));
  }

  const json& offs = field(entry, "data_offsets", source, name);
  if (!offs.is_array() || offs.size() != 2) {
    fail(source, "tensor " + qname + ": \"data_offsets\" is " +
                     (offs.is_array() ? "an array of length " + std::to_string(offs.size())
                                      : type_of(offs)) +
                     ", not [begin, end]");
  }
  e.begin = get_u64(offs[0], source, "data_offsets[0] of tensor " + qname);
  e.end = get_u64(offs[1], source, "data_offsets[1] of tensor " + qname);
  const std::string offsets = "[" + fmt_u64(e.begin) + ", " + fmt_u64(e.end) + "]";
  if (e.begin > e.end) {
    fail(source, "tensor " + qname + " has data_offsets " + offsets + ": begin is after end");
  }

  const auto& t = traits(e.info.dtype);
  const auto need = io_detail::checked_nbytes(e.info.shape, t.storage_bytes);
  const std::string desc =
      "dtype " + std::string(t.safetensors) + " and shape " + io_detail::shape_string(e.info.shape);
  if (!need)
    fail(source, "tensor " + qname + ": " + desc + " is too large (size overflows 64 bits)");
  if (*need != e.end - e.begin) {
    fail(source, "tensor " + qname + " has data_offsets " + offsets + " (" +
                     fmt_u64(e.end - e.begin) + " bytes) but " + desc + " need " + fmt_u64(*need) +
                     " bytes");
  }
  e.info.nbytes = e.end - e.begin;
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& m, std::string_view source) {
  std::map<std::string, std::string> out;
  if (m.is_null()) return out;  // the reference's Option<HashMap> accepts null as "no metadata"
  if (!m.is_object()) {
    fail(source, "\"__metadata__\" is " + type_of(m) + ", not an object of strings");
  }
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) {
      fail(source, "\"__metadata__\" value for key " + quote(key) + " is " + type_of(value) +
                       ", not a string");
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Checks that the tensors, sorted by offset, tile [0, buffer_bytes) exactly (reference:
// Metadata::validate requires each begin to equal the previous end, and read_metadata requires
// the last end to be the end of the file).
void check_layout(std::vector<Entry>& entries, uint64_t data_start, uint64_t buffer_bytes,
                  std::string_view source) {
  const auto file_at = [&](uint64_t off) { return fmt_u64(data_start + off); };
  for (const auto& e : entries) {
    if (e.end > buffer_bytes) {
      fail(source, "tensor " + quote(e.info.name) + " ends at data offset " + fmt_u64(e.end) +
                       " (file byte " + file_at(e.end) + ") but the data buffer has only " +
                       fmt_u64(buffer_bytes) +
                       " bytes; the file is truncated or the offsets are wrong");
    }
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const auto& e : entries) {
    if (e.begin < covered) {
      fail(source, "tensors " + quote(prev->info.name) + " [" + fmt_u64(prev->begin) + ", " +
                       fmt_u64(prev->end) + "] and " + quote(e.info.name) + " [" +
                       fmt_u64(e.begin) + ", " + fmt_u64(e.end) + "] overlap in the data buffer");
    }
    if (e.begin > covered) {
      fail(source, "data bytes [" + fmt_u64(covered) + ", " + fmt_u64(e.begin) + ") (file bytes [" +
                       file_at(covered) + ", " + file_at(e.begin) + ")) before tensor " +
                       quote(e.info.name) +
                       " belong to no tensor; safetensors requires the buffer to be fully indexed");
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != buffer_bytes) {
    fail(source, "the last " + fmt_u64(buffer_bytes - covered) +
                     " bytes of the file (from file byte " + file_at(covered) +
                     ") belong to no tensor; safetensors requires the buffer "
                     "to be fully indexed");
  }
}

// Parses and validates the header given the header bytes and the total file size.
SafeTensorsHeader parse_header(std::span<const std::byte> header, uint64_t file_bytes,
                               std::string_view source) {
  const json root = parse_json(header, source);
  SafeTensorsHeader out;
  out.header_bytes = header.size();
  out.file_bytes = file_bytes;
  const uint64_t data_start = 8 + header.size();

  std::vector<Entry> entries;  // in header order, which breaks ties between empty tensors
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      out.metadata = parse_metadata(value, source);
    } else {
      entries.push_back(parse_entry(key, value, source));
    }
  }
  check_layout(entries, data_start, file_bytes - data_start, source);
  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    e.info.file_offset = data_start + e.begin;
    out.tensors.push_back(std::move(e.info));
  }
  return out;
}

// An open file, closed on scope exit.
class ReadFile {
 public:
  explicit ReadFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw IoError(io_detail::os_error("open", path, errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      throw IoError(io_detail::os_error("stat", path, err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw IoError("cannot read " + quote_path(path) + ": not a regular file" +
                    (S_ISDIR(st.st_mode) ? " (it is a directory)" : ""));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ReadFile() { ::close(fd_); }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  uint64_t size() const { return size_; }
  void read_at(uint64_t offset, std::span<std::byte> out) const {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t r =
          ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw IoError(io_detail::os_error("read", path_, errno));
      }
      if (r == 0) {
        throw IoError("cannot read " + quote_path(path_) +
                      ": it became shorter while being read (at byte " + fmt_u64(offset + done) +
                      "); is another program writing it?");
      }
      done += static_cast<size_t>(r);
    }
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

SafeTensorsHeader read_header(const ReadFile& f, const std::string& source) {
  std::byte prefix[8] = {};
  if (f.size() >= 8) f.read_at(0, prefix);
  const uint64_t n = check_prefix(prefix, f.size(), source);
  std::vector<std::byte> header(n);
  f.read_at(8, header);
  return parse_header(header, f.size(), source);
}

// The path as it should appear at the start of an error message: plain unless it holds
// characters that would break the one-line message.
std::string source_of(const std::filesystem::path& path) {
  const std::string& s = path.native();
  const bool plain = std::none_of(
      s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; });
  return plain ? s : quote_path(path);
}

}  // namespace

SafeTensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  ReadFile f(path);
  return read_header(f, source_of(path));
}

SafeTensorsFile read_safetensors(const std::filesystem::path& path) {
  ReadFile f(path);
  SafeTensorsHeader h = read_header(f, source_of(path));
  SafeTensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.tensors.size());
  for (auto& info : h.tensors) {
    SafeTensor t{std::move(info.name), info.dtype, std::move(info.shape), {}};
    t.data.resize(info.nbytes);
    f.read_at(info.file_offset, t.data);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

SafeTensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view source_name) {
  const uint64_t n = check_prefix(bytes, bytes.size(), source_name);
  SafeTensorsHeader h = parse_header(bytes.subspan(8, n), bytes.size(), source_name);
  SafeTensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.tensors.size());
  for (auto& info : h.tensors) {
    const auto src = bytes.subspan(info.file_offset, info.nbytes);
    out.tensors.push_back(SafeTensor{
        std::move(info.name), info.dtype, std::move(info.shape), {src.begin(), src.end()}});
  }
  return out;
}

}  // namespace mixp
