// CpuBackend::argmax: the source viewed as [outer, n, inner] around the reduced dim (made
// contiguous first when it is a strided view). inner == 1 scans each row; otherwise the loop runs
// over n with the running maxima of `inner` columns in a buffer, so the inner loop is contiguous
// and vectorizes. fp32, fp64, int32 and int64 are read as they are; the other floating formats
// (bf16, fp16, fp8, ...) are widened to fp32 first, which is exact, so the indices are the same.
// Other integer formats (int8, uint8, bool) go to the reference kernel.
#include <algorithm>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_layout.h"
#include "backend/cpu/cpu_parallel.h"
#include "mixp/format/convert.h"

namespace mixp {
namespace {

template <class T>
inline bool nan_of(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    (void)v;
    return false;
  }
}

// v replaces the running maximum m when it is larger, or NaN while m is not (ties keep the first
// index; once m is NaN nothing replaces it: the first NaN wins).
template <class T>
inline bool takes_over(T v, T m) {
  return (v > m) | (nan_of(v) & !nan_of(m));
}

template <class T>
void argmax_contiguous(int64_t* dst, const T* x, int64_t outer, int64_t n, int64_t inner) {
  const int64_t work = outer * n * inner;
  if (inner == 1) {
    cpu::parallel_for(outer, work, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* row = x + o * n;
        T m = row[0];
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j) {
          if (takes_over(row[j], m)) {
            m = row[j];
            best = j;
          }
        }
        dst[o] = best;
      }
    });
    return;
  }
  // Columns in blocks of kCols per task, tasks = outer x column blocks.
  constexpr int64_t kCols = 512;
  const int64_t blocks = (inner + kCols - 1) / kCols;
  cpu::parallel_for(outer * blocks, work, [&](int64_t lo, int64_t hi) {
    T m[kCols];
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * kCols;
      const int64_t w = std::min(kCols, inner - c0);
      const T* base = x + o * n * inner + c0;
      int64_t* bi = dst + o * inner + c0;
      for (int64_t i = 0; i < w; ++i) {
        m[i] = base[i];
        bi[i] = 0;
      }
      for (int64_t j = 1; j < n; ++j) {
        const T* xr = base + j * inner;
#pragma omp simd
        for (int64_t i = 0; i < w; ++i) {
          const bool up = takes_over(xr[i], m[i]);
          m[i] = up ? xr[i] : m[i];
          bi[i] = up ? j : bi[i];
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::argmax(Tensor& dst, const Tensor& src, int dim) {
  const DType sd = src.dtype();
  const bool native =
      sd == DType::fp32 || sd == DType::fp64 || sd == DType::int32 || sd == DType::int64;
  const bool widen = !native && is_elementwise_float(sd);
  if (dst.dtype() != DType::int64 || !(native || widen) || src.numel() == 0)
    return RefBackend::argmax(dst, src, dim);
  if (widen) {  // exact: the same order, the same NaNs
    Tensor f = Tensor::empty(src.shape(), {.dtype = DType::fp32});
    copy(f, cpu::dense(*this, src));  // contiguous first: the bulk converters want that
    return argmax(dst, f, dim);
  }
  const Tensor x = cpu::dense(*this, src);
  Tensor out = cpu::dense_out(dst);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  const int64_t n = x.shape()[dim];
  int64_t* o = static_cast<int64_t*>(out.data_ptr());
  switch (sd) {
    case DType::fp32:
      argmax_contiguous(o, static_cast<const float*>(x.data_ptr()), outer, n, inner);
      break;
    case DType::fp64:
      argmax_contiguous(o, static_cast<const double*>(x.data_ptr()), outer, n, inner);
      break;
    case DType::int32:
      argmax_contiguous(o, static_cast<const int32_t*>(x.data_ptr()), outer, n, inner);
      break;
    default:
      argmax_contiguous(o, static_cast<const int64_t*>(x.data_ptr()), outer, n, inner);
      break;
  }
  cpu::write_back(*this, dst, out);
}

}  // namespace mixp
