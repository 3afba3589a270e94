// The block-scaled recipes' CUDA arithmetic, on any machine (docs/cuda.md "Block-scaled
// recipes"): src/format/block_quant_math.h is the one header the CPU path and the CUDA
// kernels (src/backend/cuda/cuda_block_quant.cu) share. Here:
//  - the CPU path includes it and keeps no second copy of its functions (a source check: if
//    someone re-adds a private copy, the GPU's math is no longer what the CPU tests cover);
//  - the kernels' structure (one tile's amax as a max over |x|'s bits, thread 0's tile_scale,
//    each element's code from the header) run on the host equals block_scaled_quantize, its
//    fake quantization and its GEMM factors bit for bit, for every scheme, tile, rounding and
//    an odd shape, and fp8-block's column-wise tiles (128 x 1);
//  - cuBLASLt's scale layouts (the 128x4 tiles of VEC16_UE4M3 / VEC32_UE8M0, VEC128_32F's and
//    BLK128x128_32F's padded layouts) against the documented offsets;
//  - block_gemm_path's choice by compute capability.
// test_cuda_block_device.cpp runs the kernels themselves on a GPU against the CPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "format/block_quant_math.h"
#include "common/test_paths.h"
#include "mixp/backend/cuda_block.h"
#include "mixp/format/block_scaled.h"
#include "mixp/format/rounding.h"

namespace mixp {
namespace {

namespace bm = block_math;

std::string read_source(const std::string& rel) {
  std::ifstream f(std::string(MIXP_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(CudaBlockMath, TheCpuPathRunsTheSharedHeader) {
  // A packed test binary (scripts/gpu-pack.sh) runs where this build's source tree is not.
  if (read_source("src/format/block_scaled.cpp").empty())
    GTEST_SKIP() << "the source tree " << MIXP_SOURCE_DIR << " is not on this machine";
  const char* header = "#include \"format/block_quant_math.h\"";
  for (const char* file : {"src/format/block_scaled_kernels.inc", "src/format/block_scaled.cpp",
                           "src/backend/cuda/cuda_block_quant.cu"}) {
    const std::string src = read_source(file);
    ASSERT_FALSE(src.empty()) << file;
    EXPECT_NE(src.find(header), std::string::npos) << file << " does not include the header";
    // No definition of the header's functions of its own (a definition: a return type, the
    // name, a parameter list and a body).
    for (const char* fn : {"e2m1_code_rne", "e2m1_code_sr", "e2m1_rne_index", "e2m1_deq",
                           "e4m3_code", "e4m3_value", "e4m3_rne_mag", "tile_scale",
                           "nvfp4_tensor_scales", "ceil_log2", "rht16_entry"}) {
      const std::regex def(std::string(R"((uint32_t|uint8_t|float|int|TileScale|TensorScales)\s+)") +
                           fn + R"(\s*\([^;{]*\)\s*\{)");
      EXPECT_FALSE(std::regex_search(src, def)) << file << " defines its own " << fn;
    }
  }
  // The CPU's tile scale is the header's (block_scaled.cpp calls it).
  EXPECT_NE(read_source("src/format/block_scaled.cpp").find("block_math::tile_scale("),
            std::string::npos);
}

// Values over many binades with zeros, ties and subnormals.
std::vector<float> data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-12, 6);
  std::vector<float> v(n);
  for (float& f : v) f = std::ldexp(nd(rng), ex(rng));
  const float fixed[] = {0.0f, -0.0f, 6.0f, -2.5f, 0.25f, 1e-40f, -3e-39f, 448.0f, 5.0f, -0.75f};
  for (size_t i = 0; i < std::size(fixed) && i < n; ++i) v[i * 13 % n] = fixed[i];
  return v;
}

struct Sim {
  std::vector<uint8_t> codes, scale_codes;
  std::vector<float> scales, deq;
  std::vector<uint16_t> factors;
  float amax = 0.0f;
};

// cuda_block_quant.cu's block_quantize_kernel, on the host: tiles of th x tw.
Sim simulate(const std::vector<float>& x, int64_t rows, int64_t cols, int kind, int th, int tw,
             bool pow2, bool sr, uint64_t seed) {
  Sim s;
  const int64_t gr = (rows + th - 1) / th, gc = (cols + tw - 1) / tw;
  s.codes.assign(x.size(), 0);
  s.deq.assign(x.size(), 0.0f);
  s.factors.assign(x.size(), 0);
  s.scales.assign(static_cast<size_t>(gr * gc), 0.0f);
  s.scale_codes.assign(s.scales.size(), 0);
  bm::TensorScales gs;
  if (kind == bm::kNvfp4) {  // launch_amax: an unsigned max over the keys
    uint32_t m = 0;
    for (float v : x) m = std::max(m, bm::abs_key(v));
    s.amax = bm::bitsf(m);
    gs = bm::nvfp4_tensor_scales(s.amax);
  }
  for (int64_t t = 0; t < gr * gc; ++t) {
    const int64_t r0 = (t / gc) * th, c0 = (t % gc) * tw;
    uint32_t m = 0;
    for (int64_t r = r0; r < std::min(rows, r0 + th); ++r)
      for (int64_t c = c0; c < std::min(cols, c0 + tw); ++c)
        m = std::max(m, bm::abs_key(x[static_cast<size_t>(r * cols + c)]));
    const bm::TileScale ts = bm::tile_scale(kind, pow2, bm::bitsf(m), gs.gdec, gs.gmult);
    s.scales[static_cast<size_t>(t)] = ts.s;
    s.scale_codes[static_cast<size_t>(t)] = ts.code;
    for (int64_t r = r0; r < std::min(rows, r0 + th); ++r)
      for (int64_t c = c0; c < std::min(cols, c0 + tw); ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const float v = x[i] * ts.enc;
        uint32_t code;
        float deq, fac;
        if (kind == bm::kFp8Block) {
          code = bm::e4m3_code(v);
          deq = bm::e4m3_value(code) * ts.s;
          fac = bm::e4m3_value(code) * 1.0f;
        } else {
          code = sr ? bm::e2m1_code_sr(v, sr_bits(seed, i)) : bm::e2m1_code_rne(v);
          deq = bm::e2m1_deq(code, ts.s, gs.g);
          fac = bm::e2m1_deq(code, ts.s, 1.0f);
        }
        s.codes[i] = static_cast<uint8_t>(code);
        s.deq[i] = deq;
        s.factors[i] = static_cast<uint16_t>(bm::fbits(fac) >> 16);
      }
  }
  return s;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

struct Case {
  BlockScheme scheme;
  int tile_rows;
  bool pow2;
  Round round;
};
const Case kCases[] = {
    {BlockScheme::nvfp4, 1, false, Round::nearest_even},
    {BlockScheme::nvfp4, 16, false, Round::nearest_even},
    {BlockScheme::nvfp4, 1, false, Round::stochastic},
    {BlockScheme::mxfp4, 1, false, Round::nearest_even},
    {BlockScheme::mxfp4, 1, false, Round::stochastic},
    {BlockScheme::fp8_block, 1, false, Round::nearest_even},
    {BlockScheme::fp8_block, 128, false, Round::nearest_even},
    {BlockScheme::fp8_block, 1, true, Round::nearest_even},
    {BlockScheme::fp8_block, 128, true, Round::nearest_even},
};

TEST(CudaBlockMath, KernelStructureEqualsTheCpuQuantizerBitForBit) {
  const int64_t rows = 133, cols = 300;  // partial tiles of every size at both edges
  const std::vector<float> x = data(static_cast<size_t>(rows * cols), 3);
  for (const Case& c : kCases) {
    const BlockScaledOptions o{.scheme = c.scheme, .tile_rows = c.tile_rows, .pow2_scales = c.pow2,
                               .round = c.round, .seed = 0x1234567890ULL};
    const std::string what = std::string(to_string(c.scheme)) + " " + std::to_string(c.tile_rows) +
                             (c.pow2 ? " pow2" : "") + (c.round == Round::stochastic ? " sr" : "");
    const Sim s = simulate(x, rows, cols, static_cast<int>(c.scheme), c.tile_rows,
                           block_scaled_tile_cols(c.scheme), c.pow2, c.round == Round::stochastic,
                           o.seed);
    const BlockScaledTensor q = block_scaled_quantize(x, rows, cols, o);
    EXPECT_EQ(s.codes, q.codes) << what;
    EXPECT_EQ(bits(s.scales), bits(q.scales)) << what;
    if (c.scheme != BlockScheme::fp8_block) {
      EXPECT_EQ(s.scale_codes, q.scale_codes) << what;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(s.amax), std::bit_cast<uint32_t>(q.global_amax)) << what;
    std::vector<float> fq = x;
    block_scaled_fake_quantize(fq, rows, cols, o);
    EXPECT_EQ(bits(s.deq), bits(fq)) << what;
    std::vector<uint16_t> f16(x.size());
    (void)block_scaled_fake_quantize_factors(x, rows, cols, o, f16);
    EXPECT_EQ(s.factors, f16) << what;
  }
}

TEST(CudaBlockMath, ColumnTilesEqualFp8ColumnsFactors) {
  const int64_t rows = 300, cols = 37;  // tiles of 128 rows x 1 column
  const std::vector<float> x = data(static_cast<size_t>(rows * cols), 5);
  const BlockScaledOptions o{.scheme = BlockScheme::fp8_block};
  const Sim s = simulate(x, rows, cols, bm::kFp8Block, 128, 1, false, false, 0);
  std::vector<uint16_t> f16(x.size());
  const BlockScaledFactors f = fp8_block_columns_factors(x, rows, cols, o, f16);
  EXPECT_EQ(s.factors, f16);
  EXPECT_EQ(bits(s.scales), bits(f.tile_scales));
}

TEST(CudaBlockMath, RhtOutputIsRht16Rows) {
  std::vector<float> x = data(16 * 40, 9);
  std::vector<float> want = x;
  rht16_rows(want, 40, 16);
  for (size_t g = 0; g < x.size(); g += 16)
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(std::bit_cast<uint32_t>(bm::rht16_output(x.data() + g, j)),
                std::bit_cast<uint32_t>(want[g + static_cast<size_t>(j)]));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bm::rht16_sign(i), rht16_sign(i));
}

TEST(CudaBlockMath, ScaleLayoutsAreCublasLts) {
  // VEC16 / VEC32 (cuBLAS's 128x4 tiles). The documented example (nvmath-python
  // get_block_scale_offset, NVFP4, a of 128 x 128: 8 scale columns): block (5, 2) at 82 and
  // (5, 5) at 593.
  EXPECT_EQ(bm::vec_scale_offset(5, 2, 8), 82);
  EXPECT_EQ(bm::vec_scale_offset(5, 5, 8), 593);
  // Rows padded to 128 and scale columns to 4 (Microsoft superbench GetScaleTensorSize: the
  // same count), every (row, column) at its own offset inside.
  for (const auto& [rows, sc] : {std::pair<int64_t, int64_t>{1, 1}, {130, 5}, {256, 8}, {77, 19}}) {
    const int64_t n = bm::vec_scale_bytes(rows, sc);
    EXPECT_EQ(n, ((rows + 127) / 128 * 128) * ((sc + 3) / 4 * 4));
    std::set<int64_t> seen;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < sc; ++c) {
        const int64_t off = bm::vec_scale_offset(r, c, sc);
        EXPECT_GE(off, 0);
        EXPECT_LT(off, n);
        EXPECT_TRUE(seen.insert(off).second) << r << " " << c;
      }
  }
  // Inside a tile: row 32 q + p, column j at p * 16 + q * 4 + j; tiles row-major.
  EXPECT_EQ(bm::vec_scale_offset(0, 0, 4), 0);
  EXPECT_EQ(bm::vec_scale_offset(0, 3, 4), 3);
  EXPECT_EQ(bm::vec_scale_offset(32, 0, 4), 4);
  EXPECT_EQ(bm::vec_scale_offset(1, 0, 4), 16);
  EXPECT_EQ(bm::vec_scale_offset(127, 3, 4), 31 * 16 + 3 * 4 + 3);
  EXPECT_EQ(bm::vec_scale_offset(0, 4, 8), 512);    // the next tile along K
  EXPECT_EQ(bm::vec_scale_offset(128, 0, 8), 1024);  // the next row of tiles
  // VEC128_32F: [ceil(K / 128), roundup(rows, 4)] (TE's GEMM_READY rowwise 1-D scales).
  EXPECT_EQ(bm::vec128_scale_count(130, 3), 3 * 132);
  EXPECT_EQ(bm::vec128_scale_offset(5, 2, 130), 2 * 132 + 5);
  // BLK128x128_32F: [ceil(rows / 128), roundup(ceil(K / 128), 4)] (TE's 2-D GEMM_READY).
  EXPECT_EQ(bm::blk128_scale_count(300, 5), 3 * 8);
  EXPECT_EQ(bm::blk128_scale_offset(2, 4, 5), 2 * 8 + 4);
}

TEST(CudaBlockMath, GemmPathByComputeCapability) {
  const auto path = [](BlockScheme s, int major, int minor) {
    return std::string(to_string(block_gemm_path(s, major, minor)));
  };
  for (const auto& [maj, min] : {std::pair{7, 5}, {8, 0}, {8, 9}}) {
    EXPECT_EQ(path(BlockScheme::fp8_block, maj, min), "dequantize");
    EXPECT_EQ(path(BlockScheme::nvfp4, maj, min), "dequantize");
    EXPECT_EQ(path(BlockScheme::mxfp4, maj, min), "dequantize");
  }
  EXPECT_EQ(path(BlockScheme::fp8_block, 9, 0), "cublaslt");  // Hopper: VEC128 / BLK128x128
  EXPECT_EQ(path(BlockScheme::nvfp4, 9, 0), "dequantize");
  EXPECT_EQ(path(BlockScheme::mxfp4, 9, 0), "dequantize");
  for (const auto& [maj, min] : {std::pair{10, 0}, {12, 0}}) {  // Blackwell
    EXPECT_EQ(path(BlockScheme::nvfp4, maj, min), "cublaslt");
    EXPECT_EQ(path(BlockScheme::mxfp4, maj, min), "cublaslt");
    EXPECT_EQ(path(BlockScheme::fp8_block, maj, min), "dequantize");
  }
}

}  // namespace
}  // namespace mixp
