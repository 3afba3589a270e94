// Data parallelism with the model in device memory (docs/distributed.md, "Gradients in device
// memory"): the gradients are reduced by backend ops on their device over the device's group
// (src/train/device_grad_reduce.h) -- NCCL for a GPU, which this machine lacks. The guarded test
// device stands in: host memory that only backend kernels may touch, so a run on it proves that
// the data-parallel step reads and writes the device's memory only through kernels and the
// transport, as a GPU run must. Its group is MPI's world, and the training must be the host
// path's, bit for bit.
#include <gtest/gtest.h>

#include <string>

#include "common/temp_dir.h"
#include "dist/checkpoint_compare.h"
#include "dist/mpi_runner.h"

namespace mixp::test {
namespace {

// A small gpt, one thread per rank (the guarded device's scope covers the calling thread).
const std::string kGpt =
    "train --model gpt --width 64 --layers 2 --heads 2 --context 32 --no-eval --threads 1 "
    "--steps 3 --batch 3 --bucket-mb 0.05 --json --check-replicas 1 ";

// Every wire format, accumulation, loss scaling with skipped steps, ZeRO 1 and 2 (stochastic
// rounding of bf16-pure), on 2 ranks and on 3 (pieces of unequal length).
TEST(DeviceGradients, GuardedMemoryTrainsLikeHostMemory) {
  TempDir dir;
  int k = 0;
  for (const std::string variant :
       {"--grad-comm fp32 --grad-accum 2", "--grad-comm bf16",
        "--precision fp16 --loss-scale-init 131072 --clip 0.5 --grad-comm fp16",
        "--zero 1 --grad-comm bf16", "--zero 2 --precision bf16-pure --grad-comm bf16"}) {
    for (int n : {2, 3}) {
      const std::string tag = std::to_string(k++);
      const std::string args = kGpt + variant + " --save '" + (dir / tag).string();
      const CliResult host = run_mpi(n, args + "cpu'");
      const CliResult dev = run_mpi(n, args + "dev' --device guarded");
      ASSERT_EQ(host.exit_code, 0) << host.err;
      ASSERT_EQ(dev.exit_code, 0) << dev.err;
      const nlohmann::json a = host.json(), b = dev.json();
      SCOPED_TRACE(variant + " on " + std::to_string(n) + " ranks");
      EXPECT_EQ(b["final_loss"], a["final_loss"]);
      EXPECT_EQ(b["skipped_steps"], a["skipped_steps"]);
      EXPECT_EQ(b["comm_bytes_per_step"], a["comm_bytes_per_step"]);
      EXPECT_TRUE(same_weights(dir / (tag + "cpu"), dir / (tag + "dev")));
      // The summary says where the gradients went: MPI reduced the guarded memory's, with no
      // overlap and no shared memory (the device path has neither).
      EXPECT_EQ(b["gradient_transport"], "mpi");
      EXPECT_EQ(b["shared_memory"], false);
      EXPECT_NE(b["shared_memory_note"].get<std::string>().find("guarded memory"),
                std::string::npos)
          << b["shared_memory_note"];
      EXPECT_EQ(b["comm_buckets_overlapped"], 0);
      EXPECT_EQ(a["gradient_transport"], "shared memory");
    }
  }
}

// The naive ring is a host-memory demonstration: refused with a reason for device memory.
TEST(DeviceGradients, TheBf16RingIsRefusedForDeviceMemory) {
  const CliResult r = run_mpi(2, kGpt + "--grad-comm bf16-ring --device guarded");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bf16-ring reduces host memory only"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mixp::test
