// TensorDataset: the built-in image data's seeded order, batches gathered from the user's tensors
// (any dtype), drop_last, DistributedSampler-style shards, and state/restore; and DataSource's
// default state/restore (replaying next()).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

#include "mixp/data/batch_sampler.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/data_source.h"
#include "mixp/train/tensor_dataset.h"
#include "mixp/train/train_config.h"

namespace mixp::train {
namespace {

// n samples; sample i has inputs [i, i + 0.5] and label i, so a batch tells which samples it holds.
struct Numbered {
  Tensor x, y;
};
Numbered numbered(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(float(i));
    x.push_back(float(i) + 0.5f);
    y.push_back(i);
  }
  return {from_vector(x, {n, 2}), from_vector(y, {n})};
}

// The labels of a batch, after checking that its inputs belong to them.
std::vector<int64_t> labels_of(const Batch& b) {
  EXPECT_EQ(b.input.size(0), b.samples);
  EXPECT_EQ(b.target.size(0), b.samples);
  std::vector<int64_t> out;
  const std::vector<double> x = b.input.to_double_vector(), y = b.target.to_double_vector();
  for (int64_t i = 0; i < b.samples; ++i) {
    EXPECT_EQ(x[size_t(2 * i)], y[size_t(i)]);
    EXPECT_EQ(x[size_t(2 * i + 1)], y[size_t(i)] + 0.5);
    out.push_back(int64_t(y[size_t(i)]));
  }
  return out;
}

// Every sample an epoch hands out, in order.
std::vector<int64_t> one_epoch(TensorDataset& d) {
  std::vector<int64_t> out;
  const int64_t e = d.epoch();
  for (int64_t k = 0; k < d.batches_per_epoch(); ++k) {
    EXPECT_EQ(d.epoch(), e);
    EXPECT_EQ(d.position(), k);
    for (int64_t v : labels_of(d.next())) out.push_back(v);
  }
  EXPECT_EQ(d.epoch(), e + 1);  // after the last batch, the next epoch is reported already
  EXPECT_EQ(d.position(), 0);
  return out;
}

TEST(TensorDataset, VisitsTheBuiltInImageDataOrderEpochByEpoch) {
  const Numbered t = numbered(100);
  TensorDataset d(t.x, t.y, {.batch_size = 32, .seed = 5});
  EXPECT_EQ(d.batches_per_epoch(), 4);  // 32, 32, 32, 4
  for (int64_t e = 0; e < 3; ++e) {
    const std::vector<int64_t> want = data::BatchSampler::permutation(100, 5, e);
    EXPECT_EQ(d.epoch_order(e), want);
    EXPECT_EQ(one_epoch(d), want) << "epoch " << e;
  }
  EXPECT_NE(d.epoch_order(0), d.epoch_order(1));
}

TEST(TensorDataset, WithoutShufflingEveryEpochIsInOrder) {
  const Numbered t = numbered(10);
  TensorDataset d(t.x, t.y, {.batch_size = 4, .shuffle = false});
  std::vector<int64_t> want(10);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(one_epoch(d), want);
  EXPECT_EQ(one_epoch(d), want);
}

TEST(TensorDataset, DropLastDropsTheShortBatch) {
  const Numbered t = numbered(10);
  TensorDataset keep(t.x, t.y, {.batch_size = 4, .seed = 1});
  TensorDataset drop(t.x, t.y, {.batch_size = 4, .seed = 1, .drop_last = true});
  EXPECT_EQ(keep.batches_per_epoch(), 3);
  EXPECT_EQ(drop.batches_per_epoch(), 2);
  const std::vector<int64_t> all = one_epoch(keep), dropped = one_epoch(drop);
  EXPECT_EQ(all.size(), 10u);
  ASSERT_EQ(dropped.size(), 8u);
  EXPECT_TRUE(std::equal(dropped.begin(), dropped.end(), all.begin()));
  EXPECT_THROW(TensorDataset(t.x, t.y, {.batch_size = 11, .drop_last = true}),
               std::invalid_argument);
}

TEST(TensorDataset, KeepsTheDtypesOfTheTensors) {
  Numbered t = numbered(6);
  const Tensor xb = t.x.to(DType::bf16, Round::nearest_even);
  const Tensor y32 = t.y.to(DType::int32, Round::nearest_even);
  TensorDataset d(xb, y32, {.batch_size = 4, .shuffle = false});
  const Batch b = d.next();
  EXPECT_EQ(b.input.dtype(), DType::bf16);
  EXPECT_EQ(b.target.dtype(), DType::int32);
  EXPECT_EQ(b.input.shape(), Shape({4, 2}));
  EXPECT_EQ(labels_of(b), (std::vector<int64_t>{0, 1, 2, 3}));
  const Batch last = d.next();
  EXPECT_EQ(last.samples, 2);
  EXPECT_EQ(labels_of(last), (std::vector<int64_t>{4, 5}));
}

TEST(TensorDataset, ShardsAreDisjointAndCoverTheEpoch) {
  const Numbered t = numbered(10);
  const std::vector<int64_t> perm = data::BatchSampler::permutation(10, 2, 0);
  for (bool drop_last : {false, true}) {
    std::multiset<int64_t> seen;
    int64_t batches = -1;
    for (int64_t r = 0; r < 3; ++r) {
      TensorDataset d(t.x, t.y, {.batch_size = 2, .seed = 2, .drop_last = drop_last});
      d.shard(r, 3);
      EXPECT_EQ(d.shard_size(), drop_last ? 3 : 4);
      if (batches >= 0) {
        EXPECT_EQ(d.batches_per_epoch(), batches) << "every rank steps together";
      }
      batches = d.batches_per_epoch();
      const std::vector<int64_t> order = d.epoch_order(0);
      for (size_t i = 0; i < order.size(); ++i) {
        EXPECT_EQ(order[i], perm[(size_t(r) + 3 * i) % 10]) << "rank " << r << " sample " << i;
      }
      const std::vector<int64_t> got = one_epoch(d);
      const size_t expect_n = drop_last ? 2 : 4;  // drop_last: batches of 2 from 3 samples
      EXPECT_EQ(got.size(), expect_n);
      seen.insert(order.begin(), order.end());
    }
    if (drop_last) {
      EXPECT_EQ(seen.size(), 9u);
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 9u) << "disjoint";
    } else {
      EXPECT_EQ(seen.size(), 12u);  // padded with the order's first two samples
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u) << "covers the epoch";
    }
  }
  TensorDataset d(t.x, t.y);
  EXPECT_THROW(d.shard(3, 3), std::invalid_argument);
  EXPECT_THROW(d.shard(0, 11), std::invalid_argument);
}

TEST(TensorDataset, RestoreContinuesTheOrderExactly) {
  const Numbered t = numbered(50);
  TensorDataset a(t.x, t.y, {.batch_size = 8, .seed = 9});
  a.shard(1, 2);
  for (int i = 0; i < 5; ++i) a.next();  // into the second epoch (4 batches of 25 samples)
  const std::string s = a.state();
  TensorDataset b(t.x, t.y, {.batch_size = 8, .seed = 9});
  b.shard(1, 2);
  b.restore(s);
  EXPECT_EQ(b.epoch(), a.epoch());
  EXPECT_EQ(b.position(), a.position());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(labels_of(a.next()), labels_of(b.next())) << i;

  TensorDataset other_batch(t.x, t.y, {.batch_size = 4, .seed = 9});
  other_batch.shard(1, 2);
  EXPECT_THROW(other_batch.restore(s), TrainError);
  TensorDataset other_rank(t.x, t.y, {.batch_size = 8, .seed = 9});
  other_rank.shard(0, 2);
  EXPECT_THROW(other_rank.restore(s), TrainError);
}

TEST(TensorDataset, EvaluationSetIsVisitedInOrder) {
  const Numbered t = numbered(20), e = numbered(7);
  TensorDataset d(t.x, t.y, {.batch_size = 4, .eval_batch_size = 3});
  EXPECT_EQ(d.eval_batches(), 0);
  d.set_eval(e.x, e.y);
  ASSERT_EQ(d.eval_batches(), 3);
  EXPECT_EQ(d.eval_samples(), 7);
  EXPECT_EQ(labels_of(d.eval_batch(0)), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(labels_of(d.eval_batch(2)), (std::vector<int64_t>{6}));
  EXPECT_THROW(d.eval_batch(3), std::out_of_range);
}

TEST(TensorDataset, RefusesTensorsThatDoNotPair) {
  const Numbered t = numbered(10), u = numbered(9);
  EXPECT_THROW(TensorDataset(t.x, u.y), std::invalid_argument);
  EXPECT_THROW(TensorDataset(t.x, t.y, {.batch_size = 0}), std::invalid_argument);
  EXPECT_THROW(TensorDataset(t.x.slice(0, 0, 0), t.y.slice(0, 0, 0)), std::invalid_argument);
}

// A source that only knows how to go forward: batch k holds the number k.
class Counter final : public DataSource {
 public:
  int64_t batches_per_epoch() const override { return 3; }
  int64_t batch_size() const override { return 1; }
  int64_t epoch() const override { return k_ / 3; }
  int64_t position() const override { return k_ % 3; }
  Batch next() override {
    const Tensor v = from_vector(std::vector<int64_t>{k_++}, {1});
    return {v, v, 1};
  }

 private:
  int64_t k_ = 0;
};

TEST(DataSource, DefaultStateAndRestoreReplayTheOrder) {
  Counter a;
  for (int i = 0; i < 7; ++i) a.next();
  EXPECT_EQ(a.state(), R"({"epoch":2,"position":1})");
  Counter b;
  b.restore(a.state());
  EXPECT_EQ(b.next().input.item(), 7.0);
  EXPECT_THROW(b.restore(R"({"epoch":0,"position":0})"), TrainError);  // cannot go back
  EXPECT_EQ(b.eval_batches(), 0);
  EXPECT_THROW(b.eval_batch(0), std::out_of_range);
}

}  // namespace
}  // namespace mixp::train
