// --optimizer-in-backward (train_config.h): each parameter updated, and its gradient freed, by the
// grad-ready hook inside backward. Bit for bit the ordinary step wherever it is allowed (losses,
// logged gradient norms, every weight and buffer, every optimizer state and master copy, and the
// saved checkpoint files), refused with a message where it cannot be exact, and it lowers the
// peak.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixp/optim/optimizer.h"
#include "mixp/train/callbacks.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/trainer.h"
#include "train_test_util.h"

namespace mixp::train {
namespace {

using testing::run_cli;
using testing::TempDir;

// A 2-block gpt2 (tied head, 50257-token vocabulary) 64 wide on generated tokens.
TrainConfig tiny_gpt2(const std::string& precision) {
  TrainConfig c;
  c.model.name = "gpt2";
  c.model.layers = 2;
  c.model.width = 64;
  c.model.heads = 2;
  c.model.context = 32;
  c.data = kSyntheticData;
  c.batch = 4;
  c.lr = 1e-3;
  c.seed = 5;
  c.threads = 1;
  c.precision = precision;
  return c;
}

struct RunOut {
  TrainResult result;
  std::vector<double> grad_norms;
  std::vector<double> lrs;
  SafeTensorsFile model;
  optim::StateDict opt;
};

RunOut train(TrainConfig c, bool in_backward, int64_t steps = 3) {
  c.steps = steps;
  c.evaluate = false;
  c.optimizer_in_backward = in_backward;
  Trainer t(c);
  RunOut r;
  t.add_callback(std::make_shared<StepFunctionCallback>([&](const StepInfo& s) {
    r.grad_norms.push_back(s.grad_norm);
    r.lrs.push_back(s.lr);
  }));
  r.result = t.fit();
  r.model = module_state(t.model());
  r.opt = t.optimizer().state_dict();
  return r;
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

void expect_identical(const TrainConfig& c, const std::string& what, int64_t steps = 3) {
  const RunOut a = train(c, false, steps);
  const RunOut b = train(c, true, steps);
  ASSERT_EQ(a.result.losses.size(), b.result.losses.size()) << what;
  for (size_t i = 0; i < a.result.losses.size(); ++i) {
    EXPECT_TRUE(same_bits(a.result.losses[i], b.result.losses[i]))
        << what << ": loss of step " << i + 1 << ": " << a.result.losses[i] << " vs "
        << b.result.losses[i];
    EXPECT_TRUE(same_bits(a.grad_norms[i], b.grad_norms[i]))
        << what << ": gradient norm of step " << i + 1 << ": " << a.grad_norms[i] << " vs "
        << b.grad_norms[i];
    EXPECT_TRUE(same_bits(a.lrs[i], b.lrs[i])) << what;
  }
  ASSERT_EQ(a.model.tensors.size(), b.model.tensors.size()) << what;
  for (size_t i = 0; i < a.model.tensors.size(); ++i) {
    EXPECT_EQ(a.model.tensors[i].name, b.model.tensors[i].name);
    EXPECT_TRUE(a.model.tensors[i].data == b.model.tensors[i].data)
        << what << ": tensor " << a.model.tensors[i].name << " differs";
  }
  ASSERT_EQ(a.opt.tensors.size(), b.opt.tensors.size()) << what;
  for (size_t i = 0; i < a.opt.tensors.size(); ++i) {
    const Tensor& x = a.opt.tensors[i].second;
    const Tensor& y = b.opt.tensors[i].second;
    EXPECT_EQ(a.opt.tensors[i].first, b.opt.tensors[i].first);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << what << ": " << a.opt.tensors[i].first;
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0)
        << what << ": optimizer state " << a.opt.tensors[i].first << " differs";
  }
  EXPECT_EQ(a.opt.scalars, b.opt.scalars) << what;
}

TEST(OptimizerInBackward, Gpt2TiedHeadIsBitIdentical) {
  for (const char* p : {"fp32", "bf16", "bf16-pure"}) expect_identical(tiny_gpt2(p), p, 2);
  TrainConfig c = tiny_gpt2("bf16");
  c.model.checkpointing = true;
  expect_identical(c, "bf16 + checkpointing", 2);
}

TEST(OptimizerInBackward, GptIsBitIdenticalInEveryRecipeItAllows) {
  for (const char* p : {"fp32", "fp64", "tf32", "bf16", "bf16-pure", "fp8", "fp8-current",
                        "bf16-pure:rounding=nearest,kahan=on,states=fp32", "bf16-pure:master=on"}) {
    expect_identical(testing::small_gpt(p), p);
  }
  for (const char* p : {"fp32", "bf16"}) {
    TrainConfig c = testing::small_gpt(p);
    c.model.checkpointing = true;
    expect_identical(c, std::string(p) + " + checkpointing");
  }
  TrainConfig c = testing::small_gpt("bf16");
  c.schedule = "warmup_cosine";
  c.warmup_steps = 2;
  c.optimizer = "adam";
  c.weight_decay = 0.1;
  expect_identical(c, "adam, warmup_cosine", 4);
}

TEST(OptimizerInBackward, MlpIsBitIdenticalWithAdamWAndSgd) {
  for (const char* p : {"fp32", "bf16", "bf16-pure"}) {
    expect_identical(testing::small_mlp(p), std::string("adamw ") + p);
    TrainConfig c = testing::small_mlp(p);
    c.optimizer = "sgd";
    expect_identical(c, std::string("sgd ") + p);
  }
}

TEST(OptimizerInBackward, QatRecipesAreBitIdentical) {
  for (const char* p : {"int8-qat", "int4-qat", "ternary"}) {
    TrainConfig c = testing::small_mlp(p);
    c.model.name = "cnn";
    c.model.width = 8;
    c.batch = 16;
    c.train_limit = 128;
    expect_identical(c, std::string("cnn ") + p);
  }
}

TEST(OptimizerInBackward, ResumesAcrossTheFlag) {
  // A checkpoint written with the flag resumes without it (and the other way) to the same bits:
  // the flag changes no state.
  TempDir dir;
  TrainConfig c = testing::small_gpt("bf16");
  c.evaluate = false;
  c.steps = 2;
  c.optimizer_in_backward = true;
  c.save_dir = (dir / "a").string();
  Trainer(c).fit();
  TrainConfig r = c;
  r.save_dir = (dir / "b").string();
  r.resume_dir = (dir / "a").string();
  r.steps = 4;
  r.optimizer_in_backward = false;
  Trainer(r).fit();
  TrainConfig f = c;
  f.save_dir = (dir / "c").string();
  f.steps = 4;
  f.optimizer_in_backward = false;
  Trainer(f).fit();
  for (const char* file : {kModelFile, kOptimizerFile}) {
    EXPECT_EQ(testing::read_text(dir / "b" / file), testing::read_text(dir / "c" / file)) << file;
  }
}

TEST(OptimizerInBackward, LowersThePeak) {
  // (Only the peaks are kept: a run's saved states would count in the next run's peak.)
  auto peak = [](TrainConfig c, bool in_backward) {
    c.steps = 2;
    c.evaluate = false;
    c.optimizer_in_backward = in_backward;
    return Trainer(c).fit().peak_memory_bytes;
  };
  // A gpt2 whose peak is the first block's backward, holding the later blocks' gradients.
  TrainConfig c = tiny_gpt2("bf16");
  c.model.layers = 4;
  c.model.checkpointing = true;
  EXPECT_LT(peak(c, true), peak(c, false));
}

TEST(OptimizerInBackward, ConfigurationsItCannotDoExactlyAreRefused) {
  auto refused = [](TrainConfig c, const std::string& expect) {
    c.optimizer_in_backward = true;
    c.steps = 1;
    try {
      Trainer t(c);
      ADD_FAILURE() << "expected a refusal mentioning '" << expect << "'";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--optimizer-in-backward"), std::string::npos) << m;
      EXPECT_NE(m.find(expect), std::string::npos) << m;
    }
  };
  TrainConfig c = testing::small_gpt("bf16");
  c.clip = 1.0;
  refused(c, "--clip");
  c = testing::small_gpt("bf16");
  c.grad_accum = 2;
  refused(c, "--grad-accum");
  for (const char* p : {"fp16", "fp16-o2", "fp16-pure"}) refused(testing::small_gpt(p), p);
  // A callback that reads the gradients after backward.
  c = testing::small_gpt("bf16");
  c.optimizer_in_backward = true;
  c.steps = 1;
  Trainer t(c);
  EXPECT_THROW(t.add_callback(std::make_shared<GradientFunctionCallback>([](StepContext&) {})),
               ConfigError);
  // One that does not is fine.
  t.add_callback(std::make_shared<StepFunctionCallback>([](const StepInfo&) {}));
}

TEST(OptimizerInBackward, NanGuardStillStopsTheRun) {
  TrainConfig c = testing::small_mlp("fp32");
  c.lr = 1e30;
  c.optimizer = "sgd";
  c.momentum = 0;
  c.steps = 5;
  c.optimizer_in_backward = true;
  Trainer t(c);
  EXPECT_THROW(t.fit(), TrainError);
}

std::string q(const std::filesystem::path& p) {
  std::string s = "'";
  s.append(p.string());
  s.push_back('\'');
  return s;
}

TEST(OptimizerInBackwardCli, SavesTheSameCheckpointAndLog) {
  TempDir dir;
  const std::string run =
      "train --model gpt --width 32 --layers 2 --heads 2 --context 16 --data synthetic "
      "--train-limit 20000 --batch 8 --steps 3 --threads 1 --precision bf16 --checkpointing "
      "--no-eval --json ";
  const auto a = run_cli(run + "--save " + q(dir / "a") + " --log " + q(dir / "a.jsonl"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto b = run_cli(run + "--optimizer-in-backward --save " + q(dir / "b") + " --log " +
                         q(dir / "b.jsonl"));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  for (const char* file : {kModelFile, kOptimizerFile}) {
    EXPECT_EQ(testing::read_text(dir / "a" / file), testing::read_text(dir / "b" / file)) << file;
  }
  // The logs agree but for the step times.
  std::ifstream la(dir / "a.jsonl"), lb(dir / "b.jsonl");
  std::string x, y;
  int lines = 0;
  while (std::getline(la, x) && std::getline(lb, y)) {
    auto jx = nlohmann::json::parse(x), jy = nlohmann::json::parse(y);
    for (const char* k : {"ms", "cpu_ms", "elapsed_s"}) jx.erase(k), jy.erase(k);
    EXPECT_EQ(jx, jy);
    ++lines;
  }
  EXPECT_EQ(lines, 3);
  EXPECT_LT(b.json()["peak_memory_bytes"].get<int64_t>(),
            a.json()["peak_memory_bytes"].get<int64_t>());
}

TEST(OptimizerInBackwardCli, RefusalsExitNonZeroAndSayWhatToDo) {
  const std::string run =
      "train --model gpt --width 32 --layers 1 --heads 2 --context 16 --data synthetic "
      "--train-limit 20000 --batch 8 --steps 1 --threads 1 --no-eval --optimizer-in-backward ";
  struct Case {
    std::string args, expect;
  };
  for (const Case& k : {Case{"--clip 1", "drop --clip"}, Case{"--grad-accum 2", "--grad-accum 1"},
                        Case{"--precision fp16", "loss scaling"},
                        Case{"--inspect every=1,out=/dev/null", "drop one of them"}}) {
    const auto r = run_cli(run + k.args);
    EXPECT_NE(r.exit_code, 0) << k.args;
    EXPECT_NE(r.err.find("--optimizer-in-backward"), std::string::npos) << k.args << ": " << r.err;
    EXPECT_NE(r.err.find(k.expect), std::string::npos) << k.args << ": " << r.err;
  }
}

}  // namespace
}  // namespace mixp::train
