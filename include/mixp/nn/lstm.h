// LSTM (torch.nn.LSTM), unrolled over time with the lstm_cell op (gate order i, f, g, o):
//   x [T, N, I] (or [N, T, I] with batch_first) -> output [T, N, H] (or [N, T, H]).
// Per layer l: weight_ih_l{l} [4H, I_l], weight_hh_l{l} [4H, H], bias_ih_l{l}, bias_hh_l{l} [4H],
// PyTorch's names and init: every tensor ~ U(-1/sqrt(H), 1/sqrt(H)), drawn in that order.
// The initial state is zero unless given; forward_with_state returns the final (h, c) as well.
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

struct LstmOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
};

struct LstmOutput {
  Tensor output;  // [T, N, H] (batch_first: [N, T, H]), the last layer's h at every step
  Tensor h;       // [num_layers, N, H] at the last step
  Tensor c;       // [num_layers, N, H]
};

class LSTM : public Module {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, Generator& gen, const LstmOptions& opt = {});
  Tensor forward(const Tensor& x) override;
  // h0/c0 [num_layers, N, H], or undefined for zeros.
  LstmOutput forward_with_state(const Tensor& x, const Tensor& h0 = Tensor(),
                                const Tensor& c0 = Tensor());

  int64_t hidden_size() const { return hidden_; }

 protected:
  std::string describe() const override;

 private:
  int64_t input_, hidden_;
  LstmOptions opt_;
  struct Layer {
    Tensor *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
  };
  std::vector<Layer> layers_;
  Tensor none_;
};

}  // namespace mixp::nn
