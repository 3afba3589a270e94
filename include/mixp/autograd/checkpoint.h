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

namespace detail {
// Seed replay for dropout under checkpoint: dropout calls this to obtain its seed.
uint64_t checkpoint_aware_seed(uint64_t fresh_seed);
}  // namespace detail

}  // namespace mixp
