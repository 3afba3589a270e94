#include "mixp/nn/embedding.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/nn/init.h"
#include "mixp/ops/ops.h"

namespace mixp::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std)
    : Module("embedding"), num_(num_embeddings), dim_(dim) {
  if (num_ <= 0 || dim_ <= 0 || !(init_std > 0)) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Embedding: need positive sizes and init_std, got num={} dim={} std={}", num_,
        dim_, init_std));
  }
  weight_ = &register_parameter("weight", init::normal({num_, dim_}, init_std, gen));
}

Tensor Embedding::forward(const Tensor& indices) {
  if (!indices.defined() || (indices.dtype() != DType::int32 && indices.dtype() != DType::int64)) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Embedding({}, {}): indices must be int32 or int64, got {}", num_,
                    dim_, indices.defined() ? std::string(name(indices.dtype())) : "(undefined)"));
  }
  return embedding(indices, *weight_);
}

std::string Embedding::describe() const {
  return fmt::format("num={}, dim={}", num_, dim_);
}

}  // namespace mixp::nn
