// ZeRO stage 3 (docs/distributed.md, "ZeRO stage 3: --zero 3"): parameters sharded across the
// ranks and gathered per unit around its forward and backward, against --zero 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "dist/checkpoint_compare.h"
#include "dist/mpi_runner.h"
#include "mixp/data/token_file.h"
#include "mixp/io/safetensors.h"

namespace mixp::test {
namespace {

// A small gpt: 2 blocks of width 64 over the fortunes corpus; one thread per rank.
const std::string kGpt =
    "train --model gpt --width 64 --layers 2 --heads 2 --context 32 --no-eval --threads 1 ";

// A path in `dir`, quoted for the shell.
std::string path(const TempDir& dir, const std::string& name) {
  std::string quoted = (dir / name).string();
  quoted.insert(quoted.begin(), '\'');
  quoted.push_back('\'');
  return quoted;
}

// With the fp32 wire every rank computes with the owners' exact values, so ZeRO 3 trains
// bit-identically to no ZeRO: the losses of every step, the weights and the optimizer state
// (the checkpoint gathers them whole). The replicas' check gathers the parameters too.
TEST(ZeroThree, TrainsBitIdenticallyToNoZeroWithTheFp32Wire) {
  TempDir dir;
  // Also with accumulation (every micro-batch gathers), with checkpointing under bf16 autocast
  // (a block's recomputation gathers it again; autocast's weight copies), and under bf16
  // autocast with weight shadows: the 16-bit copies autograd saved in a block's forward have
  // their bytes freed at its release and made again at its backward's gather
  // (Zero3::restore_shadow); wrong bits there change the gradients, missing ones crash. And
  // GPT-2 (its head tied to the token embedding), whose head weight gradient ZeRO 3 computes when
  // backward reaches the embedding (ops/deferred_weight_grad.h): it must reach the weight's
  // gradient before the embedding's rows, as the head's own backward does.
  for (const std::string variant :
       {"", "--grad-accum 2 --no-comm-overlap", "--checkpointing --precision bf16",
        "--precision bf16", "--model gpt2 --precision bf16", "--model gpt2 --grad-accum 2"}) {
    std::string model = kGpt;
    if (variant.rfind("--model gpt2", 0) == 0) model.replace(model.find("gpt "), 4, "gpt2 ");
    const std::string args = model + "--steps 4 --batch 4 --bucket-mb 0.05 --json " +
                             (model == kGpt ? variant : variant.substr(13));
    const CliResult z0 =
        run_mpi(2, args + " --log " + path(dir, "z0.jsonl") + " --save " + path(dir, "z0"));
    const CliResult z3 = run_mpi(2, args + " --zero 3 --check-replicas 2 --log " +
                                        path(dir, "z3.jsonl") + " --save " + path(dir, "z3"));
    ASSERT_EQ(z0.exit_code, 0) << z0.err;
    ASSERT_EQ(z3.exit_code, 0) << z3.err;
    EXPECT_EQ(z3.json()["zero"], 3);
    EXPECT_EQ(log_losses(dir / "z3.jsonl"), log_losses(dir / "z0.jsonl")) << variant;
    EXPECT_TRUE(same_weights(dir / "z0", dir / "z3")) << variant;
    const SafeTensorsFile a = read_safetensors(dir / "z0" / "optimizer.safetensors");
    const SafeTensorsFile b = read_safetensors(dir / "z3" / "optimizer.safetensors");
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (const SafeTensor& t : a.tensors) {
      const SafeTensor* u = b.find(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      EXPECT_TRUE(u->data == t.data) << t.name << " " << variant;
    }
  }
}

// Prefetch (--zero3-prefetch, default 1; src/train/zero3_prefetch.h): each gather's transfer is
// started by the gather before it, on a thread of its own, so that it moves while that unit
// computes. Each step of this gpt gathers 9 times (the root, the token and position embeddings'
// forwards, the 2 blocks' forwards and backwards, the head's forward and backward); from the
// second step on all but the root's (the step's first) were started ahead.
// The same results with it off, bit for bit (the same bytes, unpacked at the same moments).
TEST(ZeroThree, PrefetchStartsEachGatherWhileTheUnitBeforeComputes) {
  TempDir dir;
  const std::string args =
      kGpt + "--steps 3 --batch 4 --zero 3 --json --precision bf16 --grad-comm bf16 --log ";
  const CliResult on = run_mpi(2, args + path(dir, "on.jsonl"));
  const CliResult off = run_mpi(2, args + path(dir, "off.jsonl") + " --zero3-prefetch 0");
  ASSERT_EQ(on.exit_code, 0) << on.err;
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(on.json()["zero3_prefetch"], true);
  EXPECT_EQ(on.json()["param_gathers_last_step"], 9);
  EXPECT_EQ(on.json()["param_gathers_prefetched_last_step"], 8);
  EXPECT_EQ(off.json()["zero3_prefetch"], false);
  EXPECT_EQ(off.json()["param_gathers_last_step"], 9);
  EXPECT_EQ(off.json()["param_gathers_prefetched_last_step"], 0);
  EXPECT_EQ(on.json()["comm_param_bytes_per_step"], off.json()["comm_param_bytes_per_step"]);
  EXPECT_EQ(on.json()["comm_bytes_per_step"], off.json()["comm_bytes_per_step"]);
  EXPECT_EQ(log_losses(dir / "on.jsonl"), log_losses(dir / "off.jsonl"));
  // MPI asked for MPI_THREAD_FUNNELED (MIXP_MPI_THREAD, src/dist/mpi_group.cpp): no second thread
  // may call MPI, so the gathers are blocking, with the same training; another value is an error.
  const CliResult funneled = run_mpi(2, args + path(dir, "funneled.jsonl"), "",
                                     "-x MIXP_MPI_THREAD=funneled");
  ASSERT_EQ(funneled.exit_code, 0) << funneled.err;
  EXPECT_EQ(funneled.json()["zero3_prefetch"], false);
  EXPECT_EQ(log_losses(dir / "funneled.jsonl"), log_losses(dir / "on.jsonl"));
  const CliResult level = run_mpi(2, kGpt + "--steps 1", "", "-x MIXP_MPI_THREAD=single");
  EXPECT_NE(level.exit_code, 0);
  EXPECT_NE(level.err.find("MIXP_MPI_THREAD must be multiple (the default) or funneled"),
            std::string::npos)
      << level.err;
  // A switch, not a number: anything but 0 or 1 is a usage error.
  const CliResult bad = run_cli("train --zero3-prefetch 2");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--zero3-prefetch"), std::string::npos) << bad.err;
}

// bf16-pure writes its updates back with stochastic rounding, each parameter drawing the stream
// of its index in the optimizer (optim/optimizer.h write_back_seed). A ZeRO shard's optimizer
// holds a subset of the parameters; it is given their indices in the whole list, so every stage
// rounds exactly as --zero 0 does (before, the losses parted from the second step on).
TEST(ZeroStages, Bf16PureRoundsAsWithoutZero) {
  TempDir dir;
  const std::string args =
      kGpt + "--steps 3 --batch 4 --precision bf16-pure --grad-comm fp32 --json ";
  const CliResult z0 =
      run_mpi(2, args + "--log " + path(dir, "z0.jsonl") + " --save " + path(dir, "z0"));
  ASSERT_EQ(z0.exit_code, 0) << z0.err;
  for (const std::string stage : {"1", "2", "3"}) {
    const std::string name = "z" + stage;
    const CliResult z = run_mpi(2, args + "--zero " + stage + " --log " +
                                       path(dir, name + ".jsonl") + " --save " + path(dir, name));
    ASSERT_EQ(z.exit_code, 0) << z.err;
    EXPECT_EQ(log_losses(dir / (name + ".jsonl")), log_losses(dir / "z0.jsonl"))
        << "--zero " << stage;
    EXPECT_TRUE(same_weights(dir / "z0", dir / name)) << "--zero " << stage;
  }
}

// A bf16 wire rounds the gathered parameters to bf16 (FSDP's MixedPrecision(param_dtype=bf16)):
// not bit-identical, but within the 16-bit wire's bound (docs/distributed.md: the loss within
// 1e-2 relative of the fp32 wire's), and the replicas stay identical.
TEST(ZeroThree, TheBf16WireTrainsWithinTheSixteenBitBound) {
  TempDir dir;
  const std::string args = kGpt + "--steps 4 --batch 4 --precision bf16 --json ";
  const CliResult ref = run_mpi(2, args + "--log " + path(dir, "ref.jsonl"));
  const CliResult z3 = run_mpi(2, args + "--zero 3 --grad-comm bf16 --check-replicas 1 --log " +
                                      path(dir, "z3.jsonl"));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  const std::vector<double> a = log_losses(dir / "ref.jsonl"), b = log_losses(dir / "z3.jsonl");
  ASSERT_EQ(a.size(), b.size());
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i], a[i], 1e-2 * a[i]) << "step " << i + 1;
    differs = differs || a[i] != b[i];
  }
  // The parameters did go 16-bit: the first step's loss already sees rounded weights.
  EXPECT_TRUE(differs);
}

// The checkpoint of a ZeRO 3 run is gathered whole to rank 0 (the file a run without ZeRO
// writes): it resumes under ZeRO 3 bit-identically to an uninterrupted run, and on one process.
TEST(ZeroThree, CheckpointsResumeBitIdentically) {
  TempDir dir;
  const std::string args = kGpt + "--batch 4 --zero 3 ";
  const CliResult straight = run_mpi(2, args + "--json --steps 6 --save " + path(dir, "straight"));
  const CliResult first = run_mpi(2, args + "--steps 3 --save " + path(dir, "half"));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // The summary names the stage and both kinds of bytes.
  EXPECT_NE(first.out.find("ZeRO stage 3"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("sent per step per rank (gradients; parameters "), std::string::npos)
      << first.out;
  const CliResult resumed = run_mpi(2, kGpt + "--batch 4 --zero 3 --json --steps 6 --resume " +
                                           path(dir, "half") + " --save " + path(dir, "resumed"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(same_weights(dir / "resumed", dir / "straight"));
  EXPECT_EQ(resumed.json()["final_loss"], straight.json()["final_loss"]);
  const CliResult one = run_cli("train --resume " + path(dir, "half") +
                                " --steps 4 --batch 8 --no-eval --threads 1 --json");
  EXPECT_EQ(one.exit_code, 0) << one.err;
}

// Bytes per step and rank, against the arithmetic: the row shards (each parameter split along
// dim 0 as torch.chunk splits it: ceil(rows / N) rows to each rank in order, DataParallel's
// row_piece), the units (each block, each embedding, the head; the root: the final norm), each
// block's and the head's parameters gathered twice (forward, backward), the embeddings' once
// (their backward reads only the ids), GPT-2's tied wte three times (the token embedding's
// forward, the head's forward and backward), the root's once (kept from its forward to its
// backward); each rank sends its rows to N-1 ranks. The gradients are reduce-scattered by the
// same rows: rank 0 sends the others' rows of every gradient.
TEST(ZeroThree, BytesSentPerStepMatchTheArithmetic) {
  TempDir dir;
  const std::string gpt2 = "train --model gpt2 --width 64 --layers 2 --heads 2 --context 32 "
                           "--no-eval --threads 1 ";
  for (const auto& [model, wire] : {std::pair{kGpt, "fp32"}, std::pair{kGpt, "bf16"},
                                    std::pair{gpt2, "bf16"}}) {
    const std::string name = std::string(wire) + (model == gpt2 ? "_tied" : "");
    const CliResult r = run_mpi(2, model + "--steps 2 --batch 4 --zero 3 --json --grad-comm " +
                                       wire + " --save " + path(dir, name));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const SafeTensorsFile f = read_safetensors(dir / name / "model.safetensors");
    const double bytes = std::string(wire) == "fp32" ? 4 : 2;
    auto gathers = [&](const std::string& p) {
      if (p == "tok_emb.weight" && model == gpt2) return 3;  // the tied head's weight
      return p.rfind("blocks.", 0) == 0 || p.rfind("head.", 0) == 0 ? 2 : 1;
    };
    double param_bytes = 0, grad_bytes = 0, total = 0;
    for (const SafeTensor& t : f.tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
      const int64_t mine = std::min(rows, (rows + 1) / 2) * (n / rows);  // rank 0's rows
      total += double(n);
      param_bytes += bytes * double(mine) * gathers(t.name);
      grad_bytes += bytes * double(n - mine);
    }
    const nlohmann::json j = r.json();
    EXPECT_EQ(total, j["parameters"].get<double>()) << name;
    EXPECT_EQ(j["comm_param_bytes_per_step"].get<double>(), param_bytes) << name;
    EXPECT_EQ(j["comm_bytes_per_step"].get<double>(), grad_bytes) << name;
  }
}

// The embeddings and the head are units of their own (as FSDP wraps the embeddings): at a
// vocabulary much larger than the width (GPT-2's 50257 at 768 is 38.6M values, a third of the
// model), GPT-2's tied wte is gathered for the token embedding's forward, the head's forward
// and the head's backward, and freed in between. The most bytes gathered at once in the step
// (param_gathered_peak_bytes_last_step) are then exactly the wte's and the root's (the final
// norm, kept from the root's forward to its backward); holding the wte across the blocks, as
// the root unit did before, adds a block to that. 9 gathers a step: the root, the two
// embeddings' forwards (their backward reads only the ids), 2 blocks twice, the head twice.
TEST(ZeroThree, TheTiedEmbeddingIsGatheredAroundItsUsesOnly) {
  TempDir dir;
  constexpr int64_t kVocab = 2048;  // 32x the width
  std::vector<uint32_t> tokens(8192);
  uint32_t x = 1;
  for (uint32_t& t : tokens) {  // any ids below the vocabulary: only the shapes matter here
    x = x * 1664525u + 1013904223u;
    t = (x >> 8) % uint32_t(kVocab);
  }
  data::write_token_file(dir / "tokens.bin", tokens, kVocab);
  const CliResult r = run_mpi(
      2, "train --model gpt2 --width 64 --layers 2 --heads 2 --context 32 --no-eval --threads 1 "
         "--steps 2 --batch 2 --zero 3 --precision bf16 --grad-comm bf16 --json --data " +
             path(dir, "tokens.bin") + " --save " + path(dir, "ck"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafeTensorsFile f = read_safetensors(dir / "ck" / "model.safetensors");
  double wte = 0, root = 0, block = 0;
  for (const SafeTensor& t : f.tensors) {
    double n = 4;  // fp32 parameters
    for (int64_t d : t.shape) n *= double(d);
    if (t.name == "tok_emb.weight") wte = n;
    if (t.name.rfind("ln_f.", 0) == 0) root += n;
    if (t.name.rfind("blocks.0.", 0) == 0) block += n;
  }
  ASSERT_GT(wte, block);
  const nlohmann::json j = r.json();
  EXPECT_EQ(j["param_gathers_last_step"], 9);
  EXPECT_EQ(j["param_gathered_peak_bytes_last_step"].get<double>(), wte + root)
      << "wte " << wte << ", root " << root << ", block " << block;
  // The head's forward gathers only the wte's bf16 copy, and its weight gradient is computed
  // when backward reaches the token embedding, once a step each (docs/distributed.md, "What is
  // gathered when"): the 4-byte wte is whole neither at the head's forward nor at its backward.
  EXPECT_EQ(j["param_gathers_copy_only_last_step"], 1);
  EXPECT_EQ(j["head_grads_deferred_last_step"], 1);
  // Under --checkpointing autocast casts per use (no weight shadows): the values are gathered.
  const CliResult ck = run_mpi(
      2, "train --model gpt2 --width 64 --layers 2 --heads 2 --context 32 --no-eval --threads 1 "
         "--steps 2 --batch 2 --zero 3 --precision bf16 --grad-comm bf16 --json --checkpointing "
         "--data " + path(dir, "tokens.bin"));
  ASSERT_EQ(ck.exit_code, 0) << ck.err;
  EXPECT_EQ(ck.json()["param_gathers_copy_only_last_step"], 0);
  EXPECT_EQ(ck.json()["head_grads_deferred_last_step"], 1);
}

// The memory: at batch 1 (parameters, gradients and optimizer state make the peak) on a gpt of
// 8 blocks (the root, embeddings and final norm, is about 1% of it), ZeRO 3 holds less than
// ZeRO 2 at its peak: ideally the half of the parameters another rank owns (4 bytes each) less
// one gathered block; measured 0.89x of that half here, checked at > 0.7x (peak_memory_bytes).
// (0.52x while a Linear's saved weight kept the released bytes alive: they are now freed in
// their Storage, which autograd's saved views share.)
TEST(ZeroThree, ThePeakHoldsLessThanZeroTwos) {
  const std::string args = "train --model gpt --width 64 --layers 8 --heads 2 --context 32 "
                           "--no-eval --threads 1 --steps 2 --batch 1 --json --zero ";
  const CliResult z2 = run_mpi(2, args + "2");
  const CliResult z3 = run_mpi(2, args + "3");
  ASSERT_EQ(z2.exit_code, 0) << z2.err;
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  const double half = 0.5 * 4.0 * z3.json()["parameters"].get<double>();
  const double saved = z2.json()["peak_memory_bytes"].get<double>() -
                       z3.json()["peak_memory_bytes"].get<double>();
  EXPECT_GT(saved, 0.7 * half) << "saved " << saved << " of " << half;
  EXPECT_LT(saved, half);
}

// Issue 33's memory target at its own shape: GPT-2 124M (the 50257-token vocabulary), bf16,
// batch 4, context 256, bf16 wire, 4 ranks: each rank's peak is at most 0.4 of the unsharded
// run's (one process; the allocator's peaks, which do not depend on timing: 824.55 / 2190.90
// MiB = 0.376 on the avx512-bf16 host class), and `mixp plan --zero-stage 3` is within 5% of it
// (1.015x). About a minute on 2 cores; docs/benchmarks.md "Flat shards" has the bench
// (bench/zero3.py).
TEST(ZeroThree, Gpt2At4RanksPeaksUnderFourTenthsOfTheUnshardedRun) {
  TempDir dir;
  std::vector<uint16_t> tokens(40000);
  uint32_t x = 7;
  for (uint16_t& t : tokens) {  // GPT-2 ids: only the shapes matter for memory
    x = x * 1664525u + 1013904223u;
    t = uint16_t((x >> 8) % 50257u);
  }
  data::write_token_file(dir / "gpt2.bin", tokens);
  const std::string shape = "--model gpt2 --data " + path(dir, "gpt2.bin") +
                            " --precision bf16 --batch 4 --context 256 ";
  const std::string run = "train " + shape + "--steps 2 --no-eval --json ";
  const CliResult z3 = run_mpi(4, run + "--threads 1 --zero 3 --grad-comm bf16");
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  const CliResult one = run_cli(run + "--threads 2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const double sharded = z3.json()["peak_memory_bytes"].get<double>();
  const double whole = one.json()["peak_memory_bytes"].get<double>();
  EXPECT_LE(sharded / whole, 0.4) << sharded << " of " << whole;
  const CliResult plan =
      run_cli("plan " + shape + "--zero-stage 3 --ranks 4 --grad-comm bf16 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NEAR(plan.json()["peak_bytes"].get<double>() / sharded, 1.0, 0.05);
}

// What a rank holds, against `mixp plan --zero-stage 3` (src/study/memory_plan.cpp): at 4 ranks
// with the bf16 wire the measured peak is within 5% of the plan (1.013x here; GPT-2 124M B4 T256
// at its 50257-token vocabulary: 1.012x, docs/benchmarks.md). The peak is in backward: the
// shards, every block's saved activations, the gathered root (the final norm), the last block's
// autocast copies, the tied head's gradient, the first gradient bucket.
// Before the gathered weights' autocast copies and the owners' rounded copies were freed
// between a block's forward and backward, and while a block's backward gathered its fp32 values
// too, the measured peak was 1.22x this one (83.4 MB against 68.2 MB), which fails here.
TEST(ZeroThree, ThePlanCountsWhatARankHolds) {
  const std::string shape = "--model gpt2 --width 384 --layers 6 --heads 6 --context 64 "
                            "--batch 2 --precision bf16 --threads 1 --grad-comm bf16 ";
  const CliResult z3 = run_mpi(4, "train " + shape + "--steps 2 --no-eval --json --zero 3");
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  const CliResult plan = run_cli("plan " + shape + "--zero-stage 3 --ranks 4 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const double measured = z3.json()["peak_memory_bytes"].get<double>();
  const double planned = plan.json()["peak_bytes"].get<double>();
  EXPECT_NEAR(planned / measured, 1.0, 0.05) << planned << " planned, " << measured << " measured";
  // Under the 16-bit wire no rank keeps autocast copies between a unit's uses.
  EXPECT_EQ(plan.json()["cast_copy_bytes"].get<double>(), 0);
}

}  // namespace
}  // namespace mixp::test
