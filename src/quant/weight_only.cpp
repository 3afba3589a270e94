// Weight-only int4/NF4 Linear; see include/mixp/quant/weight_only.h.
#include "mixp/quant/weight_only.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "mixp/backend/gemm.h"
#include "mixp/backend/host_parallel.h"
#include "mixp/backend/quant_kernels.h"
#include "mixp/format/block_int8.h"
#include "mixp/io/quantized_safetensors.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "quant/quant_util.h"

namespace mixp::quant {

Block4 parse_block4(const std::string& name) {
  if (name == "nf4") return Block4::nf4;
  if (name == "int4") return Block4::int4;
  throw std::invalid_argument("unknown 4-bit weight format '" + name + "'; use nf4 or int4");
}

namespace {
void check_options(const WeightOnlyOptions& o) {
  if (o.compute != DType::bf16 && o.compute != DType::fp32) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::WeightOnlyLinear: compute dtype must be bf16 or fp32, got {}",
                    name(o.compute)));
  }
  if (o.block_size <= 0 || o.block_size % 2 != 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::WeightOnlyLinear: block size must be a positive even number, got {}",
        o.block_size));
  }
}
}  // namespace

WeightOnlyLinear::WeightOnlyLinear(const nn::Linear& src, const WeightOnlyOptions& opt)
    : nn::Module(src.kind()),
      in_(src.in_features()),
      out_(src.out_features()),
      act_(src.activation()),
      opt_(opt) {
  check_options(opt_);
  const Tensor w = detail::as_fp32_contiguous(src.weight());
  const int64_t n = w.numel();
  data_.resize(static_cast<size_t>(block4_data_bytes(n)));
  scales_.resize(static_cast<size_t>(block4_num_blocks(n, opt_.block_size)));
  block4_quantize(data_, scales_, std::span<const float>(w.data<float>(), static_cast<size_t>(n)),
                  opt_.kind, opt_.block_size, Round::nearest_even, 0);
  if (opt_.double_quant) double_quantize();
  if (src.bias().defined()) {
    bias_ = &register_buffer("bias", detail::as_fp32_contiguous(src.bias()).clone());
  } else {
    bias_ = &no_bias_;
  }
}

WeightOnlyLinear::WeightOnlyLinear(int64_t in_features, int64_t out_features,
                                   std::vector<uint8_t> data, std::vector<float> scales,
                                   Tensor bias, Activation act, const WeightOnlyOptions& opt)
    : nn::Module("linear"),
      in_(in_features),
      out_(out_features),
      act_(act),
      opt_(opt),
      data_(std::move(data)),
      scales_(std::move(scales)) {
  check_options(opt_);
  const int64_t n = in_ * out_;
  if (static_cast<int64_t>(data_.size()) != block4_data_bytes(n) ||
      static_cast<int64_t>(scales_.size()) != block4_num_blocks(n, opt_.block_size)) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::WeightOnlyLinear: a [{}, {}] weight in blocks of {} needs {} code bytes and "
        "{} scales, got {} and {}",
        out_, in_, opt_.block_size, block4_data_bytes(n), block4_num_blocks(n, opt_.block_size),
        data_.size(), scales_.size()));
  }
  if (opt_.double_quant) double_quantize();
  bias_ = bias.defined() ? &register_buffer("bias", detail::as_fp32_contiguous(bias).clone())
                         : &no_bias_;
}

DoubleQuantized double_quantize_scales(std::span<float> scales) {
  DoubleQuantized d;
  const size_t n = scales.size();
  double sum = 0;
  for (float s : scales) sum += s;
  d.mean = n ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
  d.codes.resize(n);
  const QParams unit{1.0f, 0, -127, 127};
  for (size_t b = 0; b < n; b += kDoubleQuantBlock) {
    const size_t e = std::min(n, b + kDoubleQuantBlock);
    float amax = 0.0f;
    for (size_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(scales[i] - d.mean));
    const float s2 = amax > 0.0f ? amax / 127.0f : 1.0f;
    d.dq_scales.push_back(s2);
    for (size_t i = b; i < e; ++i) {
      QParams p = unit;
      p.scale = s2;
      const int32_t q = quantize_int8_value(scales[i] - d.mean, p, Round::nearest_even, 0);
      d.codes[i] = static_cast<int8_t>(q);
      scales[i] = d.mean + static_cast<float>(q) * s2;  // what the GEMM will use
    }
  }
  return d;
}

void decode_double_quantized(std::span<float> out, std::span<const int8_t> codes,
                             std::span<const float> dq_scales, float mean) {
  if (codes.size() != out.size() ||
      dq_scales.size() != (codes.size() + kDoubleQuantBlock - 1) / kDoubleQuantBlock) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::decode_double_quantized: {} codes need {} second-level scales, got {}",
        codes.size(), (codes.size() + kDoubleQuantBlock - 1) / kDoubleQuantBlock,
        dq_scales.size()));
  }
  for (size_t i = 0; i < codes.size(); ++i)
    out[i] = mean + static_cast<float>(codes[i]) * dq_scales[i / kDoubleQuantBlock];
}

void WeightOnlyLinear::double_quantize() {
  DoubleQuantized d = double_quantize_scales(scales_);
  dq_mean_ = d.mean;
  dq_codes_ = std::move(d.codes);
  dq_scales_ = std::move(d.dq_scales);
}

Tensor WeightOnlyLinear::dequantized_weight() const {
  Tensor w = empty(Shape{out_, in_}, {.dtype = DType::fp32});
  float lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = block4_code_value(opt_.kind, c);
  const qk::Kernels& k = qk::kernels();
  const int64_t n = w.numel(), block = opt_.block_size;
  float* y = w.data<float>();
  const bool high = opt_.kind == Block4::nf4;
  // Chunks aligned to blocks so that every thread starts on an even index.
  const int64_t blocks = (n + block - 1) / block;
  host_parallel_for(blocks, n, [&](int64_t b0, int64_t b1) {
    const int64_t lo = b0 * block, hi = std::min(n, b1 * block);
    k.dequant4(y + lo, data_.data(), scales_.data(), lo, hi, block, lut, high);
  });
  if (opt_.compute == DType::bf16) return w.to(DType::bf16, Round::nearest_even);
  return w;
}

Tensor WeightOnlyLinear::forward(const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != in_) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::WeightOnlyLinear({} -> {}): input must be [..., {}], got {}", in_,
                    out_, in_, x.defined() ? x.shape().str() : "(undefined)"));
  }
  const Tensor w = dequantized_weight();
  if (opt_.compute == DType::fp32) return linear(x, w, *bias_, act_);
  // bf16 x bf16 -> fp32 on oneDNN; W^T is a column-major view (no copy).
  const Tensor x2 = x.reshape({-1, in_}).to(DType::bf16, Round::nearest_even);
  Tensor y = gemm(x2, w.t());
  if (bias_->defined()) y = add(y, *bias_);
  if (act_ == Activation::relu) y = relu(y);
  if (act_ == Activation::gelu) y = gelu(y, GeluApprox::tanh);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = out_;
  return y.reshape(out_shape);
}

int64_t WeightOnlyLinear::weight_bytes() const {
  const int64_t codes = static_cast<int64_t>(data_.size());
  if (opt_.double_quant) {
    return codes + static_cast<int64_t>(dq_codes_.size()) +
           4 * static_cast<int64_t>(dq_scales_.size()) + 4;
  }
  return codes + 4 * static_cast<int64_t>(scales_.size());
}

std::string WeightOnlyLinear::describe() const {
  return fmt::format("in={}, out={}, {} weights (block {}{}), {} compute", in_, out_,
                     opt_.kind == Block4::nf4 ? "nf4" : "int4", opt_.block_size,
                     opt_.double_quant ? ", double quantization" : "", name(opt_.compute));
}

int quantize_weights_4bit(nn::Module& model, const WeightOnlyOptions& opt) {
  int count = 0;
  // Containers first: replacing children frees the old Linear modules.
  std::vector<nn::Sequential*> seqs;
  for (auto& [name, m] : model.named_modules()) {
    if (auto* seq = dynamic_cast<nn::Sequential*>(m)) seqs.push_back(seq);
  }
  for (nn::Sequential* seq : seqs) {
    for (const auto& [child, c] : seq->named_children()) {
      if (const auto* lin = dynamic_cast<const nn::Linear*>(c.get())) {
        seq->replace(child, std::make_shared<WeightOnlyLinear>(*lin, opt));
        ++count;
      }
    }
  }
  if (count == 0) {
    throw std::invalid_argument(
        "mixp::quant::quantize_weights_4bit: the model has no Linear layer inside a Sequential "
        "(weight-only 4-bit supports the mlp and cnn models)");
  }
  return count;
}

int load_weights_4bit(nn::Module& model, const SafeTensorsFile& file, DType compute,
                      std::string* scheme) {
  std::vector<std::pair<std::string, nn::Sequential*>> seqs;
  for (auto& [name, m] : model.named_modules()) {
    if (auto* seq = dynamic_cast<nn::Sequential*>(m)) seqs.emplace_back(name, seq);
  }
  int count = 0;
  for (auto& [prefix, seq] : seqs) {
    for (const auto& [child, c] : seq->named_children()) {
      const auto* lin = dynamic_cast<const nn::Linear*>(c.get());
      const std::string wname = (prefix.empty() ? "" : prefix + ".") + child + ".weight";
      if (!lin || !is_block_tensor(file, wname)) continue;
      const BlockTensor t = get_block_tensor(file, wname);
      if (t.scheme != "nf4" && t.scheme != "int4") continue;  // other schemes: decoded to fp32
      if (t.shape != std::vector<int64_t>{lin->out_features(), lin->in_features()}) {
        throw std::invalid_argument(
            fmt::format("{} is stored with shape [{}] but the layer's weight is [{}, {}]", wname,
                        fmt::join(t.shape, ", "), lin->out_features(), lin->in_features()));
      }
      std::vector<float> scales(t.scales.size() / 4);
      std::memcpy(scales.data(), t.scales.data(), scales.size() * 4);  // little-endian fp32
      WeightOnlyOptions o;
      o.kind = parse_block4(t.scheme);
      o.block_size = t.block_size;
      o.compute = compute;
      seq->replace(child, std::make_shared<WeightOnlyLinear>(
                              lin->in_features(), lin->out_features(), t.data, std::move(scales),
                              lin->bias(), lin->activation(), o));
      if (scheme) *scheme = t.scheme;
      ++count;
    }
  }
  return count;
}

}  // namespace mixp::quant
