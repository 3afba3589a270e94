// CpuBackend's rotary embedding (backend.h): fp32 contiguous rows split over OpenMP threads; fp64
// and other layouts fall through to the ref kernel (src/backend/ref/ref_rope.cpp). RMSNorm is
// cpu_norm.cpp.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_parallel.h"

namespace mixp {
using cpu::f32c;
using cpu::fp;
using cpu::parallel_for;

void CpuBackend::rope(Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin,
                      bool inverse) {
  if (!(f32c(dst) && f32c(src) && f32c(cos) && f32c(sin))) {
    return RefBackend::rope(dst, src, cos, sin, inverse);
  }
  const int64_t T = src.size(1), H = src.size(2), D = src.size(3), h = D / 2;
  const int64_t rows = src.numel() / D;
  const float* s = fp(src);
  const float* cp = fp(cos);
  const float* sp = fp(sin);
  float* d = fp(dst);
  const float sg = inverse ? -1.0f : 1.0f;
  parallel_for(rows, src.numel() * 2, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t pos = (r / H) % T;
      const float* c = cp + pos * h;
      const float* sn = sp + pos * h;
      const float* x = s + r * D;
      float* y = d + r * D;
      for (int64_t j = 0; j < h; ++j) {
        const float x1 = x[j], x2 = x[j + h], cj = c[j], sj = sg * sn[j];
        y[j] = x1 * cj - x2 * sj;
        y[j + h] = x2 * cj + x1 * sj;
      }
    }
  });
}

}  // namespace mixp
