// Data parallelism for the Trainer (docs/distributed.md): what every rank does so that N
// processes train one model as one process would with an N times larger batch.
//
// PyTorch DistributedDataParallel's semantics, on a dist::ProcessGroup:
//   - at the start, rank 0's parameters and buffers are copied to every rank (so a custom model
//     initialised differently still starts identical), and the configurations are compared;
//   - before each step's forward, rank 0's buffers are broadcast (DDP's broadcast_buffers:
//     BatchNorm statistics, QAT observers, FP8 scaling state stay identical);
//   - after backward, in the gradient-sync stage (callbacks.h), the gradients are reduced in
//     buckets of about bucket_mb MiB (parameters in reverse order, as backward produces them) to
//     the global mean: each rank's gradient weighted by its share of the step's samples;
//   - every `check_replicas` steps, a checksum of every parameter is compared across ranks.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mixp/dist/grad_reduce.h"
#include "mixp/dist/process_group.h"
#include "mixp/nn/module.h"
#include "mixp/tensor/tensor.h"

namespace mixp::train {

struct DataParallelOptions {
  dist::GradComm grad_comm = dist::GradComm::fp32;
  double bucket_mb = 25;  // MiB of fp32 gradient per bucket
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
  // or-ed over the ranks too (amp::set_found_inf_reducer), since each rank unscales only its own.
  void install_step_reducers(bool sharded);
  // The global L2 norm of sharded gradients, bit-identical to optim::grad_norm over all of
  // `params` unsharded: each rank contributes the terms of the parameters it owns.
  double sharded_grad_norm(std::span<const Tensor> params, const std::vector<int>& owner);

  dist::ProcessGroup& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  const DataParallelOptions& options() const { return opts_; }

  // Throws ConfigError on every rank when a rank's `config_json` differs from rank 0's; the
  // message names the first differing fields and the ranks.
  void check_same_config(const std::string& config_json);
  // Rank 0's parameters and buffers to every rank (in named order).
  void broadcast_parameters(nn::Module& model);
  void broadcast_buffers(nn::Module& model);
  // grad <- sum over ranks of weight * grad, for every parameter (a parameter without a gradient
  // contributes zeros and receives the sum). Gradients in fp32, bf16 or fp16; 16-bit gradients are
  // widened for the reduction and rounded back (nearest even).
  void reduce_gradients(std::span<const Tensor> params, double weight);
  // ZeRO stage 1: which rank owns (keeps the optimizer state of, and updates) each of `params`.
  // Whole parameters, balanced by size (largest first, to the least-loaded rank), the same on
  // every rank.
  std::vector<int> partition(std::span<const Tensor> params) const;
  // Each parameter from its owner to every rank, in its storage dtype (after the owners' step).
  void broadcast_from_owners(std::span<const Tensor> params, const std::vector<int>& owner);
  // `bytes` of rank `root` to every rank (any length).
  std::vector<std::byte> broadcast_bytes(std::vector<std::byte> bytes, int root);
  // Throws TrainError naming the first parameter whose bytes differ between ranks.
  void check_replicas(const nn::NamedTensors& params, int64_t step);

  // Gradient bytes this rank sent in the last reduce_gradients call.
  uint64_t last_gradient_bytes() const { return last_bytes_; }

 private:
  dist::ProcessGroup& group_;
  DataParallelOptions opts_;
  uint64_t last_bytes_ = 0;
  std::vector<float> flat_;      // one bucket's gradients, reused every step
  dist::ReduceWorkspace work_;   // the reduction's buffers, reused every step
};

}  // namespace mixp::train
