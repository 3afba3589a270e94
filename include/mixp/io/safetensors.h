// Reading and writing .safetensors files (huggingface/safetensors format):
//
//   bytes [0, 8)        N, the header size, unsigned 64-bit little-endian
//   bytes [8, 8+N)      UTF-8 JSON object: {"<name>": {"dtype": "F32", "shape": [2, 3],
//                       "data_offsets": [begin, end]}, ..., "__metadata__": {"<key>": "<value>"}}
//                       (writers pad it with spaces to a multiple of 8 bytes)
//   bytes [8+N, EOF)    the data buffer (offsets relative to its start), row-major, little-endian
//
// Validation follows the reference implementation (safetensors/src/tensor.rs, Metadata::validate
// and SafeTensors::read_metadata) and is a little stricter where the reference is silent:
//   - file at least 8 bytes; N <= 100,000,000 (the reference's MAX_HEADER_SIZE); 8 + N <= size;
//   - the header is valid UTF-8 JSON, starts with '{', is an object; no key appears twice in any
//     object (the reference's HashMap silently keeps one; we reject: the file is ambiguous);
//   - each tensor entry is an object with "dtype" (a string this library supports), "shape" (an
//     array of non-negative integers) and "data_offsets" (two non-negative integers, begin <= end);
//     other keys in an entry are ignored, as in the reference;
//   - numel(shape) * element size == end - begin, computed without overflow;
//   - sorted by offset, the tensors tile the buffer exactly: each begins where the previous one
//     ended (no overlaps, no holes) and the last ends at the end of the file (no trailing bytes);
//   - "__metadata__" is an object whose values are all strings (null is accepted as "none").
// Every violation throws SafeTensorsError with a one-line message naming the source, the tensor
// and the byte offsets involved; filesystem failures throw IoError (mixp/io/atomic_file.h).
//
// Writing: the header is compact JSON with "__metadata__" first (when non-empty), then the tensors
// in the order given, each {"dtype","shape","data_offsets"}; padded with spaces to a multiple of 8,
// as the reference does. Tensor data are laid out in the order of SafeTensorsFile::tensors, so a
// write followed by a read gives the same order back. The reference writer instead sorts by
// descending dtype alignment, then by name, which aligns every tensor to its element size for
// zero-copy readers; call sort_tensors_like_reference() first to get that layout (and, for at most
// one metadata entry, byte-identical output to the reference).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/dtype.h"

namespace mixp {

// A malformed .safetensors file, or a SafeTensorsFile that cannot be written.
class SafeTensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The reference implementation's limit on the header size, in bytes.
inline constexpr uint64_t kSafeTensorsMaxHeaderBytes = 100'000'000;

struct SafeTensor {
  std::string name;
  DType dtype = DType::fp32;    // one with a safetensors string (traits(dtype).safetensors)
  std::vector<int64_t> shape;   // [] is a scalar (one element); a 0 extent means no elements
  std::vector<std::byte> data;  // numel() * traits(dtype).storage_bytes bytes, little-endian
  // Product of the extents; throws SafeTensorsError on a negative extent or int64 overflow.
  int64_t numel() const;
};

struct SafeTensorsFile {
  std::map<std::string, std::string> metadata;  // the "__metadata__" object
  std::vector<SafeTensor> tensors;              // in data-buffer (file) order
  // The tensor called `name`, or nullptr.
  const SafeTensor* find(std::string_view name) const;
  SafeTensor* find(std::string_view name);
};

// A tensor's entry in the header, without its data (for inspecting large files cheaply).
struct SafeTensorInfo {
  std::string name;
  DType dtype = DType::fp32;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;  // absolute offset of the first data byte in the file (8 + N + begin)
  uint64_t nbytes = 0;       // end - begin
};

struct SafeTensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<SafeTensorInfo> tensors;  // in data-buffer (file) order
  uint64_t header_bytes = 0;            // N
  uint64_t file_bytes = 0;              // size of the whole file
};

// Reads and validates a whole file. Throws IoError if it cannot be read, SafeTensorsError if it
// is malformed. Memory: one copy of each tensor's data (the file is not buffered whole).
SafeTensorsFile read_safetensors(const std::filesystem::path& path);
// Reads and validates the header only (the data are not read, but the file size is checked).
SafeTensorsHeader read_safetensors_header(const std::filesystem::path& path);
// Parses a complete file image held in memory; `source_name` names it in error messages.
SafeTensorsFile parse_safetensors(std::span<const std::byte> bytes,
                                  std::string_view source_name = "<memory>");

// Throws SafeTensorsError unless `file` can be written: every dtype has a safetensors string,
// names are unique, valid UTF-8 and not "__metadata__", extents are non-negative, data sizes
// match dtype and shape, metadata keys and values are valid UTF-8.
void validate_for_write(const SafeTensorsFile& file);
// The complete file image. Validates first.
std::vector<std::byte> serialize_safetensors(const SafeTensorsFile& file);
// Validates, then writes atomically (AtomicFileWriter): on any failure no file is left at `path`
// and an existing file there is unchanged. Streams tensor data; no second copy in memory.
void write_safetensors(const std::filesystem::path& path, const SafeTensorsFile& file);

// Orders `file.tensors` as the reference writer does: descending alignment class of the dtype
// (I64, F64, F32, I32, BF16, F16, F8_E4M3, F8_E5M2, I8, U8, BOOL, the reference's Dtype order
// reversed), then by name. Stable for equal keys.
void sort_tensors_like_reference(SafeTensorsFile& file);

// "F64, F32, BF16, ..." the dtype strings this library reads and writes (for error messages).
std::string safetensors_dtype_names();

}  // namespace mixp
