// Reader for the committed reference fixtures under tests/golden/format/ (written by
// gen_format_fixtures.py there; the script's docstring documents the layout and where every
// expected value comes from).
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>
#include "common/test_paths.h"

namespace mixp::test {

class Fixture {
 public:
  explicit Fixture(const std::string& name) {
    const std::string path = std::string(MIXP_TEST_DATA) + "/format/" + name;
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      throw std::runtime_error("cannot open fixture " + path +
                               "; regenerate with /usr/bin/python3 tests/golden/format/"
                               "gen_format_fixtures.py");
    }
    data_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (data_.size() < 24 || std::memcmp(data_.data(), "MXFX", 4) != 0 || field(4, 4) != 1) {
      throw std::runtime_error("fixture " + path + " has a bad header");
    }
    in_bytes_ = field(8, 4);
    out_bytes_ = field(12, 4);
    n_out_ = field(16, 4);
    count_ = field(20, 4);
    record_ = in_bytes_ + n_out_ * out_bytes_;
    if (data_.size() != 24 + static_cast<size_t>(count_) * record_) {
      throw std::runtime_error("fixture " + path + " has the wrong size for its header");
    }
  }
  uint32_t count() const { return count_; }
  uint32_t n_out() const { return n_out_; }
  uint32_t input(uint32_t i) const { return field(24 + size_t{i} * record_, in_bytes_); }
  uint32_t output(uint32_t i, uint32_t k) const {
    return field(24 + size_t{i} * record_ + in_bytes_ + size_t{k} * out_bytes_, out_bytes_);
  }

 private:
  uint32_t field(size_t off, uint32_t bytes) const {  // little endian, 1..4 bytes
    uint32_t v = 0;
    for (uint32_t b = 0; b < bytes; ++b) v |= uint32_t{data_[off + b]} << (8 * b);
    return v;
  }
  std::vector<unsigned char> data_;
  uint32_t in_bytes_ = 0, out_bytes_ = 0, n_out_ = 0, count_ = 0, record_ = 0;
};

inline float f32(uint32_t bits) { return std::bit_cast<float>(bits); }
inline uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

}  // namespace mixp::test
