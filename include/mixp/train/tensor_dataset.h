// TensorDataset: a DataSource over your own tensors, with the loader's work built in (PyTorch's
// TensorDataset + DataLoader + DistributedSampler in one): seeded shuffling, batching, drop_last,
// and sharding by rank.
//
//   TensorDataset data(x, y, {.batch_size = 64, .seed = 1});   // x [N, ...] any dtype, y [N] int64
//   data.shard(rank, world_size);                              // only for data-parallel runs
//
// Order. Epoch e visits permutation(N, seed, e): a Fisher-Yates shuffle of 0..N-1 driven by
// std::mt19937_64 seeded with data::derive_seed(seed, e) (the built-in image data's order,
// docs/data.md), or 0..N-1 with shuffle off. It is a pure function of (N, seed, e), so the state a
// checkpoint needs is the epoch and the position in it.
//
// Sharding (DistributedSampler's rule). With world_size W > 1 the epoch's order is first made a
// multiple of W: drop_last drops its tail, otherwise its first samples are repeated at the end;
// rank r then takes every W-th sample from position r. The shards are disjoint (apart from the
// repeated samples), together cover the epoch, have the same length and so the same number of
// batches on every rank: the global batch is batch_size x W. Every rank must use the same seed.
//
// Batching. Batch k of an epoch is samples [k * batch_size, (k + 1) * batch_size) of the shard's
// order; the last one is shorter unless drop_last drops it. The samples are copied into buffers
// allocated once (the first next()), and a batch is a view of them: valid until the next call.
//
// Evaluation. set_eval() adds an evaluation set, visited in order in batches of eval_batch_size
// (views of it, no copies), on every rank whole (not sharded).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixp/tensor/tensor.h"
#include "mixp/train/data_source.h"

namespace mixp::train {

struct TensorDatasetOptions {
  int64_t batch_size = 32;      // samples per micro-batch (per rank)
  bool shuffle = true;          // a new permutation every epoch; false: 0..N-1 every epoch
  uint64_t seed = 0;            // of the permutations; the same on every rank
  bool drop_last = false;       // drop the short last batch (and, sharded, the uneven tail)
  int64_t eval_batch_size = 0;  // batches of the evaluation set; 0 = batch_size
  std::string description{};    // for logs; "" = "tensors: N samples of [..] <dtype>"
};

class TensorDataset final : public DataSource {
 public:
  // `inputs` [N, ...] of any dtype (features in a floating dtype; token ids in int32/int64);
  // `targets` [N, ...] (int64 or int32 class indices for the Trainer's default cross-entropy loss,
  // or whatever a custom loss takes). Both are kept (made contiguous; not copied when they are
  // already). Throws std::invalid_argument for tensors of different lengths, an empty set, a
  // batch size < 1, or drop_last with fewer samples than one batch.
  TensorDataset(Tensor inputs, Tensor targets, const TensorDatasetOptions& opt = {});

  // This process's shard of `world_size` (0 <= rank < world_size); call before the first next().
  // Returns *this. Throws std::invalid_argument for a bad rank or, with drop_last, a shard
  // shorter than one batch.
  TensorDataset& shard(int64_t rank, int64_t world_size);
  // Adds (replaces) the evaluation set. Throws std::invalid_argument as the constructor.
  TensorDataset& set_eval(Tensor inputs, Tensor targets);

  int64_t size() const { return n_; }  // N, the whole training set
  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_; }
  int64_t shard_size() const;  // samples this rank visits per epoch (dropped batches included)
  // The sample indices this rank visits in epoch `epoch`, in order (shard_size() of them).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // DataSource
  int64_t batches_per_epoch() const override;
  int64_t batch_size() const override { return opt_.batch_size; }
  int64_t epoch() const override;
  int64_t position() const override;
  Batch next() override;
  // {"seed", "epoch", "position" (samples of the shard handed out), "dataset_size", "batch_size"}
  // and, sharded, "rank" and "world_size" (the built-in image data's state has the same keys).
  std::string state() const override;
  void restore(const std::string& state) override;
  int64_t eval_batches() const override;
  Batch eval_batch(int64_t index) override;
  int64_t eval_samples() const override { return eval_n_; }
  int64_t train_samples() const override { return n_; }
  std::string description() const override;

 private:
  void start_epoch(int64_t e);

  TensorDatasetOptions opt_;
  Tensor x_, y_, ex_, ey_;  // the data (contiguous)
  Tensor bx_, by_;          // batch buffers, allocated by the first next()
  int64_t n_ = 0, eval_n_ = 0;
  int64_t rank_ = 0, world_ = 1;
  int64_t epoch_ = 0, pos_ = 0;  // pos_: samples of epoch_'s order handed out
  bool started_ = false;         // order_ holds epoch_'s order
  std::vector<int64_t> order_;
};

}  // namespace mixp::train
