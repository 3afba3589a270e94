// world(), the single-process group and the launch detection (process_group.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "dist_detail.h"
#include "mixp/dist/process_group.h"

namespace mixp::dist {
namespace {

class SingleProcess final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  void allreduce(std::span<double>, ReduceOp) override {}
  void allgather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    std::memcpy(recv.data(), send.data(), send.size());
  }
  void alltoall(std::span<const std::byte> send, std::span<std::byte> recv) override {
    std::memcpy(recv.data(), send.data(), send.size());
  }
  Request ialltoall(std::span<const std::byte>, std::span<std::byte>) override {
    return {};  // the only piece is this rank's own, which ialltoall leaves in send
  }
  Request iallgather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (send.data() != recv.data()) allgather(send, recv);  // else in place
    return {};
  }
  Request ialltoallv(std::span<const std::byte> send, std::span<const size_t> send_counts,
                     std::span<std::byte> recv, std::span<const size_t>) override {
    std::memcpy(recv.data(), send.data(), send_counts[0]);
    return {};
  }
  bool test(Request&) override { return true; }
  void wait(Request&) override {}
  void sendrecv(std::span<const std::byte> send, int, std::span<std::byte> recv, int) override {
    std::memcpy(recv.data(), send.data(), send.size());
  }
  void broadcast(std::span<std::byte>, int) override {}
  void barrier() override {}
  std::unique_ptr<ProcessGroup> duplicate() override {
    return std::make_unique<SingleProcess>();
  }
  void set_timeout(double s) override { timeout_ = s; }
  double timeout() const override { return timeout_; }

 private:
  double timeout_ = 60;
};

std::unique_ptr<ProcessGroup>& world_slot() {
  // Destroyed at exit, after main returns: the MPI group finalises MPI there.
  static std::unique_ptr<ProcessGroup> g;
  return g;
}

}  // namespace

namespace detail {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end && *end == 0) ? static_cast<int>(x) : fallback;
}
}  // namespace detail

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

ProcessGroup& world() {
  auto& g = world_slot();
  if (!g) g = launched_by_mpirun() ? detail::make_mpi_group() : make_single_process_group();
  return *g;
}

ProcessGroup* world_if_started() {
  return world_slot().get();
}

void abort_world(int exit_code) {
  auto& g = world_slot();
  if (g && g->size() > 1) detail::mpi_abort(*g, exit_code);
}

std::unique_ptr<ProcessGroup> make_single_process_group() {
  return std::make_unique<SingleProcess>();
}

ProcessGroup& group_for(Device device) {
  if (device.is_host_memory()) return world();
  // One NCCL group per GPU, never destroyed: destroying a communicator during exit, after the
  // CUDA runtime may have been torn down, is what to avoid; the driver releases it with the
  // process.
  static std::mutex mu;
  static auto* groups = new std::map<int, std::unique_ptr<ProcessGroup>>();
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<ProcessGroup>& g = (*groups)[device.index];
  if (!g) g = make_nccl_group(&world(), device.index);
  return *g;
}

}  // namespace mixp::dist
