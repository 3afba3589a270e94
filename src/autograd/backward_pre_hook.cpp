// with_backward_pre_hook (autograd/backward_pre_hook.h): an identity node whose apply runs the
// hook first.
#include "mixp/autograd/backward_pre_hook.h"

#include <utility>

#include "mixp/autograd/grad_mode.h"
#include "mixp/autograd/node.h"

namespace mixp {
namespace {

class BackwardPreHookNode final : public Node {
 public:
  explicit BackwardPreHookNode(std::function<void()> hook) : hook_(std::move(hook)) {}
  void apply(std::span<Tensor> grad_outputs, std::span<Tensor> grad_inputs) override {
    if (hook_) hook_();
    grad_inputs[0] = std::move(grad_outputs[0]);  // unchanged: the same tensor
  }
  void release() override { hook_ = nullptr; }
  std::string name() const override { return "BackwardPreHook"; }

 private:
  std::function<void()> hook_;
};

}  // namespace

Tensor with_backward_pre_hook(const Tensor& y, std::function<void()> hook) {
  if (!GradMode::is_enabled() || !y.defined() || !y.requires_grad()) return y;
  auto node = std::make_shared<BackwardPreHookNode>(std::move(hook));
  node->next_edges.push_back(gradient_edge(y));
  node->outputs.push_back(OutputMeta{y.shape(), y.dtype(), y.device()});
  const TensorImpl& src = *y.impl();
  auto alias = std::make_shared<TensorImpl>();
  alias->storage = src.storage;
  alias->offset = src.offset;
  alias->shape = src.shape;
  alias->strides = src.strides;
  alias->dtype = src.dtype;
  alias->device = src.device;
  alias->requires_grad = true;
  alias->output_nr = 0;
  alias->grad_fn = std::move(node);
  return Tensor(std::move(alias));
}

}  // namespace mixp
