// Folder manifests: what makes a checkpoint folder verifiable (docs/io.md, "Manifests").
//
// `manifest.json`, written last into a folder being built (an AtomicDirectory's staging folder),
// names every other file of the folder with its size and CRC-32, and, for each .safetensors
// file, every tensor with its dtype, shape and the CRC-32 of its data:
//
//   {"format": "mixp-manifest", "version": 1, "checksum": "crc32",
//    "files": {"model.safetensors": {"bytes": 407080, "crc32": "1c291ca3",
//                "tensors": {"fc1.weight": {"dtype": "F32", "shape": [128, 784],
//                                           "crc32": "9e83486c"}, ...}},
//              "state.json": {"bytes": 2113, "crc32": "0b0c71a2"}, ...}}
//
// CRC-32 is zlib's (crc32_z: the gzip/PNG polynomial), a dependency already; it catches every
// burst of up to 32 flipped bits and any other accidental damage but for a 2^-32 chance. It is
// not a defence against a deliberate forgery (nothing is, without a key).
//
// A reader (read_verified_folder) opens the folder once and reads the manifest and every file it
// names through that one directory handle, then checks each file's size and checksum: it sees one
// save, never parts of two, even while a writer replaces the folder (a folder replaced during the
// read is read again). Files the manifest does not name are ignored.
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

namespace mixp {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kManifestFormat = "mixp-manifest";

// A folder's content does not match its manifest (or the manifest is unreadable). The message
// names the file and, for a safetensors file, the tensor; it says the folder is damaged.
class IntegrityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// zlib's CRC-32 of `bytes`.
uint32_t crc32_of(std::span<const std::byte> bytes);

// Writes `dir/manifest.json` naming every regular file under `dir` (recursively, in name order;
// manifest.json itself excluded). Call it last, on a staging folder. Throws IoError when a file
// cannot be read or the manifest cannot be written.
void write_folder_manifest(const std::filesystem::path& dir);

// A folder read once, through one directory handle.
struct VerifiedFolder {
  std::filesystem::path dir;
  bool has_manifest = false;
  // With a manifest: every file it names, verified. Without one: those of the requested legacy
  // names that exist, unverified.
  std::map<std::string, std::vector<std::byte>, std::less<>> files;
  const std::vector<std::byte>* find(std::string_view name) const;
  // The file's path, for messages (dir / name).
  std::filesystem::path path(std::string_view name) const { return dir / std::string(name); }
};

// Reads `dir` as described at the top of this file. Throws IoError when `dir` or a file cannot be
// read, IntegrityError on a missing file, a size or checksum mismatch, or a malformed manifest.
// Without a manifest, reads `legacy_files` (those that exist) and sets has_manifest = false.
VerifiedFolder read_verified_folder(const std::filesystem::path& dir,
                                    std::span<const std::string> legacy_files);

// The bytes of one file; when the folder holding it has a manifest.json that names it (a file of
// a checkpoint), checked against it (IntegrityError on a mismatch, naming the file). For tools
// that read one file of a checkpoint (`mixp convert`).
std::vector<std::byte> read_file_verified(const std::filesystem::path& file);

}  // namespace mixp
