// DeferredWeightGrad and its scope (ops/deferred_weight_grad.h); linear() consults
// deferred_weight_grad_for (linalg_ops.cpp).
#include "mixp/ops/deferred_weight_grad.h"

#include <stdexcept>
#include <utility>
#include <vector>

namespace mixp {
namespace {

struct Entry {
  const TensorImpl* w;
  std::shared_ptr<DeferredWeightGrad> sink;
};
thread_local std::vector<Entry> t_scopes;

}  // namespace

Tensor DeferredWeightGrad::compute() {
  if (!work_) return Tensor();
  std::function<Tensor()> w = std::move(work_);
  work_ = nullptr;
  return w();
}

void DeferredWeightGrad::stash(std::function<Tensor()> work) {
  if (work_) {
    throw std::logic_error(
        "mixp: a deferred weight gradient is already pending (the weight was used twice under "
        "one DeferWeightGradScope)");
  }
  work_ = std::move(work);
}

DeferWeightGradScope::DeferWeightGradScope(const Tensor& w,
                                           std::shared_ptr<DeferredWeightGrad> sink)
    : w_(w.impl()), sink_(std::move(sink)) {
  t_scopes.push_back({w_, sink_});
}

DeferWeightGradScope::~DeferWeightGradScope() {
  t_scopes.pop_back();
}

std::shared_ptr<DeferredWeightGrad> deferred_weight_grad_for(const Tensor& w) {
  for (auto it = t_scopes.rbegin(); it != t_scopes.rend(); ++it) {
    if (it->w == w.impl()) return it->sink;
  }
  return nullptr;
}

}  // namespace mixp
