#include "mixp/nn/gpt.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "mixp/autograd/checkpoint.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

namespace {
constexpr double kInitStd = 0.02;  // GPT-2
}

Gpt::Gpt(const GptConfig& cfg, Generator& gen) : Module("gpt"), cfg_(cfg) {
  if (cfg.vocab <= 0 || cfg.context <= 0 || cfg.width <= 0 || cfg.layers <= 0 || cfg.heads <= 0 ||
      cfg.mlp_width <= 0) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Gpt: every size must be positive, got vocab={} context={} width={} "
                    "layers={} heads={} mlp_width={}",
                    cfg.vocab, cfg.context, cfg.width, cfg.layers, cfg.heads, cfg.mlp_width));
  }
  if (cfg.width % cfg.heads != 0) {
    // The hint lists the largest head counts below the one asked for that divide the width (a
    // width changed without --heads keeps the model's default heads: issue 28 item 12).
    std::vector<int64_t> fit;
    for (int64_t h = std::min(cfg.heads, cfg.width); h > 1 && fit.size() < 3; --h) {
      if (cfg.width % h == 0) fit.insert(fit.begin(), h);
    }
    if (fit.empty()) fit.push_back(1);
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Gpt: width {} is not divisible by heads {}; pass heads N with N dividing {} "
        "(e.g. {}; `mixp train --heads N`)",
        cfg.width, cfg.heads, cfg.width, fmt::join(fit, ", ")));
  }
  if (cfg.padded_vocab != 0 && cfg.padded_vocab < cfg.vocab) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Gpt: padded_vocab {} is smaller than vocab {}", cfg.padded_vocab, cfg.vocab));
  }
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(cfg.layers));
  const int64_t rows = embedding_rows();
  tok_emb_ =
      register_module("tok_emb", std::make_shared<Embedding>(rows, cfg.width, gen, kInitStd));
  if (rows > cfg.vocab) {
    // llm.c's padded rows are zero; no token ever looks them up and no logit of theirs is used.
    NoGradGuard ng;
    tok_emb_->weight().slice(0, cfg.vocab, rows).zero_();
  }
  pos_emb_ = register_module("pos_emb",
                             std::make_shared<Embedding>(cfg.context, cfg.width, gen, kInitStd));
  auto blocks = register_module("blocks", std::make_shared<Sequential>());
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto b = std::make_shared<TransformerBlock>(
        cfg.width, cfg.heads, cfg.mlp_width, gen,
        BlockOptions{.bias = true, .init_std = kInitStd, .proj_init_std = proj_std});
    blocks->push_back(b);
    blocks_.push_back(std::move(b));
  }
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(cfg.width));
  head_ = register_module(
      "head", cfg.tied_head
                  ? std::make_shared<Linear>(tok_emb_->weight(), LinearOptions{.bias = false})
                  : std::make_shared<Linear>(cfg.width, cfg.vocab, gen,
                                             LinearOptions{.bias = false, .init_std = kInitStd}));
  head_->set_kind("head");
  positions_ = arange(cfg.context, {.dtype = DType::int64});
}

Tensor Gpt::forward(const Tensor& idx) {
  if (!idx.defined() || idx.dim() != 2 ||
      (idx.dtype() != DType::int32 && idx.dtype() != DType::int64)) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Gpt: input must be int32/int64 token ids [B, T], got {} {}",
                    idx.defined() ? std::string(name(idx.dtype())) : "(undefined)",
                    idx.defined() ? idx.shape().str() : ""));
  }
  const int64_t T = idx.size(1);
  if (T < 1 || T > cfg_.context) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Gpt: sequence length {} must be in [1, context {}]", T, cfg_.context));
  }
  Tensor x = add((*tok_emb_)(idx), (*pos_emb_)(positions_.slice(0, 0, T)));  // [B,T,C] + [T,C]
  const bool ckpt = cfg_.checkpointing && GradMode::is_enabled();
  if (ckpt) x = checkpoint_input(x);  // frozen embeddings (LoRA): autograd/checkpoint.h
  for (auto& b : blocks_) {
    if (ckpt) {
      // checkpoint() re-enters the autocast, FP8 and fp32 GEMM state of this forward for the
      // recomputation (autograd/checkpoint.h), so the block recomputes the same dtypes.
      TransformerBlock* blk = b.get();
      x = checkpoint([blk](const Tensor& in) { return (*blk)(in); }, x);
    } else {
      x = (*b)(std::move(x));  // the block may free its input early (forward_owned)
    }
  }
  Tensor logits = (*head_)((*ln_f_)(x));
  if (loss_targets_.defined()) {
    if (loss_targets_.numel() != idx.numel()) {
      throw std::invalid_argument(fmt::format(
          "mixp::nn::Gpt: loss targets {} must hold one token per input token {}",
          loss_targets_.shape().str(), idx.shape().str()));
    }
    // [B, T, rows] -> [B*T, rows]: a view; the classifier's loss covers the first vocab columns.
    Tensor flat = logits.reshape({-1, logits.size(-1)});
    logits = Tensor();  // the flat view is then the only tensor on the buffer (its gradient's)
    return cross_entropy_in_place(flat, loss_targets_.reshape({-1}), cfg_.vocab);
  }
  if (embedding_rows() > cfg_.vocab) logits = logits.slice(2, 0, cfg_.vocab);
  return logits;
}

std::string Gpt::describe() const {
  return fmt::format(
      "vocab={}{}, context={}, width={}, layers={}, heads={}, mlp_width={}{}{}", cfg_.vocab,
      embedding_rows() > cfg_.vocab ? fmt::format(" (padded {})", embedding_rows()) : std::string(),
      cfg_.context, cfg_.width, cfg_.layers, cfg_.heads, cfg_.mlp_width,
      cfg_.tied_head ? ", tied head" : "", cfg_.checkpointing ? ", checkpointing" : "");
}

}  // namespace mixp::nn
