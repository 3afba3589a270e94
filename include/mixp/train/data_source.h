// Where the Trainer's batches come from: one interface for the built-in data (Fashion-MNIST or
// another IDX folder, a text corpus, the synthetic sets) and for a user's own (TensorDataset over
// your tensors, tensor_dataset.h, or a class of your own).
//
// A DataSource hands out the training set as micro-batches, epoch after epoch, in an order that is
// a pure function of its seed and position, so that a checkpoint can record where it stands
// (state()) and a resumed run continues bit for bit (restore()). It may also hold an evaluation set
// (the test split, or gpt's validation windows), visited in order by Trainer::evaluate().
//
// The Trainer calls next() once per micro-batch and is done with the batch (forward and backward)
// before it calls next() again, so a source may hand out views of buffers it reuses: a step then
// allocates no batch memory (the built-in sources and TensorDataset do that).
#pragma once
#include <cstdint>
#include <string>

#include "mixp/tensor/tensor.h"

namespace mixp::train {

// One micro-batch: the model's input and the loss's target.
struct Batch {
  Tensor input;         // e.g. mlp [n, 784] / cnn [n, 1, 28, 28] fp32; gpt [n, T] int32 tokens
  Tensor target;        // e.g. [n] int32/int64 class labels; gpt [n * T] int32 next tokens
  int64_t samples = 0;  // n (gpt: sequences)
};

class DataSource {
 public:
  virtual ~DataSource() = default;

  // ---- the training set
  // Micro-batches per epoch (every epoch has as many; > 0).
  virtual int64_t batches_per_epoch() const = 0;
  // Samples per micro-batch (the last one of an epoch may have fewer); the Trainer reports
  // samples per second from it.
  virtual int64_t batch_size() const = 0;
  // The epoch of the next micro-batch (from 0), and how many micro-batches of that epoch were
  // handed out already (0 <= position < batches_per_epoch()). After an epoch's last micro-batch,
  // epoch() is already the next epoch and position() 0.
  virtual int64_t epoch() const = 0;
  virtual int64_t position() const = 0;
  // The next training micro-batch; its tensors stay valid until the next call to next().
  virtual Batch next() = 0;

  // Resumable state: a JSON object (text) that restore() accepts, stored in a checkpoint's
  // state.json under "data". The default records {"epoch": E, "position": P}, and its restore()
  // calls next() until the source stands there again: correct for any source whose order depends
  // only on how it was constructed, and fast enough for small data. Sources that can jump
  // directly (all in mixp) override both. restore() throws TrainError (train_config.h) for a
  // state that belongs to other data or another batch size.
  virtual std::string state() const;
  virtual void restore(const std::string& state);

  // ---- the evaluation set (none by default): batches visited in order by Trainer::evaluate().
  virtual int64_t eval_batches() const { return 0; }
  // Batch `index` of [0, eval_batches()); valid until the next call. The default throws
  // std::out_of_range.
  virtual Batch eval_batch(int64_t index);
  virtual int64_t eval_samples() const { return 0; }

  // ---- descriptions
  // Samples (gpt: tokens) in the training set; 0 when unknown.
  virtual int64_t train_samples() const { return 0; }
  // The vocabulary of a language model's tokens, 0 for anything else. A source with a vocabulary
  // makes the Trainer report a validation loss (val_loss) rather than an accuracy.
  virtual int vocab_size() const { return 0; }
  // One line for logs and the result's "data" field.
  virtual std::string description() const { return "custom data"; }
  // A checksum of the training set's contents (text; empty when the source has none or did not
  // load its training set). A checkpoint records it, and a resumed run whose data has another
  // one is refused (docs/train.md, "Resuming": the data may move, not change). mixp's sources
  // give CRC-32s of the samples and targets, computed once.
  virtual std::string fingerprint() const { return {}; }
};

}  // namespace mixp::train
