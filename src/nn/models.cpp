#include "mixp/nn/models.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/nn/activation.h"
#include "mixp/nn/batch_norm2d.h"
#include "mixp/nn/conv2d.h"
#include "mixp/nn/flatten.h"
#include "mixp/nn/gpt.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/max_pool2d.h"
#include "mixp/nn/sequential.h"

namespace mixp::nn {

namespace {

// A Sequential image classifier that names the expected input in its error (instead of a GEMM
// shape mismatch deep inside). kind "sequential" stays: per-layer rules address its children.
class ImageClassifier final : public Sequential {
 public:
  ImageClassifier(std::string model, bool accepts_flat)
      : model_(std::move(model)), accepts_flat_(accepts_flat) {}
  Tensor forward(const Tensor& x) override {
    const bool image =
        x.defined() && x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28;
    const bool flat = accepts_flat_ && x.defined() && x.dim() == 2 && x.size(1) == 784;
    if (!(image || flat) || !x.is_floating_point()) {
      throw std::invalid_argument(
          fmt::format("mixp::nn::{}: input must be floating {}[N, 1, 28, 28], got {} {}", model_,
                      accepts_flat_ ? "[N, 784] or " : "",
                      x.defined() ? std::string(name(x.dtype())) : "(undefined)",
                      x.defined() ? x.shape().str() : ""));
    }
    return Sequential::forward(x);
  }

 protected:
  std::string describe() const override { return "model=" + model_; }

 private:
  std::string model_;
  bool accepts_flat_;
};

void require_unset(const ModelConfig& c, const char* field, int64_t v) {
  if (v != 0) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::make_model: model '{}' has no '{}' to set (got {}); leave it 0",
                    c.name, field, v));
  }
}

// mlp and cnn (image models): none of the sequence models' sizes, and no checkpointing (gpt's).
void require_image_model_options(const ModelConfig& c) {
  require_unset(c, "heads", c.heads);
  require_unset(c, "context", c.context);
  require_unset(c, "vocab", c.vocab);
  require_unset(c, "kv_heads", c.kv_heads);
  if (c.checkpointing)
    throw std::invalid_argument("mixp::nn::make_model: checkpointing is supported by 'gpt' only");
}

std::shared_ptr<Module> make_mlp(const ModelConfig& c, Generator& gen) {
  auto m = std::make_shared<ImageClassifier>("mlp", true);
  m->add("flatten", std::make_shared<Flatten>());
  int64_t in = 784;
  for (int64_t i = 0; i < c.layers; ++i) {
    m->add(
        fmt::format("fc{}", i + 1),
        std::make_shared<Linear>(in, c.width, gen, LinearOptions{.activation = Activation::relu}));
    in = c.width;
  }
  auto head = std::make_shared<Linear>(in, 10, gen);
  head->set_kind("head");
  m->add("head", head);
  return m;
}

std::shared_ptr<Module> make_cnn(const ModelConfig& c, Generator& gen) {
  auto m = std::make_shared<ImageClassifier>("cnn", false);
  const int64_t c1 = c.width, c2 = 2 * c.width;
  m->add("conv1", std::make_shared<Conv2d>(1, c1, 3, gen, Conv2dOptions{.padding = 1}));
  m->add("bn1", std::make_shared<BatchNorm2d>(c1));
  m->add("relu1", std::make_shared<ReLU>());
  m->add("pool1", std::make_shared<MaxPool2d>(2));
  m->add("conv2", std::make_shared<Conv2d>(c1, c2, 3, gen, Conv2dOptions{.padding = 1}));
  m->add("bn2", std::make_shared<BatchNorm2d>(c2));
  m->add("relu2", std::make_shared<ReLU>());
  m->add("pool2", std::make_shared<MaxPool2d>(2));
  m->add("flatten", std::make_shared<Flatten>());
  m->add("fc1", std::make_shared<Linear>(c2 * 7 * 7, c.mlp_width, gen,
                                         LinearOptions{.activation = Activation::relu}));
  auto head = std::make_shared<Linear>(c.mlp_width, 10, gen);
  head->set_kind("head");
  m->add("head", head);
  return m;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> n = {"cnn", "gpt", "gpt2", "gpt2-medium", "llama"};
  for (auto& p : llama_preset_names()) n.push_back(p);
  n.push_back("mlp");
  return n;
}

ModelConfig resolve_model_config(const ModelConfig& cfg) {
  ModelConfig c = cfg;
  auto def = [](int64_t& v, int64_t d) {
    if (v == 0) v = d;
  };
  if (c.name == "mlp") {
    def(c.width, 512);
    def(c.layers, 2);
  } else if (c.name == "cnn") {
    def(c.width, 32);
    def(c.mlp_width, 128);
  } else if (is_gpt2_model(c.name)) {
    const bool medium = c.name == "gpt2-medium";
    def(c.width, medium ? 1024 : 768);
    def(c.layers, medium ? 24 : 12);
    def(c.heads, medium ? 16 : 12);
    def(c.context, 1024);
    def(c.vocab, kGpt2Vocab);
    def(c.mlp_width, 4 * c.width);
  } else if (is_llama_model(c.name)) {
    const LlamaConfig p = llama_preset(c.name);
    def(c.width, p.width);
    def(c.layers, p.layers);
    def(c.heads, p.heads);
    // A head count set without kv_heads keeps multi-head attention unless the preset's k/v
    // heads still divide it.
    def(c.kv_heads, c.heads % p.kv() == 0 ? p.kv() : c.heads);
    def(c.context, p.context);
    def(c.vocab, p.vocab);
    def(c.mlp_width, p.mlp_width);
  } else if (c.name == "gpt") {
    def(c.width, 256);
    def(c.layers, 4);
    def(c.heads, 4);
    def(c.context, 128);
    def(c.vocab, 256);
    def(c.mlp_width, 1024);
  } else {
    std::string known;
    for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument(
        fmt::format("mixp::nn::make_model: unknown model '{}'; known models: {}", cfg.name, known));
  }
  return c;
}

std::shared_ptr<Module> make_model(const ModelConfig& cfg) {
  const ModelConfig c = resolve_model_config(cfg);
  for (int64_t v : {c.width, c.layers, c.heads, c.context, c.vocab, c.mlp_width}) {
    if (v < 0)
      throw std::invalid_argument(
          fmt::format("mixp::nn::make_model: model '{}' got a negative size {}", c.name, v));
  }
  Generator gen(c.seed);
  if (c.name == "mlp") {
    require_unset(c, "mlp_width", c.mlp_width);
    require_image_model_options(c);
    return make_mlp(c, gen);
  }
  if (c.name == "cnn") {
    if (c.layers != 0 && c.layers != 2) {
      throw std::invalid_argument(
          fmt::format("mixp::nn::make_model: 'cnn' has 2 conv layers, got layers={}", c.layers));
    }
    require_image_model_options(c);
    return make_cnn(c, gen);
  }
  if (is_llama_model(c.name)) return std::make_shared<Llama>(llama_config_of(c), gen);
  require_unset(c, "kv_heads", c.kv_heads);
  if (c.context > 0 && is_gpt2_model(c.name) && c.context > 1024) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::make_model: '{}' learns positions up to 1024, got context={}",
                    c.name, c.context));
  }
  GptConfig g = gpt_config_of(c);
  return std::make_shared<Gpt>(g, gen);
}

bool is_gpt2_model(std::string_view name) {
  return name == "gpt2" || name == "gpt2-medium";
}

int64_t padded_vocab_size(int64_t vocab) {
  return (vocab + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
}

GptConfig gpt_config_of(const ModelConfig& cfg) {
  const ModelConfig c = resolve_model_config(cfg);
  GptConfig g;
  if (is_gpt2_model(c.name)) {
    g.tied_head = true;
    g.padded_vocab = padded_vocab_size(c.vocab);
  }
  g.vocab = c.vocab;
  g.context = c.context;
  g.width = c.width;
  g.layers = c.layers;
  g.heads = c.heads;
  g.mlp_width = c.mlp_width;
  g.checkpointing = c.checkpointing;
  return g;
}

LlamaConfig llama_config_of(const ModelConfig& cfg) {
  const ModelConfig c = resolve_model_config(cfg);
  if (!is_llama_model(c.name)) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::make_model: '{}' is not a LLaMA-family model", c.name));
  }
  LlamaConfig l = llama_preset(c.name);
  l.width = c.width;
  l.layers = c.layers;
  l.heads = c.heads;
  l.kv_heads = c.kv_heads;
  l.context = c.context;
  l.vocab = c.vocab;
  l.mlp_width = c.mlp_width;
  l.checkpointing = c.checkpointing;
  try {
    l.validate();
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    if (m.rfind("mixp::nn::Llama: ", 0) == 0) m = m.substr(17);
    throw std::invalid_argument(fmt::format("mixp::nn::make_model: '{}': {}{}", c.name, m,
                                            m.find("kv_heads") != std::string::npos
                                                ? " (`mixp train --kv-heads N`)"
                                                : ""));
  }
  return l;
}

}  // namespace mixp::nn
