// Gradient checkpointing (activation recomputation, Chen et al. 2016; torch.utils.checkpoint).
//
// checkpoint(fn, inputs) runs fn(inputs) without recording, so none of the segment's intermediate
// activations are kept; only `inputs` are saved. In backward, fn is run again with recording on
// (on detached copies of the inputs) and the segment's backward runs from the recomputed outputs.
// Parameters that fn captures (weights) get their .grad during that inner backward, as in PyTorch.
// Dropout inside fn replays the same masks: the seeds it draws in forward are recorded and
// reused by the recomputation.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs);
// One input, one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

// The input of a model's first checkpointed segment. checkpoint() differentiates a segment only
// when an input requires grad (as PyTorch's reentrant checkpoint), so when everything before the
// segments is frozen (LoRA, nn/lora.h: embeddings frozen, adapters inside the blocks) nothing
// would reach the blocks' parameters. Under grad mode a leaf that does not require grad is made
// to, as Hugging Face's enable_input_require_grads() does for PEFT with gradient checkpointing;
// any other tensor is returned as it is. Called by nn/gpt.cpp and nn/llama.cpp.
Tensor checkpoint_input(Tensor x);

// Thread-local state that a segment's recomputation must see as its forward did: the
// recomputation runs during backward, outside the caller's regions (torch.utils.checkpoint
// restores the autocast state the same way). checkpoint() captures, at forward time, the fp32
// GEMM precision (ops/matmul_precision.h) and the state of every module that registered here (amp
// registers its Autocast and Fp8Autocast regions), and re-enters all of it around the
// recomputation. So a model calls checkpoint() and knows nothing of the modules above it.
//
// A capture function is called in checkpoint()'s forward and returns a restorer; the restorer is
// called before the recomputation and returns a scope object (any RAII guard, type-erased) that
// is destroyed after it, in the reverse order of registration.
using CheckpointScope = std::shared_ptr<void>;
using CheckpointRestorer = std::function<CheckpointScope()>;
using CheckpointCapture = std::function<CheckpointRestorer()>;
// Registers `capture` for every later checkpoint() (process-wide; call once, e.g. from a static
// initializer of the module that owns the state).
void register_checkpoint_state(CheckpointCapture capture);

class Generator;
namespace detail {
// Seed replay for dropout under checkpoint: dropout calls this to obtain its seed. It draws from
// `gen` except while a checkpointed segment is being recomputed, where it returns the seeds the
// forward pass drew, in order, without touching `gen` (so a checkpointed run and a plain run
// leave their generators in the same state).
uint64_t checkpoint_aware_seed(Generator& gen);
}  // namespace detail

}  // namespace mixp
