// Test helpers shared by every tests/<dir> binary: a fresh temporary folder per test and whole-file
// read/write. Header-only: tests/common has no .cpp, so cmake/MixpTargets.cmake builds no binary
// for it; tests include it as "common/temp_dir.h".
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace mixp::test {

// A fresh folder under the system temp dir, named after the running test (for whoever has to look
// at a leftover) and made unique by mkdtemp, so tests can run in parallel under ctest. Removed with
// everything in it, read-only entries included, when the object dies.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "mixp_";
    if (info) name += std::string(info->test_suite_name()) + "_" + info->name() + "_";
    for (char& c : name) {
      if (c == '/') c = '_';  // parameterized tests are named "Suite/Name/0"
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / (name + "XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  // Names of the entries directly inside (or inside `sub`), sorted.
  std::set<std::string> entries(const std::string& sub = "") const {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(sub.empty() ? path_ : path_ / sub)) {
      out.insert(e.path().filename().string());
    }
    return out;
  }

 private:
  std::filesystem::path path_;
};

// The whole file; "" when it cannot be opened.
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

inline void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

}  // namespace mixp::test
