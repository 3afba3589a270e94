// Folder manifests (contract in include/mixp/io/manifest.h).
#include "mixp/io/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>

#include "io/io_util.h"
#include "io/safetensors_detail.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"

namespace mixp {

using io_detail::os_error;
using io_detail::quote;
using io_detail::quote_path;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr int kReadAttempts = 20;  // a folder replaced during every one of them is reported

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

bool parse_hex32(const json& j, uint32_t& out) {
  if (!j.is_string()) return false;
  const auto& s = j.get_ref<const std::string&>();
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | uint32_t(d);
  }
  out = v;
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string shape_json(const std::vector<int64_t>& shape) {
  return io_detail::shape_string(shape);
}

// One file read whole through the directory handle; ENOENT is returned, not thrown.
int read_at(int dfd, const std::string& name, const fs::path& shown, std::vector<std::byte>& out) {
  const int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return ENOENT;
    throw IoError(os_error("open", shown, errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (err) throw IoError(os_error("stat", shown, err));
    throw IoError("cannot read " + quote_path(shown) + ": not a regular file");
  }
  out.clear();
  try {
    out.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw IoError("cannot read " + quote_path(shown) + ": out of memory for its " +
                  std::to_string(st.st_size) + " bytes");
  }
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::read(fd, out.data() + done, out.size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IoError(os_error("read", shown, err));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  ::close(fd);
  return 0;
}

// nlohmann keeps the last of two equal keys silently; a manifest with one is refused.
struct DuplicateGuard {
  std::string source;
  std::vector<std::set<std::string>> keys;
  bool operator()(int depth, nlohmann::json::parse_event_t event, json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end) keys.pop_back();
    if (event == E::key && !keys.back().insert(parsed.get<std::string>()).second) {
      throw IntegrityError(source + ": the key " + quote(parsed.get<std::string>()) +
                           " appears twice in one object; the file is damaged");
    }
    (void)depth;
    return true;
  }
};

struct ExpectedTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint32_t crc = 0;
};
struct ExpectedFile {
  uint64_t bytes = 0;
  uint32_t crc = 0;
  bool has_tensors = false;
  std::map<std::string, ExpectedTensor> tensors;
};

[[noreturn]] void bad_manifest(const fs::path& file, const std::string& what) {
  throw IntegrityError(file.string() + ": " + what +
                       "; the folder's manifest is damaged, so nothing in it can be trusted "
                       "(save the checkpoint again, or restore it from a copy)");
}

std::map<std::string, ExpectedFile> parse_manifest(const std::vector<std::byte>& bytes,
                                                   const fs::path& file) {
  json j;
  try {
    DuplicateGuard guard{file.string(), {}};
    const auto* p = reinterpret_cast<const char*>(bytes.data());
    j = json::parse(p, p + bytes.size(), std::ref(guard));
  } catch (const json::exception& e) {
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    bad_manifest(file, "not valid JSON (" + what.substr(0, 200) + ")");
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kManifestFormat) {
    bad_manifest(file, std::string("its \"format\" is not \"") + kManifestFormat + "\"");
  }
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != 1) {
    bad_manifest(file, "its \"version\" is not 1 (a newer mixp wrote it? upgrade mixp)");
  }
  if (!j.contains("checksum") || j["checksum"] != "crc32") {
    bad_manifest(file, "its \"checksum\" is not \"crc32\"");
  }
  if (!j.contains("files") || !j["files"].is_object() || j["files"].empty()) {
    bad_manifest(file, "it has no \"files\" object");
  }
  std::map<std::string, ExpectedFile> out;
  for (const auto& [name, e] : j["files"].items()) {
    const fs::path rel(name);
    bool escapes = name.empty() || rel.is_absolute() || name == kManifestFile;
    for (const auto& part : rel) escapes = escapes || part == ".." || part == ".";
    if (escapes) bad_manifest(file, "it names the file " + quote(name));
    ExpectedFile f;
    if (!e.is_object() || !e.contains("bytes") || !e["bytes"].is_number_unsigned() ||
        !e.contains("crc32") || !parse_hex32(e["crc32"], f.crc)) {
      bad_manifest(file, "the entry of " + quote(name) +
                             " is not {\"bytes\": N, \"crc32\": \"8 hex digits\", ...}");
    }
    f.bytes = e["bytes"].get<uint64_t>();
    if (e.contains("tensors")) {
      if (!e["tensors"].is_object()) bad_manifest(file, "\"tensors\" of " + quote(name));
      f.has_tensors = true;
      for (const auto& [tname, t] : e["tensors"].items()) {
        ExpectedTensor et;
        bool ok = t.is_object() && t.contains("dtype") && t["dtype"].is_string() &&
                  t.contains("shape") && t["shape"].is_array() && t.contains("crc32") &&
                  parse_hex32(t["crc32"], et.crc);
        if (ok) {
          et.dtype = t["dtype"].get<std::string>();
          for (const auto& d : t["shape"]) {
            ok = ok && d.is_number_unsigned();
            if (ok) et.shape.push_back(d.get<int64_t>());
          }
        }
        if (!ok) bad_manifest(file, "the entry of tensor " + quote(tname) + " in " + quote(name));
        f.tensors[tname] = std::move(et);
      }
    }
    out[name] = std::move(f);
  }
  return out;
}

// Why `bytes` (a .safetensors file whose checksum does not match) differs from what was saved:
// the tensors whose dtype, shape or data changed, by name.
std::string diagnose_safetensors(const std::vector<std::byte>& bytes, const ExpectedFile& want,
                                 const fs::path& shown) {
  SafeTensorsFile f;
  try {
    f = parse_safetensors(bytes, shown.string());
  } catch (const SafeTensorsError& e) {
    return std::string("it is no longer a valid safetensors file (") + e.what() + ")";
  }
  std::vector<std::string> problems;
  for (const auto& t : f.tensors) {
    auto it = want.tensors.find(t.name);
    if (it == want.tensors.end()) {
      problems.push_back("tensor " + quote(t.name) + " was not in the saved file");
      continue;
    }
    const ExpectedTensor& e = it->second;
    const std::string dt(traits(t.dtype).safetensors);
    if (dt != e.dtype) {
      problems.push_back("tensor " + quote(t.name) + " is stored as " + dt + " but was saved as " +
                         e.dtype);
    } else if (t.shape != e.shape) {
      problems.push_back("tensor " + quote(t.name) + " has shape " + shape_json(t.shape) +
                         " but was saved with " + shape_json(e.shape));
    } else if (crc32_of(t.data) != e.crc) {
      problems.push_back("the data of tensor " + quote(t.name) + " differ from what was saved");
    }
  }
  for (const auto& [name, e] : want.tensors) {
    if (!f.find(name)) problems.push_back("tensor " + quote(name) + " is missing");
  }
  if (problems.empty()) return "its header differs from what was saved";
  std::string s;
  for (size_t i = 0; i < problems.size() && i < 4; ++i) s += (i ? "; " : "") + problems[i];
  if (problems.size() > 4) s += "; and " + std::to_string(problems.size() - 4) + " more";
  return s;
}

ino_t inode_of(const fs::path& dir) {
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 ? st.st_ino : 0;
}

class DirHandle {
 public:
  explicit DirHandle(const fs::path& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) {
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        throw IoError("cannot read " + quote_path(dir) +
                      (err == ENOENT ? ": no such folder" : ": not a folder"));
      }
      throw IoError(os_error("open folder", dir, err));
    }
    struct stat st {};
    if (::fstat(fd_, &st) == 0) inode_ = st.st_ino;
  }
  ~DirHandle() { ::close(fd_); }
  DirHandle(const DirHandle&) = delete;
  DirHandle& operator=(const DirHandle&) = delete;
  int fd() const { return fd_; }
  ino_t inode() const { return inode_; }

 private:
  int fd_ = -1;
  ino_t inode_ = 0;
};

}  // namespace

uint32_t crc32_of(std::span<const std::byte> bytes) {
  return static_cast<uint32_t>(
      ::crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

void write_folder_manifest(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    std::string rel = it->path().lexically_relative(dir).generic_string();
    if (rel != kManifestFile) names.push_back(std::move(rel));
  }
  if (ec) throw IoError(os_error("list", dir, ec.value()));
  std::sort(names.begin(), names.end());
  json files = json::object();
  DirHandle d(dir);
  for (const auto& name : names) {
    std::vector<std::byte> bytes;
    if (read_at(d.fd(), name, dir / name, bytes) != 0) {
      throw IoError("cannot read " + quote_path(dir / name) +
                    ": it disappeared while the manifest "
                    "was written");
    }
    json e = {{"bytes", bytes.size()}, {"crc32", hex32(crc32_of(bytes))}};
    if (ends_with(name, ".safetensors")) {
      // Our own files parse; a foreign file that does not is listed by its checksum only.
      try {
        const SafeTensorsFile f = parse_safetensors(bytes, (dir / name).string());
        json tensors = json::object();
        for (const auto& t : f.tensors) {
          tensors[t.name] = {{"dtype", std::string(traits(t.dtype).safetensors)},
                             {"shape", t.shape},
                             {"crc32", hex32(crc32_of(t.data))}};
        }
        e["tensors"] = std::move(tensors);
      } catch (const SafeTensorsError&) {
      }
    }
    files[name] = std::move(e);
  }
  json m = {{"format", kManifestFormat},
            {"version", 1},
            {"checksum", "crc32"},
            {"files", std::move(files)}};
  write_text_atomic(dir / kManifestFile, m.dump(1) + "\n");
}

std::vector<std::byte> read_file_verified(const fs::path& file) {
  const fs::path dir = io_detail::parent_or_dot(file);
  const std::string name = file.filename().native();
  DirHandle d(dir);
  std::vector<std::byte> bytes;
  if (read_at(d.fd(), name, file, bytes) == ENOENT) {
    throw IoError(os_error("open", file, ENOENT));
  }
  std::vector<std::byte> manifest;
  if (read_at(d.fd(), kManifestFile, dir / kManifestFile, manifest) == ENOENT) return bytes;
  const auto want = parse_manifest(manifest, dir / kManifestFile);
  const auto it = want.find(name);
  if (it == want.end()) return bytes;  // a file the folder's manifest does not cover
  const ExpectedFile& e = it->second;
  const uint32_t crc = crc32_of(bytes);
  if (bytes.size() != e.bytes || crc != e.crc) {
    std::string why = bytes.size() != e.bytes
                          ? "it has " + std::to_string(bytes.size()) + " bytes but " +
                                std::to_string(e.bytes) + " were saved"
                          : "its CRC-32 is " + hex32(crc) + " but " + hex32(e.crc) + " was saved";
    if (e.has_tensors) why += ": " + diagnose_safetensors(bytes, e, file);
    throw IntegrityError(file.string() + " does not match the folder's " + kManifestFile + " (" +
                         why +
                         "); the file was damaged or changed after it was saved, so it is refused "
                         "(save it again, or restore it from a copy)");
  }
  return bytes;
}

const std::vector<std::byte>* VerifiedFolder::find(std::string_view name) const {
  auto it = files.find(name);
  return it == files.end() ? nullptr : &it->second;
}

VerifiedFolder read_verified_folder(const fs::path& dir,
                                    std::span<const std::string> legacy_files) {
  for (int attempt = 1;; ++attempt) {
    // Where the filesystem cannot exchange two folders, a writer renames the old one aside
    // before it renames the new one in (io/atomic_file.h): the folder is missing for a moment,
    // so a missing folder is looked for again (for about 0.1 s) before it is reported.
    std::optional<DirHandle> opened;
    try {
      opened.emplace(dir);
    } catch (const IoError&) {
      if (attempt < kReadAttempts && ::access(dir.c_str(), F_OK) != 0 && errno == ENOENT) {
        ::usleep(5000);
        continue;
      }
      if (attempt < kReadAttempts && ::access(dir.c_str(), F_OK) == 0) continue;  // back already
      throw;
    }
    const DirHandle& d = *opened;
    // Any inconsistency while the folder is being replaced is retried on the new folder.
    const auto replaced = [&] { return attempt < kReadAttempts && inode_of(dir) != d.inode(); };
    VerifiedFolder out;
    out.dir = dir;
    std::vector<std::byte> manifest;
    if (read_at(d.fd(), kManifestFile, dir / kManifestFile, manifest) == ENOENT) {
      if (replaced()) continue;
      for (const auto& name : legacy_files) {
        std::vector<std::byte> bytes;
        if (read_at(d.fd(), name, dir / name, bytes) == 0) out.files[name] = std::move(bytes);
      }
      if (replaced()) continue;
      return out;
    }
    out.has_manifest = true;
    std::map<std::string, ExpectedFile> want;
    try {
      want = parse_manifest(manifest, dir / kManifestFile);
    } catch (const IntegrityError&) {
      if (replaced()) continue;
      throw;
    }
    bool retry = false;
    for (const auto& [name, e] : want) {
      const fs::path shown = dir / name;
      std::vector<std::byte> bytes;
      if (read_at(d.fd(), name, shown, bytes) == ENOENT) {
        if ((retry = replaced())) break;
        throw IntegrityError(shown.string() + ": missing, but the folder's " + kManifestFile +
                             " names it; the folder is incomplete (save it again, or restore it "
                             "from a copy)");
      }
      const uint32_t crc = crc32_of(bytes);
      if (bytes.size() != e.bytes || crc != e.crc) {
        if ((retry = replaced())) break;
        std::string why =
            bytes.size() != e.bytes
                ? "it has " + std::to_string(bytes.size()) + " bytes but " +
                      std::to_string(e.bytes) + " were saved"
                : "its CRC-32 is " + hex32(crc) + " but " + hex32(e.crc) + " was saved";
        if (e.has_tensors) why += ": " + diagnose_safetensors(bytes, e, shown);
        throw IntegrityError(shown.string() + " does not match the folder's " + kManifestFile +
                             " (" + why +
                             "); the file was damaged or changed after it was saved, so it is "
                             "refused (save it again, or restore it from a copy)");
      }
      out.files[name] = std::move(bytes);
    }
    if (retry) continue;
    return out;
  }
}

}  // namespace mixp
