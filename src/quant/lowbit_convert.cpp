// convert_to_packed: a model prepared for low-bit QAT and calibrated, as a PackedModel of packed
// codes (include/mixp/quant/lowbit_model.h; the model's forward is in lowbit_model.cpp).
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "mixp/nn/flatten.h"
#include "mixp/nn/max_pool2d.h"
#include "mixp/nn/sequential.h"
#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/qat.h"
#include "mixp/quant/qat_modules.h"
#include "mixp/tensor/factories.h"
#include "quant/lowbit_runtime.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {
using detail::as;

PackedStep act_step(const std::string& name, const LowBitActivation& a, bool input) {
  PackedStep s;
  s.kind = input ? "input" : "act";
  s.name = name;
  s.act = a.params();
  s.relu = a.relu();
  return s;
}
}  // namespace

std::shared_ptr<PackedModel> convert_to_packed(const nn::Module& prepared) {
  const auto* seq = dynamic_cast<const nn::Sequential*>(&prepared);
  if (seq == nullptr || !is_lowbit_prepared(prepared)) {
    throw std::invalid_argument(
        "mixp::quant::convert_to_packed: the model is not prepared for low-bit QAT "
        "(quant::prepare_lowbit_qat)");
  }
  if (!is_lowbit_convertible(prepared)) {
    throw std::invalid_argument(
        "mixp::quant::convert_to_packed: the model was prepared layer by layer (a Module tree "
        "other than a Sequential of Linear/Conv2d/BatchNorm2d/ReLU/MaxPool2d/Flatten): it runs "
        "with fake quantization only, there is no packed form of it");
  }
  std::string missing;
  if (!lowbit_observers_calibrated(prepared, &missing)) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::convert_to_packed: the activation quantizer '{}' has seen no data; train "
        "at least one step first",
        missing));
  }
  NoGradGuard ng;
  const DefaultDeviceGuard host(Device::cpu());  // the packed model's tensors live on the cpu
  auto model = std::make_shared<PackedModel>();
  for (const auto& [name, m] : seq->named_children()) {
    if (const auto* l = as<LowBitLayer>(m)) {
      if (l->owned_input_quant()) {
        model->add_step(act_step(name + ".input_quant", *l->owned_input_quant(), true));
      }
      PackedStep s;
      s.kind = "layer";
      s.name = name;
      s.scheme = l->scheme();
      s.conv = l->is_conv();
      // The packed model is a cpu inference model (as int8_model.cpp's): built from host copies
      // of the trained parameters (explicit host access, docs/architecture.md 3.5).
      const Tensor w = detail::as_fp32_contiguous(l->weight().to(Device::cpu()));
      s.out = w.size(0);
      s.in = w.size(1);
      s.kernel = s.conv ? w.size(2) : 1;
      if (s.conv) {
        const Conv2dParams& c = l->conv_params();
        if (w.size(2) != w.size(3) || c.stride_h != c.stride_w || c.pad_h != c.pad_w ||
            c.dilation_h != 1 || c.dilation_w != 1) {
          throw std::invalid_argument(fmt::format(
              "mixp::quant::convert_to_packed: '{}' needs a square kernel, equal strides and "
              "padding and no dilation",
              name));
        }
        s.stride = c.stride_h;
        s.padding = c.pad_h;
      }
      const int64_t K = w.numel() / s.out;
      std::vector<float> codes(static_cast<size_t>(w.numel()));
      s.weight_scale.resize(static_cast<size_t>(s.out));
      lowbit_weight_codes_raw(w.data<float>(), s.out, K, s.scheme, codes.data(),
                              s.weight_scale.data(), nullptr);
      s.packed = pack_weight_codes(codes.data(), s.out, K, s.scheme);
      const ActCodeParams in = l->input_quant()->params();
      s.input_scale = in.scale;
      s.input_kind = in.kind;
      if (l->bias().defined()) {
        s.bias = detail::as_fp32_contiguous(l->bias().to(Device::cpu())).clone();
      }
      model->add_step(std::move(s));
      if (l->output_quant())
        model->add_step(act_step(name + ".output_quant", *l->output_quant(), false));
    } else if (const auto* bn = as<QatBatchNorm2d>(m)) {
      PackedStep s;
      s.kind = "batch_norm";
      s.name = name;
      s.running_mean = bn->running_mean().to(Device::cpu()).clone();
      s.running_var = bn->running_var().to(Device::cpu()).clone();
      if (bn->weight().defined()) {
        s.gamma = bn->weight().detach().to(Device::cpu()).clone();
        s.beta = bn->bias().detach().to(Device::cpu()).clone();
      }
      s.eps = bn->options().eps;
      s.momentum = bn->options().momentum;
      model->add_step(std::move(s));
    } else if (const auto* a = as<LowBitActivation>(m)) {
      model->add_step(act_step(name, *a, false));
    } else if (const auto* p = as<nn::MaxPool2d>(m)) {
      PackedStep s;
      s.kind = "max_pool2d";
      s.name = name;
      s.pool_kernel = p->kernel();
      s.pool_stride = p->stride() > 0 ? p->stride() : p->kernel();
      s.pool_padding = p->padding();
      model->add_step(std::move(s));
    } else if (const auto* f = as<nn::Flatten>(m)) {
      if (f->start_dim() != 1 || (f->end_dim() != -1 && f->end_dim() != 3)) {
        throw std::invalid_argument(fmt::format(
            "mixp::quant::convert_to_packed: '{}' flattens other dimensions than 1..-1", name));
      }
      PackedStep s;
      s.kind = "flatten";
      s.name = name;
      model->add_step(std::move(s));
    } else {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::convert_to_packed: module '{}' ({}) has no packed version", name,
          m->kind()));
    }
  }
  return model;
}

}  // namespace mixp::quant
