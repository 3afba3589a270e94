// rescale_s32; see include/mixp/backend/lowbit_gemm.h. Plain fp32 arithmetic, one rounding per
// operation (the build does not contract a * b + c into an FMA: -std=c++20, not gnu++20), so the
// results equal lowbit_rescale's mul and add on either backend bit for bit. The work is a
// transpose (channels last in, channels first out), in tiles of 16 positions.
#include "backend/cpu/lowbit_rescale.h"

#include <algorithm>

#include "backend/cpu/cpu_parallel.h"
#include "mixp/format/cpu_features.h"
#include "mixp/backend/lowbit_gemm.h"

namespace mixp {

namespace cpu::rescale {
void tile_generic(float* dst, const int32_t* acc, int64_t n, int64_t p0, int64_t pn, int64_t P,
                  int64_t O, const int32_t* off, const float* mult, const float* bias) {
  const int32_t* src = acc + (n * P + p0) * O;
  for (int64_t o = 0; o < O; ++o) {
    const int32_t sub = off ? off[o] : 0;
    const float m = mult[o];
    float* d = dst + (n * O + o) * P + p0;
    for (int64_t p = 0; p < pn; ++p) {
      const float y = static_cast<float>(src[p * O + o] - sub) * m;
      d[p] = bias ? y + bias[o] : y;
    }
  }
}
}  // namespace cpu::rescale

void rescale_s32(float* dst, const int32_t* acc, int64_t N, int64_t P, int64_t O,
                 const int32_t* off, const float* mult, const float* bias) {
  static const cpu::rescale::TileFn tile =
      by_tier(&cpu::rescale::tile_avx512, &cpu::rescale::tile_generic, &cpu::rescale::tile_generic);
  const int64_t tiles = (P + 15) / 16;
  cpu::parallel_for(N * tiles, N * O * P, [&](int64_t lo, int64_t hi) {
    for (int64_t nt = lo; nt < hi; ++nt) {
      const int64_t n = nt / tiles, p0 = (nt % tiles) * 16;
      tile(dst, acc, n, p0, std::min<int64_t>(16, P - p0), P, O, off, mult, bias);
    }
  });
}

}  // namespace mixp
