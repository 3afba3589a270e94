// AMX tier of the peak loops (see peak_kernels.h): TDPBF16PS and TDPBSSD on register tiles.
// Compiled with -mamx-tile -mamx-bf16 -mamx-int8 only (cmake/MixpTargets.cmake, *_amx.cpp);
// peak.cpp calls these loops only after cpuid reported AMX-TILE with AMX-BF16 / AMX-INT8, XCR0
// showed the OS saves the tile state, and Linux granted this process the XTILEDATA permission
// (arch_prctl ARCH_REQ_XCOMP_PERM). Without the permission the first tile instruction would
// fault (SIGILL), so nothing here may run on its own.
//
// Not run on the machine this was written on (AMD Zen 5: AVX512_BF16, no AMX): the instruction
// counts follow Intel's definition (SDM vol. 2, TDPBF16PS / TDPBSSD): with palette 1 and every
// tile 16 rows x 64 bytes, one TDPBF16PS is 16 x 16 x 32 bf16 multiply-adds (2 x 16 x 16 x 32
// flops), one TDPBSSD 16 x 16 x 64 s8 multiply-adds (2 x 16 x 16 x 64 ops).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "bench/peak_kernels.h"

namespace mixp::bench::detail {
namespace {

// The 64-byte LDTILECFG operand: palette 1, tiles 0-7 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// The tile configuration is per thread: every loop loads it (on the thread that runs it) and
// releases the tiles at its end.
void configure() {
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
}

// Configures the tiles, zeroes the accumulators tmm0-3 and loads the 1 KiB `src` (16 rows of 64
// bytes) into each source tile tmm4-7.
void start_tiles(const void* src) {
  configure();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, src, 64);
  _tile_loadd(5, src, 64);
  _tile_loadd(6, src, 64);
  _tile_loadd(7, src, 64);
}

// The accumulators tmm0-3 summed as `T` (float or int32), then the tiles released.
template <class T>
double fold_and_release() {
  alignas(64) T out[4][16 * 16];
  _tile_stored(0, out[0], 64);
  _tile_stored(1, out[1], 64);
  _tile_stored(2, out[2], 64);
  _tile_stored(3, out[3], 64);
  _tile_release();
  double r = 0;
  for (const auto& t : out)
    for (T v : t) r += static_cast<double>(v);
  return r;
}

// Four independent accumulators (tmm0-3) from four source tiles (tmm4-7), the 2 x 2 block of a
// GEMM's inner loop: each source feeds two products, and an accumulator waits for its previous
// product only every fourth instruction, so the loop runs at the unit's issue rate (one
// TDPBF16PS per 16 cycles per core, 1024 flops a cycle: the ~3.7 TFLOP/s per core of issue 29
// at 3.6 GHz) rather than its latency.
double run_bf16_tiles(int64_t iters) {
  // Small bf16 values (2^-10: 0x3a80): the sums grow by 32 x 2^-20 per step, finite for any count.
  alignas(64) uint16_t src[16 * 32];
  for (uint16_t& v : src) v = 0x3a80;
  start_tiles(src);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  return fold_and_release<float>();
}

// The int32 sums wrap, which is harmless here.
double run_int8_tiles(int64_t iters) {
  alignas(64) int8_t src[16 * 64];
  std::memset(src, 1, sizeof src);
  start_tiles(src);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  return fold_and_release<int32_t>();
}

}  // namespace

PeakKernel bf16_tiles_amx() {
  return {"TDPBF16PS tile peak", "amx_bf16", 4.0 * 2 * 16 * 16 * 32, run_bf16_tiles};
}
PeakKernel int8_tiles_amx() {
  return {"TDPBSSD tile peak", "amx_int8", 4.0 * 2 * 16 * 16 * 64, run_int8_tiles};
}

}  // namespace mixp::bench::detail
