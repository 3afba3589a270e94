// ShardedSource (sharded_source.h).
#include "sharded_source.h"

#include <fmt/format.h>

#include "mixp/train/train_config.h"

namespace mixp::train::detail {

ShardedSource::ShardedSource(std::unique_ptr<DataSource> global, int rank, int ranks)
    : inner_(std::move(global)), rank_(rank), ranks_(ranks) {}

Batch ShardedSource::slice(const Batch& b) const {
  const int64_t n = b.samples;
  const int64_t lo = n * rank_ / ranks_, hi = n * (rank_ + 1) / ranks_;
  if (hi <= lo) {
    throw TrainError(fmt::format(
        "a batch of {} samples cannot be shared by {} ranks (rank {} would get none); this is the "
        "last, shorter batch of an epoch: use a training set or --train-limit whose size leaves "
        "at least {} samples in it, or fewer ranks",
        n, ranks_, rank_, ranks_));
  }
  Batch out;
  out.input = b.input.slice(0, lo, hi);
  const int64_t per = b.target.size(0) / n;  // targets per sample: 1, or gpt's T tokens
  out.target = b.target.slice(0, lo * per, hi * per);
  out.samples = hi - lo;
  return out;
}

Batch ShardedSource::next() {
  Batch b = inner_->next();
  global_samples_ = b.samples;
  return slice(b);
}

int64_t ShardedSource::eval_batches() const {
  const int64_t n = inner_->eval_batches();
  return n > rank_ ? (n - rank_ + ranks_ - 1) / ranks_ : 0;
}

Batch ShardedSource::eval_batch(int64_t index) {
  return inner_->eval_batch(index * ranks_ + rank_);
}

}  // namespace mixp::train::detail
