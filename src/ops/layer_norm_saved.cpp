#include "ops/layer_norm_saved.h"

#include <algorithm>
#include <vector>

#include "mixp/backend/backend.h"
#include "ops/dispatch.h"

namespace mixp::detail {

Tensor layer_norm_xhat(const Tensor& x, const Tensor& mean, const Tensor& rstd, DType low) {
  Tensor out = new_tensor(x.shape(), low, x.device());
  backend_for(out, x, mean, rstd).layer_norm_xhat(out, x, mean, rstd);
  return out;
}

void layer_norm_backward_from_xhat(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                                   const Tensor& xhat, const Tensor& w, const Tensor& rstd) {
  backend_for(dx, dw, db, dy, xhat, w, rstd).layer_norm_backward_xhat(dx, dw, db, dy, xhat, w, rstd);
}

}  // namespace mixp::detail
