// Reducing gradients over the ranks of a ProcessGroup, with a chosen wire format
// (docs/distributed.md, "What goes over the wire").
//
// Every mode computes, in place on every rank, sum over ranks r of weight_r * buf_r, and leaves
// bit-identical values on every rank (so the replicas of the model stay identical):
//   fp32       reduce-scatter + all-gather in fp32: the sum of a piece is computed by the rank that
//              owns it, in rank order, in fp32.
//   bf16/fp16  the same with 16-bit pieces on the wire and fp32 accumulation: each contribution
//              is rounded once to the wire format (after the weight is applied, so fp16 gradients
//              are pre-divided by the world size, as PyTorch's fp16_compress_hook does), the owner
//              sums them in fp32 and rounds the sum once for the all-gather. Half the bytes of
//              fp32; error per element <= u * (sum of |contributions|) + u * |sum|, u = 2^-8 for
//              bf16 and 2^-11 for fp16 within its range (fp16 flushes contributions below 2^-24
//              to zero: unscaled gradients lose their smallest values; use it with loss scaling).
//   bf16-ring  the naive ring all-reduce in bf16: each hop adds the incoming bf16 piece to the
//              local one and rounds the partial sum to bf16, N-1 roundings per element; its error
//              grows with the number of ranks (bench/dist_reduce.cpp measures it). Offered to
//              show the difference; not a default.
// Non-finite values propagate (an inf in any contribution makes the sum inf or NaN), so the fp16
// recipes' inf check after the reduction sees them on every rank and every rank skips the step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/dist/process_group.h"
#include "mixp/format/dtype.h"

namespace mixp::dist {

enum class GradComm { fp32, bf16, fp16, bf16_ring };

// "fp32", "bf16", "fp16", "bf16-ring"; parse throws std::invalid_argument listing them.
GradComm parse_grad_comm(std::string_view name);
std::string grad_comm_name(GradComm c);
const std::vector<std::string>& grad_comm_names();
// The format of one element on the wire (fp32, bf16, fp16; bf16-ring's is bf16) and its bytes.
DType wire_dtype(GradComm c);
int wire_bytes(GradComm c);

// Scratch buffers of reduce_weighted_sum, kept between calls so that a training step allocates
// (and page-faults) nothing.
struct ReduceWorkspace {
  std::vector<std::byte> send, recv;
  std::vector<float> acc, tmp;
  std::vector<float> flat;  // staging for the caller (train/data_parallel.cpp), and the ring's
};

// The values of one reduction: spans of fp32 laid end to end (a bucket's gradients, read and
// written where they are, so that no flat copy is made on either side of the wire).
using Segments = std::vector<std::span<float>>;

// buf <- sum over ranks of weight * buf (each rank its own buf and weight), identical on every
// rank. buf has the same length on every rank.
void reduce_weighted_sum(ProcessGroup& g, std::span<float> buf, float weight, GradComm mode,
                         ReduceWorkspace* workspace = nullptr);

// reduce_weighted_sum in nonblocking phases, so that a bucket's communication overlaps the rest
// of backward (train/data_parallel.h), with the same result bit for bit (buf may be given as
// several segments, which then behave as one buffer laid end to end):
//   start()        weights and narrows buf into the wire format, starts the all-to-all;
//   scatter_sum()  waits for the all-to-all, sums this rank's piece in fp32 (rank order), starts
//                  the all-gather of the rounded sum;
//   test()         true once the all-gather is complete (never blocks);
//   finish()       waits for the all-gather and widens the result into buf.
// Each phase is a collective *started*: every rank must call start() and scatter_sum() of its
// reductions in the same order. buf and the workspace must stay alive and untouched until
// finish(). bf16-ring (a demonstration mode) runs entirely inside start().
//
// With `shared` memory (ProcessGroup::map_shared, the same object for the same reduction on every
// rank, at least shared_bytes() large) the ranks skip the transport: start() writes this rank's
// weighted contribution to every other rank's piece into its own region, the owner of a piece
// sums it reading the other ranks' regions directly and writes the rounded sum both into buf and
// into its region, where finish() reads the other pieces from. The same sums in the same order,
// bit for bit, with two passes over memory fewer, no copy by the kernel and no MPI call (the
// other ranks' progress needs none from this one). A `shared` memory serves one reduction at a
// time; its flags order the reuses.
class PendingReduce {
 public:
  // Bytes of shared memory a reduction of `elems` elements needs on a group of `ranks`
  // (to_owners: the reduction to owners).
  static size_t shared_bytes(size_t elems, int ranks, GradComm mode, bool to_owners);
  void start(ProcessGroup& g, Segments buf, float weight, GradComm mode, ReduceWorkspace& ws,
             SharedMemory* shared = nullptr);
  // The reduction to owners (ZeRO stage 2): buf holds the pieces of rank 0, 1, ... one after the
  // other (counts[r] elements each); each rank receives only its own piece from every rank and
  // sums it in fp32 in rank order, then rounds it once to the wire format -- the same values, bit
  // for bit, as that piece after start(), at about half the bytes (no all-gather). After
  // finish() only this rank's piece of buf holds the sum. Not for bf16-ring.
  void start_to_owners(ProcessGroup& g, Segments buf, std::span<const size_t> counts,
                       float weight, GradComm mode, ReduceWorkspace& ws,
                       SharedMemory* shared = nullptr);
  void scatter_sum();
  bool test();
  void finish();
  // Started and not finished.
  bool active() const { return g_ != nullptr; }
  // scatter_sum() has run (or was not needed).
  bool gathering() const { return phase_ == Phase::gather; }

 private:
  enum class Phase { scatter, gather };
  // The state both starts set up.
  void begin(ProcessGroup& g, Segments buf, size_t total, GradComm mode, ReduceWorkspace& ws);
  // The shared-memory variant of both starts: ranges_ set, this rank's contributions posted.
  void start_shared(float weight);
  void scatter_sum_shared();
  ProcessGroup* g_ = nullptr;
  Segments buf_;
  size_t total_ = 0;  // elements in buf_
  ReduceWorkspace* ws_ = nullptr;
  DType wire_ = DType::fp32;
  size_t piece_ = 0;
  Phase phase_ = Phase::scatter;
  Request req_;
  std::vector<size_t> counts_;  // start_to_owners: elements per rank (else empty)
  SharedMemory* shared_ = nullptr;  // the shared-memory variant (else the transport)
  uint64_t use_ = 0;                // shared_->uses of this reduction
  float weight_ = 1;                // shared: for this rank's own piece, weighted when summed
  std::vector<size_t> offset_;      // shared: first element of each rank's piece, then total
};

}  // namespace mixp::dist
