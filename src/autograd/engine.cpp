// The reverse-mode engine: Kahn's algorithm over the nodes reachable from the roots, running the
// ready node with the highest sequence number first (the most recently recorded), so gradients
// of late activations are consumed, and their buffers freed, before early ones are computed.
#include <fmt/format.h>

#include <queue>
#include <utility>
#include <stdexcept>
#include <unordered_map>

#include "mixp/autograd/grad_mode.h"
#include "mixp/autograd/grad_ready_hook.h"
#include "mixp/autograd/node.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/kernel_observer.h"
#include "mixp/tensor/factories.h"
#include "ops/dispatch.h"
#include "tensor/backward_hook.h"

namespace mixp {
namespace {
thread_local uint64_t g_next_sequence_nr = 0;
thread_local const Node* t_current_node = nullptr;  // set only while kernel observers are on
thread_local GradReadyHook t_grad_ready_hook;        // grad_ready_hook.h

// Accumulates g into the buffer slot (which may be undefined).
// Whether nobody but this gradient slot sees its tensor and buffer, so it may be added to in place.
bool sole_owner(const Tensor& slot) {
  return slot.impl_ptr().use_count() == 1 && slot.storage().use_count() == 1 &&
         slot.is_contiguous();
}

void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = g;
    return;
  }
  if (slot.shape() != g.shape()) {
    throw std::logic_error(
        "mixp autograd: gradients of shapes " + slot.shape().str() + " and " + g.shape().str() +
        " arrive at the same tensor (a backward function returned a wrong shape)");
  }
  // Add in place when nobody else can see the slot's buffer (the common case: a fresh gradient
  // from a backward function); never modify a gradient another node may still hold.
  if (sole_owner(slot) &&
      (slot.dtype() == g.dtype() ||
       (slot.dtype() == DType::fp32 && (g.dtype() == DType::bf16 || g.dtype() == DType::fp16)))) {
    backend_for(slot, g).add_inplace(slot, g, 1.0);
    return;
  }
  // Mixed dtypes (a 16-bit gradient from a cast meets an fp32 one at the same leaf): sum in the
  // wider one, never round the fp32 gradient to 16 bits.
  DType sd = slot.dtype();
  if (g.dtype() != sd) {
    sd = (sd == DType::fp64 || g.dtype() == DType::fp64) ? DType::fp64 : DType::fp32;
  }
  Tensor sum = Tensor::empty(slot.shape(), {.dtype = sd, .device = slot.device()});
  backend_for(sum, slot).copy(sum, slot);
  backend_for(sum, g).add_inplace(sum, g, 1.0);
  slot = sum;
}

// Whether a GradAdder may add straight into the slot (no dense temporary): an fp32 buffer of the
// input's shape and device that nobody else sees.
bool adds_in_place(const Tensor& slot, const OutputMeta& meta) {
  return slot.defined() && slot.dtype() == DType::fp32 && slot.shape() == meta.shape &&
         slot.device() == meta.device && sole_owner(slot);
}
}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr++) {}

uint64_t next_sequence_nr() {
  return g_next_sequence_nr;
}
GradReadyHookScope::GradReadyHookScope(GradReadyHook hook)
    : previous_(std::exchange(t_grad_ready_hook, std::move(hook))) {}

GradReadyHookScope::~GradReadyHookScope() {
  t_grad_ready_hook = std::move(previous_);
}

const GradReadyHook* detail::grad_ready_hook() {
  return t_grad_ready_hook ? &t_grad_ready_hook : nullptr;
}

const Node* current_backward_node() {
  return t_current_node;
}

DType grad_dtype_for(DType leaf) {
  const DTypeTraits& t = traits(leaf);
  if (t.is_float() && t.bits < 32) return DType::fp32;
  if (leaf == DType::tf32) return DType::fp32;
  return leaf;
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& l) : leaf(l) {
  outputs.push_back(OutputMeta{l->shape, l->dtype, l->device});
}

void AccumulateGrad::apply(std::span<Tensor> grad_outputs, std::span<Tensor>) {
  std::shared_ptr<TensorImpl> impl = leaf.lock();
  if (!impl) return;  // the leaf is gone: nobody can read its gradient
  Tensor g = grad_outputs[0];
  if (g.shape() != impl->shape) {
    throw std::logic_error("mixp autograd: gradient of shape " + g.shape().str() +
                           " for a leaf of shape " + impl->shape.str());
  }
  const DType gd = grad_dtype_for(impl->dtype);
  if (!impl->grad) {
    // Steal the incoming buffer when nobody else can see it; else copy (a gradient may alias
    // an expanded view or another node's buffer).
    const bool stealable = g.dtype() == gd && g.is_contiguous() && g.impl_ptr().use_count() <= 2 &&
                           g.storage().use_count() == 1 && g.storage_offset() == 0;
    if (stealable) {
      impl->grad = g.impl_ptr();
    } else {
      Tensor copy = Tensor::empty(impl->shape, {.dtype = gd, .device = impl->device});
      backend_for(copy, g).copy(copy, g);
      impl->grad = copy.impl_ptr();
    }
  } else {
    Tensor acc(impl->grad);
    backend_for(acc, g).add_inplace(acc, g, 1.0);
    acc.bump_version();  // the user-visible .grad changed in place
  }
  if (const GradReadyHook* hook = detail::grad_ready_hook()) (*hook)(Tensor(impl));
}

FunctionNode::FunctionNode(OpId op, DType compute, BackwardFn fn)
    : op_(op), compute_(compute), fn_(std::move(fn)) {}

std::string FunctionNode::name() const {
  return std::string(op_name(op_)) + "_backward";
}

void FunctionNode::apply(std::span<Tensor> grad_outputs, std::span<Tensor> grad_inputs) {
  if (!fn_) {
    throw std::runtime_error(
        "mixp autograd: trying to backward through the graph a second time (through " + name() +
        "); the saved tensors were freed after the first backward. Pass "
        "retain_graph=true to the first backward if you need to run it twice.");
  }
  for (Tensor& g : grad_outputs) {
    if (g.defined() && g.dtype() != compute_ && !(pass_grad_dtype && g.is_floating_point()))
      g = g.to(compute_, Round::nearest_even);
  }
  grad_adders.clear();
  BackwardContext ctx{grad_outputs, grad_inputs, this, &grad_adders};
  fn_(ctx);
  for (size_t i = 0; i < grad_inputs.size(); ++i) {
    Tensor& g = grad_inputs[i];
    if (!next_edges[i].valid()) {
      g = Tensor();
      continue;
    }
    if (!g.defined()) continue;
    if (i < input_dtypes.size() && g.dtype() != input_dtypes[i] &&
        traits(input_dtypes[i]).is_float() && !(pass_grad_dtype && g.is_floating_point())) {
      g = g.to(input_dtypes[i], Round::nearest_even);
    }
  }
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.grad_fn()) return Edge{t.grad_fn(), t.output_nr()};
  if (!t.requires_grad()) return {};
  TensorImpl* impl = t.impl();
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

void run_backward(std::span<const Tensor> roots, std::span<const Tensor> grads, bool retain_graph) {
  if (roots.size() != grads.size())
    throw std::invalid_argument("mixp backward: one gradient per root is needed");
  NoGradGuard no_grad;  // backward functions do not record (no higher-order gradients)
  detail::CastPolicyScope no_autocast(/*suspended=*/true);  // they run in the forward's dtypes
  // Kernel observers (the profiler, the anomaly detector) see backward kernels as such, and which
  // node runs them; nothing is recorded when none is installed.
  const bool observed = kernel_observers_on();
  KernelPhaseScope phase(KernelPhase::backward);
  struct NodeReset {
    const Node* prev = t_current_node;
    ~NodeReset() { t_current_node = prev; }
  } node_reset;

  struct Item {
    Node* node;
    bool operator<(const Item& o) const { return node->sequence_nr < o.node->sequence_nr; }
  };
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> keep_alive;  // nodes stay alive while the engine runs

  // Root gradients.
  std::vector<Node*> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined()) throw std::invalid_argument("mixp backward: undefined root tensor");
    if (!r.requires_grad()) {
      throw std::runtime_error(
          "mixp backward: the tensor does not require grad and has no grad_fn "
          "(was it computed under NoGradGuard, or from tensors without requires_grad?)");
    }
    Tensor g = grads[i];
    if (!g.defined()) {
      if (r.numel() != 1) {
        throw std::invalid_argument(
            "mixp backward: a gradient can be implied only for one-element outputs; the output "
            "has shape " +
            r.shape().str() + ", pass grad explicitly");
      }
      g = ones(r.shape(), {.dtype = r.dtype(), .device = r.device()});
    } else if (g.shape() != r.shape()) {
      throw std::invalid_argument("mixp backward: gradient shape " + g.shape().str() +
                                  " differs from output shape " + r.shape().str());
    }
    Edge e = gradient_edge(r);
    keep_alive.push_back(e.fn);
    auto& buf = buffers[e.fn.get()];
    buf.resize(e.fn->outputs.size());
    accumulate(buf[e.input_nr], g);
    root_nodes.push_back(e.fn.get());
  }

  // Count dependencies: how many edges point at each reachable node.
  {
    std::vector<Node*> stack(root_nodes.begin(), root_nodes.end());
    std::unordered_map<Node*, bool> seen;
    for (Node* n : root_nodes) seen[n] = true;
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges) {
        if (!e.valid()) continue;
        ++dependencies[e.fn.get()];
        if (!seen[e.fn.get()]) {
          seen[e.fn.get()] = true;
          stack.push_back(e.fn.get());
        }
      }
    }
  }

  std::priority_queue<Item> ready;
  {
    std::unordered_map<Node*, bool> queued;
    for (Node* n : root_nodes) {
      if (dependencies[n] == 0 && !queued[n]) {
        ready.push({n});
        queued[n] = true;
      }
    }
  }
  while (!ready.empty()) {
    Node* n = ready.top().node;
    ready.pop();
    std::vector<Tensor> gout = std::move(buffers[n]);
    buffers.erase(n);
    gout.resize(n->outputs.size());
    for (size_t i = 0; i < gout.size(); ++i) {
      if (!gout[i].defined())
        gout[i] = zeros(n->outputs[i].shape,
                        {.dtype = n->outputs[i].dtype, .device = n->outputs[i].device});
    }
    std::vector<Tensor> gin(n->next_edges.size());
    n->release_after_apply = !retain_graph;
    if (observed) t_current_node = n;
    n->apply(gout, gin);
    gout.clear();
    std::vector<GradAdder> adders = std::move(n->grad_adders);
    n->grad_adders.clear();
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.valid()) continue;
      Node* m = e.fn.get();
      const bool by_adder = i < adders.size() && adders[i].add;
      if (by_adder || gin[i].defined()) {
        auto& buf = buffers[m];
        if (buf.empty()) buf.resize(m->outputs.size());
        Tensor& slot = buf[e.input_nr];
        const OutputMeta& meta = m->outputs[e.input_nr];
        if (by_adder && adds_in_place(slot, meta)) {
          adders[i].add(slot);
        } else {
          const Tensor g = by_adder ? adders[i].make() : gin[i];
          if (g.shape() != meta.shape) {
            throw std::logic_error(fmt::format(
                "mixp autograd: {} produced a gradient of shape {} for an input of shape {}",
                n->name(), g.shape().str(), meta.shape.str()));
          }
          accumulate(slot, g);
        }
      }
      if (--dependencies[m] == 0) {
        if (buffers.count(m)) {
          ready.push({m});
        } else {
          // No gradient reached this node: its subgraph gets nothing, but its own inputs'
          // dependency counts must still drop.
          std::vector<Node*> stack{m};
          while (!stack.empty()) {
            Node* k = stack.back();
            stack.pop_back();
            if (!retain_graph) k->release();
            for (const Edge& f : k->next_edges) {
              if (!f.valid()) continue;
              if (--dependencies[f.fn.get()] == 0) {
                if (buffers.count(f.fn.get()))
                  ready.push({f.fn.get()});
                else
                  stack.push_back(f.fn.get());
              }
            }
          }
        }
      }
    }
  }
}

namespace {
// Tensor::backward() runs the engine through this hook (tensor/backward_hook.h), registered while
// libmixp loads.
const bool g_backward_registered = [] {
  detail::set_backward_runner(&run_backward);
  return true;
}();
}  // namespace

}  // namespace mixp
