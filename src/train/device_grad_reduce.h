// The gradient reductions of data parallelism for gradients in device memory (a GPU's under
// --device cuda; the guarded test device), computed with backend ops on the gradients' own device
// and moved by the device's group (dist::group_for: NCCL for cuda, MPI's world for host memory).
// docs/distributed.md, "Gradients in device memory".
//
// The same values, bit for bit, as dist::PendingReduce (mixp/dist/grad_reduce.h) on the same
// gradients: every element's result is round_wire(sum over ranks r, in rank order, of
// round_wire(weight_r * g_r)) with the sum in fp32 from +0 -- which rank sums which elements
// changes nothing, so the pieces here need not be PendingReduce's. Each step of that arithmetic
// is one backend kernel (scalar mul, convert, add_inplace with alpha 1), so no contraction or
// wider accumulator can change a bit. Not overlapped with backward and not through shared memory
// (the host path's two speed-ups): this path is about where the bytes live, not speed yet.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "mixp/dist/grad_reduce.h"
#include "mixp/dist/process_group.h"
#include "mixp/tensor/tensor.h"

namespace mixp::train::detail {

// The sum over the ranks of weight * (the contributions laid end to end), rounded to the wire
// format of `mode` (fp32, bf16 or fp16; bf16-ring is refused). `parts`: this rank's
// contributions, tensors of any float dtype and layout on `device` (undefined: `numels[i]`
// zeros). With `counts` empty every rank gets the whole sum (a 1-D tensor of the wire dtype);
// with counts (elements per rank, summing to the total: the reduction to owners of ZeRO 2 and 3)
// rank r gets only its counts[r] elements, those that follow the first counts[0..r) ones.
// Each part is let go once it is packed for the wire: a caller that holds no other reference
// (ZeRO 2 and 3 drop the whole gradients first) frees them before the exchange, as the host path
// drops them once their bucket is on the wire.
// A collective over `g`: every rank calls it with the same numels and counts.
Tensor reduce_on_device(dist::ProcessGroup& g, std::vector<Tensor> parts,
                        std::span<const int64_t> numels, Device device, float weight,
                        dist::GradComm mode, std::span<const size_t> counts = {});

// A device tensor's bytes for a transport (the group reads or writes them in place): the
// pointer is taken inside a DeviceAccessScope, which is what lets the MPI group read a guarded
// tensor as NCCL reads a GPU's. `t` must be contiguous.
std::span<std::byte> transport_bytes(const Tensor& t);

}  // namespace mixp::train::detail
