// How an optimizer step reaches the low-precision weight copies it rewrites in its pass over a
// parameter (amp's weight shadows: mixp/amp/weight_shadow.h, docs/amp.md "Weight shadows").
// optim lies below amp (docs/architecture.md 2.2), so amp's cache registers itself here while
// libmixp loads and the step calls it: take() before the fused update (the destination the
// backend's optimizer_update writes in the same pass, ParamUpdate::shadow) and rewritten() after
// it. Without a hook (none registered) steps rewrite nothing.
#pragma once
#include "mixp/tensor/tensor.h"

namespace mixp::optim {

class WeightShadowHook {
 public:
  virtual ~WeightShadowHook() = default;
  // The copy of fp32 `param` this step rewrites: a contiguous tensor of the copy's dtype over its
  // bytes, or undefined. A copy that may not be rewritten (stale, held elsewhere, shadows off)
  // is dropped here.
  virtual Tensor take(const Tensor& param) = 0;
  // The step wrote `param` (its version already bumped) and the copy take() gave: the copy holds
  // the new values.
  virtual void rewritten(const Tensor& param) = 0;
};

void set_weight_shadow_hook(WeightShadowHook* hook);
WeightShadowHook* weight_shadow_hook();

}  // namespace mixp::optim
