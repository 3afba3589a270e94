// ZeRO 3's prefetch (docs/distributed.md, "ZeRO stage 3", "Prefetch"): the parameter broadcasts
// of the next unit run on a thread of their own, over a duplicate of the data-parallel group
// (ProcessGroup::duplicate, MPI_Comm_dup), while the training thread computes the current unit,
// as FSDP's forward_prefetch/backward_prefetch and DeepSpeed's prefetch bucket overlap the
// all-gathers with compute. Internal to Zero3 (trainer_zero3.cpp).
//
// Why a thread and not MPI_Ibcast on the training thread: OpenMPI here has no asynchronous
// progress thread, so a nonblocking broadcast moves only while its caller is inside an MPI call,
// and the forward of a unit makes none. The thread starts nonblocking broadcasts and tests them
// with short sleeps in between (a blocking broadcast polls and takes the training thread's core:
// slower at GPT-2 124M on 2 cores, docs/benchmarks.md "ZeRO stage 3"). Each rank's thread runs
// the same broadcasts in the same order (the training threads submit them at the same points);
// a peer more than a second late gets the duplicate group's guarded wait, whose timeout watch
// ends a rank whose peer died, as the group's does.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "mixp/dist/process_group.h"

namespace mixp::train {

class GatherThread {
 public:
  // One broadcast: `data` from rank `root` to every rank (ProcessGroup::broadcast).
  struct Piece {
    std::span<std::byte> data;
    int root = 0;
  };

  explicit GatherThread(std::unique_ptr<dist::ProcessGroup> group);
  // Waits for the broadcasts already submitted (each is bounded by the group's timeout).
  ~GatherThread();
  GatherThread(const GatherThread&) = delete;
  GatherThread& operator=(const GatherThread&) = delete;

  // Queues `pieces`, broadcast in order after everything submitted before; returns the ticket
  // for wait(). The buffers must stay untouched until then.
  uint64_t submit(std::vector<Piece> pieces);
  // Blocks until the submission `ticket` has been broadcast; rethrows the thread's error (an
  // MPI failure), which also fails every later wait.
  void wait(uint64_t ticket);

 private:
  void run();
  void broadcast(const std::vector<Piece>& pieces);

  std::unique_ptr<dist::ProcessGroup> group_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, std::vector<Piece>>> queue_;
  uint64_t submitted_ = 0;
  uint64_t done_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mixp::train
