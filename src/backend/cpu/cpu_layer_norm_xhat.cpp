// LayerNorm's 16-bit saved xhat (backend.h, layer_norm_xhat; ops/layer_norm_saved.h), moved
// from ops/layer_norm_saved.cpp unchanged: a row loop whose rounding is the bulk converter's. The
// ref backend's element loop (src/backend/ref/ref_step.cpp) is its oracle in tests/backend.
#include <omp.h>

#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "mixp/format/convert.h"

namespace mixp {

namespace {
constexpr int64_t kParallelRows = 64;  // below this a row loop is cheaper than waking threads
}  // namespace

void CpuBackend::layer_norm_xhat(Tensor& out, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd) {
  if (!x.is_contiguous() || !out.is_contiguous())
    throw std::logic_error("mixp: layer_norm_xhat needs contiguous src and dst");
  const DType low = out.dtype();
  const int64_t rows = mean.numel(), n = rows ? x.numel() / rows : 0;
  const float* xp = x.data<float>();
  const float* mp = mean.data<float>();
  const float* rp = rstd.data<float>();
  auto* ob = static_cast<unsigned char*>(out.data_ptr());
  const size_t es = out.element_size();
  const ConvertOptions rne{.round = Round::nearest_even, .overflow = Overflow::ieee};
#pragma omp parallel if (rows >= kParallelRows)
  {
    std::vector<float> row(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = xp + r * n;
      const float m = mp[r], rs = rp[r];
      for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = (xr[i] - m) * rs;
      convert_f32_to(low, row, ob + static_cast<size_t>(r * n) * es, rne);
    }
  }
}

}  // namespace mixp
