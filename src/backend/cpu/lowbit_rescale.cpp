// rescale_s32; see include/mixp/backend/lowbit_gemm.h. Plain fp32 arithmetic, one rounding per
// operation (the build does not contract a * b + c into an FMA: -std=c++20, not gnu++20), so the
// results equal lowbit_rescale's mul and add on either backend bit for bit.
#include "backend/cpu/cpu_parallel.h"
#include "mixp/backend/lowbit_gemm.h"

namespace mixp {

void rescale_s32(float* dst, const int32_t* acc, int64_t N, int64_t P, int64_t O,
                 const int32_t* off, const float* mult, const float* bias) {
  cpu::parallel_for(N * O, N * O * P, [&](int64_t lo, int64_t hi) {
    for (int64_t no = lo; no < hi; ++no) {
      const int64_t n = no / O, o = no % O;
      const int32_t sub = off ? off[o] : 0;
      const float m = mult[o];
      const int32_t* src = acc + n * P * O + o;
      float* d = dst + no * P;
      if (bias) {
        const float b = bias[o];
        for (int64_t p = 0; p < P; ++p) {
          const float y = static_cast<float>(src[p * O] - sub) * m;
          d[p] = y + b;
        }
      } else {
        for (int64_t p = 0; p < P; ++p) d[p] = static_cast<float>(src[p * O] - sub) * m;
      }
    }
  });
}

}  // namespace mixp
