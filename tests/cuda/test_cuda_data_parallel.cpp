// Data parallelism with the model on GPUs (docs/distributed.md, "Gradients in device memory"):
// the gradients reduced on the device over NCCL (src/train/device_grad_reduce.h), ZeRO 3's
// gathers through a device buffer. Every rank needs a GPU of its own (NCCL refuses two ranks on
// one), so the training tests need 2 GPUs and skip with the reason otherwise; the same code runs
// on every machine over the guarded device (tests/dist/test_device_gradients.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "dist/mpi_runner.h"
#include "mixp/backend/cuda.h"
#include "mixp/dist/process_group.h"
#include "mixp/tensor/factories.h"
#include "train/device_grad_reduce.h"

namespace mixp {
namespace {

using namespace cuda_test;

// One rank over NCCL: the device path's arithmetic on the GPU (weight * g in fp32, PendingReduce's
// one-rank result) with contributions of several dtypes and a missing one, read back exactly.
TEST(CudaDataParallel, OneRankReducesOnTheGpu) {
  REQUIRE_GPU();
  const dist::NcclStatus s = dist::nccl_status();
  if (!s.loaded) GTEST_SKIP() << "needs NCCL: " << s.message;
  const Tensor a = host_randn({5, 3}, 1), b = host_randn({7}, 2).to(DType::bf16);
  std::vector<Tensor> parts{a.to(kGpu), Tensor(), b.to(kGpu)};
  const std::vector<int64_t> numels{15, 4, 7};
  const float w = 0.375f;
  const Tensor got = train::detail::reduce_on_device(dist::group_for(kGpu), std::move(parts),
                                                     numels, kGpu, w, dist::GradComm::bf16)
                         .to(Device::cpu());
  ASSERT_EQ(got.numel(), 26);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<float> gv = got.to_vector<float>();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(gv[size_t(i)], av[size_t(i)] * w) << i;
  for (int i = 15; i < 19; ++i) EXPECT_EQ(gv[size_t(i)], 0.0f) << i;
  for (int i = 0; i < 7; ++i) EXPECT_EQ(gv[size_t(19 + i)], bv[size_t(i)] * w) << i;
}

// Two GPUs, one rank each (`--device cuda` gives rank r cuda:r): the gradients go over NCCL,
// the replicas stay identical, ZeRO 3 trains as ZeRO 0 bit for bit with the fp32 wire, and
// the run is the cpu's within the GPU's own rounding.
TEST(CudaDataParallel, TwoGpusTrainOverNccl) {
  REQUIRE_GPU();
  if (cuda_status().device_count < 2)
    GTEST_SKIP() << "needs 2 GPUs (one per rank; NCCL refuses two ranks on one), this machine has "
                 << cuda_status().device_count;
  if (!dist::nccl_status().loaded) GTEST_SKIP() << "needs NCCL: " << dist::nccl_status().message;
  const std::string gpt =
      "train --model gpt --width 64 --layers 2 --heads 2 --context 32 --no-eval --steps 5 "
      "--batch 4 --json --check-replicas 1 --grad-comm fp32 ";
  const test::CliResult z0 = test::run_mpi(2, gpt + "--device cuda");
  const test::CliResult z3 = test::run_mpi(2, gpt + "--device cuda --zero 3");
  const test::CliResult cpu = test::run_mpi(2, gpt + "--device cpu --threads 1");
  ASSERT_EQ(z0.exit_code, 0) << z0.err;
  ASSERT_EQ(z3.exit_code, 0) << z3.err;
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(z0.json()["gradient_transport"], "nccl");
  EXPECT_EQ(z3.json()["final_loss"], z0.json()["final_loss"]);
  EXPECT_NEAR(z0.json()["final_loss"].get<double>(), cpu.json()["final_loss"].get<double>(), 1e-3);
}

}  // namespace
}  // namespace mixp
