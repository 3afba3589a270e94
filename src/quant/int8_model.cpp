// Int8Model, its simple layers (quantize, max pool, flatten) and convert_to_int8; see
// include/mixp/quant/int8_model.h.
#include "mixp/quant/int8_model.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/host_parallel.h"
#include "mixp/backend/quant_kernels.h"
#include "mixp/nn/dropout.h"
#include "mixp/nn/flatten.h"
#include "mixp/nn/max_pool2d.h"
#include "mixp/nn/sequential.h"
#include "mixp/quant/qat.h"
#include "mixp/quant/qat_modules.h"
#include "mixp/tensor/factories.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {

qk::QP to_qp(const QParams& p) {
  return {p.scale, 1.0f / p.scale, static_cast<float>(p.zero_point), static_cast<float>(p.qmin),
          static_cast<float>(p.qmax)};
}

// u8 codes (NHWC when 4-D) -> fp32 (NCHW when 4-D).
Tensor dequantize_act(const QAct& a) {
  const Tensor& d = a.data;
  Tensor out = empty(d.shape(), {.dtype = DType::fp32});
  const int64_t n = d.numel();
  const qk::Kernels& k = qk::kernels();
  k.dequantize_u8(out.data<float>(), d.data<uint8_t>(), n, a.q.scale,
                  static_cast<float>(a.q.zero_point));
  if (d.dim() == 4) return out.permute({0, 3, 1, 2}).contiguous();
  return out;
}

}  // namespace

// ---- Int8Model

Int8Model::Int8Model() : nn::Module("int8_model") {
  train(false);
}
Int8Model::~Int8Model() = default;

void Int8Model::add_layer(std::unique_ptr<Int8Layer> l) {
  layers_.push_back(std::move(l));
}

Tensor Int8Model::forward(const Tensor& x) {
  if (!x.defined() || !x.is_floating_point() || (x.dim() != 2 && x.dim() != 4)) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::Int8Model: input must be floating [N, C, H, W] or [N, K], got {}",
        x.defined() ? std::string(name(x.dtype())) + " " + x.shape().str() : "nothing"));
  }
  NoGradGuard ng;
  // An int8 model is a cpu inference model (oneDNN u8s8 and the cpu quant kernels): it computes
  // on the host and hands its result back on the input's device.
  const DefaultDeviceGuard host(Device::cpu());
  QAct a;
  a.data = detail::as_fp32_contiguous(x.to(Device::cpu()));
  for (const auto& l : layers_) a = l->forward(a);
  if (a.quantized()) return dequantize_act(a).to(x.device());
  return a.data.to(x.device());
}

int64_t Int8Model::weight_bytes() const {
  int64_t b = 0;
  for (const auto& l : layers_) b += l->weight_bytes();
  return b;
}

std::string Int8Model::describe() const {
  std::string s;
  for (const auto& l : layers_) {
    const Int8LayerSpec sp = l->spec();
    s += (s.empty() ? "" : ", ") + sp.kind + "(" + sp.name + ")";
  }
  return "int8: " + s;
}

// ---- quantize / max pool / flatten

QAct Int8Quantize::forward(const QAct& in) {
  const Tensor& x = in.data;
  if (!x.defined() || x.dtype() != DType::fp32 || (x.dim() != 2 && x.dim() != 4)) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8Quantize '{}': expected fp32 [N, C, H, W] or [N, K]", name_));
  }
  const Tensor xc =
      x.dim() == 4 && x.size(1) != 1 ? x.permute({0, 2, 3, 1}).contiguous() : x.contiguous();
  QAct out;
  out.q = q_;
  out.data = empty(x.dim() == 4 ? Shape{x.size(0), x.size(2), x.size(3), x.size(1)} : x.shape(),
                   {.dtype = DType::uint8});
  const qk::Kernels& k = qk::kernels();
  const qk::QP qp = to_qp(q_);
  const float* src = xc.data<float>();
  uint8_t* dst = out.data.data<uint8_t>();
  const int64_t n = xc.numel();
  host_parallel_for(
      n, n, [&](int64_t lo, int64_t hi) { k.quantize_u8(dst + lo, src + lo, hi - lo, qp); });
  return out;
}

Int8MaxPool2d::Int8MaxPool2d(std::string name, int64_t kernel, int64_t stride, int64_t padding)
    : name_(std::move(name)), k_(kernel), s_(stride > 0 ? stride : kernel), p_(padding) {
  if (k_ <= 0 || p_ < 0 || 2 * p_ > k_) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8MaxPool2d '{}': kernel {} stride {} padding {} not supported",
                    name_, k_, s_, p_));
  }
}

QAct Int8MaxPool2d::forward(const QAct& in) {
  if (!in.quantized() || in.data.dim() != 4) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8MaxPool2d '{}': expected u8 NHWC codes", name_));
  }
  const Tensor x = in.data.contiguous();
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t OH = (H + 2 * p_ - k_) / s_ + 1, OW = (W + 2 * p_ - k_) / s_ + 1;
  QAct out;
  out.q = in.q;
  out.data = empty(Shape{N, OH, OW, C}, {.dtype = DType::uint8});
  const uint8_t* src = x.data<uint8_t>();
  uint8_t* dst = out.data.data<uint8_t>();
  const bool fast = k_ == 2 && s_ == 2 && p_ == 0;
  const qk::Kernels& kk = qk::kernels();
  host_parallel_for(N, x.numel(), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const uint8_t* xs = src + n * H * W * C;
      uint8_t* ys = dst + n * OH * OW * C;
      if (fast) {
        kk.maxpool2x2_nhwc_u8(ys, xs, H, W, C);
        continue;
      }
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          uint8_t* d = ys + (oh * OW + ow) * C;
          std::memset(d, 0, static_cast<size_t>(C));
          for (int64_t kh = 0; kh < k_; ++kh) {
            const int64_t h = oh * s_ - p_ + kh;
            if (h < 0 || h >= H) continue;
            for (int64_t kw = 0; kw < k_; ++kw) {
              const int64_t w = ow * s_ - p_ + kw;
              if (w < 0 || w >= W) continue;
              const uint8_t* s = xs + (h * W + w) * C;
              for (int64_t c = 0; c < C; ++c) d[c] = std::max(d[c], s[c]);
            }
          }
        }
      }
    }
  });
  return out;
}

Int8LayerSpec Int8MaxPool2d::spec() const {
  Int8LayerSpec s{name_, "max_pool2d"};
  s.kernel = k_;
  s.stride = s_;
  s.padding = p_;
  return s;
}

QAct Int8Flatten::forward(const QAct& in) {
  const Tensor& x = in.data;
  if (!x.defined() || x.dim() < 2) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8Flatten '{}': expected [N, ...]", name_));
  }
  QAct out;
  out.q = in.q;
  if (!in.quantized() || x.dim() != 4 || x.size(3) == 1 || (x.size(1) == 1 && x.size(2) == 1)) {
    out.data = x.contiguous().reshape({x.size(0), -1});  // NCHW fp32, or no reordering needed
    return out;
  }
  const Tensor xc = x.contiguous();
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3), HW = H * W;
  out.data = empty(Shape{N, C * HW}, {.dtype = DType::uint8});
  const uint8_t* src = xc.data<uint8_t>();
  uint8_t* dst = out.data.data<uint8_t>();
  host_parallel_for(N, xc.numel(), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const uint8_t* s = src + n * HW * C;
      uint8_t* d = dst + n * HW * C;
      for (int64_t p = 0; p < HW; ++p) {
        for (int64_t c = 0; c < C; ++c) d[c * HW + p] = s[p * C + c];
      }
    }
  });
  return out;
}

// ---- convert

namespace {

using detail::as;

[[noreturn]] void unsupported(const std::string& name, const std::string& kind, const char* why) {
  throw std::invalid_argument(
      fmt::format("mixp::quant::convert_to_int8: module '{}' ({}) {}", name, kind, why));
}

QParams activation_qparams(const FakeQuantize& fq, const std::string& where) {
  const QParams q = fq.qparams()[0];
  if (q.qmin != 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::convert_to_int8: the activations at '{}' are quantized as qint8; int8 "
        "inference takes quint8 (u8) activations: use a quint8 activation observer",
        where));
  }
  return q;
}

// Weight codes with the weight fake quant's parameters (the codes QAT trained with).
Int8WeightLayerParams weight_params(const std::string& name, const Tensor& weight,
                                    const Tensor& bias, const FakeQuantize& wfq) {
  Int8WeightLayerParams p;
  p.name = name;
  const int64_t O = weight.size(0);
  std::vector<QParams> q = wfq.qparams();
  if (q.size() == 1) q.assign(static_cast<size_t>(O), q[0]);
  for (const QParams& c : q) {
    if (c.zero_point != 0 || c.qmin >= 0) {
      throw std::invalid_argument(fmt::format(
          "mixp::quant::convert_to_int8: the weight of '{}' is not symmetric qint8 (zero point "
          "{}); int8 inference needs symmetric qint8 weights",
          name, c.zero_point));
    }
  }
  // The int8 model lives on the cpu: its codes are made from a host copy of the trained weights.
  const Tensor w = detail::as_fp32_contiguous(weight.to(Device::cpu()));
  p.weight = empty(weight.shape(), {.dtype = DType::int8});
  const std::vector<int64_t> shape(weight.shape().begin(), weight.shape().end());
  quantize_int8_per_channel(std::span<uint8_t>(reinterpret_cast<uint8_t*>(p.weight.data<int8_t>()),
                                               static_cast<size_t>(w.numel())),
                            std::span<const float>(w.data<float>(), static_cast<size_t>(w.numel())),
                            shape, 0, q, Round::nearest_even, 0);
  for (const QParams& c : q) p.weight_scale.push_back(c.scale);
  if (bias.defined()) {
    const Tensor b = detail::as_fp32_contiguous(bias.to(Device::cpu()));
    p.bias.assign(b.data<float>(), b.data<float>() + O);
  } else {
    p.bias.assign(static_cast<size_t>(O), 0.0f);
  }
  return p;
}

}  // namespace

std::shared_ptr<Int8Model> convert_to_int8(const nn::Module& prepared) {
  const auto* seq = dynamic_cast<const nn::Sequential*>(&prepared);
  if (seq == nullptr || !is_prepared(prepared)) {
    throw std::invalid_argument(
        "mixp::quant::convert_to_int8: the model is not prepared for quantization; run "
        "quant::prepare_qat (QAT) or quant::prepare_ptq and calibrate it first");
  }
  std::string missing;
  if (!observers_calibrated(prepared, &missing)) {
    throw std::invalid_argument(fmt::format(
        "convert needs calibrated observers: run training or `mixp quantize --calibrate N` first "
        "(the observer '{}' has seen no data)",
        missing));
  }
  const DefaultDeviceGuard host(Device::cpu());  // the int8 model's tensors live on the cpu
  auto model = std::make_shared<Int8Model>();
  const auto children = seq->named_children();
  bool quantized = false;  // whether the running activation is u8 codes
  QParams cur;
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& [name, m] = children[i];
    const auto* lin = as<QatLinear>(m);
    const auto* conv = as<QatConv2d>(m);
    if (lin || conv) {
      const QatModule* head = lin ? static_cast<const QatModule*>(lin) : conv;
      if (head->input_fake_quant()) {
        cur = activation_qparams(*head->input_fake_quant(), name + ".input_fake_quant");
        model->add_layer(std::make_unique<Int8Quantize>(name + ".input", cur));
        quantized = true;
      }
      if (!quantized)
        unsupported(name, m->kind(), "receives fp32 activations (no fake quant before it)");
      Int8WeightLayerParams p =
          lin ? weight_params(name, lin->weight(), lin->bias(), lin->weight_fake_quant())
              : weight_params(name, conv->weight(), conv->bias(), conv->weight_fake_quant());
      p.input = cur;
      p.relu = lin && lin->activation() == Activation::relu;
      if (lin && lin->activation() == Activation::gelu) unsupported(name, m->kind(), "fuses GELU");
      const QatModule* owner = head;
      if (conv) {
        p.conv = conv->params();
        if (i + 1 < children.size()) {
          if (const auto* bn = as<QatBatchNorm2d>(children[i + 1].second)) {
            const FoldedConv f =
                fold_conv_bn(conv->weight(), conv->bias(), bn->running_mean(), bn->running_var(),
                             bn->weight(), bn->bias(), bn->options().eps);
            const std::vector<double> g = f.factor.to_double_vector();
            const std::vector<double> fb = f.bias.to_double_vector();
            for (size_t o = 0; o < g.size(); ++o) {
              p.weight_scale[o] = static_cast<float>(static_cast<double>(p.weight_scale[o]) * g[o]);
              p.bias[o] = static_cast<float>(fb[o]);
            }
            owner = bn;
            ++i;
          }
        }
      }
      if (i + 1 < children.size() && as<QatReLU>(children[i + 1].second)) {
        if (p.relu)
          unsupported(children[i + 1].first, "relu", "follows a Linear that fuses ReLU already");
        p.relu = true;
        owner = as<QatReLU>(children[i + 1].second);
        ++i;
      }
      if (owner->output_fake_quant()) {
        p.output = activation_qparams(*owner->output_fake_quant(), name + " output");
      }
      const bool out_q = p.output.has_value();
      if (out_q) cur = *p.output;
      if (conv) {
        model->add_layer(std::make_unique<Int8Conv2d>(std::move(p)));
      } else {
        model->add_layer(std::make_unique<Int8Linear>(std::move(p)));
      }
      quantized = out_q;
    } else if (const auto* pool = as<nn::MaxPool2d>(m)) {
      if (!quantized) unsupported(name, m->kind(), "runs on fp32 activations");
      model->add_layer(
          std::make_unique<Int8MaxPool2d>(name, pool->kernel(), pool->stride(), pool->padding()));
    } else if (const auto* fl = as<nn::Flatten>(m)) {
      if (fl->start_dim() != 1 || (fl->end_dim() != -1 && fl->end_dim() != 3)) {
        unsupported(name, m->kind(), "flattens other dimensions than 1..-1");
      }
      model->add_layer(std::make_unique<Int8Flatten>(name));
    } else if (as<nn::Dropout>(m)) {
      continue;  // identity at inference
    } else {
      unsupported(name, m->kind(),
                  "has no int8 version (supported: Linear, Conv2d+BatchNorm2d+ReLU, "
                  "MaxPool2d, Flatten, Dropout as prepared by prepare_qat)");
    }
  }
  return model;
}

}  // namespace mixp::quant
