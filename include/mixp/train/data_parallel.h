// Data parallelism for the Trainer (docs/distributed.md): what every rank does so that N
// processes train one model as one process would with an N times larger batch.
//
// PyTorch DistributedDataParallel's semantics, on a dist::ProcessGroup:
//   - at the start, rank 0's parameters and buffers are copied to every rank (so a custom model
//     initialised differently still starts identical), and the configurations are compared;
//   - before each step's forward, rank 0's buffers are broadcast (DDP's broadcast_buffers:
//     BatchNorm statistics, QAT observers, FP8 scaling state stay identical);
//   - the gradients are reduced in buckets of about bucket_mb MiB (parameters in reverse order,
//     as backward produces them; the first bucket 1 MiB, as DDP's, so communication starts early)
//     to the global mean, each rank's gradient weighted by its share of the step's samples. With
//     overlap (the default), a bucket's reduction starts during the backward of the step's last
//     micro-batch as soon as all its parameters' gradients are final (autograd/grad_ready_hook.h),
//     and the gradient-sync stage (callbacks.h) waits for the rest;
//   - every `check_replicas` steps, a checksum of every parameter is compared across ranks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <memory>
#include <unordered_map>

#include "mixp/autograd/grad_ready_hook.h"
#include "mixp/dist/grad_reduce.h"
#include "mixp/dist/process_group.h"
#include "mixp/nn/module.h"
#include "mixp/tensor/tensor.h"

namespace mixp::train {

// ZeRO stage 3's shards (docs/distributed.md, "ZeRO stage 3"; FSDP2's per-parameter sharding):
// rank `rank`'s rows of a parameter of `shape`, split along dim 0 as torch.chunk splits it,
// ceil(rows / ranks) rows a rank, so the last ranks hold fewer or none. A 0-d parameter is one
// row. elem0/numel: the same piece in elements of the contiguous parameter.
struct RowPiece {
  int64_t row0 = 0, rows = 0;
  int64_t elem0 = 0, numel = 0;
};
RowPiece row_piece(const Shape& shape, int ranks, int rank);

struct DataParallelOptions {
  dist::GradComm grad_comm = dist::GradComm::fp32;
  double bucket_mb = 25;  // MiB of fp32 gradient per bucket
  bool overlap = true;     // start buckets during backward (begin_gradients)
  // The model's backward may run nested backwards (checkpointed segments recompute inside it),
  // which could finish a shared parameter twice: the first step then only watches (see
  // begin_gradients). False for a model known to have none: overlap from the first step.
  bool reentrant_backward = true;
};

class DataParallel {
 public:
  DataParallel(dist::ProcessGroup& group, const DataParallelOptions& o);
  // Removes the reducers install_step_reducers set (they are process-wide).
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The step's reductions that must see every rank (docs/distributed.md, "The step's
  // reductions"): FP8 delayed-scaling amaxes are maxed over the ranks before the scales update
  // (amp::set_fp8_amax_reducer); with `sharded` gradients (ZeRO) the loss scaler's found-inf is
  // or-ed over the ranks too (the found_inf step value, optim/step_reductions.h), since each rank
  // unscales only its own.
  void install_step_reducers(bool sharded);
  // The global L2 norm of sharded gradients, bit-identical to optim::grad_norm over all of
  // `params` unsharded: each rank contributes the terms of the parameters it owns.
  double sharded_grad_norm(std::span<const Tensor> params, const std::vector<int>& owner);
  // The same for row shards (shard_gradient_rows): pieces[k] is this rank's rows of parameter k
  // with their reduced gradient (undefined where it holds none). Each piece's sum of squares
  // (fp64) is gathered from every rank and added parameter by parameter, rows in rank order:
  // the same number on every rank, equal to the unsharded norm up to the order of the fp64
  // additions.
  double row_sharded_grad_norm(std::span<const Tensor> pieces);

  dist::ProcessGroup& group() const { return group_; }
  // The group that moves memory of `device`: group() for host memory, the NCCL group of cuda:i
  // for a GPU's (dist::group_for; collective when it makes that group).
  dist::ProcessGroup& memory_group(Device device) const {
    return device.is_host_memory() ? group_ : dist::group_for(device);
  }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  const DataParallelOptions& options() const { return opts_; }

  // How many distinct host names (gethostname) the ranks run on; collective: every rank calls it.
  int count_hosts();
  // Each host name (gethostname) with its number of ranks, in order of its first rank;
  // collective: every rank calls it.
  std::vector<std::pair<std::string, int>> ranks_per_host();
  // Throws ConfigError on every rank when a rank's `config_json` differs from rank 0's; the
  // message names the first differing fields and the ranks.
  void check_same_config(const std::string& config_json);
  // Rank 0's parameters and buffers to every rank (in named order).
  void broadcast_parameters(nn::Module& model);
  void broadcast_buffers(nn::Module& model);
  // grad <- sum over ranks of weight * grad, for every parameter (a parameter without a gradient
  // contributes zeros and receives the sum), in two halves around the backward of a step's last
  // micro-batch. Gradients in fp32, bf16 or fp16; 16-bit gradients are widened for the reduction
  // and rounded back (nearest even). The same `params` every step. With options().overlap the
  // buckets are reduced while backward computes: begin_gradients installs a
  // grad-ready hook on this thread that starts each bucket, in bucket order, once backward has
  // finished all its parameters' gradients; finish_gradients starts the rest, waits for all and
  // writes the sums into the gradients. The results are the same, bit for bit. With
  // reentrant_backward the first step only watches: if backward completes some parameter twice
  // (e.g. one shared by two checkpointed segments), its bucket would be sent too early, so overlap
  // stays off for the run. A parameter completed again after its bucket was sent is an error.
  void begin_gradients(std::span<const Tensor> params, double weight);
  void finish_gradients();
  // Buckets per step, and how many of the last step's were started during backward.
  int buckets() const { return int(buckets_.size()); }
  int buckets_started_in_backward() const { return started_in_backward_; }
  // Whether the gradient reductions go through memory the ranks map (grad_reduce.h), rather than
  // the transport; the same on every rank (map_shared agrees on it).
  bool shared_memory_reduction() const {
    return std::any_of(buckets_.begin(), buckets_.end(),
                       [](const Bucket& b) { return b.shared != nullptr; });
  }
  // Why the reductions do not use shared memory (for the run's summary), given the number of
  // hosts the ranks run on; "" when they do.
  std::string shared_memory_off_reason(int hosts) const;
  // ZeRO stage 1: which rank owns (keeps the optimizer state of, and updates) each of `params`.
  // Whole parameters, balanced by size (largest first, to the least-loaded rank), the same on
  // every rank.
  std::vector<int> partition(std::span<const Tensor> params) const;
  // ZeRO stage 2: from now on each parameter's reduced gradient goes only to its owner (`owner`,
  // from partition()); the other ranks drop their copy of it as soon as its bucket is on the wire,
  // during backward when overlapping. The owners' gradients are the same, bit for bit.
  void shard_gradients(std::vector<int> owner);
  // ZeRO stage 3: every parameter's gradient reduce-scattered by rows (row_piece): rank r gets
  // the sum of its rows of each, written into pieces[k]'s gradient (pieces[k]: this rank's rows
  // of parameter k, a tensor of its own; undefined where it holds none), and every rank drops
  // the whole gradient as soon as its bucket is on the wire. The sums are the same, bit for bit,
  // as the unsharded reduction's rows.
  void shard_gradient_rows(std::vector<Tensor> pieces);
  // Each parameter from its owner to every rank, in its storage dtype (after the owners' step).
  void broadcast_from_owners(std::span<const Tensor> params, const std::vector<int>& owner);
  // `bytes` of rank `root` to every rank (any length).
  std::vector<std::byte> broadcast_bytes(std::vector<std::byte> bytes, int root);
  // Throws TrainError naming the first parameter whose bytes differ between ranks.
  void check_replicas(const nn::NamedTensors& params, int64_t step);

  // Gradient bytes this rank sent in the last step (begin_gradients to finish_gradients).
  uint64_t last_gradient_bytes() const { return last_bytes_; }
  // Milliseconds this rank spent in collectives so far: group()'s and, for gradients in GPU
  // memory, those of the group that reduced them.
  double comm_ms() const;
  // Gradients outside ordinary host memory (a GPU's, the guarded test device's) are reduced by
  // backend ops on their device over dist::group_for(device) (src/train/device_grad_reduce.h):
  // the same sums bit for bit, each bucket at once when backward has finished it (blocking: the
  // reduction itself does not overlap the rest of backward), without shared memory. Known after
  // the first begin_gradients.
  bool device_reduction() const { return device_path_; }
  // The transport of the gradients: "shared memory", or the group's backend ("mpi", "nccl").
  std::string gradient_transport() const;

 private:
  dist::ProcessGroup& group_;
  DataParallelOptions opts_;
  struct Bucket {
    std::vector<size_t> order;   // its parameters, last first (ZeRO 2: grouped by owner)
    std::vector<size_t> counts;  // ZeRO 2 and 3: elements per owner rank
    // Per order entry: offset in work->flat, or -1 (in place). Row shards: of this rank's rows
    // (-1: it holds none).
    std::vector<int64_t> staged;
    size_t elems = 0;
    int waiting = 0;  // parameters whose gradient backward has not finished yet
    dist::PendingReduce reduce;
    dist::ReduceWorkspace* work = nullptr;  // from pool_, while in flight
    // Ranks on one machine: the bucket's memory that every rank maps (PendingReduce reads the
    // other ranks' contributions there instead of sending them); null elsewhere.
    std::unique_ptr<dist::SharedMemory> shared;
  };
  enum class Overlap { learning, on, off };

  void layout(std::span<const Tensor> params);
  void on_grad_ready(const Tensor& leaf);
  void start_next_bucket();
  void start_rows(Bucket& b);
  void progress();
  void write_back(Bucket& b);
  void reduce_bucket_on_device(Bucket& b);

  uint64_t last_bytes_ = 0;
  uint64_t bytes0_ = 0;
  // Gradients in device memory (device_reduction()), and the group that reduces them: group_
  // for host memory, the NCCL group of cuda:i (dist::group_for) for a GPU's.
  bool device_path_ = false;
  dist::ProcessGroup* grads_group_ = nullptr;
  uint64_t grads_bytes0_ = 0;
  std::span<const Tensor> params_;
  float weight_ = 1;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;                    // per parameter
  std::vector<int> grad_owner_;                      // ZeRO 2: per parameter (else empty)
  std::vector<Tensor> row_pieces_;                   // ZeRO 3: this rank's rows, per parameter
  bool rows_ = false;                                // ZeRO 3: shard_gradient_rows
  std::unordered_map<const void*, size_t> index_;   // TensorImpl* -> parameter index
  std::vector<uint8_t> completed_;                   // per parameter: times backward finished it
  size_t next_ = 0;                                  // the next bucket to start
  int started_in_backward_ = 0;
  bool late_ = false;  // a gradient was finished again after its bucket started
  Overlap overlap_state_ = Overlap::learning;  // set by the constructor
  std::unique_ptr<GradReadyHookScope> hook_;
  // The reductions' buffers, reused every step (a step allocates and page-faults nothing).
  std::vector<std::unique_ptr<dist::ReduceWorkspace>> pool_;
  std::vector<dist::ReduceWorkspace*> free_;
};

}  // namespace mixp::train
