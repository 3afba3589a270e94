// Sequential: children applied in order (torch.nn.Sequential). Children are named by the caller
// ("fc1", "head", ...) so that per-layer rules can address them; push_back names them "0", "1", ...
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("sequential") {}
  // Appends `m` under `name` and returns *this for chaining.
  Sequential& add(const std::string& name, std::shared_ptr<Module> m);
  // Appends `m` named by its position.
  Sequential& push_back(std::shared_ptr<Module> m);
  // Replaces the child called `name` by `m` at the same position (the quant module swaps layers
  // for their QAT versions this way); returns the old child. Throws std::out_of_range naming the
  // missing child.
  std::shared_ptr<Module> replace(const std::string& name, std::shared_ptr<Module> m);

  Tensor forward(const Tensor& x) override;
  size_t size() const { return order_.size(); }
  Module& operator[](size_t i) const { return *order_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> order_;
};

}  // namespace mixp::nn
