// amp's weight-shadow cache (mixp/amp/weight_shadow.h) and its registration as the optimizer's
// hook (mixp/optim/weight_shadow_hook.h). Moved from the WeightShadow field Tensor used to carry
// (issue 30: amp owns precision); the rules are unchanged, with the weight's storage identity
// added to what makes a shadow current.
#include "mixp/amp/weight_shadow.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mixp/amp/autocast.h"
#include "mixp/backend/backend.h"
#include "mixp/optim/weight_shadow_hook.h"
#include "tensor/release_hook.h"

namespace mixp::amp {

static_assert(kShadowRound == kAutocastRound && kShadowOverflow == kAutocastOverflow,
              "the optimizer's shadow rewrite must round as autocast casts");

namespace {

std::atomic<bool> g_enabled{true};

struct Entry {
  std::weak_ptr<TensorImpl> owner;
  std::weak_ptr<Storage> owner_storage;  // the weight's storage the bytes were made from
  std::shared_ptr<Storage> bytes;
  DType dtype = DType::fp32;
  uint64_t version = 0;  // the owner storage's version these bytes were made from
};

// The shadows are shared between threads (autocast's cast cache is not): two threads running
// forwards of one model must not attach shadows to the same weight at the same time.
std::mutex g_mutex;
// Never destroyed: at exit the shadows' bytes would go back to allocators (a device's among them)
// that may be gone already; a weight alive then keeps its copy to the end as it always did.
std::unordered_map<const TensorImpl*, Entry>& g_entries =
    *new std::unordered_map<const TensorImpl*, Entry>();

bool same_storage(const Entry& e, const TensorImpl& w) {
  return !e.owner_storage.owner_before(w.storage) && !w.storage.owner_before(e.owner_storage) &&
         !e.owner_storage.expired();
}

// Whether e holds w's current values (w's storage at the version the bytes were made from, the
// copy's size w's).
bool is_current(const Entry& e, const TensorImpl& w) {
  return e.bytes != nullptr && same_storage(e, w) &&
         e.version == w.storage->version.load(std::memory_order_relaxed) &&
         e.bytes->nbytes == static_cast<size_t>(w.shape.numel()) * traits(e.dtype).storage_bytes;
}

// The entry of w when it is w's (a dead weight's entry under a reused address is not), else null.
Entry* find(const Tensor& w) {
  auto it = g_entries.find(w.impl());
  if (it == g_entries.end()) return nullptr;
  if (it->second.owner.lock() != w.impl_ptr()) {
    g_entries.erase(it);
    return nullptr;
  }
  return &it->second;
}

// Frees the entries of weights that have another storage now (a dead weight's entry went with it,
// on_release). The weights it looks at stay referenced by `alive`, which the caller destroys after
// unlocking: one of them may lose its last other reference meanwhile, and its release must not
// run under the lock it takes.
void purge_locked(std::vector<std::shared_ptr<TensorImpl>>& alive) {
  for (auto it = g_entries.begin(); it != g_entries.end();) {
    std::shared_ptr<TensorImpl> w = it->second.owner.lock();
    if (!w || !same_storage(it->second, *w)) {
      it = g_entries.erase(it);
    } else {
      ++it;
    }
    if (w) alive.push_back(std::move(w));
  }
}

// ~TensorImpl of a weight that has (or had) an entry (attach flags it, tensor/release_hook.h):
// the entry and its bytes go at once, in a Python session between runs too.
void on_release(const TensorImpl* impl) noexcept {
  std::lock_guard lock(g_mutex);
  g_entries.erase(impl);
}

Tensor over(const std::shared_ptr<Storage>& bytes, const Tensor& w, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = bytes;
  impl->shape = w.shape();
  impl->strides = contiguous_strides(w.shape());
  impl->dtype = dtype;
  impl->device = w.device();
  return Tensor(std::move(impl));
}

class OptimizerHook final : public optim::WeightShadowHook {
 public:
  Tensor take(const Tensor& param) override { return WeightShadowCache::instance().take(param); }
  void rewritten(const Tensor& param) override {
    WeightShadowCache::instance().rewritten(param);
  }
};

OptimizerHook g_hook;
const bool g_registered = (optim::set_weight_shadow_hook(&g_hook),
                           mixp::detail::set_impl_release_hook(&on_release), true);

}  // namespace

void set_weight_shadows(bool on) {
  g_enabled.store(on, std::memory_order_relaxed);
}
bool weight_shadows_enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

WeightShadowCache& WeightShadowCache::instance() {
  static WeightShadowCache cache;
  return cache;
}

Tensor WeightShadowCache::lookup(const Tensor& w, DType to) {
  Tensor t = current(w);
  return t.defined() && t.dtype() == to ? t : Tensor();
}

Tensor WeightShadowCache::current(const Tensor& w) {
  std::shared_ptr<Storage> bytes;
  DType dtype = DType::fp32;
  {
    std::lock_guard lock(g_mutex);
    const Entry* e = find(w);
    if (!e || !is_current(*e, *w.impl())) return Tensor();
    bytes = e->bytes;
    dtype = e->dtype;
  }
  return over(bytes, w, dtype);
}

void WeightShadowCache::attach(const Tensor& w, const Tensor& copy) {
  std::vector<std::shared_ptr<TensorImpl>> alive;
  std::lock_guard lock(g_mutex);
  if (const Entry* e = find(w); e && is_current(*e, *w.impl())) return;
  purge_locked(alive);
  w.impl()->notify_release = true;  // on_release drops the entry when w dies
  g_entries.insert_or_assign(w.impl(), Entry{w.impl_ptr(), w.storage(), copy.storage(),
                                             copy.dtype(), w.version()});
}

Tensor WeightShadowCache::take(const Tensor& w) {
  std::shared_ptr<Storage> bytes;
  DType dtype = DType::fp32;
  {
    std::lock_guard lock(g_mutex);
    Entry* e = find(w);
    if (!e) return Tensor();
    if (!(w.dtype() == DType::fp32 && weight_shadows_enabled() && is_current(*e, *w.impl()) &&
          e->bytes.use_count() == 1)) {
      g_entries.erase(w.impl());
      return Tensor();
    }
    bytes = e->bytes;
    dtype = e->dtype;
  }
  return over(bytes, w, dtype);
}

void WeightShadowCache::rewritten(const Tensor& w) {
  std::lock_guard lock(g_mutex);
  if (Entry* e = find(w)) e->version = w.version();
}

void WeightShadowCache::drop(const TensorImpl* w) {
  std::lock_guard lock(g_mutex);
  g_entries.erase(w);
}

bool WeightShadowCache::holds(const Tensor& w) const {
  std::lock_guard lock(g_mutex);
  return find(w) != nullptr;
}

size_t WeightShadowCache::size() const {
  std::lock_guard lock(g_mutex);
  return g_entries.size();
}

size_t WeightShadowCache::bytes() const {
  std::lock_guard lock(g_mutex);
  size_t n = 0;
  for (const auto& [impl, e] : g_entries) n += e.bytes ? e.bytes->nbytes : 0;
  return n;
}

void WeightShadowCache::purge() {
  std::vector<std::shared_ptr<TensorImpl>> alive;
  std::lock_guard lock(g_mutex);
  purge_locked(alive);
}

}  // namespace mixp::amp
