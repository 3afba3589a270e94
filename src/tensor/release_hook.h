// The one process-wide callback ~TensorImpl calls for an impl whose notify_release flag is set
// (mixp/tensor/tensor.h). amp registers it while libmixp loads (src/amp/weight_shadow.cpp): its
// cache of weights' low-precision copies is keyed by the weight's impl, so an entry and its bytes
// die with the weight instead of waiting for a purge. The tensor module names nothing of what the
// callback frees (docs/architecture.md 2.2).
#pragma once
#include "mixp/tensor/tensor.h"

namespace mixp::detail {

// Called with the impl being destroyed (its members still alive); must not throw, and must not
// let the last reference of another flagged impl go while it holds a lock this one takes.
using ImplReleaseHook = void (*)(const TensorImpl* impl) noexcept;
// Registers the callback (process-wide; once, at load).
void set_impl_release_hook(ImplReleaseHook hook);

}  // namespace mixp::detail
