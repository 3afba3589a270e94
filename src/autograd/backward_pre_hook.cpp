// with_backward_pre_hook (autograd/backward_pre_hook.h): an identity node whose apply runs the
// hook first; with_grad_for: an identity node with a second edge, to w.
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

class GradForNode final : public Node {
 public:
  explicit GradForNode(std::function<Tensor()> make) : make_(std::move(make)) {}
  void apply(std::span<Tensor> grad_outputs, std::span<Tensor> grad_inputs) override {
    grad_inputs[0] = std::move(grad_outputs[0]);  // unchanged: the same tensor
    if (make_) grad_inputs[1] = make_();
  }
  void release() override { make_ = nullptr; }
  std::string name() const override { return "GradFor"; }

 private:
  std::function<Tensor()> make_;
};

// An alias of y (its storage, shape, strides) whose gradient goes to `node`.
Tensor alias_into(const Tensor& y, std::shared_ptr<Node> node) {
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

}  // namespace

Tensor with_grad_for(const Tensor& y, const Tensor& w, std::function<Tensor()> make) {
  if (!GradMode::is_enabled() || !y.defined() || !y.requires_grad()) return y;
  auto node = std::make_shared<GradForNode>(std::move(make));
  node->next_edges.push_back(gradient_edge(y));
  node->next_edges.push_back(gradient_edge(w));
  return alias_into(y, std::move(node));
}

Tensor with_backward_pre_hook(const Tensor& y, std::function<void()> hook) {
  if (!GradMode::is_enabled() || !y.defined() || !y.requires_grad()) return y;
  auto node = std::make_shared<BackwardPreHookNode>(std::move(hook));
  node->next_edges.push_back(gradient_edge(y));
  return alias_into(y, std::move(node));
}

}  // namespace mixp
