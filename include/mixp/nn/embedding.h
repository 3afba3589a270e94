// Embedding: a lookup table [num_embeddings, dim]; int32/int64 indices of any shape ->
// [*indices.shape, dim] (torch.nn.Embedding). Default init N(0, 1) as PyTorch; GPT uses 0.02.
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std = 1.0);
  Tensor forward(const Tensor& indices) override;

  const Tensor& weight() const { return *weight_; }
  int64_t num_embeddings() const { return num_; }
  int64_t dim() const { return dim_; }

 protected:
  std::string describe() const override;

 private:
  int64_t num_, dim_;
  Tensor* weight_ = nullptr;
};

}  // namespace mixp::nn
