// The resume check every training test shares: N steps + save + resume + N steps must equal 2N
// steps bit for bit — the losses, every model tensor (weights, buffers, FP8 scaling state), the
// optimizer state (moments, fp32 masters), the recipe's state (loss scaler) and the skipped-step
// count.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/temp_dir.h"
#include "mixp/optim/optimizer.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/trainer.h"

namespace mixp::train::testing {

// evaluate_before_save: the first half also evaluates before it saves, which must not change the
// state the checkpoint holds.
inline void expect_resume_identical(TrainConfig c, int64_t n, bool evaluate_before_save = false) {
  mixp::test::TempDir dir;
  c.steps = 2 * n;
  c.evaluate = false;
  Trainer full(c);
  const TrainResult rf = full.fit();

  TrainConfig first = c;
  first.steps = n;
  first.evaluate = evaluate_before_save;
  first.save_dir = (dir / "ckpt").string();
  Trainer a(first);
  const TrainResult ra = a.fit();

  TrainConfig second = c;
  second.resume_dir = (dir / "ckpt").string();
  Trainer b(second);
  EXPECT_EQ(b.step(), n);
  const TrainResult rb = b.fit();
  EXPECT_EQ(rb.steps, 2 * n);
  EXPECT_EQ(rb.steps_this_run, n);

  std::vector<double> resumed = ra.losses;
  resumed.insert(resumed.end(), rb.losses.begin(), rb.losses.end());
  ASSERT_EQ(resumed.size(), rf.losses.size());
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(std::memcmp(&resumed[i], &rf.losses[i], sizeof(double)), 0)
        << c.precision << ": loss of step " << i + 1 << ": " << resumed[i] << " vs "
        << rf.losses[i];
  }
  const auto sf = module_state(full.model()), sb = module_state(b.model());
  ASSERT_EQ(sf.tensors.size(), sb.tensors.size());
  for (size_t i = 0; i < sf.tensors.size(); ++i) {
    EXPECT_EQ(sf.tensors[i].name, sb.tensors[i].name);
    EXPECT_TRUE(sf.tensors[i].data == sb.tensors[i].data)
        << c.precision << ": tensor " << sf.tensors[i].name << " differs";
  }
  const optim::StateDict of = full.optimizer().state_dict(), ob = b.optimizer().state_dict();
  ASSERT_EQ(of.tensors.size(), ob.tensors.size());
  for (size_t i = 0; i < of.tensors.size(); ++i) {
    const Tensor& x = of.tensors[i].second;
    const Tensor& y = ob.tensors[i].second;
    ASSERT_EQ(x.nbytes(), y.nbytes()) << "optimizer state " << of.tensors[i].first;
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0)
        << c.precision << ": optimizer state " << of.tensors[i].first;
  }
  EXPECT_EQ(full.recipe().state(), b.recipe().state());
  EXPECT_EQ(full.recipe().loss_scale(), b.recipe().loss_scale());
  EXPECT_EQ(rf.skipped_steps, rb.skipped_steps);
}

}  // namespace mixp::train::testing
