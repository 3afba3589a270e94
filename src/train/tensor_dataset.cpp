// TensorDataset: seeded order, DistributedSampler-style shards, batches gathered into reused
// buffers. See include/mixp/train/tensor_dataset.h.
#include "mixp/train/tensor_dataset.h"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/data/batch_sampler.h"
#include "mixp/train/train_config.h"

namespace mixp::train {

namespace {

// The tensors a set keeps: detached from any graph, contiguous, with matching lengths.
void check_pair(const Tensor& x, const Tensor& y, const char* what) {
  if (!x.defined() || !y.defined()) {
    throw std::invalid_argument(fmt::format("TensorDataset: the {} tensors are undefined", what));
  }
  if (x.dim() < 1 || y.dim() < 1) {
    throw std::invalid_argument(fmt::format(
        "TensorDataset: the {} inputs and targets need a sample dimension first ([N, ...]); got "
        "{} and {}",
        what, x.shape().str(), y.shape().str()));
  }
  if (x.size(0) != y.size(0)) {
    throw std::invalid_argument(
        fmt::format("TensorDataset: {} inputs {} and targets {} hold different numbers of samples "
                    "({} and {})",
                    what, x.shape().str(), y.shape().str(), x.size(0), y.size(0)));
  }
}

Tensor keep(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().contiguous();
}

// A buffer of `rows` samples shaped like `like`'s.
Tensor buffer_like(const Tensor& like, int64_t rows) {
  Shape s = like.shape();
  s[0] = rows;
  return Tensor::empty(s, {.dtype = like.dtype(), .device = like.device()});
}

// Copies samples `idx` of `src` into the first rows of `dst` (same dtype, contiguous).
void gather(const Tensor& src, std::span<const int64_t> idx, const Tensor& dst) {
  if (!src.device().is_cpu()) {
    // Tensors on another device: row copies by its backend (copy_), not host memcpy.
    NoGradGuard ng;
    for (size_t i = 0; i < idx.size(); ++i) {
      const auto r = static_cast<int64_t>(i);
      Tensor d = dst.slice(0, r, r + 1);
      d.copy_(src.slice(0, idx[i], idx[i] + 1));
    }
    return;
  }
  const size_t row = src.size(0) > 0 ? src.nbytes() / size_t(src.size(0)) : 0;
  const auto* from = static_cast<const std::byte*>(src.data_ptr());
  auto* to = static_cast<std::byte*>(dst.data_ptr());
  for (size_t i = 0; i < idx.size(); ++i) {
    std::memcpy(to + i * row, from + size_t(idx[i]) * row, row);
  }
  dst.bump_version();  // a raw write: anything cached from the old contents is stale
}

Batch view_batch(const Tensor& bx, const Tensor& by, int64_t n) {
  Batch b;
  b.samples = n;
  b.input = n == bx.size(0) ? bx : bx.slice(0, 0, n);
  b.target = n == by.size(0) ? by : by.slice(0, 0, n);
  return b;
}

}  // namespace

TensorDataset::TensorDataset(Tensor inputs, Tensor targets, const TensorDatasetOptions& opt)
    : opt_(opt) {
  check_pair(inputs, targets, "training");
  if (opt_.batch_size < 1) {
    throw std::invalid_argument(
        fmt::format("TensorDataset: batch_size must be at least 1, got {}", opt_.batch_size));
  }
  if (opt_.eval_batch_size < 0) {
    throw std::invalid_argument("TensorDataset: eval_batch_size must be >= 0 (0 = batch_size)");
  }
  x_ = keep(inputs);
  y_ = keep(targets);
  n_ = x_.size(0);
  if (n_ == 0) throw std::invalid_argument("TensorDataset: the training set is empty");
  shard(0, 1);  // checks drop_last against the batch size
}

TensorDataset& TensorDataset::shard(int64_t rank, int64_t world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument(
        fmt::format("TensorDataset::shard: rank {} of world size {}; need 0 <= rank < world_size",
                    rank, world_size));
  }
  if (world_size > n_) {
    throw std::invalid_argument(fmt::format(
        "TensorDataset::shard: {} samples cannot be split into {} shards", n_, world_size));
  }
  rank_ = rank;
  world_ = world_size;
  if (opt_.drop_last && shard_size() < opt_.batch_size) {
    throw std::invalid_argument(fmt::format(
        "TensorDataset: drop_last with batches of {} and {} samples per shard leaves no batch in "
        "an epoch; use a smaller batch",
        opt_.batch_size, shard_size()));
  }
  epoch_ = 0;
  pos_ = 0;
  started_ = false;
  return *this;
}

TensorDataset& TensorDataset::set_eval(Tensor inputs, Tensor targets) {
  check_pair(inputs, targets, "evaluation");
  ex_ = keep(inputs);
  ey_ = keep(targets);
  eval_n_ = ex_.size(0);
  return *this;
}

int64_t TensorDataset::shard_size() const {
  // DistributedSampler: the epoch's order cut down (drop_last) or padded up to a multiple of W.
  return opt_.drop_last ? n_ / world_ : (n_ + world_ - 1) / world_;
}

int64_t TensorDataset::batches_per_epoch() const {
  const int64_t m = shard_size(), b = opt_.batch_size;
  return opt_.drop_last ? m / b : (m + b - 1) / b;
}

std::vector<int64_t> TensorDataset::epoch_order(int64_t epoch) const {
  std::vector<int64_t> all = data::BatchSampler::permutation(n_, opt_.seed, epoch, opt_.shuffle);
  if (world_ == 1) return all;  // also the built-in image data's order
  const int64_t m = shard_size();
  std::vector<int64_t> out(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    // Position rank + i*W of the padded order; padding repeats the order from its start.
    out[size_t(i)] = all[size_t((rank_ + i * world_) % n_)];
  }
  return out;
}

void TensorDataset::start_epoch(int64_t e) {
  epoch_ = e;
  pos_ = 0;
  order_ = epoch_order(e);
  started_ = true;
}

int64_t TensorDataset::epoch() const {
  const int64_t per_epoch = batches_per_epoch() * opt_.batch_size;
  const bool at_end = pos_ >= std::min<int64_t>(per_epoch, shard_size());
  return at_end ? epoch_ + 1 : epoch_;
}

int64_t TensorDataset::position() const {
  const int64_t per_epoch = std::min<int64_t>(batches_per_epoch() * opt_.batch_size, shard_size());
  if (pos_ >= per_epoch) return 0;
  return (pos_ + opt_.batch_size - 1) / opt_.batch_size;
}

Batch TensorDataset::next() {
  const int64_t per_epoch = std::min<int64_t>(batches_per_epoch() * opt_.batch_size, shard_size());
  if (pos_ >= per_epoch) {
    start_epoch(epoch_ + 1);
  } else if (!started_) {
    const int64_t pos = pos_;
    start_epoch(epoch_);
    pos_ = pos;
  }
  if (!bx_.defined()) {
    bx_ = buffer_like(x_, opt_.batch_size);
    by_ = buffer_like(y_, opt_.batch_size);
  }
  const int64_t n = std::min(opt_.batch_size, per_epoch - pos_);
  const std::span<const int64_t> idx(order_.data() + pos_, size_t(n));
  gather(x_, idx, bx_);
  gather(y_, idx, by_);
  pos_ += n;
  return view_batch(bx_, by_, n);
}

std::string TensorDataset::state() const {
  nlohmann::json j = {{"seed", opt_.seed},
                      {"epoch", epoch_},
                      {"position", pos_},
                      {"dataset_size", n_},
                      {"batch_size", opt_.batch_size}};
  if (world_ > 1) {
    j["rank"] = rank_;
    j["world_size"] = world_;
  }
  return j.dump();
}

void TensorDataset::restore(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  const int64_t n = j.at("dataset_size").get<int64_t>();
  const int64_t b = j.at("batch_size").get<int64_t>();
  const int64_t rank = j.value("rank", int64_t(0)), world = j.value("world_size", int64_t(1));
  if (n != n_ || b != opt_.batch_size || world != world_ || rank != rank_) {
    throw TrainError(fmt::format(
        "the checkpoint's data order was taken over {} samples in batches of {} (shard {} of {}), "
        "this run has {} samples in batches of {} (shard {} of {}); resume with the same data, "
        "batch size and shard",
        n, b, rank, world, n_, opt_.batch_size, rank_, world_));
  }
  const int64_t epoch = j.at("epoch").get<int64_t>(), pos = j.at("position").get<int64_t>();
  const int64_t per_epoch = std::min<int64_t>(batches_per_epoch() * opt_.batch_size, shard_size());
  if (epoch < 0 || pos < 0 || pos > per_epoch) {
    throw TrainError(fmt::format(
        "the checkpoint's data order stands at epoch {} position {}, outside [0, {}] (corrupt "
        "checkpoint?)",
        epoch, pos, per_epoch));
  }
  opt_.seed = j.at("seed").get<uint64_t>();
  start_epoch(epoch);
  pos_ = pos;
}

int64_t TensorDataset::eval_batches() const {
  const int64_t b = opt_.eval_batch_size > 0 ? opt_.eval_batch_size : opt_.batch_size;
  return (eval_n_ + b - 1) / b;
}

Batch TensorDataset::eval_batch(int64_t index) {
  if (index < 0 || index >= eval_batches()) {
    throw std::out_of_range(
        fmt::format("TensorDataset::eval_batch: batch {} of {}", index, eval_batches()));
  }
  // The evaluation set is visited in order: a batch is a view of it, nothing is copied.
  const int64_t b = opt_.eval_batch_size > 0 ? opt_.eval_batch_size : opt_.batch_size;
  const int64_t begin = index * b, n = std::min(b, eval_n_ - begin);
  Batch out;
  out.samples = n;
  out.input = ex_.slice(0, begin, begin + n);
  out.target = ey_.slice(0, begin, begin + n);
  return out;
}

std::string TensorDataset::description() const {
  if (!opt_.description.empty()) return opt_.description;
  Shape sample = x_.shape();
  sample.erase(0);
  std::string d = fmt::format("tensors: {} samples of {} {}", n_, sample.str(), name(x_.dtype()));
  if (world_ > 1) d += fmt::format(", shard {} of {}", rank_, world_);
  if (eval_n_ > 0) d += fmt::format(", {} for evaluation", eval_n_);
  return d;
}

}  // namespace mixp::train
