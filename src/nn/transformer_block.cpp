#include "mixp/nn/transformer_block.h"

#include "mixp/ops/ops.h"

namespace mixp::nn {

TransformerBlock::TransformerBlock(int64_t width, int64_t heads, int64_t mlp_width, Generator& gen,
                                   const BlockOptions& opt)
    : Module("block") {
  ln1_ = register_module("ln1", std::make_shared<LayerNorm>(width));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(
                                      width, heads, gen,
                                      AttentionOptions{.bias = opt.bias,
                                                       .init_std = opt.init_std,
                                                       .proj_init_std = opt.proj_init_std}));
  ln2_ = register_module("ln2", std::make_shared<LayerNorm>(width));
  mlp_ = register_module(
      "mlp", std::make_shared<GptMlp>(width, mlp_width, gen,
                                      GptMlpOptions{.bias = opt.bias,
                                                    .init_std = opt.init_std,
                                                    .proj_init_std = opt.proj_init_std}));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  return forward_owned(x);
}

Tensor TransformerBlock::forward_owned(Tensor x) {
  const Tensor h = add(x, (*attn_)((*ln1_)(x)));
  // Nothing else needs the block's input now: ln1 saved what its backward reads, and the add
  // saves nothing. Under Autocast with 16-bit norm saves (amp/autocast.h) that is an fp32
  // [B, T, C] tensor otherwise kept alive through the MLP, where the forward peaks.
  x = Tensor();
  return add(h, (*mlp_)((*ln2_)(h)));
}

}  // namespace mixp::nn
