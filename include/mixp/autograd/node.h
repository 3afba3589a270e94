// Backward graph nodes. Each recorded op makes one Node whose next_edges point at the nodes that
// produced its inputs (or at the AccumulateGrad node of a leaf), as in PyTorch's autograd.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mixp/autograd/op_list.h"
#include "mixp/tensor/tensor.h"

namespace mixp {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;  // null: this input needs no gradient
  uint32_t input_nr = 0;     // which output of fn the gradient belongs to
  bool valid() const { return fn != nullptr; }
};

// What a node knows of each of its outputs, to make a zero gradient for an unused one.
struct OutputMeta {
  Shape shape;
  DType dtype = DType::fp32;
  Device device = Device::cpu();  // where that zero gradient goes: the output's device
};

// A gradient a backward function hands over as an addition into the buffer that accumulates it
// (BackwardContext::add_into) instead of as a tensor: a large sparse gradient (an embedding's
// scatter-add over [vocab, width]) then needs no dense temporary when that buffer already exists
// (a tied weight's gradient from the head, or the earlier micro-batches' at the leaf).
// add(dst) adds the gradient into dst: fp32, contiguous, of the input's shape, seen by nobody
// else. make() returns the gradient as a new tensor (when no such buffer exists). add(dst) must
// give bit for bit what make() followed by dst += that gives (same order of additions).
struct GradAdder {
  std::function<void(Tensor& dst)> add;
  std::function<Tensor()> make;
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grad_outputs has one defined tensor per output; fills grad_inputs (one per next edge; leave
  // undefined where the edge is invalid).
  virtual void apply(std::span<Tensor> grad_outputs, std::span<Tensor> grad_inputs) = 0;
  // Drops what the node saved for backward (called after apply unless retain_graph).
  virtual void release() {}
  virtual std::string name() const = 0;

  std::vector<Edge> next_edges;
  std::vector<OutputMeta> outputs;
  // Set by the engine before apply: true when release() follows (retain_graph is false), so apply
  // may drop a saved tensor as soon as it has used it (BackwardContext::last_use).
  bool release_after_apply = false;
  // Increases with creation order (per thread): the engine runs later nodes first, which keeps
  // peak memory low (activations are freed as soon as their consumer's backward ran).
  uint64_t sequence_nr;
  // Inputs whose gradient apply handed over as an addition (GradAdder), by input index (empty,
  // or next_edges.size() long with an empty entry where a tensor was given); the engine
  // consumes and clears them right after apply.
  std::vector<GradAdder> grad_adders;
};

// Accumulates into a leaf's .grad (fp32 for low-precision floating leaves, else the leaf's dtype).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  void apply(std::span<Tensor> grad_outputs, std::span<Tensor> grad_inputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::weak_ptr<TensorImpl> leaf;
};

// The dtype a leaf's gradient is kept in: fp32 for floating formats narrower than fp32, else the
// leaf's own dtype (docs/architecture.md 3.4: low-precision leaves accumulate gradients in fp32).
DType grad_dtype_for(DType leaf_dtype);

struct BackwardContext {
  std::span<Tensor> grad_outputs;  // in the node's compute dtype
  std::span<Tensor> grad_inputs;   // fill these; converted to each input's dtype afterwards
  const Node* node = nullptr;
  const Tensor& grad(int i = 0) const { return grad_outputs[i]; }
  bool needs(int i) const { return node->next_edges[i].valid(); }
  // This is the only backward through the node: a saved tensor may be dropped once used, so that
  // its memory serves the gradients allocated after it (the peak of a step is in backward).
  bool last_use() const { return node->release_after_apply; }
  // Gives input i's gradient as an addition (GradAdder) instead of a tensor in grad_inputs[i]:
  // the engine adds it straight into the buffer accumulating that gradient when there is one of
  // the gradient's dtype (fp32) and shape, and otherwise calls make(). Only for an input whose
  // gradient needs no dtype conversion (the input is in the node's compute dtype).
  void add_into(int i, GradAdder a) {
    if (adders->empty()) adders->resize(grad_inputs.size());
    (*adders)[static_cast<size_t>(i)] = std::move(a);
  }
  std::vector<GradAdder>* adders = nullptr;
};
using BackwardFn = std::function<void(BackwardContext&)>;

// The node every op front end records: a closure that captures exactly what backward needs.
// Gradients arrive converted to `compute` and leave converted to each input's dtype.
class FunctionNode final : public Node {
 public:
  FunctionNode(OpId op, DType compute, BackwardFn fn);
  void apply(std::span<Tensor> grad_outputs, std::span<Tensor> grad_inputs) override;
  void release() override {
    if (!reusable) fn_ = nullptr;
  }
  std::string name() const override;
  OpId op() const { return op_; }
  // The closure saves no tensor (a cast, Tensor::to): release() keeps it, so a second backward
  // through the node works. Autocast's cast cache hands the same weight copy to every forward of
  // a region, so gradient accumulation inside one region goes through it once per backward.
  bool reusable = false;
  std::vector<DType> input_dtypes;
  // Set on the cast of an fp32 leaf to bf16 (Tensor::to): gradients pass through in the float
  // dtype they arrive in (bf16 from most ops, fp32 from a GEMM that wrote the weight gradient in
  // fp32 directly), and the leaf's accumulator widens a bf16 one while adding it.
  bool pass_grad_dtype = false;

 private:
  OpId op_;
  DType compute_;
  BackwardFn fn_;
};

// The sequence number the next node made on this thread will get: nodes made between two reads
// were recorded by the ops run in between (the inspect module maps nodes to modules this way).
uint64_t next_sequence_nr();
// The node whose backward runs on this thread, while kernel observers are installed
// (mixp/backend/kernel_observer.h); null otherwise and outside backward.
const Node* current_backward_node();

// The edge a gradient for `t` must flow into: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// Runs the backward pass from `roots` with gradients `grads` (same count; an undefined entry
// means ones for a one-element root). Leaves accumulate into .grad.
void run_backward(std::span<const Tensor> roots, std::span<const Tensor> grads, bool retain_graph);

}  // namespace mixp
