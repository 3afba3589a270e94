#include "mixp/nn/lstm.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/nn/init.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

LSTM::LSTM(int64_t input_size, int64_t hidden_size, Generator& gen, const LstmOptions& opt)
    : Module("lstm"), input_(input_size), hidden_(hidden_size), opt_(opt) {
  if (input_ <= 0 || hidden_ <= 0 || opt.num_layers <= 0) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::LSTM: sizes must be positive, got input={} hidden={} layers={}",
                    input_, hidden_, opt.num_layers));
  }
  const int64_t H = hidden_;
  for (int64_t l = 0; l < opt.num_layers; ++l) {
    const int64_t in = l == 0 ? input_ : H;
    Layer L;
    L.w_ih = &register_parameter(fmt::format("weight_ih_l{}", l),
                                 init::fan_in_uniform({4 * H, in}, H, gen));
    L.w_hh = &register_parameter(fmt::format("weight_hh_l{}", l),
                                 init::fan_in_uniform({4 * H, H}, H, gen));
    if (opt.bias) {
      L.b_ih =
          &register_parameter(fmt::format("bias_ih_l{}", l), init::fan_in_uniform({4 * H}, H, gen));
      L.b_hh =
          &register_parameter(fmt::format("bias_hh_l{}", l), init::fan_in_uniform({4 * H}, H, gen));
    } else {
      L.b_ih = L.b_hh = &none_;
    }
    layers_.push_back(L);
  }
}

Tensor LSTM::forward(const Tensor& x) {
  return forward_with_state(x).output;
}

LstmOutput LSTM::forward_with_state(const Tensor& x, const Tensor& h0, const Tensor& c0) {
  if (x.dim() != 3 || x.size(2) != input_) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::LSTM(input {}): input must be [{}, {}], got {}", input_,
        opt_.batch_first ? "N, T" : "T, N", input_, x.defined() ? x.shape().str() : "(undefined)"));
  }
  const int time_dim = opt_.batch_first ? 1 : 0;
  const int64_t T = x.size(time_dim), N = x.size(1 - time_dim),
                L = static_cast<int64_t>(layers_.size());
  if (T == 0) throw std::invalid_argument("mixp::nn::LSTM: the input sequence is empty (T = 0)");
  const Shape state_shape{L, N, hidden_};
  for (const Tensor* s : {&h0, &c0}) {
    if (s->defined() && !(s->shape() == state_shape)) {
      throw std::invalid_argument(fmt::format("mixp::nn::LSTM: initial state must be {}, got {}",
                                              state_shape.str(), s->shape().str()));
    }
  }
  const TensorOptions zopt{.dtype = x.dtype() == DType::fp64 ? DType::fp64 : DType::fp32};
  std::vector<Tensor> seq;
  seq.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) seq.push_back(x.select(time_dim, t));
  std::vector<Tensor> h_last, c_last;
  for (int64_t l = 0; l < L; ++l) {
    const Layer& ly = layers_[static_cast<size_t>(l)];
    Tensor h = h0.defined() ? h0.select(0, l) : zeros({N, hidden_}, zopt);
    Tensor c = c0.defined() ? c0.select(0, l) : zeros({N, hidden_}, zopt);
    for (int64_t t = 0; t < T; ++t) {
      std::tie(h, c) =
          lstm_cell(seq[static_cast<size_t>(t)], h, c, *ly.w_ih, *ly.w_hh, *ly.b_ih, *ly.b_hh);
      seq[static_cast<size_t>(t)] = h;  // the next layer's input
    }
    h_last.push_back(h);
    c_last.push_back(c);
  }
  LstmOutput out;
  out.output = stack(std::span<const Tensor>(seq), time_dim);
  out.h = stack(std::span<const Tensor>(h_last), 0);
  out.c = stack(std::span<const Tensor>(c_last), 0);
  return out;
}

std::string LSTM::describe() const {
  return fmt::format("input={}, hidden={}, layers={}{}", input_, hidden_, opt_.num_layers,
                     opt_.batch_first ? ", batch_first" : "");
}

}  // namespace mixp::nn
