// Low-bit QAT layers and prepare_lowbit_qat; see include/mixp/quant/lowbit_qat.h.
#include "mixp/quant/lowbit_qat.h"

#include <fmt/format.h>

#include <limits>
#include <set>
#include <stdexcept>

#include "mixp/nn/activation.h"
#include "mixp/nn/batch_norm2d.h"
#include "mixp/nn/flatten.h"
#include "mixp/nn/max_pool2d.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/quant/qat_modules.h"
#include "mixp/tensor/factories.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

ObserverSpec act_observer_spec() {
  // Statistics only (min and max): the low-bit scale is computed by lowbit_act_scale.
  return {ObserverKind::moving_average, false, 0, 0.01f, {QDType::quint8, QScheme::affine, false}};
}
}  // namespace

// ---- LowBitActivation

LowBitActivation::LowBitActivation(ActCodeKind kind, int bits, bool relu)
    : nn::Module("lowbit_act"),
      kind_(kind),
      bits_(bits),
      relu_(relu),
      observer_(act_observer_spec(), 1) {
  // Sign codes observe nothing: their buffers hold the sign's range (finite, so that a checkpoint
  // of them passes the loader's check).
  const bool sign = kind == ActCodeKind::sign;
  min_val_ = &register_buffer("min_val", full({1}, sign ? -1.0 : kInf));
  max_val_ = &register_buffer("max_val", full({1}, sign ? 1.0 : -kInf));
}

bool LowBitActivation::has_data() const {
  if (kind_ == ActCodeKind::sign) return true;
  const float mn = min_val_->item<float>(), mx = max_val_->item<float>();
  return mn <= mx && std::isfinite(mn) && std::isfinite(mx);
}

ActCodeParams LowBitActivation::params() const {
  ActCodeParams p;
  p.kind = kind_;
  p.bits = bits_;
  p.scale = lowbit_act_scale(kind_, bits_, min_val_->item<float>(), max_val_->item<float>());
  return p;
}

Tensor LowBitActivation::forward(const Tensor& x) {
  const Tensor y = relu_ ? mixp::relu(x) : x;
  if (observer_enabled_ && kind_ != ActCodeKind::sign) {
    // The buffers through the host-access paths (item, detail::write_buffer): one value each.
    const float mn = min_val_->item<float>(), mx = max_val_->item<float>();
    observer_.set_state({&mn, 1}, {&mx, 1});
    observer_.observe(y);
    detail::write_buffer(*min_val_, std::vector<float>{observer_.min_vals()[0]});
    detail::write_buffer(*max_val_, std::vector<float>{observer_.max_vals()[0]});
  }
  return lowbit_act_codes(y, params());
}

std::string LowBitActivation::describe() const {
  const char* k = kind_ == ActCodeKind::sign          ? "sign"
                  : kind_ == ActCodeKind::signed8     ? "signed 8-bit"
                  : kind_ == ActCodeKind::signed_bits ? "signed"
                                                      : "unsigned";
  const bool with_bits = kind_ == ActCodeKind::unsigned_bits || kind_ == ActCodeKind::signed_bits;
  return fmt::format("{}{} codes{}{}", relu_ ? "relu, " : "", k,
                     with_bits ? fmt::format(" ({} bits)", bits_) : "",
                     observer_enabled_ ? "" : ", observer off");
}

// ---- LowBitLayer

LowBitLayer::LowBitLayer(const nn::Linear& src, LowBitScheme scheme)
    : nn::Module(src.kind()), scheme_(scheme) {
  weight_ = &register_parameter("weight", src.weight(), src.weight().requires_grad());
  bias_ = src.bias().defined()
              ? &register_parameter("bias", src.bias(), src.bias().requires_grad())
              : &no_bias_;
}

LowBitLayer::LowBitLayer(const nn::Conv2d& src, LowBitScheme scheme)
    : nn::Module(src.kind()), scheme_(scheme), conv_(true), cp_(src.params()) {
  weight_ = &register_parameter("weight", src.weight(), src.weight().requires_grad());
  bias_ = src.bias().defined()
              ? &register_parameter("bias", src.bias(), src.bias().requires_grad())
              : &no_bias_;
}

void LowBitLayer::set_input_quant(std::shared_ptr<LowBitActivation> q) {
  own_in_ = register_module("input_quant", std::move(q));
  in_ = own_in_.get();
}

void LowBitLayer::set_output_quant(std::shared_ptr<LowBitActivation> q) {
  out_ = register_module("output_quant", std::move(q));
}

std::vector<float> LowBitLayer::multipliers(const std::vector<float>& sw) const {
  const float sx = in_ ? in_->params().scale : 1.0f;
  std::vector<float> m(sw.size());
  for (size_t o = 0; o < sw.size(); ++o) m[o] = sx * sw[o];
  return m;
}

Tensor lowbit_rescale(const Tensor& acc, const std::vector<float>& m, const Tensor& bias) {
  const int64_t O = static_cast<int64_t>(m.size());
  const Shape cs = acc.dim() == 4 ? Shape{O, 1, 1} : Shape{O};
  Tensor y = mul(acc, from_vector(m, cs));
  if (bias.defined()) y = add(y, reshape(bias, cs));
  return y;
}

Tensor LowBitLayer::forward(const Tensor& x0) {
  if (in_ == nullptr) {
    throw std::logic_error("mixp::quant::LowBitLayer: no input quantizer (prepare_lowbit_qat)");
  }
  const Tensor x = own_in_ ? own_in_->forward(x0) : x0;
  std::vector<float> sw;
  const Tensor wc = lowbit_weight_codes(*weight_, scheme_, &sw);
  const Tensor acc = conv_ ? conv2d(x, wc, Tensor(), cp_) : linear(x, wc);
  Tensor y = lowbit_rescale(acc, multipliers(sw), *bias_);
  return out_ ? out_->forward(y) : y;
}

std::string LowBitLayer::describe() const {
  return fmt::format("lowbit {}: weight {}{}", conv_ ? "conv2d" : "linear", name(scheme_),
                     weight_->shape().str());
}

// ---- prepare

namespace {

const char* kSupported =
    "supported: a Sequential of Linear, Conv2d, BatchNorm2d (after a Conv2d), ReLU, MaxPool2d "
    "and Flatten (the built-in mlp and cnn)";

using detail::as;
using detail::attach_qat;
using detail::tree_qat_layers;

// The activation codes a layer of `scheme` takes.
std::shared_ptr<LowBitActivation> input_act_for(LowBitScheme s, bool relu) {
  switch (s) {
    case LowBitScheme::binary_act:
      return std::make_shared<LowBitActivation>(ActCodeKind::sign, 1, false);
    case LowBitScheme::int4:
      return std::make_shared<LowBitActivation>(ActCodeKind::unsigned_bits, 4, relu);
    case LowBitScheme::int2:
      return std::make_shared<LowBitActivation>(ActCodeKind::unsigned_bits, 2, relu);
    default:
      return std::make_shared<LowBitActivation>(ActCodeKind::unsigned_bits, 8, relu);
  }
}

// The input codes of a layer of `s` in any Module tree, where the input need not be a ReLU's
// output: signed, symmetric (the first layer's signed 8-bit codes, with the scheme's bits).
std::shared_ptr<LowBitActivation> tree_input_act_for(LowBitScheme s) {
  switch (s) {
    case LowBitScheme::binary_act:
      return std::make_shared<LowBitActivation>(ActCodeKind::sign, 1, false);
    case LowBitScheme::int4:
      return std::make_shared<LowBitActivation>(ActCodeKind::signed_bits, 4, false);
    case LowBitScheme::int2:
      return std::make_shared<LowBitActivation>(ActCodeKind::signed_bits, 2, false);
    default:
      return std::make_shared<LowBitActivation>(ActCodeKind::signed8, 8, false);
  }
}

// A Sequential of only the layers the Sequential form takes (the built-in mlp and cnn): prepared
// in place with fused activation codes, and convert_to_packed can pack it. Anything else is
// prepared layer by layer (prepare_tree).
bool is_lowbit_sequential(const nn::Module& model) {
  const auto* seq = dynamic_cast<const nn::Sequential*>(&model);
  if (seq == nullptr) return false;
  for (const auto& [name, m] : seq->named_children()) {
    if (as<nn::Linear>(m) && as<nn::Linear>(m)->activation() == Activation::gelu) return false;
    if (!(as<nn::Linear>(m) || as<nn::Conv2d>(m) || as<nn::BatchNorm2d>(m) || as<nn::ReLU>(m) ||
          as<nn::MaxPool2d>(m) || as<nn::Flatten>(m))) {
      return false;
    }
  }
  return true;
}

// The scheme of each of `names` (the model's Linear/Conv2d layers in order): int8 at both ends,
// the recipe's in between, then the overrides (a layer name, "first" or "last").
std::vector<LowBitScheme> layer_schemes(const std::vector<std::string>& names,
                                        const LowBitConfig& cfg) {
  std::vector<LowBitScheme> scheme(names.size(), cfg.scheme);
  scheme.front() = LowBitScheme::int8;
  scheme.back() = LowBitScheme::int8;
  const std::set<std::string> known(names.begin(), names.end());
  for (const auto& [key, s] : cfg.overrides) {
    if (key == "first") {
      scheme.front() = s;
    } else if (key == "last") {
      scheme.back() = s;
    } else if (!known.contains(key)) {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::prepare_lowbit_qat: --layer-precision names '{}', which is not a "
          "Linear/Conv2d layer of the model (layers: {}; or first, last)",
          key, fmt::join(known, ", ")));
    }
  }
  for (size_t l = 0; l < names.size(); ++l) {
    const auto it = cfg.overrides.find(names[l]);
    if (it != cfg.overrides.end()) scheme[l] = it->second;
  }
  return scheme;
}

// Any other Module tree (a custom model, docs/custom-models.md), as prepare_qat's tree form
// (qat.cpp): every Linear and Conv2d, found by type through named_modules(), trains through a
// LowBitLayer that shares its parameters, registered as its child "qat" (its observer buffers
// are checkpointed, the switches reach it) and run by a forward wrapper, so that the parent keeps
// calling the layer it holds. prepare cannot see the data flow between layers, so each layer
// quantizes its own input, with signed codes (tree_input_act_for), and returns fp32 outputs
// (then the Linear's fused ReLU or GELU); nothing is fused. Such a model trains and evaluates
// with fake quantization; convert_to_packed takes the Sequential form only.
void prepare_tree(nn::Module& model, const LowBitConfig& cfg) {
  const auto layers = tree_qat_layers(model, "prepare_lowbit_qat");
  std::vector<std::string> names;
  for (const auto& [name, m] : layers) names.push_back(name);
  const std::vector<LowBitScheme> scheme = layer_schemes(names, cfg);
  for (size_t l = 0; l < layers.size(); ++l) {
    nn::Module* m = layers[l].second;
    std::shared_ptr<LowBitLayer> q;
    Activation act = Activation::none;
    if (auto* lin = dynamic_cast<nn::Linear*>(m)) {
      q = std::make_shared<LowBitLayer>(*lin, scheme[l]);
      act = lin->activation();
    } else {
      q = std::make_shared<LowBitLayer>(*dynamic_cast<nn::Conv2d*>(m), scheme[l]);
    }
    q->set_input_quant(tree_input_act_for(scheme[l]));
    LowBitLayer* run = q.get();
    std::function<Tensor(const Tensor&)> post;
    if (act == Activation::relu) post = [](const Tensor& y) { return mixp::relu(y); };
    // As nn::Linear's fused GELU (linear.cpp): the tanh form.
    if (act == Activation::gelu)
      post = [](const Tensor& y) { return mixp::gelu(y, GeluApprox::tanh); };
    attach_qat(*m, q, [run](const Tensor& x) { return run->forward(x); }, std::move(post));
  }
}

}  // namespace

bool is_lowbit_prepared(const nn::Module& model) {
  return detail::has_module<LowBitLayer>(model);
}

bool is_lowbit_convertible(const nn::Module& model) {
  if (!dynamic_cast<const nn::Sequential*>(&model)) return false;
  // Prepared in the Sequential form: the low-bit layers are the Sequential's own children.
  for (const auto& [name, m] : model.named_children()) {
    if (dynamic_cast<const LowBitLayer*>(m.get())) return true;
  }
  return false;
}

void prepare_lowbit_qat(nn::Module& model, const LowBitConfig& cfg) {
  if (is_lowbit_prepared(model)) {
    throw std::invalid_argument("mixp::quant::prepare_lowbit_qat: the model is prepared already");
  }
  if (!is_lowbit_sequential(model)) {
    prepare_tree(model, cfg);
    return;
  }
  auto* seq = dynamic_cast<nn::Sequential*>(&model);
  const auto children = seq->named_children();
  std::vector<size_t> layers;
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& m = children[i].second;
    // The other children are of the kinds is_lowbit_sequential allows.
    if (as<nn::Linear>(m) || as<nn::Conv2d>(m)) layers.push_back(i);
  }
  if (layers.empty()) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::prepare_lowbit_qat: the model has no Linear or Conv2d; {}", kSupported));
  }
  std::vector<std::string> names;
  for (const size_t i : layers) names.push_back(children[i].first);
  const std::vector<LowBitScheme> scheme = layer_schemes(names, cfg);

  const LowBitActivation* prev = nullptr;
  for (size_t l = 0; l < layers.size(); ++l) {
    size_t i = layers[l];
    const auto& [name, m] = children[i];
    std::shared_ptr<LowBitLayer> layer;
    bool fused_relu = false;
    if (auto* lin = as<nn::Linear>(m)) {
      fused_relu = lin->activation() == Activation::relu;
      layer = std::make_shared<LowBitLayer>(*lin, scheme[l]);
    } else {
      layer = std::make_shared<LowBitLayer>(*as<nn::Conv2d>(m), scheme[l]);
    }
    if (l == 0) {
      layer->set_input_quant(scheme[l] == LowBitScheme::binary_act
                                 ? std::make_shared<LowBitActivation>(ActCodeKind::sign, 1, false)
                                 : std::make_shared<LowBitActivation>(ActCodeKind::signed8, 8,
                                                                      false));
    } else {
      layer->link_input(prev);
    }
    seq->replace(name, layer);
    if (layer->is_conv() && i + 1 < children.size() &&
        as<nn::BatchNorm2d>(children[i + 1].second)) {
      ++i;
      seq->replace(children[i].first, std::make_shared<QatBatchNorm2d>(
                                          *as<nn::BatchNorm2d>(children[i].second)));
    }
    const bool relu_next = i + 1 < children.size() && as<nn::ReLU>(children[i + 1].second);
    if (l + 1 == layers.size()) {
      if (fused_relu || relu_next) {
        throw std::invalid_argument(fmt::format(
            "mixp::quant::prepare_lowbit_qat: the last layer '{}' ends in a ReLU; the low-bit "
            "models return its output as logits",
            name));
      }
      break;
    }
    std::shared_ptr<LowBitActivation> act = input_act_for(scheme[l + 1], true);
    if (relu_next) {
      seq->replace(children[i + 1].first, act);
    } else if (fused_relu) {
      layer->set_output_quant(act);
    } else {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::prepare_lowbit_qat: '{}' feeds another layer without a ReLU; the "
          "low-bit activations are the codes of a ReLU's output (or the sign before it)",
          name));
    }
    prev = act.get();
  }
}

void set_lowbit_observers_enabled(nn::Module& model, bool on) {
  detail::for_each_module<LowBitActivation>(model,
                                            [on](LowBitActivation& a) { a.enable_observer(on); });
}

bool lowbit_observers_calibrated(const nn::Module& model, std::string* missing) {
  return detail::all_have_data<LowBitActivation>(model, missing);
}

}  // namespace mixp::quant
