// prepare_qat / prepare_ptq, the QAT switches and Conv+BN folding; see include/mixp/quant/qat.h.
#include "mixp/quant/qat.h"

#include <fmt/format.h>

#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>

#include "mixp/nn/activation.h"
#include "mixp/nn/dropout.h"
#include "mixp/nn/flatten.h"
#include "mixp/nn/max_pool2d.h"
#include "mixp/nn/sequential.h"
#include "mixp/quant/qat_modules.h"
#include "mixp/tensor/factories.h"
#include "quant/quant_util.h"

namespace mixp::quant {

bool default_reduce_range() {
  // What oneDNN will run, not just what the CPU has: ONEDNN_MAX_CPU_ISA (or a tool that hides
  // AVX-512, such as valgrind) can select kernels without VNNI on a VNNI machine.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  auto has = [&](dnnl::cpu_isa want) {
    const auto w = static_cast<unsigned>(want);
    return (isa & w) == w;
  };
  return !has(dnnl::cpu_isa::avx512_core_vnni) && !has(dnnl::cpu_isa::avx2_vnni);
}

namespace {

// PyTorch's default qconfigs differ only in the observer: quint8 affine activations per tensor
// (reduce_range where the CPU has no VNNI), qint8 symmetric weights per channel.
QConfig default_qconfig(ObserverKind observer) {
  QConfig q;
  q.activation = {
      observer, false, 0, 0.01f, {QDType::quint8, QScheme::affine, default_reduce_range()}};
  q.weight = {observer, true, 0, 0.01f, {QDType::qint8, QScheme::symmetric, false}};
  return q;
}

}  // namespace

QConfig default_qat_qconfig() {
  return default_qconfig(ObserverKind::moving_average);
}

QConfig default_ptq_qconfig() {
  return default_qconfig(ObserverKind::min_max);
}

namespace {

const char* kSupported =
    "supported: a Sequential of Linear, Conv2d, BatchNorm2d (after a Conv2d), ReLU, MaxPool2d, "
    "Flatten and Dropout (the built-in mlp and cnn)";

using detail::as;
using detail::attach_qat;
using detail::tree_qat_layers;

}  // namespace

bool is_prepared(const nn::Module& model) {
  return detail::has_module<FakeQuantize>(model);
}

namespace {

// A Sequential of only the layers the int8 model runs (the built-in mlp and cnn): prepared as
// fused groups, and convert_to_int8 can make it an int8 model.
bool is_int8_sequential(const nn::Module& model) {
  const auto* seq = dynamic_cast<const nn::Sequential*>(&model);
  if (seq == nullptr) return false;
  for (const auto& [name, m] : seq->named_children()) {
    // int8 inference does not run GELU.
    if (as<nn::Linear>(m) && as<nn::Linear>(m)->activation() == Activation::gelu) return false;
    if (!(as<nn::Linear>(m) || as<nn::Conv2d>(m) || as<nn::BatchNorm2d>(m) ||
          as<nn::MaxPool2d>(m) || as<nn::Flatten>(m) || as<nn::Dropout>(m) || as<nn::ReLU>(m))) {
      return false;
    }
  }
  return true;
}

// Any other Module tree (a custom model, docs/custom-models.md): every Linear and Conv2d in it,
// found by type wherever it sits as amp::enable_fp8 finds its Linear layers (amp/fp8_linear.cpp),
// trains through a QatLinear / QatConv2d that shares its parameters, registered as its child
// "qat" (so the observers are in the state dict and the switches reach them) and run by a
// forward wrapper: the parent module keeps calling the layer it holds. The data flow between
// layers is the model's own code, which prepare cannot see, so each layer fake-quantizes its own
// input and output (PyTorch eager mode needs QuantStubs for the same reason); the last layer's
// output (the logits, by named_modules() order) only with QConfig::quantize_output. Such a model
// trains and evaluates with fake quantization; convert_to_int8 takes the Sequential ones only.
void prepare_tree(nn::Module& model, const QConfig& qc) {
  const auto layers = tree_qat_layers(model, "prepare_qat");
  for (size_t i = 0; i < layers.size(); ++i) {
    nn::Module* m = layers[i].second;
    std::shared_ptr<QatModule> q;
    if (auto* lin = dynamic_cast<nn::Linear*>(m)) {
      q = std::make_shared<QatLinear>(*lin, qc.weight);
    } else {
      q = std::make_shared<QatConv2d>(*dynamic_cast<nn::Conv2d*>(m), qc.weight);
    }
    q->set_input_fake_quant(std::make_shared<FakeQuantize>(qc.activation, 1));
    if (i + 1 < layers.size() || qc.quantize_output) {
      q->set_output_fake_quant(std::make_shared<FakeQuantize>(qc.activation, 1));
    }
    QatModule* run = q.get();
    attach_qat(*m, q, [run](const Tensor& x) { return run->forward(x); });
  }
}

}  // namespace

bool is_int8_convertible(const nn::Module& model) {
  if (!dynamic_cast<const nn::Sequential*>(&model)) return false;
  // Prepared as fused groups: the QAT layers are the Sequential's own children.
  for (const auto& [name, m] : model.named_children()) {
    if (dynamic_cast<const QatModule*>(m.get())) return true;
  }
  return false;
}

void prepare_qat(nn::Module& model, const QConfig& qc) {
  if (is_prepared(model)) {
    throw std::invalid_argument("mixp::quant::prepare_qat: the model is prepared already");
  }
  if (qc.activation.per_channel) {
    throw std::invalid_argument(
        "mixp::quant::prepare_qat: activations are quantized per tensor; the qconfig asks for "
        "per-channel activation observers");
  }
  if (!is_int8_sequential(model)) {
    prepare_tree(model, qc);
    return;
  }
  auto* seq = dynamic_cast<nn::Sequential*>(&model);
  const auto act_fq = [&] { return std::make_shared<FakeQuantize>(qc.activation, 1); };
  const auto children = seq->named_children();
  std::vector<QatModule*> owners;  // the last module of each fused group
  bool first = true;
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& [name, m] = children[i];
    auto next_is = [&](auto* probe) {
      using T = std::remove_pointer_t<decltype(probe)>;
      return i + 1 < children.size() && as<T>(children[i + 1].second) != nullptr;
    };
    std::shared_ptr<QatModule> head;
    if (auto* lin = as<nn::Linear>(m)) {
      head = std::make_shared<QatLinear>(*lin, qc.weight);
    } else if (auto* conv = as<nn::Conv2d>(m)) {
      head = std::make_shared<QatConv2d>(*conv, qc.weight);
    } else if (as<nn::MaxPool2d>(m) || as<nn::Flatten>(m) || as<nn::Dropout>(m) ||
               as<nn::ReLU>(m)) {
      continue;  // quantization-preserving (see the header comment)
    } else {
      throw std::invalid_argument(
          fmt::format("mixp::quant::prepare_qat: cannot quantize module '{}' ({}); {}", name,
                      m->kind(), kSupported));
    }
    if (first) head->set_input_fake_quant(act_fq());
    first = false;
    seq->replace(name, head);
    QatModule* owner = head.get();
    if (as<nn::Conv2d>(m) && next_is(static_cast<nn::BatchNorm2d*>(nullptr))) {
      ++i;
      auto bn = std::make_shared<QatBatchNorm2d>(*as<nn::BatchNorm2d>(children[i].second));
      seq->replace(children[i].first, bn);
      owner = bn.get();
    }
    if (next_is(static_cast<nn::ReLU*>(nullptr))) {
      ++i;
      auto r = std::make_shared<QatReLU>();
      seq->replace(children[i].first, r);
      owner = r.get();
    }
    owners.push_back(owner);
  }
  if (owners.empty()) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::prepare_qat: the model has no Linear or Conv2d to quantize; {}", kSupported));
  }
  for (size_t g = 0; g < owners.size(); ++g) {
    if (g + 1 < owners.size() || qc.quantize_output) owners[g]->set_output_fake_quant(act_fq());
  }
}

void prepare_ptq(nn::Module& model, const QConfig& qc) {
  prepare_qat(model, qc);
  set_fake_quant_enabled(model, false);
  model.eval();
}

void set_observers_enabled(nn::Module& model, bool on) {
  detail::for_each_module<FakeQuantize>(model, [on](FakeQuantize& fq) { fq.enable_observer(on); });
}

void set_fake_quant_enabled(nn::Module& model, bool on) {
  detail::for_each_module<FakeQuantize>(model,
                                        [on](FakeQuantize& fq) { fq.enable_fake_quant(on); });
}

void freeze_batch_norm(nn::Module& model, bool on) {
  detail::for_each_module<QatBatchNorm2d>(model, [on](QatBatchNorm2d& bn) { bn.freeze(on); });
}

bool observers_calibrated(const nn::Module& model, std::string* missing) {
  return detail::all_have_data<FakeQuantize>(model, missing);
}

FoldedConv fold_conv_bn(const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv,
                        const Tensor& gamma, const Tensor& beta, double eps) {
  if (!w.defined() || w.dim() != 4 || !rm.defined() || !rv.defined()) {
    throw std::invalid_argument(
        "mixp::quant::fold_conv_bn: needs a conv weight [O, C, KH, KW] and the batch norm's "
        "running mean and variance");
  }
  const int64_t O = w.size(0);
  for (const Tensor* t : {&b, &rm, &rv, &gamma, &beta}) {
    if (t->defined() && (t->dim() != 1 || t->size(0) != O)) {
      throw std::invalid_argument(
          fmt::format("mixp::quant::fold_conv_bn: per-channel tensors must be [{}], got {}", O,
                      t->shape().str()));
    }
  }
  const std::vector<double> wv = w.to_double_vector(), mean = rm.to_double_vector(),
                            var = rv.to_double_vector();
  const std::vector<double> bv = b.defined() ? b.to_double_vector() : std::vector<double>(O, 0.0);
  const std::vector<double> gv =
      gamma.defined() ? gamma.to_double_vector() : std::vector<double>(O, 1.0);
  const std::vector<double> be =
      beta.defined() ? beta.to_double_vector() : std::vector<double>(O, 0.0);
  const int64_t per = w.numel() / std::max<int64_t>(O, 1);
  std::vector<double> fw(wv.size()), fb(static_cast<size_t>(O)), g(static_cast<size_t>(O));
  for (int64_t o = 0; o < O; ++o) {
    const size_t oi = static_cast<size_t>(o);
    g[oi] = gv[oi] / std::sqrt(var[oi] + eps);
    for (int64_t k = 0; k < per; ++k) {
      const size_t i = static_cast<size_t>(o * per + k);
      fw[i] = wv[i] * g[oi];
    }
    fb[oi] = (bv[oi] - mean[oi]) * g[oi] + be[oi];
  }
  const DType dt = w.dtype();
  FoldedConv f;
  f.weight = from_vector(fw, w.shape(), {.dtype = DType::fp64});
  f.bias = from_vector(fb, Shape{O}, {.dtype = DType::fp64});
  f.factor = from_vector(g, Shape{O}, {.dtype = DType::fp64});
  if (dt != DType::fp64) {
    f.weight = f.weight.to(dt, Round::nearest_even);
    f.bias = f.bias.to(dt, Round::nearest_even);
  }
  return f;
}

}  // namespace mixp::quant
