// The NCCL process group (process_group.h: nccl_status, make_nccl_group, group_for; src/dist/nccl/).
// Everywhere: host memory goes through world(), and without NCCL or a GPU making a group says
// why. With a GPU and libnccl.so.2: the single-rank path (ncclCommInitAll, no MPI) for host and
// device buffers, every collective of the interface. Multi-GPU cannot be tested here.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "mixp/dist/process_group.h"
#include "mixp/tensor/device.h"

namespace mixp {
namespace {

using namespace cuda_test;

// A cuda tensor's device memory as bytes (the kernels' access, DeviceAccessScope).
std::span<std::byte> bytes_of(Tensor& t) {
  const DeviceAccessScope access;
  return {static_cast<std::byte*>(t.data_ptr()), t.nbytes()};
}

TEST(CudaNccl, HostMemoryUsesTheWorldAndAMissingNcclOrGpuSaysWhy) {
  EXPECT_EQ(&dist::group_for(Device::cpu()), &dist::world());
  EXPECT_EQ(&dist::group_for(Device::guarded()), &dist::world());
  const dist::NcclStatus s = dist::nccl_status();
  EXPECT_FALSE(s.message.empty());
  if (!s.built) {
    EXPECT_FALSE(s.loaded);
  }
  std::printf("%s\n", s.message.c_str());
  // `mixp doctor --json` reports the same.
  std::string out, err;
  ASSERT_EQ(run_cli("doctor --json", out, err), 0) << err;
  const nlohmann::json j = nlohmann::json::parse(out).at("nccl");
  EXPECT_EQ(j.at("built").get<bool>(), s.built);
  EXPECT_EQ(j.at("loaded").get<bool>(), s.loaded);
  EXPECT_EQ(j.at("status").get<std::string>(), s.message);
  if (cuda_available() && s.loaded) GTEST_SKIP() << "this machine can make the group (next test)";
  try {
    (void)dist::make_nccl_group(nullptr, 0);
    FAIL() << "an NCCL group without NCCL or a GPU";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("NCCL") != std::string::npos || m.find("no CUDA device") != std::string::npos)
        << m;
  }
}

TEST(CudaNccl, SingleRankCollectivesOnHostAndDeviceMemory) {
  REQUIRE_GPU();
  const dist::NcclStatus s = dist::nccl_status();
  if (!s.loaded) GTEST_SKIP() << "needs NCCL: " << s.message;
  dist::ProcessGroup& g = dist::group_for(kGpu);
  EXPECT_EQ(&dist::group_for(kGpu), &g);  // one per device
  EXPECT_EQ(g.backend_name(), "nccl");
  EXPECT_EQ(g.size(), 1);
  EXPECT_EQ(g.rank(), 0);

  std::vector<double> v{1.5, -2, 3};
  g.allreduce(v, dist::ReduceOp::sum);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2, 3}));
  g.allreduce(v, dist::ReduceOp::max);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2, 3}));
  g.barrier();

  // Host bytes (staged through the device).
  std::vector<std::byte> hs(64), hr(64);
  for (size_t i = 0; i < hs.size(); ++i) hs[i] = std::byte(i * 7 + 1);
  g.allgather(hs, hr);
  EXPECT_EQ(std::memcmp(hs.data(), hr.data(), hs.size()), 0);
  std::fill(hr.begin(), hr.end(), std::byte{0});
  g.alltoall(hs, hr);
  EXPECT_EQ(std::memcmp(hs.data(), hr.data(), hs.size()), 0);
  g.broadcast(hs, 0);

  // Device bytes, in place, through the nonblocking calls.
  Tensor src = host_randn(Shape{256}, 40).to(kGpu);
  Tensor dst = Tensor::empty(Shape{256}, {.device = kGpu});
  dist::Request r = g.iallgather(bytes_of(src), bytes_of(dst));
  g.wait(r);
  EXPECT_FALSE(r.pending());
  expect_same_bits(dst, src, "iallgather of device memory");
  Tensor dst2 = Tensor::empty(Shape{256}, {.device = kGpu});
  const size_t n = src.nbytes();
  const std::vector<size_t> counts{n};
  r = g.ialltoallv(bytes_of(src), counts, bytes_of(dst2), counts);
  while (!g.test(r)) {
  }
  expect_same_bits(dst2, src, "ialltoallv of device memory");
  std::vector<std::byte> out(n);
  g.sendrecv(bytes_of(src), 0, out, 0);
  const Tensor host = src.to(Device::cpu());
  EXPECT_EQ(std::memcmp(out.data(), host.data_ptr(), n), 0);
  EXPECT_GT(g.stats().calls, 0u);
}

}  // namespace
}  // namespace mixp
