#include "ops/layer_norm_saved.h"

#include <algorithm>
#include <vector>

#include "mixp/backend/backend.h"
#include "mixp/format/convert.h"
#include "ops/dispatch.h"

namespace mixp::detail {

namespace {
constexpr int64_t kParallelRows = 64;  // below this a row loop is cheaper than waking threads
constexpr int64_t kBlockElements = 1 << 16;  // widened xhat per block: 256 KiB, in L2
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
  // Blocks of rows, so that the widened xhat (fp32) exists for one block at a time: the point of
  // saving 16 bits is lost if the backward materializes all of it in fp32 at once.
  const int64_t block =
      std::max<int64_t>(1, std::min<int64_t>(rows, kBlockElements / std::max<int64_t>(n, 1)));
  Tensor xh = new_tensor(Shape{block, n}, DType::fp32);
  Tensor zero = new_tensor(Shape{block}, DType::fp32), one = new_tensor(Shape{block}, DType::fp32);
  zero.fill_(0.0);
  one.fill_(1.0);
  Tensor dw_part = dw.defined() ? new_tensor(Shape{n}, DType::fp32) : Tensor();
  Tensor db_part = db.defined() ? new_tensor(Shape{n}, DType::fp32) : Tensor();
  float* d = dx.data<float>();
  const float* rp = rstd.data<float>();
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t nr = std::min(block, rows - r0);
    const Shape rs{nr, n}, st{n, 1};
    Tensor xh_b = raw_view(xh, rs, st, 0);
    // Row blocks of contiguous tensors (raw_view's offset is absolute in the storage).
    auto block_rows = [&](const Tensor& t) {
      return raw_view(t, rs, st, t.storage_offset() + r0 * n);
    };
    backend().copy(xh_b, block_rows(xhat));  // widening: exact
    Tensor dx_b = block_rows(dx);
    Tensor z = raw_view(zero, Shape{nr}, Shape{1}, 0), o = raw_view(one, Shape{nr}, Shape{1}, 0);
    Tensor& dw_b = r0 == 0 ? dw : dw_part;
    Tensor& db_b = r0 == 0 ? db : db_part;
    backend().layer_norm_backward(dx_b, dw_b, db_b, block_rows(dy), xh_b, w, z, o);
    if (r0 > 0 && dw.defined()) dw.add_(dw_part);
    if (r0 > 0 && db.defined()) db.add_(db_part);
    // dx of these rows times their rstd, while the block is still in cache.
#pragma omp parallel for schedule(static) if (nr >= kParallelRows)
    for (int64_t r = r0; r < r0 + nr; ++r) {
      float* dr = d + r * n;
      const float rs_r = rp[r];
      for (int64_t i = 0; i < n; ++i) dr[i] = rs_r * dr[i];
    }
  }
}

}  // namespace mixp::detail
