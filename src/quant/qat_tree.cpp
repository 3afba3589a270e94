// The tree forms of QAT (qat.cpp's prepare_qat, lowbit_qat.cpp's prepare_lowbit_qat) on any
// Module tree: which layers they wrap and how the wrapper is attached. See quant/quant_util.h.
#include <fmt/format.h>

#include <stdexcept>

#include "mixp/nn/conv2d.h"
#include "mixp/nn/linear.h"
#include "quant/quant_util.h"

namespace mixp::quant::detail {

std::vector<std::pair<std::string, nn::Module*>> tree_qat_layers(nn::Module& model,
                                                                 const char* who) {
  std::vector<std::pair<std::string, nn::Module*>> layers;
  for (auto& [name, m] : model.named_modules()) {
    if (dynamic_cast<nn::Linear*>(m) || dynamic_cast<nn::Conv2d*>(m)) layers.emplace_back(name, m);
  }
  if (layers.empty()) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::{}: the model ({}) has no Linear or Conv2d to quantize", who, model.kind()));
  }
  for (const auto& [name, m] : layers) {
    if (m->forward_wrapper()) {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::{}: '{}' already runs through a forward wrapper (a per-layer precision "
          "or FP8?); QAT wraps it itself",
          who, name));
    }
  }
  return layers;
}

void attach_qat(nn::Module& layer, const std::shared_ptr<nn::Module>& q,
                std::function<Tensor(const Tensor&)> run,
                std::function<Tensor(const Tensor&)> post) {
  q->train(layer.is_training());
  layer.register_module("qat", q);
  // q lives as long as the layer, which owns the wrapper: `run` may hold a plain pointer to it.
  layer.set_forward_wrapper(
      [run = std::move(run), post = std::move(post)](nn::Module&, const Tensor& x) {
        Tensor y = run(x);
        return post ? post(y) : y;
      });
}

}  // namespace mixp::quant::detail
