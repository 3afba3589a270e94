// The GPT feed-forward block: fc (C -> mlp_width), GELU (tanh approximation), proj
// (mlp_width -> C, a residual projection). kind "mlp". GELU is fused into fc's GEMM in eval
// mode (see Linear).
#pragma once
#include "mixp/nn/linear.h"
#include "mixp/nn/module.h"

namespace mixp::nn {

struct GptMlpOptions {
  bool bias = true;
  double init_std = 0.0;       // fc weight std; 0 = PyTorch default init
  double proj_init_std = 0.0;  // proj weight std; 0 = PyTorch default init
};

class GptMlp : public Module {
 public:
  GptMlp(int64_t width, int64_t mlp_width, Generator& gen, const GptMlpOptions& opt = {});
  Tensor forward(const Tensor& x) override;

  Linear& fc() { return *fc_; }
  Linear& proj() { return *proj_; }

 private:
  std::shared_ptr<Linear> fc_, proj_;
};

}  // namespace mixp::nn
