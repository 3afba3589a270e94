#include "ops/layer_norm_saved.h"

#include <vector>

#include "mixp/backend/backend.h"
#include "mixp/format/convert.h"
#include "ops/dispatch.h"

namespace mixp::detail {

namespace {
constexpr int64_t kParallelRows = 64;  // below this a row loop is cheaper than waking threads
}  // namespace

Tensor layer_norm_xhat(const Tensor& x, const Tensor& mean, const Tensor& rstd, DType low) {
  const int64_t rows = mean.numel(), n = rows ? x.numel() / rows : 0;
  Tensor out = new_tensor(x.shape(), low);
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
  return out;
}

void layer_norm_backward_from_xhat(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                   const Tensor& xhat, const Tensor& w, const Tensor& rstd) {
  const int64_t rows = rstd.numel(), n = rows ? xhat.numel() / rows : 0;
  Tensor xh = new_tensor(xhat.shape(), DType::fp32);
  backend().copy(xh, xhat);  // widening: exact
  Tensor zero = new_tensor(Shape{rows}, DType::fp32), one = new_tensor(Shape{rows}, DType::fp32);
  zero.fill_(0.0);
  one.fill_(1.0);
  backend().layer_norm_backward(dx, dw, db, dy, xh, w, zero, one);
  float* d = dx.data<float>();
  const float* rp = rstd.data<float>();
#pragma omp parallel for schedule(static) if (rows >= kParallelRows)
  for (int64_t r = 0; r < rows; ++r) {
    float* dr = d + r * n;
    const float rs = rp[r];
    for (int64_t i = 0; i < n; ++i) dr[i] = rs * dr[i];
  }
}

}  // namespace mixp::detail
