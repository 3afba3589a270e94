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
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs);
// One input, one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

class Generator;
namespace detail {
// Seed replay for dropout under checkpoint: dropout calls this to obtain its seed. It draws from
// `gen` except while a checkpointed segment is being recomputed, where it returns the seeds the
// forward pass drew, in order, without touching `gen` (so a checkpointed run and a plain run
// leave their generators in the same state).
uint64_t checkpoint_aware_seed(Generator& gen);
}  // namespace detail

}  // namespace mixp
