// QLoRA's frozen 4-bit Linear; see include/mixp/quant/qlora.h.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "mixp/backend/backend.h"
#include "mixp/backend/gemm.h"
#include "mixp/backend/host_parallel.h"
#include "mixp/backend/quant_kernels.h"
#include "mixp/format/convert.h"
#include "mixp/quant/qlora.h"
#include "mixp/quant/weight_only.h"
#include "mixp/tensor/factories.h"
#include "ops/dispatch.h"
#include "quant/quant_util.h"

namespace mixp::quant {

namespace {

constexpr int kBlock = kInt4DefaultBlock;  // 64, as bitsandbytes' default blocksize

Tensor on_host(const Tensor& t) {
  return t.device().kind == DeviceKind::cpu ? t : t.to(Device::cpu());
}

// The state of one 4-bit layer: handles on the module's tensors (a load_state_dict into the
// module, e.g. a resume, is seen here) and the code book.
struct Frozen4bit {
  Block4 kind;
  int64_t out, in;
  Tensor codes, absmax, nested, offset, bias;

  // W [out, in] in bf16 or fp32, decoded block by block (the fp32 values of a chunk of blocks
  // live only in a small buffer when the target is bf16).
  Tensor weight(DType dt, Device device) const {
    const int64_t n = out * in;
    const Tensor c = on_host(codes), a = on_host(absmax), ns = on_host(nested),
                 off = on_host(offset);
    std::vector<float> scales(static_cast<size_t>(a.numel()));
    decode_double_quantized(
        scales, std::span<const int8_t>(a.data<int8_t>(), static_cast<size_t>(a.numel())),
        std::span<const float>(ns.data<float>(), static_cast<size_t>(ns.numel())),
        off.data<float>()[0]);
    std::array<float, 16> lut;
    for (uint32_t k = 0; k < 16; ++k) lut[k] = block4_code_value(kind, k);
    const bool high = kind == Block4::nf4;
    const qk::Kernels& k = qk::kernels();
    Tensor w = empty(Shape{out, in}, {.dtype = dt, .device = Device::cpu()});
    const uint8_t* data = c.data<uint8_t>();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    if (dt == DType::fp32) {
      float* y = w.data<float>();
      host_parallel_for(blocks, n, [&](int64_t b0, int64_t b1) {
        const int64_t lo = b0 * kBlock, hi = std::min(n, b1 * kBlock);
        k.dequant4(y + lo, data, scales.data(), lo, hi, kBlock, lut.data(), high);
      });
    } else {
      auto* y = static_cast<uint16_t*>(w.data_ptr());
      constexpr int64_t kChunk = 64 * kBlock;
      host_parallel_for(blocks, n, [&](int64_t b0, int64_t b1) {
        std::array<float, kChunk> buf;
        for (int64_t lo = b0 * kBlock, end = std::min(n, b1 * kBlock); lo < end; lo += kChunk) {
          const int64_t hi = std::min(end, lo + kChunk);
          k.dequant4(buf.data(), data, scales.data(), lo, hi, kBlock, lut.data(), high);
          convert_f32_to(DType::bf16, std::span<const float>(buf.data(), size_t(hi - lo)), y + lo,
                         {.round = Round::nearest_even, .overflow = Overflow::ieee});
        }
      });
    }
    w.bump_version();
    return device.kind == DeviceKind::cpu ? w : w.to(device);
  }

  Tensor operator()(nn::Linear& self, const Tensor& x) const;
};

Tensor Frozen4bit::operator()(nn::Linear& self, const Tensor& x) const {
  const Activation act = self.activation();
  const int64_t K = in, N = out;
  const bool rec = mixp::detail::should_record({&x});
  Tensor y;
  {
    NoGradGuard ng;
    const Tensor x2 = mixp::detail::raw_reshape(mixp::detail::raw_contiguous(x.detach()),
                                                Shape{x.numel() / K, K});
    const Tensor xb = x2.dtype() == DType::bf16 ? x2 : x2.to(DType::bf16, Round::nearest_even);
    const Tensor w = weight(DType::bf16, x.device());
    y = gemm(xb, w.t());  // [M, N] fp32
    const Tensor bf =
        bias.defined() ? mixp::detail::as_compute(bias.detach(), DType::fp32) : Tensor();
    if (bf.defined()) backend_for(y, bf).scale_bias_act(y, y, bf, 1.0f, Activation::none);
    if (x.dtype() != DType::fp32) y = y.to(x.dtype(), Round::nearest_even);
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = N;
  Tensor out = mixp::detail::raw_reshape(y, out_shape);
  if (rec) {
    const Shape x_shape = x.shape();
    const Frozen4bit me = *this;  // handles: the codes, not a copy of them
    mixp::detail::record(
        OpId::linear, DType::fp32, {&x}, {&out}, [me, x_shape, N](BackwardContext& ctx) {
          if (!ctx.needs(0)) return;
          // dx [M, K] = bf16(g) [M, N] @ W [N, K], W dequantized again.
          const Tensor g = mixp::detail::raw_reshape(mixp::detail::raw_contiguous(ctx.grad()),
                                                     Shape{ctx.grad().numel() / N, N});
          const Tensor gb = g.dtype() == DType::bf16 ? g : g.to(DType::bf16, Round::nearest_even);
          ctx.grad_inputs[0] =
              mixp::detail::raw_reshape(gemm(gb, me.weight(DType::bf16, g.device())), x_shape);
        });
  }
  if (act == Activation::relu) return relu(out);
  if (act == Activation::gelu) return gelu(out, GeluApprox::tanh);
  return out;
}

const Frozen4bit* state_of(const nn::Linear& layer) {
  return layer.forward_impl().target<Frozen4bit>();
}

bool is_adapter(const std::string& name) {
  const size_t dot = name.rfind('.');
  const std::string last = dot == std::string::npos ? name : name.substr(dot + 1);
  return last == "lora_A" || last == "lora_B";
}

}  // namespace

bool is_4bit_linear(const nn::Linear& layer) {
  return state_of(layer) != nullptr;
}

void quantize_linear_4bit(nn::Linear& layer, Block4 kind) {
  if (is_4bit_linear(layer))
    throw std::invalid_argument("mixp::quant::quantize_linear_4bit: the layer is 4-bit already");
  const Tensor& wref = layer.weight();
  if (!wref.is_floating_point())
    throw std::invalid_argument(
        fmt::format("mixp::quant::quantize_linear_4bit: the weight is {}, not a floating tensor",
                    name(wref.dtype())));
  const int64_t out = layer.out_features(), in = layer.in_features(), n = out * in;
  const int64_t blocks = block4_num_blocks(n, kBlock);
  Tensor codes = zeros(Shape{block4_data_bytes(n), 1}, {.dtype = DType::uint8});
  std::vector<float> scales(static_cast<size_t>(blocks));
  {
    const Tensor w = detail::as_fp32_contiguous(on_host(wref));
    // block4_quantize throws std::invalid_argument on NaN/inf.
    block4_quantize(std::span<uint8_t>(codes.data<uint8_t>(), size_t(codes.numel())), scales,
                    std::span<const float>(w.data<float>(), static_cast<size_t>(n)), kind, kBlock,
                    Round::nearest_even, 0);
  }
  const DoubleQuantized dq = double_quantize_scales(scales);
  Tensor absmax = empty(Shape{blocks}, {.dtype = DType::int8});
  std::copy(dq.codes.begin(), dq.codes.end(), absmax.data<int8_t>());
  Tensor nested = empty(Shape{int64_t(dq.dq_scales.size())}, {.dtype = DType::fp32});
  std::copy(dq.dq_scales.begin(), dq.dq_scales.end(), nested.data<float>());
  Tensor offset = full(Shape{1}, dq.mean);
  codes.bump_version();
  absmax.bump_version();
  nested.bump_version();
  // Swap the weight's storage under the same TensorImpl (as nn::convert_tensor_in_place): the
  // module's parameter becomes the packed codes and the fp32 values are released.
  const Device dev = wref.device();
  if (dev.kind != DeviceKind::cpu) codes = codes.to(dev);
  TensorImpl* impl = wref.impl();
  impl->storage = codes.impl()->storage;
  impl->offset = 0;
  impl->shape = codes.shape();
  impl->strides = codes.strides();
  impl->dtype = DType::uint8;
  impl->requires_grad = false;
  impl->grad.reset();  // (amp's weight shadow of the fp32 values is stale now: keyed by storage)
  Frozen4bit st{kind, out, in, wref, Tensor(), Tensor(), Tensor(), layer.bias()};
  st.absmax =
      layer.register_buffer("weight_absmax", dev.kind == DeviceKind::cpu ? absmax : absmax.to(dev));
  st.nested = layer.register_buffer("weight_nested_absmax",
                                    dev.kind == DeviceKind::cpu ? nested : nested.to(dev));
  st.offset =
      layer.register_buffer("weight_offset", dev.kind == DeviceKind::cpu ? offset : offset.to(dev));
  if (st.bias.defined()) st.bias.requires_grad_(false);
  layer.set_forward_impl(st);
}

std::vector<std::string> quantize_frozen_base(nn::Module& model, Block4 kind) {
  std::vector<std::pair<std::string, nn::Linear*>> todo;
  for (auto& [name, m] : model.named_modules()) {
    auto* lin = dynamic_cast<nn::Linear*>(m);
    if (lin && lin->kind() != "head" && !is_adapter(name) && !is_4bit_linear(*lin))
      todo.emplace_back(name, lin);
  }
  if (todo.empty())
    throw std::invalid_argument(
        "mixp::quant::quantize_frozen_base: the model has no Linear layer to quantize besides "
        "its head");
  std::vector<std::string> names;
  for (auto& [name, lin] : todo) {
    quantize_linear_4bit(*lin, kind);
    names.push_back(name);
  }
  return names;
}

Tensor dequantized_4bit_weight(const nn::Linear& layer, DType dtype) {
  const Frozen4bit* st = state_of(layer);
  if (!st)
    throw std::invalid_argument("mixp::quant::dequantized_4bit_weight: the layer is not 4-bit");
  if (dtype != DType::bf16 && dtype != DType::fp32)
    throw std::invalid_argument("mixp::quant::dequantized_4bit_weight: dtype must be bf16 or fp32");
  return st->weight(dtype, Device::cpu());
}

int64_t parameter_values(const nn::Module& model) {
  int64_t n = model.num_parameters();
  for (const auto& [name, m] : model.named_modules()) {
    const auto* lin = dynamic_cast<const nn::Linear*>(m);
    if (lin && is_4bit_linear(*lin))
      n += lin->out_features() * lin->in_features() - lin->weight().numel();
  }
  return n;
}

int64_t weight_4bit_bytes(const nn::Linear& layer) {
  const Frozen4bit* st = state_of(layer);
  if (!st) return 0;
  return int64_t(st->codes.nbytes() + st->absmax.nbytes() + st->nested.nbytes() +
                 st->offset.nbytes());
}

}  // namespace mixp::quant
