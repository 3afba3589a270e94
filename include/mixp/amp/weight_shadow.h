// Weight shadows (docs/amp.md, "Weight shadows"): the low-precision copy of an fp32 weight that
// amp keeps between steps. Autocast makes it when it casts a weight (a leaf that requires grad),
// the optimizer rewrites it in the same pass that updates the weight (while each chunk is in L1:
// optim/weight_shadow_hook.h, which this cache registers), and the next autocast region uses it
// instead of casting the weight again.
//
// The cache is amp's alone (Tensor knows nothing of it). An entry is keyed by the weight's
// TensorImpl and records the weight's Storage and its version counter (tensor.h) at the time the
// bytes were made; it is current, and used, only while the weight still has that storage at that
// version and the copy's size is the weight's, and only for its own dtype. Anything else (a write
// through copy_, a load, a storage swapped in, a skipped rewrite) leaves it stale: autocast casts
// afresh and replaces it. The bytes are the contiguous row-major copy of the weight, exactly what
// Tensor::to(dtype, kShadowRound, kShadowOverflow) gives. An entry dies with its weight: attach
// flags the weight's TensorImpl, whose destructor calls back into this cache (the release hook of
// src/tensor/release_hook.h), so the copy's bytes are freed at once, between runs in a Python
// session too. Entries of weights whose storage was swapped (a load, ZeRO-3) are freed when the
// next copy is attached and when an outermost autocast region begins (purge).
#pragma once
#include <cstddef>

#include "mixp/tensor/tensor.h"

namespace mixp::amp {

// Weight shadows on (default) or off, process-wide. Off: autocast neither uses nor attaches them,
// and optimizer steps drop the ones that exist (docs/amp.md: the copies cost 2 bytes per
// parameter of memory for one conversion per weight per step saved).
void set_weight_shadows(bool on);
bool weight_shadows_enabled();

class WeightShadowCache {
 public:
  static WeightShadowCache& instance();

  // A tensor over w's current shadow of dtype `to` (no conversion; no history), or undefined.
  Tensor lookup(const Tensor& w, DType to);
  // w's current shadow whatever its dtype, or undefined (ZeRO-3 keeps it to refill in place).
  Tensor current(const Tensor& w);
  // Makes `copy` (= w cast to copy's dtype, just made) w's shadow, unless w has a current one
  // already (of another dtype: a weight used under two dtypes keeps the first one's shadow).
  void attach(const Tensor& w, const Tensor& copy);
  // The optimizer's side (optim/weight_shadow_hook.h): the shadow a step of fp32 w rewrites in
  // its pass (current, of a weight still fp32, held by nothing else, shadows on), else undefined
  // and any shadow of w dropped; then, after the step, current at w's new version.
  Tensor take(const Tensor& w);
  void rewritten(const Tensor& w);
  // Forgets w's shadow (ZeRO-3 frees a gathered parameter's bytes in place).
  void drop(const TensorImpl* w);
  // Whether an entry for w is held (current or not), how many are, and the bytes their copies
  // take.
  bool holds(const Tensor& w) const;
  size_t size() const;
  size_t bytes() const;
  // Frees the entries of weights that have another storage now (a dead weight's went with it).
  void purge();
};

inline WeightShadowCache& weight_shadows() {
  return WeightShadowCache::instance();
}

}  // namespace mixp::amp
