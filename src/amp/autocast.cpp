// The Autocast guard, its thread-local state and cast cache, and the hook the op front ends call.
#include "mixp/amp/autocast.h"

#include <fmt/format.h>

#include <atomic>
#include <unordered_map>

#include "mixp/amp/weight_shadow.h"
#include "mixp/autograd/checkpoint.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/ops/ops.h"
#include "ops/dispatch.h"

namespace mixp::amp {

namespace {

struct CacheKey {
  const TensorImpl* src;
  DType dtype;
  friend bool operator==(const CacheKey& a, const CacheKey& b) {
    return a.src == b.src && a.dtype == b.dtype;
  }
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<const void*>()(k.src) ^ (static_cast<size_t>(k.dtype) * 0x9E3779B97F4A7C15ULL);
  }
};
struct CacheEntry {
  Tensor src;   // keeps the key's TensorImpl alive (so its address cannot be reused)
  Tensor copy;  // the low-precision copy (with history when `recorded`)
  bool recorded = false;
  uint64_t version = 0;  // src's version when copied: an in-place write since makes it stale
};

struct ThreadState {
  AutocastOptions cur{DType::bf16, false, true};
  int nesting = 0;
  std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> cache;
  AutocastCacheStats stats;
};

ThreadState& tls() {
  thread_local ThreadState s;
  return s;
}

bool is_low(DType d) {
  return d == DType::bf16 || d == DType::fp16;
}

void check_dtype(DType d) {
  if (!is_low(d)) {
    throw std::invalid_argument(
        fmt::format("mixp::amp::Autocast: dtype must be bf16 or fp16, got {} "
                    "(for fp32 use Autocast(DType::bf16, /*enabled=*/false))",
                    name(d)));
  }
}

// A floating tensor the policy may cast (PyTorch: is_autocast_eligible and not fp64).
bool eligible(const Tensor& t) {
  return t.defined() && t.is_floating_point() && t.dtype() != DType::fp64;
}

Tensor cast(const Tensor& t, DType to) {
  return t.to(to, kAutocastRound, kAutocastOverflow, 0);
}

// The low-precision copy of weight `t` taken from its shadow (no conversion), with the history
// Tensor::to would record; undefined when t has no current shadow of dtype `to`.
Tensor from_shadow(const Tensor& t, DType to) {
  Tensor copy = weight_shadows().lookup(t, to);
  if (copy.defined()) mixp::detail::record_to(t, copy);
  return copy;
}

Tensor cast_lower(const Tensor& t, DType to, bool use_cache) {
  // PyTorch caches only fp32 leaves that require grad (the weights), which are the ones reused.
  const bool cacheable = use_cache && tls().nesting > 0 && t.dtype() == DType::fp32 &&
                         t.is_leaf() && t.requires_grad();
  if (!cacheable) return cast(t, to);
  ThreadState& s = tls();
  // Without weight shadows a region keeps no copy that nothing else holds: one made under
  // NoGradGuard (a checkpointed segment's forward) has no graph to save it, and caching it would
  // keep every weight's copy alive to the end of the region (the logits' allocation, the
  // head's moment). It is cast per use instead: the same values.
  if (!s.cur.weight_shadows && !GradMode::is_enabled()) return cast(t, to);
  const bool want_history = GradMode::is_enabled();
  const CacheKey key{t.impl(), to};
  auto it = s.cache.find(key);
  // A hit needs the copy's history when recording (its cast node stays usable after a backward:
  // it saves nothing, FunctionNode::reusable, so accumulating gradients over several backwards in
  // one region works as in PyTorch), and a weight unchanged since the copy: an optimizer step
  // inside the region bumps the weight's version, and the next use casts it again.
  if (it != s.cache.end() && (it->second.recorded || !want_history) &&
      it->second.version == t.version()) {
    ++s.stats.hits;
    return it->second.copy;
  }
  ++s.stats.misses;
  const bool shadows = weight_shadows_enabled() && s.cur.weight_shadows;
  Tensor copy = shadows ? from_shadow(t, to) : Tensor();
  if (copy.defined()) {
    ++s.stats.shadow_hits;
  } else {
    copy = cast(t, to);
    if (shadows) weight_shadows().attach(t, copy);
  }
  s.cache.insert_or_assign(key, CacheEntry{t, copy, want_history, t.version()});
  s.stats.entries = static_cast<int64_t>(s.cache.size());
  return copy;
}

void hook(OpId op, std::span<Tensor> inputs) {
  const ThreadState& s = tls();
  if (!s.cur.enabled) return;
  apply_autocast(op, inputs, s.cur.dtype, s.cur.cache_enabled);
}

DType save_hook(OpId op) {
  const AutocastOptions& o = tls().cur;
  if (o.enabled && o.low_precision_norm_saves && op == OpId::layer_norm) return o.dtype;
  return DType::fp32;
}

void install_hook_once() {
  static const bool installed = [] {
    set_cast_policy_hook(&hook);
    set_save_dtype_hook(&save_hook);
    return true;
  }();
  (void)installed;
}

// Widest floating dtype of the inputs, by the engine's promotion rule (ops.h): equal dtypes stay,
// any fp64 gives fp64, other mixes give fp32. Returns false when they already agree.
bool promoted_dtype(std::span<Tensor> inputs, DType& out) {
  bool first = true, mixed = false, any64 = false;
  DType d = DType::fp32;
  for (const Tensor& t : inputs) {
    if (!t.defined() || !t.is_floating_point()) continue;
    if (t.dtype() == DType::fp64) any64 = true;
    if (first) {
      d = t.dtype();
      first = false;
    } else if (t.dtype() != d) {
      mixed = true;
    }
  }
  if (!mixed) return false;
  out = any64 ? DType::fp64 : DType::fp32;
  return true;
}

}  // namespace

void apply_autocast(OpId op, std::span<Tensor> inputs, DType dtype, bool use_cache) {
  switch (cast_policy(op, dtype)) {
    case CastPolicy::none:
      return;
    case CastPolicy::lower_precision:
      for (Tensor& t : inputs) {
        if (eligible(t) && t.dtype() != dtype) t = cast_lower(t, dtype, use_cache);
      }
      return;
    case CastPolicy::fp32:
      for (Tensor& t : inputs) {
        if (eligible(t) && t.dtype() != DType::fp32) t = cast(t, DType::fp32);
      }
      return;
    case CastPolicy::promote: {
      // add/sub/mul/div: the engine's own promotion gives the same result dtype (ops.h), and its
      // pointwise kernels read 16-bit operands directly, so the widening is fused into the op
      // instead of materializing an fp32 copy (the gradient is narrowed for the 16-bit input by
      // the engine, as the cast's backward would). cat/stack cast explicitly.
      if (op == OpId::add || op == OpId::sub || op == OpId::mul || op == OpId::div) return;
      DType to;
      if (!promoted_dtype(inputs, to)) return;
      for (Tensor& t : inputs) {
        if (t.defined() && t.is_floating_point() && t.dtype() != to) t = cast(t, to);
      }
      return;
    }
    case CastPolicy::banned:
      throw BannedOpError(op);
  }
}

Autocast::Autocast(DType dtype, bool enabled)
    : Autocast(AutocastOptions{dtype, enabled, true,
                               tls().nesting > 0 && tls().cur.low_precision_norm_saves,
                               tls().nesting == 0 || tls().cur.weight_shadows}) {}

Autocast::Autocast(const AutocastOptions& options) {
  check_dtype(options.dtype);
  install_hook_once();
  ThreadState& s = tls();
  // An outermost region frees the shadows of weights whose storage was swapped (weight_shadow.h;
  // a dead weight's went with it).
  if (s.nesting == 0) weight_shadows().purge();
  prev_ = s.cur;
  s.cur = options;
  ++s.nesting;
}

Autocast::~Autocast() {
  ThreadState& s = tls();
  s.cur = prev_;
  if (--s.nesting == 0) {
    s.cache.clear();
    s.stats.entries = 0;
  }
}

namespace {
// A checkpointed segment recomputes inside the autocast region its forward ran in
// (autograd/checkpoint.h; torch.utils.checkpoint restores the autocast state the same way).
[[maybe_unused]] const bool g_checkpoint_registered = [] {
  register_checkpoint_state([]() -> CheckpointRestorer {
    // Outside any region there is nothing to re-enter (and constructing a guard would install
    // the autocast hook, replacing one a user installed).
    if (autocast_nesting() == 0) return [] { return CheckpointScope(); };
    const AutocastOptions o = autocast_options();
    return [o] { return std::make_shared<Autocast>(o); };
  });
  return true;
}();
}  // namespace

bool is_autocast_enabled() {
  return tls().cur.enabled;
}

bool autocast_reads_shadow(OpId op, const Tensor& w) {
  // cast_lower's path to from_shadow, condition by condition.
  const ThreadState& s = tls();
  return s.cur.enabled && cast_policy(op, s.cur.dtype) == CastPolicy::lower_precision &&
         eligible(w) && w.dtype() == DType::fp32 && s.cur.dtype != DType::fp32 &&
         s.cur.cache_enabled && s.nesting > 0 && w.is_leaf() && w.requires_grad() &&
         weight_shadows_enabled() && s.cur.weight_shadows;
}
DType autocast_dtype() {
  return tls().cur.dtype;
}
bool is_autocast_cache_enabled() {
  return tls().cur.cache_enabled;
}
AutocastOptions autocast_options() {
  return tls().cur;
}
int autocast_nesting() {
  return tls().nesting;
}

AutocastCacheStats autocast_cache_stats() {
  AutocastCacheStats st = tls().stats;
  st.entries = static_cast<int64_t>(tls().cache.size());
  return st;
}

void reset_autocast_cache_stats() {
  ThreadState& s = tls();
  s.stats = AutocastCacheStats{};
}


void clear_autocast_cache() {
  ThreadState& s = tls();
  s.cache.clear();
  s.stats.entries = 0;
}

}  // namespace mixp::amp
