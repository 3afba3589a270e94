// Module: the base of every layer and model (after torch.nn.Module).
//
// A module owns named parameters (trainable leaves), named buffers (state that is saved but not
// trained, e.g. BatchNorm's running statistics) and named child modules. Names compose with dots
// in registration order, depth first, a module's own entries before its children's, exactly as
// PyTorch's named_parameters(): "blocks.0.attn.qkv.weight".
//
// Parameters and buffers live in the base class; register_parameter/register_buffer return a
// reference that stays valid for the module's life (a std::deque never moves its elements), and
// subclasses keep a pointer to it. So there is exactly one handle per parameter inside the model:
// whoever changes a parameter's contents in place (an optimizer step, a dtype conversion that
// swaps the TensorImpl's storage, load_state_dict) is seen by the layer's forward.
//
// kind(): what a module is, for per-layer precision rules (`--layer-precision
// embed=fp32,attn=bf16,mlp=bf16,head=fp32`): "linear", "conv2d", "conv1d", "batch_norm2d",
// "layer_norm", "embedding", "attention", "mlp", "block", "lstm", "dropout", "relu", "gelu",
// "flatten", "max_pool2d", "sequential", "gpt", and "head" for a model's final classifier / LM head
// (a Linear whose kind was set by the model). Rules select modules by kind or by dotted name.
//
// Forward wrappers. `m(x)` (operator()) runs forward(x) through the module's forward wrapper when
// one is set (set_forward_wrapper): the amp recipes use it for per-layer precision, e.g. to run
// one module under its own Autocast region with casts at its boundary (jmp's per-module policy).
// Modules call their children through operator(), never child->forward() directly, so that a
// wrapper set on any module is honoured wherever it sits in the tree.
//
// Modules are not copyable (parameters are identities); share them with std::shared_ptr.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mixp/tensor/generator.h"
#include "mixp/tensor/tensor.h"

namespace mixp::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  explicit Module(std::string kind);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  // forward(x), through the forward wrapper when one is set.
  Tensor operator()(const Tensor& x) { return wrapper_ ? wrapper_(*this, x) : forward(x); }
  // The same for an input the caller gives up (`x = block(std::move(x))`): without a wrapper it
  // goes to forward_owned, which may drop the input as soon as it is no longer needed instead of
  // the caller's reference keeping it alive for the whole call.
  Tensor operator()(Tensor&& x) {
    if (wrapper_) return wrapper_(*this, x);
    return forward_owned(std::move(x));
  }
  // forward(x) for an input this module owns; modules whose input dies early override it (a
  // residual block whose input is saved by nothing: TransformerBlock under 16-bit norm saves).
  virtual Tensor forward_owned(Tensor x) { return forward(x); }

  // A function run instead of forward(x) by operator(); it receives the module and the input and
  // must call module.forward(...) itself (wrappers do not nest: setting one replaces the previous;
  // an empty function removes it).
  using ForwardWrapper = std::function<Tensor(Module& self, const Tensor& x)>;
  void set_forward_wrapper(ForwardWrapper w) { wrapper_ = std::move(w); }
  const ForwardWrapper& forward_wrapper() const { return wrapper_; }

  // What this module is (see the header comment). A model may retag a child (its head: "head").
  virtual std::string kind() const { return kind_; }
  void set_kind(std::string kind) { kind_ = std::move(kind); }

  // ---- registration. Names are non-empty, contain no '.', and are unique within this module
  // across parameters, buffers and children; violations throw std::invalid_argument.
  // The parameter becomes a leaf that requires grad (when floating and requires_grad).
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // ---- traversal (handles share the module's tensors; a parameter shared by two modules is
  // listed once, under its first name, as in PyTorch)
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  // Direct children in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module (name "") and every descendant, pre-order, with dotted names. Non-owning
  // pointers, valid while this module lives.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, const Module*>> named_modules() const;

  // Lookup by dotted name; throw std::out_of_range naming the missing entry.
  Tensor parameter(const std::string& dotted_name) const;
  Tensor buffer(const std::string& dotted_name) const;
  Module& module(const std::string& dotted_name);

  // Number of parameter elements (shared parameters counted once).
  int64_t num_parameters() const;

  // ---- modes. train(false) == eval(); recursive. Affects Dropout and BatchNorm2d.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Clears every parameter's .grad (set to none, like PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  // ---- state: parameters then buffers, named as above (the same handles, not copies).
  NamedTensors state_dict() const;
  // Copies values in (converting dtype with nearest-even) after checking every name and shape
  // first, so a mismatch leaves the module untouched. strict: entries in `state` that the module
  // does not have are an error too. Throws std::invalid_argument naming the offending entry.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // A readable tree: one line per module, "name (kind) shapes...".
  std::string str() const;

 protected:
  // One line describing this module's configuration for str(), e.g. "in=784, out=512".
  virtual std::string describe() const { return {}; }
  // Swaps the direct child `name` for `m` (same name and position); returns the old one. Throws
  // std::out_of_range when there is no such child. Containers that keep their own list of
  // children (Sequential) wrap it.
  std::shared_ptr<Module> replace_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out,
               std::vector<const TensorImpl*>& seen) const;
  void str_into(const std::string& name, int depth, std::string& out) const;

  std::string kind_;
  ForwardWrapper wrapper_;
  bool training_ = true;
  std::deque<std::pair<std::string, Tensor>> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace mixp::nn
