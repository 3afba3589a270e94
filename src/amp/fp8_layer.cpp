// enable_fp8 on layers and models, Fp8Linear (see fp8_linear.h).
#include <fmt/format.h>

#include <stdexcept>

#include "mixp/amp/fp8_linear.h"
#include "mixp/nn/module.h"

namespace mixp::amp {

namespace {

// The forward implementation enable_fp8 installs; fp8_meta finds the meta through it.
struct Fp8Forward {
  std::shared_ptr<Fp8LinearMeta> meta;
  Tensor operator()(nn::Linear& self, const Tensor& x) const {
    if (!Fp8Autocast::is_enabled()) return self.forward_default(x);
    // Linear fuses GELU in eval only; fp8_linear applies it after the GEMM either way.
    return fp8_linear(x, self.weight(), self.bias(), self.activation(), *meta);
  }
};

}  // namespace

std::shared_ptr<Fp8LinearMeta> enable_fp8(nn::Linear& layer, const Fp8Recipe& recipe) {
  if (layer.forward_impl()) {
    throw std::logic_error(
        "mixp::amp::enable_fp8: this Linear already has a forward implementation (FP8 enabled "
        "twice, or another recipe swapped its GEMM)");
  }
  auto meta = std::make_shared<Fp8LinearMeta>(recipe);
  for (auto& [name, t] : meta->buffers()) layer.register_buffer(name, t);
  layer.set_forward_impl(Fp8Forward{meta});
  return meta;
}

std::shared_ptr<Fp8LinearMeta> fp8_meta(const nn::Linear& layer) {
  const auto* f = layer.forward_impl().target<Fp8Forward>();
  return f ? f->meta : nullptr;
}

bool is_fp8_state_name(std::string_view n) {
  const size_t dot = n.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? n : n.substr(dot + 1);
  if (last.rfind("fp8_", 0) != 0) return false;
  for (Fp8Role role : kFp8Roles) {
    const std::string prefix = "fp8_" + std::string(to_string(role)) + "_";
    if (last.rfind(prefix, 0) != 0) continue;
    const std::string_view t = last.substr(prefix.size());
    if (t == "amax_history" || t == "scale" || t == "scale_inv") return true;
  }
  return false;
}

std::vector<std::string> enable_fp8(nn::Module& model, const Fp8Recipe& recipe,
                                    const Fp8Selector& select) {
  recipe.validate();
  std::vector<std::string> out;
  for (auto& [name, m] : model.named_modules()) {
    auto* lin = dynamic_cast<nn::Linear*>(m);
    if (!lin) continue;
    const bool take = select ? select(name, *m) : m->kind() == "linear";
    if (!take) continue;
    enable_fp8(*lin, recipe);
    out.push_back(name);
  }
  return out;
}

Fp8Linear::Fp8Linear(int64_t in_features, int64_t out_features, Generator& gen,
                     const Fp8Recipe& recipe, const nn::LinearOptions& opt)
    : nn::Linear(in_features, out_features, gen, opt), meta_(enable_fp8(*this, recipe)) {}

}  // namespace mixp::amp
