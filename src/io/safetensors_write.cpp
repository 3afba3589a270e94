// Writing .safetensors files (layout and header form documented in include/mixp/io/safetensors.h).
#include <algorithm>
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

[[noreturn]] void fail(const std::string& what) {
  throw SafeTensorsError("cannot write safetensors: " + what);
}

// The reference's Dtype enum order (increasing alignment): BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16
// F16 BF16 I32 U32 F32 F64 I64 U64. Formats without a safetensors string rank lowest.
int reference_rank(DType t) {
  switch (t) {
    case DType::boolean:
      return 0;
    case DType::uint8:
      return 1;
    case DType::int8:
      return 2;
    case DType::fp8_e5m2:
      return 3;
    case DType::fp8_e4m3:
      return 4;
    case DType::fp16:
      return 7;
    case DType::bf16:
      return 8;
    case DType::int32:
      return 9;
    case DType::fp32:
      return 11;
    case DType::fp64:
      return 12;
    case DType::int64:
      return 13;
    default:
      return -1;
  }
}

// A JSON string literal for `s` (already checked to be valid UTF-8); nlohmann escapes quotes,
// backslashes and control characters and leaves other UTF-8 as is, as serde_json does.
std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump();
}

// The header JSON, padded with spaces to a multiple of 8 bytes (reference: prepare()).
std::string build_header(const SafeTensorsFile& file) {
  std::string h = "{";
  if (!file.metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : file.metadata) {
      if (!first) h += ',';
      first = false;
      h += json_string(key) + ":" + json_string(value);
    }
    h += '}';
  }
  uint64_t offset = 0;
  for (const auto& t : file.tensors) {
    if (h.size() > 1) h += ',';
    h += json_string(t.name);
    h += ":{\"dtype\":\"";
    h += traits(t.dtype).safetensors;
    h += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) h += ',';
      h += std::to_string(t.shape[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + ",";
    offset += t.data.size();
    h += std::to_string(offset) + "]}";
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

void append_u64_le(std::vector<std::byte>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}

}  // namespace

void validate_for_write(const SafeTensorsFile& file) {
  for (const auto& [key, value] : file.metadata) {
    if (!io_detail::is_valid_utf8(key)) fail("metadata key " + quote(key) + " is not valid UTF-8");
    if (!io_detail::is_valid_utf8(value)) {
      fail("metadata value for key " + quote(key) + " is not valid UTF-8");
    }
  }
  std::set<std::string_view> names;
  for (const auto& t : file.tensors) {
    const std::string qname = quote(t.name);
    if (!io_detail::is_valid_utf8(t.name)) fail("tensor name " + qname + " is not valid UTF-8");
    if (t.name == "__metadata__") {
      fail("a tensor may not be called \"__metadata__\" (the key is reserved for metadata)");
    }
    if (!names.insert(t.name).second) fail("two tensors are named " + qname);
    const auto& tr = traits(t.dtype);
    if (tr.safetensors.empty()) {
      fail("tensor " + qname + " has dtype " + std::string(tr.name) +
           ", which has no safetensors encoding; convert it to one of " +
           safetensors_dtype_names() +
           " first (block formats: store U8 codes plus a scale tensor)");
    }
    for (int64_t extent : t.shape) {
      if (extent < 0) {
        fail("tensor " + qname + " has a negative extent in shape " +
             io_detail::shape_string(t.shape));
      }
    }
    const auto need = io_detail::checked_nbytes(t.shape, tr.storage_bytes);
    if (!need) fail("tensor " + qname + " is too large: shape " + io_detail::shape_string(t.shape));
    if (*need != t.data.size()) {
      fail("tensor " + qname + " holds " + std::to_string(t.data.size()) + " bytes but dtype " +
           std::string(tr.safetensors) + " and shape " + io_detail::shape_string(t.shape) +
           " need " + std::to_string(*need));
    }
  }
}

std::vector<std::byte> serialize_safetensors(const SafeTensorsFile& file) {
  validate_for_write(file);
  const std::string header = build_header(file);
  uint64_t total = 8 + header.size();
  for (const auto& t : file.tensors) total += t.data.size();
  std::vector<std::byte> out;
  out.reserve(total);
  append_u64_le(out, header.size());
  const auto* h = reinterpret_cast<const std::byte*>(header.data());
  out.insert(out.end(), h, h + header.size());
  for (const auto& t : file.tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

void write_safetensors(const std::filesystem::path& path, const SafeTensorsFile& file) {
  validate_for_write(file);  // before the temporary exists: a bad file leaves no trace at all
  const std::string header = build_header(file);
  std::vector<std::byte> prefix;
  append_u64_le(prefix, header.size());
  AtomicFileWriter w(path);
  w.write(prefix);
  w.write(header);
  for (const auto& t : file.tensors) w.write(t.data);
  w.commit();
}

void sort_tensors_like_reference(SafeTensorsFile& file) {
  std::stable_sort(file.tensors.begin(), file.tensors.end(),
                   [](const SafeTensor& a, const SafeTensor& b) {
                     const int ra = reference_rank(a.dtype), rb = reference_rank(b.dtype);
                     return ra != rb ? ra > rb : a.name < b.name;
                   });
}

}  // namespace mixp
