#include "ops/layer_norm_saved.h"

#include <algorithm>
#include <vector>

#include "mixp/backend/backend.h"
#include "ops/dispatch.h"

namespace mixp::detail {

namespace {
constexpr int64_t kBlockElements = 1 << 16;  // widened xhat per block: 256 KiB, in L2
}  // namespace

Tensor layer_norm_xhat(const Tensor& x, const Tensor& mean, const Tensor& rstd, DType low) {
  Tensor out = new_tensor(x.shape(), low, x.device());
  backend_for(out, x, mean, rstd).layer_norm_xhat(out, x, mean, rstd);
  return out;
}

void layer_norm_backward_from_xhat(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                   const Tensor& xhat, const Tensor& w, const Tensor& rstd) {
  const int64_t rows = rstd.numel(), n = rows ? xhat.numel() / rows : 0;
  // Blocks of rows, so that the widened xhat (fp32) exists for one block at a time: the point of
  // saving 16 bits is lost if the backward materializes all of it in fp32 at once.
  const int64_t block =
      std::max<int64_t>(1, std::min<int64_t>(rows, kBlockElements / std::max<int64_t>(n, 1)));
  Tensor xh = new_tensor(Shape{block, n}, DType::fp32, xhat.device());
  Tensor zero = new_tensor(Shape{block}, DType::fp32, xhat.device()),
         one = new_tensor(Shape{block}, DType::fp32, xhat.device());
  zero.fill_(0.0);
  one.fill_(1.0);
  Tensor dw_part = dw.defined() ? new_tensor(Shape{n}, DType::fp32, xhat.device()) : Tensor();
  Tensor db_part = db.defined() ? new_tensor(Shape{n}, DType::fp32, xhat.device()) : Tensor();
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t nr = std::min(block, rows - r0);
    const Shape rs{nr, n}, st{n, 1};
    Tensor xh_b = raw_view(xh, rs, st, 0);
    // Row blocks of contiguous tensors (raw_view's offset is absolute in the storage).
    auto block_rows = [&](const Tensor& t) {
      return raw_view(t, rs, st, t.storage_offset() + r0 * n);
    };
    backend_for(xh_b).copy(xh_b, block_rows(xhat));  // widening: exact
    Tensor dx_b = block_rows(dx);
    Tensor z = raw_view(zero, Shape{nr}, Shape{1}, 0), o = raw_view(one, Shape{nr}, Shape{1}, 0);
    Tensor& dw_b = r0 == 0 ? dw : dw_part;
    Tensor& db_b = r0 == 0 ? db : db_part;
    backend_for(dx_b, dw_b, db_b, xh_b, w, z, o)
        .layer_norm_backward(dx_b, dw_b, db_b, block_rows(dy), xh_b, w, z, o);
    if (r0 > 0 && dw.defined()) dw.add_(dw_part);
    if (r0 > 0 && db.defined()) db.add_(db_part);
    // dx of these rows times their rstd, while the block is still in cache (fp32 products,
    // rs_r * dx as before: the same bits).
    const Tensor rs_b =
        raw_expand(raw_view(rstd, Shape{nr, 1}, Shape{1, 1}, rstd.storage_offset() + r0), rs);
    backend_for(dx_b, rs_b).binary(BinaryOp::mul, dx_b, rs_b, dx_b);
  }
}

}  // namespace mixp::detail
