// The data of one rank of a data-parallel run (docs/distributed.md, "Data"): a DataSource that
// hands out this rank's slice of every global micro-batch of another source.
//
// The inner source is built with the global batch (per-rank batch x ranks) and keeps the order a
// single process would see with that batch; rank r of N takes rows [n r / N, n (r+1) / N) of each
// of its batches (n samples; gpt's targets by their T tokens per sample). So the ranks' samples
// are disjoint, together they are exactly the single process's batch (llm.c's DataLoader shards
// the same way, each process at its own offset of the global batch), and `N ranks x batch b` trains
// like `1 rank x batch N b`. The state (position, epoch) is the inner source's: a checkpoint
// written by any rank resumes on any number of ranks with the same global batch.
//
// Evaluation batches are dealt round-robin: rank r evaluates batches r, r + N, ... and the
// Trainer sums the results over the ranks.
#pragma once
#include <memory>

#include "mixp/train/data_source.h"

namespace mixp::train::detail {

class ShardedSource final : public DataSource {
 public:
  ShardedSource(std::unique_ptr<DataSource> global, int rank, int ranks);

  int64_t batches_per_epoch() const override { return inner_->batches_per_epoch(); }
  int64_t batch_size() const override { return inner_->batch_size() / ranks_; }
  int64_t epoch() const override { return inner_->epoch(); }
  int64_t position() const override { return inner_->position(); }
  Batch next() override;
  std::string state() const override { return inner_->state(); }
  void restore(const std::string& s) override { inner_->restore(s); }
  int64_t eval_batches() const override;
  Batch eval_batch(int64_t index) override;
  int64_t eval_samples() const override { return inner_->eval_samples(); }
  int64_t train_samples() const override { return inner_->train_samples(); }
  int vocab_size() const override { return inner_->vocab_size(); }
  std::string description() const override { return inner_->description(); }
  std::string fingerprint() const override { return inner_->fingerprint(); }

  // Samples of the last next() batch over all ranks.
  int64_t global_samples() const { return global_samples_; }

 private:
  Batch slice(const Batch& b) const;
  std::unique_ptr<DataSource> inner_;
  int rank_, ranks_;
  int64_t global_samples_ = 0;
};

}  // namespace mixp::train::detail
