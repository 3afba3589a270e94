#include "mixp/autograd/checkpoint.h"

#include <mutex>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/autograd/node.h"
#include "mixp/ops/matmul_precision.h"
#include "mixp/tensor/generator.h"
#include "ops/dispatch.h"
#include "ops/dropout_seed.h"

namespace mixp {

namespace detail {
namespace {
// Seeds drawn by dropout inside a checkpointed segment: recorded in forward, replayed in the
// recomputation so the masks match.
struct SeedLog {
  std::vector<uint64_t> seeds;
  size_t next = 0;
  bool replay = false;
};
thread_local SeedLog* g_seed_log = nullptr;
}  // namespace

uint64_t checkpoint_aware_seed(Generator& gen) {
  SeedLog* log = g_seed_log;
  if (!log) return gen.next_u64();
  if (log->replay) {
    if (log->next >= log->seeds.size()) {
      throw std::logic_error(
          "mixp::checkpoint: the recomputation drew more dropout seeds than the forward pass");
    }
    return log->seeds[log->next++];
  }
  const uint64_t fresh = gen.next_u64();
  log->seeds.push_back(fresh);
  return fresh;
}

// dropout(x, p, training, Generator&) draws its seeds here (ops/dropout_seed.h), registered
// while libmixp loads.
const bool kDropoutSeedsRegistered = (set_dropout_seed_source(&checkpoint_aware_seed), true);

struct SeedLogScope {
  SeedLog* prev;
  explicit SeedLogScope(SeedLog* l) : prev(g_seed_log) { g_seed_log = l; }
  ~SeedLogScope() { g_seed_log = prev; }
};
}  // namespace detail

namespace {
std::mutex g_captures_mutex;
std::vector<CheckpointCapture>& captures() {
  static std::vector<CheckpointCapture> c;
  return c;
}

// The state checkpoint() re-enters for the recomputation (see checkpoint.h).
std::vector<CheckpointRestorer> capture_state() {
  std::vector<CheckpointRestorer> r;
  const Fp32GemmMode gemm = effective_fp32_gemm_mode();
  r.push_back([gemm] { return std::make_shared<Tf32Guard>(gemm.precision, gemm.round); });
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  for (const CheckpointCapture& c : captures()) r.push_back(c());
  return r;
}

class CheckpointNode final : public Node {
 public:
  CheckpointNode(SegmentFn fn, std::vector<Tensor> inputs, std::shared_ptr<detail::SeedLog> seeds,
                 std::vector<CheckpointRestorer> state)
      : fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        seeds_(std::move(seeds)),
        state_(std::move(state)) {}

  void apply(std::span<Tensor> grad_outputs, std::span<Tensor> grad_inputs) override {
    if (!fn_)
      throw std::runtime_error(
          "mixp::checkpoint: backward through a freed checkpoint segment (retain_graph was false)");
    // Recompute the segment with recording on, from detached copies of the inputs.
    std::vector<Tensor> detached;
    detached.reserve(inputs_.size());
    for (const Tensor& t : inputs_) {
      Tensor d = t.defined() ? t.detach() : Tensor();
      if (d.defined() && t.requires_grad()) d.requires_grad_(true);
      detached.push_back(d);
    }
    std::vector<Tensor> outs;
    {
      EnableGradGuard enable;
      // The recomputation is a forward pass: the autocast hook applies again (the engine
      // suspends it for backward functions), in the regions the forward ran in.
      detail::CastPolicyScope cast_policy(/*suspended=*/false);
      std::vector<CheckpointScope> scopes;
      for (const CheckpointRestorer& r : state_) scopes.push_back(r());
      seeds_->next = 0;
      seeds_->replay = true;
      detail::SeedLogScope scope(seeds_.get());
      outs = fn_(detached);
      while (!scopes.empty()) scopes.pop_back();  // leave the regions innermost first
    }
    std::vector<Tensor> roots, grads;
    for (size_t i = 0; i < outs.size() && i < grad_outputs.size(); ++i) {
      if (outs[i].defined() && outs[i].requires_grad() && outs[i].is_floating_point()) {
        roots.push_back(outs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) run_backward(roots, grads, false);
    for (size_t i = 0; i < grad_inputs.size(); ++i) {
      if (next_edges[i].valid() && detached[i].defined()) grad_inputs[i] = detached[i].grad();
    }
  }
  void release() override {
    fn_ = nullptr;
    inputs_.clear();
    state_.clear();
  }
  std::string name() const override { return "CheckpointBackward"; }

 private:
  SegmentFn fn_;
  std::vector<Tensor> inputs_;
  std::shared_ptr<detail::SeedLog> seeds_;
  std::vector<CheckpointRestorer> state_;
};
}  // namespace

void register_checkpoint_state(CheckpointCapture capture) {
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  captures().push_back(std::move(capture));
}

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs) {
  auto seeds = std::make_shared<detail::SeedLog>();
  std::vector<CheckpointRestorer> state = capture_state();
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    detail::SeedLogScope scope(seeds.get());
    outs = fn(inputs);
  }
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  // As PyTorch's reentrant checkpoint: the segment is differentiated when an input requires
  // grad (parameters captured by fn then get theirs during the recomputation).
  if (!GradMode::is_enabled() || !any) return outs;
  auto node = std::make_shared<CheckpointNode>(fn, inputs, seeds, std::move(state));
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->outputs.resize(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    Tensor& o = outs[k];
    if (!o.defined()) continue;
    node->outputs[k] = OutputMeta{o.shape(), detail::grad_dtype_of(o.dtype()), o.device()};
    if (!o.is_floating_point()) continue;
    // Outputs may alias inputs (fn returned an input): give each its own impl.
    o = o.detach();
    o.impl()->grad_fn = node;
    o.impl()->output_nr = static_cast<uint32_t>(k);
    o.impl()->requires_grad = true;
  }
  return outs;
}

Tensor checkpoint_input(Tensor x) {
  if (GradMode::is_enabled() && x.defined() && !x.requires_grad() && x.is_leaf()) {
    x.requires_grad_(true);
  }
  return x;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  SegmentFn seg = [fn](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs[0])}; };
  return checkpoint(seg, std::vector<Tensor>{input})[0];
}

}  // namespace mixp
