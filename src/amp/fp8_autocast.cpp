// Fp8Autocast and the deferred scale updates (see fp8_linear.h).
#include <algorithm>
#include <mutex>
#include <vector>

#include "amp/fp8_detail.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/grad_mode.h"

namespace mixp::amp {

namespace {

struct Region {
  int depth = 0;
  bool enabled = false;
  std::vector<std::shared_ptr<Fp8ScalingState>> forward_used;
};

Region& region() {
  thread_local Region r;
  return r;
}

// Backward may run on another thread than the forward that recorded it: one shared list.
std::mutex& pending_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::shared_ptr<Fp8ScalingState>>& pending() {
  static std::vector<std::shared_ptr<Fp8ScalingState>> v;
  return v;
}

void add_once(std::vector<std::shared_ptr<Fp8ScalingState>>& v,
              const std::shared_ptr<Fp8ScalingState>& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

namespace detail {
void note_forward_state(const std::shared_ptr<Fp8ScalingState>& s) {
  Region& r = region();
  if (r.depth > 0) add_once(r.forward_used, s);
}
void note_backward_state(const std::shared_ptr<Fp8ScalingState>& s) {
  std::lock_guard<std::mutex> lock(pending_mutex());
  add_once(pending(), s);
}
}  // namespace detail

void fp8_update_backward_states() {
  std::vector<std::shared_ptr<Fp8ScalingState>> todo;
  {
    std::lock_guard<std::mutex> lock(pending_mutex());
    todo.swap(pending());
  }
  for (const auto& s : todo) s->update();
}

Fp8Autocast::Fp8Autocast(bool enabled) {
  Region& r = region();
  prev_enabled_ = r.enabled;
  if (r.depth == 0) {
    // The backward of the previous pass has ended: its grad_output updates are due.
    fp8_update_backward_states();
    r.forward_used.clear();
  }
  ++r.depth;
  r.enabled = enabled;
}

Fp8Autocast::~Fp8Autocast() {
  Region& r = region();
  r.enabled = prev_enabled_;
  if (--r.depth > 0) return;
  // TE updates the forward scales only when the region ran with gradients (a training pass);
  // an evaluation pass leaves its amaxes in slot 0 for the next update.
  if (GradMode::is_enabled()) {
    for (const auto& s : r.forward_used) s->update();
  }
  r.forward_used.clear();
}

bool Fp8Autocast::is_enabled() { return region().enabled; }

}  // namespace mixp::amp
