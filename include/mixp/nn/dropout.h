// Dropout (inverted, torch.nn.Dropout): in training, zeroes each element with probability p and
// scales the rest by 1/(1-p); identity in eval. Masks come from the module's own Generator
// (seeded at construction), one 64-bit draw per forward; under checkpoint() the recomputation
// replays the same mask (autograd/checkpoint.h).
#pragma once
#include "mixp/nn/module.h"
#include "mixp/tensor/generator.h"

namespace mixp::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;

  double p() const { return p_; }
  // The mask stream; a Trainer that resumes bit-identically saves and restores its state.
  Generator& generator() { return gen_; }

 protected:
  std::string describe() const override;

 private:
  double p_;
  Generator gen_;
};

}  // namespace mixp::nn
