// GatherThread (zero3_prefetch.h): ZeRO 3's parameter broadcasts on a thread of their own.
#include "zero3_prefetch.h"

#include <chrono>
#include <utility>

namespace mixp::train {

GatherThread::GatherThread(std::unique_ptr<dist::ProcessGroup> group)
    : group_(std::move(group)), thread_([this] { run(); }) {}

GatherThread::~GatherThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t GatherThread::submit(std::vector<Piece> pieces) {
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    ticket = ++submitted_;
    queue_.emplace_back(ticket, std::move(pieces));
  }
  cv_.notify_all();
  return ticket;
}

void GatherThread::wait(uint64_t ticket) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_ >= ticket || error_; });
  if (error_) std::rethrow_exception(error_);
}

void GatherThread::broadcast(const std::vector<Piece>& pieces) {
  // Nonblocking broadcasts tested with a pause between tries, not blocking ones: OpenMPI polls
  // while it waits inside a blocking call, and this thread would take the core from the training
  // thread whose compute it is meant to hide behind (measured at GPT-2 124M on 2 cores:
  // docs/benchmarks.md, "ZeRO stage 3"). A peer more than a second late gets the guarded wait,
  // where the group's timeout watch applies (a dead rank ends the run as before).
  using Clock = std::chrono::steady_clock;
  std::vector<dist::Request> requests;
  for (const Piece& p : pieces) requests.push_back(group_->ibroadcast(p.data, p.root));
  const Clock::time_point t0 = Clock::now();
  for (dist::Request& r : requests) {
    while (!group_->test(r)) {
      if (Clock::now() - t0 > std::chrono::seconds(1)) {
        group_->wait(r);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void GatherThread::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Stops once the queue is empty: the broadcasts submitted are part of the collective order
    // every rank follows, so they run even when stopping.
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [ticket, pieces] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      broadcast(pieces);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) {
      error_ = error;
      queue_.clear();
    }
    done_ = ticket;
    cv_.notify_all();
  }
}

}  // namespace mixp::train
