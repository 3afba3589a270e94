// The processes of a data-parallel run and what they say to each other (docs/distributed.md).
//
// A ProcessGroup is the communication layer behind mixp's data parallelism: the Trainer and the
// gradient reduction (grad_reduce.h) only ever call this interface, so that another transport
// (NCCL with the GPU backend) can take its place. Three implementations exist:
//   - the single process (size 1): every collective is the identity, nothing is counted;
//   - MPI (src/dist/mpi_group.cpp), used when the program was started by `mpirun`;
//   - NCCL (src/dist/nccl/nccl_group.cpp, built with the CUDA backend when nccl.h is found), for
//     GPU memory: group_for(Device) below picks it for cuda tensors.
// Every collective is blocking and called by every rank in the same order (the MPI rule). A
// collective that waits longer than the group's timeout for the other ranks ends the process
// with a message naming the collective (a dead or hung rank never hangs the others forever).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mixp/tensor/device.h"

namespace mixp::dist {

// Bytes this rank sent and time it spent in collectives, since the group was created (or the last
// reset_stats()). The Trainer reports them per step (--json: comm_bytes_per_step, comm_ms).
struct CommStats {
  uint64_t bytes_sent = 0;  // payload bytes this rank handed to the transport
  uint64_t calls = 0;
  double ms = 0;  // wall time inside collectives, waiting included
};

enum class ReduceOp { sum, max, min };

// A nonblocking collective in flight (ialltoall, iallgather). `handle` is the transport's (an
// MPI_Request); null means complete.
struct Request {
  std::shared_ptr<void> handle;
  bool pending() const { return handle != nullptr; }
};

// Memory that every rank of a group maps (ranks on one machine; ProcessGroup::map_shared): each
// rank writes only its own region and reads the others' directly, with no copy by the transport.
// Each rank also has a flag, a number it raises with post() and the others watch: the only
// synchronisation, so neither side makes an MPI call. The memory stays mapped until the object is
// destroyed (no collective then: a rank that stops early hangs no one).
class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  // Rank `rank`'s region: size() bytes, 64-byte aligned, zero when mapped.
  virtual std::byte* region(int rank) const = 0;
  virtual size_t size() const = 0;
  // This rank's writes to its region so far become visible to the others, then its flag becomes
  // `value` (never lowered). `bytes`: what the other ranks will read because of it, counted as
  // sent in the group's CommStats.
  virtual void post(uint64_t value, size_t bytes) = 0;
  // Whether rank `rank`'s flag has reached `value` (its writes before that post are then
  // visible here); never blocks.
  virtual bool ready(int rank, uint64_t value) const = 0;
  // Blocks until ready(rank, value); the group's timeout applies, as to a collective.
  virtual void wait(int rank, uint64_t value) = 0;
  // A counter for the user of the memory (grad_reduce.cpp counts its reductions with it).
  uint64_t uses = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks of this group on this machine (OpenMPI's local size); threads per rank default to the
  // machine's cores divided by it.
  virtual int local_size() const { return 1; }
  virtual std::string backend_name() const = 0;

  // In place over every rank: element-wise op of the ranks' values. Exact for max/min; sum of
  // doubles is for scalars (losses, counts), identical on every rank.
  virtual void allreduce(std::span<double> values, ReduceOp op) = 0;
  // Every rank sends `send` (bytes, same length on every rank) and receives all ranks' pieces in
  // rank order into `recv` (size() * send.size() bytes).
  virtual void allgather(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  // `send` holds size() equal pieces; piece j goes to rank j, and `recv` receives piece rank()
  // of every rank, in rank order (MPI_Alltoall).
  virtual void alltoall(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  // Nonblocking all-to-all and all-gather (MPI_Ialltoall, MPI_Iallgather): the same contract as
  // the blocking ones, started now and finished by wait(). They count as collectives in the
  // order they are *started*: every rank must start them in the same order, relative to each
  // other and to the blocking collectives. Neither buffer may be touched until the request is
  // complete. The transport makes progress inside test() and wait() (and other collectives), so
  // a caller that overlaps them with computation calls test() now and then.
  // Two differences from the blocking ones, each saving a copy of this rank's own piece (the
  // gradient reductions of grad_reduce.cpp read it where it already is): ialltoall leaves piece
  // rank() of `recv` unwritten (that piece is in `send`), and iallgather accepts `send` lying
  // in `recv` at piece rank() (in place, as MPI_IN_PLACE).
  virtual Request ialltoall(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  virtual Request iallgather(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  // Nonblocking all-to-all with a byte count per rank (MPI_Ialltoallv): send_counts[j] bytes of
  // `send` (pieces in rank order) go to rank j; recv_counts[i] bytes from rank i land in `recv`,
  // in rank order. The count vectors are copied.
  virtual Request ialltoallv(std::span<const std::byte> send, std::span<const size_t> send_counts,
                             std::span<std::byte> recv, std::span<const size_t> recv_counts) = 0;
  // True when `r` is complete (it is reset then); never blocks.
  virtual bool test(Request& r) = 0;
  // Blocks until `r` is complete (the timeout applies, as to a blocking collective).
  virtual void wait(Request& r) = 0;
  // Sends `send` to rank `to` while receiving `recv` from rank `from` (one hop of a ring).
  virtual void sendrecv(std::span<const std::byte> send, int to, std::span<std::byte> recv,
                        int from) = 0;
  // Rank `root`'s bytes to every rank.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  // The same, nonblocking (MPI_Ibcast), under the rules of the nonblocking collectives above.
  // The default runs the blocking one and returns a complete request.
  virtual Request ibroadcast(std::span<std::byte> data, int root) {
    broadcast(data, root);
    return {};
  }
  virtual void barrier() = 0;

  // A collective: `bytes` of memory per rank that every rank maps (SharedMemory), when all ranks
  // run on one machine; null, on every rank, where they do not, in a single process, where the
  // memory cannot be had, or with MIXP_SHARED_MEMORY=0 in the environment. With
  // MIXP_SHARED_MEMORY=1, not having it throws instead (the tests use it to know which path ran).
  virtual std::unique_ptr<SharedMemory> map_shared(size_t bytes) {
    (void)bytes;
    return nullptr;
  }

  // A collective: a group over the same ranks whose collectives are independent of this one's
  // (MPI_Comm_dup), for one other thread to call while this one's thread calls this group (ZeRO
  // 3's prefetching gathers, src/train/zero3_prefetch.h). It has its own statistics and its own
  // timeout watch (the timeout is this group's at the time). Null, on every rank, where the
  // transport cannot (MPI without MPI_THREAD_MULTIPLE; NCCL).
  virtual std::unique_ptr<ProcessGroup> duplicate() { return nullptr; }

  // Seconds a collective may wait for the other ranks before the process ends with an error
  // (default 60; 0 = forever).
  virtual void set_timeout(double seconds) = 0;
  virtual double timeout() const = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;
};

// The group of this process: MPI's world when started by mpirun (OMPI_COMM_WORLD_SIZE or
// PMIX_RANK in the environment), else the single process. Created on first use; MPI is
// initialised then and finalised at exit.
ProcessGroup& world();
// The group world() created, or null when nothing has asked for it yet.
ProcessGroup* world_if_started();
// True when this process was started by mpirun (before, and without, initialising MPI).
bool launched_by_mpirun();
// Ends a multi-process run at once after an error on this rank: the other ranks stop too
// (MPI_Abort) instead of waiting for this one. Does nothing (returns) in a single process.
void abort_world(int exit_code);

// A single-process group, for tests and for code that wants the interface without MPI.
std::unique_ptr<ProcessGroup> make_single_process_group();

// --- NCCL (docs/distributed.md, "NCCL"; untested on hardware, multi-GPU untested anywhere).
// Whether this mixp has the NCCL group (built with the CUDA backend when CMake finds nccl.h;
// libnccl.so.2 itself is loaded with dlopen on first use, never linked) and whether it loads.
struct NcclStatus {
  bool built = false;   // the NCCL group is compiled in
  bool loaded = false;  // libnccl.so.2 loaded and has every entry point used
  int version = 0;      // ncclGetVersion (22809 = 2.28.9), 0 when not loaded
  std::string message;  // "NCCL 2.28.9 (libnccl.so.2)" or why not
};
NcclStatus nccl_status();
// A group over NCCL on cuda:device, with the ranks of `bootstrap` (its rank 0 makes the
// ncclUniqueId, its broadcast hands it to the others: MPI's world under mpirun); null or a
// single-rank bootstrap gives one rank (ncclCommInitAll, no MPI). Its collectives take device
// memory in place and stage host memory through a device copy; they run on the CUDA backend's
// stream of that device, after the kernels queued before them. set_timeout is kept, not
// enforced (NCCL's calls have no timeout). Throws std::runtime_error saying why when NCCL is not
// built in or does not load, and "no CUDA device: ..." without the device. Collective: every
// rank of bootstrap calls it.
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup* bootstrap, int device);
// The group that moves `device`'s memory: world() for host memory (cpu, the guarded test
// device); for cuda:i the NCCL group of cuda:i over world()'s ranks, created on first use
// (collectively: every rank must ask in the same order) and kept until the process ends.
ProcessGroup& group_for(Device device);

}  // namespace mixp::dist
