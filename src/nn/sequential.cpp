#include "mixp/nn/sequential.h"

#include <string>

namespace mixp::nn {

Sequential& Sequential::add(const std::string& name, std::shared_ptr<Module> m) {
  register_module(name, m);
  order_.push_back(std::move(m));
  return *this;
}

Sequential& Sequential::push_back(std::shared_ptr<Module> m) {
  return add(std::to_string(order_.size()), std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : order_) y = (*m)(y);
  return y;
}

}  // namespace mixp::nn
