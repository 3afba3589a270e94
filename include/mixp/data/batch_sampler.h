// Epoch-wise shuffled mini-batches and the gather that copies them into contiguous buffers.
//
// Order: epoch e visits the samples in permutation(dataset_size, seed, e): the identity when
// shuffling is off, else a Fisher–Yates shuffle of 0..n-1 driven by std::mt19937_64 seeded with
// derive_seed(seed, e) (random.h). It is a pure function of (n, seed, e), so the sampler's whole
// state is three integers and a checkpoint resumes mid-epoch bit-identically.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "mixp/data/image_dataset.h"

namespace mixp::data {

// JSON-friendly sampler state. dataset_size and batch_size are kept to refuse a resume against a
// different data set or batch size, which would silently change the order.
struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;     // current epoch, from 0
  int64_t position = 0;  // samples of this epoch's order already handed out
  int64_t dataset_size = 0;
  int64_t batch_size = 0;
};

class BatchSampler {
 public:
  // drop_last: an epoch ends before a final batch smaller than batch_size (PyTorch's DataLoader).
  BatchSampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle = true,
               bool drop_last = false);

  int64_t dataset_size() const { return n_; }
  int64_t batch_size() const { return batch_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }
  // Batches per epoch: ceil(n / batch), or floor(n / batch) with drop_last.
  int64_t batches_per_epoch() const;
  // Samples handed out per epoch (n, or batches_per_epoch * batch with drop_last).
  int64_t samples_per_epoch() const;

  int64_t epoch() const { return epoch_; }
  int64_t position() const { return pos_; }
  // True after the last batch of the current epoch; the next call to next() starts epoch + 1.
  bool at_epoch_end() const { return pos_ >= samples_per_epoch(); }

  // Indices of the next batch (valid until the next call to next() or restore()). Starts the next
  // epoch first when the current one is finished.
  std::span<const int64_t> next();

  // The current epoch's full order.
  std::span<const int64_t> order() const { return order_; }

  SamplerState state() const;
  // Continues exactly where `s` was taken. Throws std::invalid_argument if s.dataset_size or
  // s.batch_size differ from this sampler's, or if position is outside [0, samples_per_epoch()].
  void restore(const SamplerState& s);

  // The order of epoch `epoch` (see the file comment).
  static std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch,
                                          bool shuffle = true);

 private:
  void start_epoch(int64_t e);

  int64_t n_, batch_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int64_t epoch_ = 0;
  int64_t pos_ = 0;
  std::vector<int64_t> order_;
};

// Copies the samples `indices` of `ds` into `images` (indices.size() * sample_size floats, row
// after row) and `labels` (indices.size() values). The buffers may be larger; the rest is
// untouched. Throws std::out_of_range for an index outside [0, ds.count) and std::invalid_argument
// for buffers that are too small.
void gather_batch(const ImageDataset& ds, std::span<const int64_t> indices, std::span<float> images,
                  std::span<int32_t> labels);

// The same for any row-major float table of `row_size` values per row.
void gather_rows(std::span<const float> table, int64_t row_size, std::span<const int64_t> indices,
                 std::span<float> out);

}  // namespace mixp::data
