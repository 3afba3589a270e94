#include "mixp/nn/gpt_mlp.h"

namespace mixp::nn {

GptMlp::GptMlp(int64_t width, int64_t mlp_width, Generator& gen, const GptMlpOptions& opt)
    : Module("mlp") {
  fc_ = register_module("fc", std::make_shared<Linear>(width, mlp_width, gen,
                                                       LinearOptions{.bias = opt.bias,
                                                                     .activation = Activation::gelu,
                                                                     .init_std = opt.init_std}));
  proj_ = register_module(
      "proj",
      std::make_shared<Linear>(mlp_width, width, gen,
                               LinearOptions{.bias = opt.bias, .init_std = opt.proj_init_std}));
}

Tensor GptMlp::forward(const Tensor& x) {
  return (*proj_)((*fc_)(x));
}

}  // namespace mixp::nn
