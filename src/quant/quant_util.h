// Small helpers shared by the quant sources (internal).
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/module.h"
#include "mixp/tensor/tensor.h"

namespace mixp::quant::detail {

// dst (a module's buffer on any device) = values, written by the backend's copy from a host
// tensor (explicit host access, docs/architecture.md 3.5; the copy bumps the version). The
// observers' min/max buffers (fake_quantize.cpp, lowbit_qat.cpp): a few values per forward.
template <class T>
void write_buffer(Tensor& dst, const std::vector<T>& values) {
  NoGradGuard ng;
  Tensor host = Tensor::empty(dst.shape(), {.dtype = dst.dtype()});
  for (size_t i = 0; i < values.size(); ++i) host.set_at({static_cast<int64_t>(i)}, values[i]);
  dst.copy_(host.to(dst.device()));
}

// The child m as a T, or null: how the converters and the QAT preparation look at a Sequential's
// layers.
template <class T>
T* as(const std::shared_ptr<nn::Module>& m) {
  return dynamic_cast<T*>(m.get());
}

// f(m) for every module of `model` (itself included) that is an M, in named_modules() order: how
// the QAT switches reach their observers, fake quantizers and batch norms (qat.cpp,
// lowbit_qat.cpp).
template <class M, class F>
void for_each_module(nn::Module& model, F&& f) {
  for (auto& [name, m] : model.named_modules()) {
    if (auto* x = dynamic_cast<M*>(m)) f(*x);
  }
}

// The Linear and Conv2d layers of any Module tree, in named_modules() order, for the tree forms
// of QAT (qat.cpp, lowbit_qat.cpp) to wrap. Throws, before anything is changed, when there is none
// or when one already runs through a forward wrapper (a per-layer precision or FP8). `who` names
// the caller in the messages ("prepare_qat").
std::vector<std::pair<std::string, nn::Module*>> tree_qat_layers(nn::Module& model,
                                                                 const char* who);

// Registers q as layer's child "qat" (q takes the layer's training mode, so its observer buffers
// are checkpointed and the switches reach it) and routes the layer's forward through q, then
// `post` (identity when empty), so that the parent keeps calling the layer it holds.
void attach_qat(nn::Module& layer, const std::shared_ptr<nn::Module>& q,
                std::function<Tensor(const Tensor&)> run,
                std::function<Tensor(const Tensor&)> post = {});

// Whether some module of `model` is an M (a prepared model has fake quantizers or low-bit layers).
template <class M>
bool has_module(const nn::Module& model) {
  for (const auto& [name, m] : model.named_modules()) {
    if (dynamic_cast<const M*>(m) != nullptr) return true;
  }
  return false;
}

// Whether every module of `model` that is an M has seen data (has_data()); if not, the first one's
// name goes to *missing (when given).
template <class M>
bool all_have_data(const nn::Module& model, std::string* missing) {
  for (const auto& [name, m] : model.named_modules()) {
    const auto* x = dynamic_cast<const M*>(m);
    if (x != nullptr && !x->has_data()) {
      if (missing) *missing = name;
      return false;
    }
  }
  return true;
}

// Row-major geometry around a channel axis: index = (o * channels + c) * inner + i.
struct ChannelLayout {
  int64_t outer = 1, channels = 1, inner = 1;
};

inline ChannelLayout channel_layout(std::span<const int64_t> shape, int axis, size_t numel,
                                    const char* who) {
  const int rank = static_cast<int>(shape.size());
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw std::invalid_argument(
        fmt::format("mixp::quant ({}): channel axis {} is out of range for "
                    "a tensor of rank {}",
                    who, axis, rank));
  }
  ChannelLayout g;
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    n *= shape[d];
    if (d < a) g.outer *= shape[d];
    if (d > a) g.inner *= shape[d];
  }
  g.channels = shape[a];
  if (static_cast<size_t>(n) != numel) {
    throw std::invalid_argument(
        fmt::format("mixp::quant ({}): shape has {} values, the data {}", who, n, numel));
  }
  return g;
}

// x detached, widened or rounded (nearest-even) to fp32, contiguous.
inline Tensor as_fp32_contiguous(const Tensor& x) {
  Tensor d = x.detach();
  if (d.dtype() != DType::fp32) d = d.to(DType::fp32, Round::nearest_even);
  return d.contiguous();
}

}  // namespace mixp::quant::detail
