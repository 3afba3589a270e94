// The built-in data sources (internal): the DataSource implementations (mixp/train/data_source.h)
// behind `--data`, for the two kinds of data:
//   - ImageBatches: an ImageDataset (Fashion-MNIST, another IDX folder, or synthetic), visited in
//     the BatchSampler's seeded per-epoch permutation, gathered into buffers allocated once.
//   - TextBatches: a TextCorpus; micro-batch k is sample_batch_at(seed, k), so its whole state is
//     the micro-batch counter. An "epoch" is train_tokens / (batch * context) micro-batches.
// Both keep their input/target tensors for the whole run: a step allocates no batch memory.
#pragma once
#include <cstdint>
#include <memory>

#include "mixp/train/data_source.h"
#include "mixp/train/train_config.h"

namespace mixp::train::detail {

// Loads the data `c.data` names for model `c.model.name` (a resolved config), with its limits.
// `train` false loads only what evaluation needs (eval of a checkpoint).
std::unique_ptr<DataSource> make_batch_source(const TrainConfig& c, int64_t context,
                                              bool train = true);

}  // namespace mixp::train::detail
