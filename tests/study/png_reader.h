// A minimal PNG decoder for tests: 8-bit greyscale, RGB, grey+alpha or RGBA, not interlaced
// (what Chromium's --screenshot writes). Undoes the five row filters (PNG spec section 9).
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixp::study::test {

struct Png {
  uint32_t width = 0, height = 0;
  int channels = 0;             // 1, 2, 3 or 4
  std::vector<uint8_t> pixels;  // rows top to bottom, `channels` bytes per pixel
  const uint8_t* at(uint32_t x, uint32_t y) const {
    return &pixels[(size_t(y) * width + x) * size_t(channels)];
  }
};

inline uint32_t png_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

inline Png read_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> d((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (d.size() < 8 || !std::equal(sig, sig + 8, d.begin())) throw std::runtime_error("not a PNG");
  Png png;
  int bit_depth = 0, color_type = -1, interlace = 0;
  std::vector<uint8_t> idat;
  for (size_t i = 8; i + 12 <= d.size();) {
    uint32_t n = png_be32(&d[i]);
    std::string type(reinterpret_cast<const char*>(&d[i + 4]), 4);
    if (i + 12 + n > d.size()) throw std::runtime_error("truncated PNG chunk");
    const uint8_t* c = &d[i + 8];
    if (type == "IHDR") {
      png.width = png_be32(c);
      png.height = png_be32(c + 4);
      bit_depth = c[8];
      color_type = c[9];
      interlace = c[12];
    } else if (type == "IDAT") {
      idat.insert(idat.end(), c, c + n);
    } else if (type == "IEND") {
      break;
    }
    i += 12 + n;
  }
  switch (color_type) {
    case 0:
      png.channels = 1;
      break;
    case 2:
      png.channels = 3;
      break;
    case 4:
      png.channels = 2;
      break;
    case 6:
      png.channels = 4;
      break;
    default:
      throw std::runtime_error("unsupported PNG colour type " + std::to_string(color_type));
  }
  if (bit_depth != 8 || interlace != 0) throw std::runtime_error("unsupported PNG layout");
  const size_t stride = size_t(png.width) * size_t(png.channels);
  std::vector<uint8_t> raw((stride + 1) * png.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, idat.data(), idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    throw std::runtime_error("PNG image data does not inflate to the expected size");
  }
  png.pixels.resize(stride * png.height);
  const size_t bpp = size_t(png.channels);
  for (uint32_t y = 0; y < png.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* src = &raw[y * (stride + 1) + 1];
    uint8_t* dst = &png.pixels[y * stride];
    const uint8_t* up = y ? &png.pixels[(y - 1) * stride] : nullptr;
    for (size_t x = 0; x < stride; ++x) {
      int a = x >= bpp ? dst[x - bpp] : 0, b = up ? up[x] : 0,
          c = (up && x >= bpp) ? up[x - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default:
          throw std::runtime_error("bad PNG filter type");
      }
      dst[x] = uint8_t(src[x] + pred);
    }
  }
  return png;
}

}  // namespace mixp::study::test
