#include "mixp/train/recipe.h"

#include <algorithm>

#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/module.h"
#include "mixp/train/train_config.h"

namespace mixp::train {

namespace detail {
// recipe_int8_qat.cpp
std::unique_ptr<PrecisionRecipe> make_int8_qat_recipe(const RecipeOptions& opt);
}  // namespace detail

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Replaces the contents of `t`'s TensorImpl by a converted copy, so that every handle to the
// parameter (the module's, the optimizer's) sees the new dtype.
void convert_in_place(Tensor& t, DType dtype) {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == dtype) return;
  Tensor c;
  {
    NoGradGuard ng;
    c = t.detach().to(dtype, Round::nearest_even).contiguous();
  }
  TensorImpl* impl = t.impl();
  impl->storage = c.impl()->storage;
  impl->offset = c.impl()->offset;
  impl->shape = c.impl()->shape;
  impl->strides = c.impl()->strides;
  impl->dtype = dtype;
  impl->grad.reset();
}

// The two recipes without any mixed precision: every parameter, activation and gradient in one
// floating type. They differ only in that type.
class UniformRecipe final : public PrecisionRecipe {
 public:
  UniformRecipe(std::string name, DType dtype) : name_(std::move(name)), dtype_(dtype) {}
  std::string name() const override { return name_; }
  DType param_dtype() const override { return dtype_; }

 private:
  std::string name_;
  DType dtype_;
};

}  // namespace

void PrecisionRecipe::prepare_model(nn::Module& model) const {
  convert_module(model, param_dtype());
}

void convert_module(nn::Module& model, DType dtype) {
  for (auto& [name, p] : model.named_parameters()) convert_in_place(p, dtype);
  for (auto& [name, b] : model.named_buffers()) convert_in_place(b, dtype);
}

const std::vector<std::string>& planned_recipes() {
  static const std::vector<std::string> v{"fp64",  "fp32",     "tf32",      "bf16", "bf16-pure",
                                          "fp16",  "fp16-o2",  "fp16-pure", "fp8",  "fp8-current",
                                          "mxfp8", "int8-qat", "auto"};
  return v;
}

std::vector<std::string> available_recipes() {
  return {"fp32", "fp64", "int8-qat"};
}

std::unique_ptr<PrecisionRecipe> make_recipe(std::string_view name, const RecipeOptions& opt) {
  const std::vector<std::string> avail = available_recipes();
  const std::string n(name);
  if (std::find(avail.begin(), avail.end(), n) == avail.end()) {
    const auto& planned = planned_recipes();
    if (std::find(planned.begin(), planned.end(), n) != planned.end()) {
      throw ConfigError("precision '" + n + "' is not available yet; available: " + join(avail));
    }
    std::vector<std::string> later;
    for (const auto& p : planned)
      if (std::find(avail.begin(), avail.end(), p) == avail.end()) later.push_back(p);
    throw ConfigError("unknown precision '" + n + "'; available: " + join(avail) +
                      " (not yet available: " + join(later) + ")");
  }
  // fp32 and fp64 compute everything in one type: nothing to override per layer and no loss
  // scale to tune. Refusing these options says so instead of silently ignoring them.
  if (!opt.layer_precision.empty()) {
    throw ConfigError("--layer-precision needs a mixed-precision recipe; precision '" + n +
                      "' runs every layer in " + n);
  }
  if (opt.loss_scale_init || opt.growth_interval) {
    throw ConfigError(std::string(opt.loss_scale_init ? "--loss-scale-init" : "--growth-interval") +
                      " only applies to fp16 recipes with dynamic loss scaling; precision '" + n +
                      "' does not scale the loss");
  }
  if (n == "int8-qat") return detail::make_int8_qat_recipe(opt);
  if (opt.qat_freeze_bn_epoch || opt.qat_disable_observer_epoch) {
    throw ConfigError(std::string(opt.qat_freeze_bn_epoch ? "--qat-freeze-bn-epoch"
                                                          : "--qat-disable-observer-epoch") +
                      " only applies to --precision int8-qat");
  }
  return std::make_unique<UniformRecipe>(n, n == "fp64" ? DType::fp64 : DType::fp32);
}

}  // namespace mixp::train
