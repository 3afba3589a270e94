// The GEMMs of a training step, found from the model's layer shapes, and their price in counted
// operations (step_counts.h).
#include "mixp/study/step_counts.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/conv2d.h"
#include "mixp/nn/gpt.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/models.h"
#include "mixp/nn/sequential.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/recipe.h"

namespace mixp::study {

namespace {

int64_t trained_values(const nn::Module& model) {
  int64_t n = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.requires_grad()) n += p.numel();
  }
  return n;
}

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Runs the children of a Sequential one by one on `x`, recording the GEMM of each Linear and
// Conv2d from the shapes it actually sees. `batch` scales the one-sample trace to the real batch
// (every GEMM's M is proportional to the batch on these layers).
Tensor trace_sequential(nn::Sequential& seq, const std::string& prefix, Tensor x, int64_t batch,
                        StepTrace& out) {
  const auto children = seq.named_children();
  for (size_t i = 0; i < seq.size(); ++i) {
    nn::Module& child = seq[i];
    const std::string name = join_name(prefix, children.at(i).first);
    if (auto* lin = dynamic_cast<nn::Linear*>(&child)) {
      const int64_t rows = x.numel() / lin->in_features();
      out.gemms.push_back({.layer = name,
                           .m = rows * batch,
                           .n = lin->out_features(),
                           .k = lin->in_features(),
                           .a_grad = x.requires_grad(),
                           .b_grad = lin->weight().requires_grad()});
      out.weight_values += lin->weight().numel();
      x = child.forward(x);
    } else if (auto* conv = dynamic_cast<nn::Conv2d*>(&child)) {
      Tensor y = child.forward(x);
      const int64_t positions = y.numel() / y.size(1);  // out_h * out_w of the one sample
      out.gemms.push_back({.layer = name,
                           .m = positions * batch,
                           .n = conv->out_channels(),
                           .k = conv->weight().numel() / conv->out_channels(),
                           .a_grad = x.requires_grad(),
                           .b_grad = conv->weight().requires_grad()});
      out.weight_values += conv->weight().numel();
      x = y;
    } else if (auto* sub = dynamic_cast<nn::Sequential*>(&child)) {
      x = trace_sequential(*sub, name, x, batch, out);
    } else {
      // A leaf without GEMMs (activation, norm, pooling, flatten) or a composite whose inner
      // shapes are not visible from here.
      for (const auto& [inner, m] : child.named_modules()) {
        if (!inner.empty() &&
            (dynamic_cast<const nn::Linear*>(m) || dynamic_cast<const nn::Conv2d*>(m))) {
          out.not_counted.push_back(name);
          break;
        }
      }
      x = child.forward(x);
    }
  }
  return x;
}

// The GPT of nn/gpt.h from its configuration: per block qkv, attention scores and values per
// head, proj, mlp.fc, mlp.proj; then the head. Embedding lookups are not GEMMs.
void trace_gpt(const nn::Gpt& gpt, int64_t batch, StepTrace& out) {
  const nn::GptConfig& c = gpt.config();
  const int64_t rows = batch * c.context, T = c.context, D = c.width / c.heads;
  const int re = c.checkpointing ? 1 : 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = fmt::format("blocks.{}", l);
    out.gemms.push_back(
        {.layer = b + ".attn.qkv", .m = rows, .n = 3 * c.width, .k = c.width, .recompute = re});
    out.gemms.push_back({.layer = b + ".attn (scores)",
                         .m = T,
                         .n = T,
                         .k = D,
                         .count = batch * c.heads,
                         .recompute = re});
    out.gemms.push_back({.layer = b + ".attn (values)",
                         .m = T,
                         .n = D,
                         .k = T,
                         .count = batch * c.heads,
                         .recompute = re});
    out.gemms.push_back(
        {.layer = b + ".attn.proj", .m = rows, .n = c.width, .k = c.width, .recompute = re});
    out.gemms.push_back(
        {.layer = b + ".mlp.fc", .m = rows, .n = c.mlp_width, .k = c.width, .recompute = re});
    out.gemms.push_back(
        {.layer = b + ".mlp.proj", .m = rows, .n = c.width, .k = c.mlp_width, .recompute = re});
    out.weight_values += 4 * c.width * c.width + 2 * c.width * c.mlp_width;
  }
  out.gemms.push_back({.layer = "head", .m = rows, .n = c.vocab, .k = c.width});
  out.weight_values += c.vocab * c.width;
}

double bytes_per_value(DType d) {
  return double(traits(d).bits) / 8.0;
}

}  // namespace

StepTrace trace_step_gemms(nn::Module& model, const Shape& sample_shape, int64_t batch) {
  if (batch <= 0) {
    throw std::invalid_argument(
        fmt::format("trace_step_gemms: the batch must be positive, got {}", batch));
  }
  StepTrace out;
  out.parameters = trained_values(model);
  if (auto* gpt = dynamic_cast<nn::Gpt*>(&model)) {
    trace_gpt(*gpt, batch, out);
    return out;
  }
  if (auto* seq = dynamic_cast<nn::Sequential*>(&model)) {
    Shape one;
    one.push_back(1);
    for (int64_t d : sample_shape) one.push_back(d);
    const bool was_training = model.is_training();
    model.eval();  // BatchNorm uses (and leaves alone) its running statistics
    try {
      EnableGradGuard grad;  // so that requires_grad tells which inputs get a gradient
      trace_sequential(*seq, "", zeros(one), batch, out);
    } catch (...) {
      model.train(was_training);
      throw;
    }
    model.train(was_training);
    return out;
  }
  // Any other model: each Linear on one row per sample; convolutions cannot be sized.
  for (const auto& [name, m] : model.named_modules()) {
    if (const auto* lin = dynamic_cast<const nn::Linear*>(m)) {
      out.gemms.push_back(
          {.layer = name, .m = batch, .n = lin->out_features(), .k = lin->in_features()});
      out.weight_values += lin->weight().numel();
    } else if (dynamic_cast<const nn::Conv2d*>(m)) {
      out.not_counted.push_back(name);
    }
  }
  return out;
}

StepTrace trace_step_gemms(const nn::ModelConfig& config, int64_t batch) {
  nn::ModelConfig c = nn::resolve_model_config(config);
  std::shared_ptr<nn::Module> model = nn::make_model(c);
  if (c.name == "gpt" || nn::is_gpt2_model(c.name))
    return trace_step_gemms(*model, Shape{c.context}, batch);
  return trace_step_gemms(*model, Shape{1, 28, 28}, batch);
}

StepPrecision step_precision(const train::RecipeDtypes& d, std::string_view optimizer) {
  StepPrecision p;
  p.states = optimizer == "sgd" ? 1 : 2;
  p.compute = d.compute;
  p.param = d.master;
  p.grad = d.grads;
  p.state = d.states;
  const DTypeTraits& c = traits(d.compute);
  p.casts_weights =
      c.is_float() && c.bits < 32 && d.compute != DType::tf32 && d.master != d.compute;
  return p;
}

StepPrecision step_precision(std::string_view recipe, std::string_view optimizer) {
  return step_precision(train::make_recipe(recipe)->dtypes(), optimizer);
}

OpCounts count_training_step(const StepTrace& trace, const StepPrecision& p, int64_t micro_batches,
                             GemmTraffic traffic) {
  if (micro_batches < 1) {
    throw std::invalid_argument(fmt::format(
        "count_training_step: micro_batches must be at least 1, got {}", micro_batches));
  }
  OpCounts total;
  for (const StepGemm& g : trace.gemms) {
    const double times = double(g.count);
    total +=
        count_matmul(g.m, g.n, g.k, p.compute, p.compute, traffic) * (times * (1 + g.recompute));
    if (g.a_grad) total += count_matmul(g.m, g.k, g.n, p.compute, p.compute, traffic) * times;
    if (g.b_grad) total += count_matmul(g.k, g.n, g.m, p.compute, p.compute, traffic) * times;
  }
  if (p.casts_weights) {
    total.dram_bytes +=
        double(trace.weight_values) * (bytes_per_value(p.param) + bytes_per_value(p.compute));
  }
  total *= double(micro_batches);
  // The optimizer: read parameter and gradient, read and write each state, write the parameter.
  const double per_value = 2 * bytes_per_value(p.param) + bytes_per_value(p.grad) +
                           2.0 * p.states * bytes_per_value(p.state);
  total.dram_bytes += double(trace.parameters) * per_value;
  return total;
}

}  // namespace mixp::study
