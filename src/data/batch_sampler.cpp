// Shuffled batches. The permutation is recomputed from (seed, epoch) at each epoch start (O(n),
// 60000 swaps for Fashion-MNIST, negligible next to one training step) instead of carrying a
// generator, which is what makes the state three integers.
#include "mixp/data/batch_sampler.h"

#include <fmt/format.h>

#include <cstring>
#include <numeric>
#include <stdexcept>

#include "mixp/data/random.h"

namespace mixp::data {

BatchSampler::BatchSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle,
                           bool drop_last)
    : n_(dataset_size), batch_(batch_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  if (n_ <= 0) throw std::invalid_argument(fmt::format("BatchSampler: dataset size {} <= 0", n_));
  if (batch_ <= 0)
    throw std::invalid_argument(fmt::format("BatchSampler: batch size {} <= 0", batch_));
  if (drop_last_ && batch_ > n_) {
    throw std::invalid_argument(fmt::format(
        "BatchSampler: batch size {} is larger than the data set ({} samples) and drop_last is "
        "set, so an epoch would have no batch; use a smaller batch",
        batch_, n_));
  }
  start_epoch(0);
}

int64_t BatchSampler::batches_per_epoch() const {
  return drop_last_ ? n_ / batch_ : (n_ + batch_ - 1) / batch_;
}

int64_t BatchSampler::samples_per_epoch() const {
  return drop_last_ ? (n_ / batch_) * batch_ : n_;
}

std::vector<int64_t> BatchSampler::permutation(int64_t n, uint64_t seed, int64_t epoch,
                                               bool shuffle) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  if (shuffle) {
    std::mt19937_64 rng(derive_seed(seed, uint64_t(epoch)));
    fisher_yates_shuffle(std::span<int64_t>(p), rng);
  }
  return p;
}

void BatchSampler::start_epoch(int64_t e) {
  epoch_ = e;
  pos_ = 0;
  order_ = permutation(n_, seed_, e, shuffle_);
}

std::span<const int64_t> BatchSampler::next() {
  if (at_epoch_end()) start_epoch(epoch_ + 1);
  const int64_t len = std::min(batch_, samples_per_epoch() - pos_);
  std::span<const int64_t> out(order_.data() + pos_, static_cast<size_t>(len));
  pos_ += len;
  return out;
}

SamplerState BatchSampler::state() const {
  return {seed_, epoch_, pos_, n_, batch_};
}

void BatchSampler::restore(const SamplerState& s) {
  if (s.dataset_size != n_ || s.batch_size != batch_) {
    throw std::invalid_argument(fmt::format(
        "cannot resume the batch order: the checkpoint was taken with {} samples in batches of {}, "
        "this run has {} in batches of {}; resume with the same data set and --batch",
        s.dataset_size, s.batch_size, n_, batch_));
  }
  if (s.epoch < 0 || s.position < 0 || s.position > samples_per_epoch()) {
    throw std::invalid_argument(fmt::format(
        "cannot resume the batch order: epoch {} position {} is outside [0, {}] (corrupt "
        "checkpoint?)",
        s.epoch, s.position, samples_per_epoch()));
  }
  seed_ = s.seed;
  start_epoch(s.epoch);
  pos_ = s.position;
}

void gather_rows(std::span<const float> table, int64_t row_size, std::span<const int64_t> indices,
                 std::span<float> out) {
  if (row_size <= 0) throw std::invalid_argument(fmt::format("gather_rows: row size {}", row_size));
  const int64_t rows = int64_t(table.size()) / row_size;
  const size_t rs = size_t(row_size);
  if (out.size() < indices.size() * rs) {
    throw std::invalid_argument(
        fmt::format("gather: output buffer holds {} values, {} rows of {} need {}", out.size(),
                    indices.size(), row_size, indices.size() * rs));
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = indices[i];
    if (r < 0 || r >= rows) {
      throw std::out_of_range(
          fmt::format("gather: index {} (batch row {}) outside [0, {})", r, i, rows));
    }
    std::memcpy(out.data() + i * rs, table.data() + size_t(r) * rs, rs * sizeof(float));
  }
}

void gather_batch(const ImageDataset& ds, std::span<const int64_t> indices, std::span<float> images,
                  std::span<int32_t> labels) {
  if (labels.size() < indices.size()) {
    throw std::invalid_argument(fmt::format("gather_batch: label buffer holds {} values, need {}",
                                            labels.size(), indices.size()));
  }
  gather_rows(ds.images, ds.sample_size(), indices, images);  // also checks the indices
  for (size_t i = 0; i < indices.size(); ++i) labels[i] = ds.labels[size_t(indices[i])];
}

}  // namespace mixp::data
