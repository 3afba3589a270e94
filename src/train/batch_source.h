// Where the Trainer's batches come from (internal). One interface for the two kinds of data:
//   - ImageBatches: an ImageDataset (Fashion-MNIST, another IDX folder, or synthetic), visited in
//     the BatchSampler's seeded per-epoch permutation, gathered into buffers allocated once.
//   - TextBatches: a TextCorpus; micro-batch k is sample_batch_at(seed, k), so its whole state is
//     the micro-batch counter. An "epoch" is train_tokens / (batch * context) micro-batches.
// Both keep their input/target tensors for the whole run: a step allocates no batch memory.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "mixp/tensor/tensor.h"
#include "mixp/train/train_config.h"

namespace mixp::train::detail {

struct Batch {
  Tensor input;         // mlp [n, 784] / cnn [n, 1, 28, 28] fp32; gpt [n, T] int32
  Tensor target;        // [n] int32 labels; gpt [n * T] int32 next tokens
  int64_t samples = 0;  // n
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Micro-batches per epoch.
  virtual int64_t batches_per_epoch() const = 0;
  // Epoch of the next micro-batch (from 0) and micro-batches of it already handed out.
  virtual int64_t epoch() const = 0;
  virtual int64_t position() const = 0;
  // The next training micro-batch; valid until the next call.
  virtual Batch next() = 0;
  // Resumable state (JSON-friendly integers) and its restoration; restore throws TrainError when
  // the state belongs to different data or batch size.
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& s) = 0;

  // Evaluation set: the test split (classifiers) or validation windows (gpt).
  virtual int64_t eval_batches() const = 0;
  virtual Batch eval_batch(int64_t index) = 0;
  virtual int64_t eval_samples() const = 0;

  virtual int64_t train_samples() const = 0;    // samples (gpt: tokens) in the training split
  virtual int vocab_size() const { return 0; }  // gpt only
  virtual std::string description() const = 0;
};

// Loads the data `c.data` names for model `c.model.name` (a resolved config), with its limits.
// `train` false loads only what evaluation needs (eval of a checkpoint).
std::unique_ptr<BatchSource> make_batch_source(const TrainConfig& c, int64_t context,
                                               bool train = true);

}  // namespace mixp::train::detail
