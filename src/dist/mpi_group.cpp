// The MPI process group (process_group.h): OpenMPI from Debian (libopenmpi-dev), started by
// `mpirun`. Only the thread that created the group calls MPI (MPI_THREAD_FUNNELED); a watchdog
// thread only reads two atomics and ends the process when a collective has waited too long.
#include <mpi.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dist_detail.h"
#include "mixp/dist/process_group.h"

namespace mixp::dist {
namespace {

double wall_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

int checked_count(size_t bytes, const char* what) {
  if (bytes > size_t(INT_MAX)) {
    throw std::length_error(fmt::format(
        "{}: {} bytes in one MPI call exceed its int count; use a smaller --bucket-mb", what,
        bytes));
  }
  return static_cast<int>(bytes);
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(fmt::format("MPI {} failed: {}", what, std::string(msg, len)));
}

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // Errors come back as codes (turned into exceptions by check()) rather than aborting inside
    // MPI without a word about what mixp was doing.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    local_size_ = detail::env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    watchdog_ = std::thread([this] { watch(); });
  }

  ~MpiGroup() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string backend_name() const override { return "mpi"; }

  void allreduce(std::span<double> v, ReduceOp op) override {
    Guard g(*this, "all-reduce", v.size_bytes());
    const MPI_Op mop = op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::max ? MPI_MAX : MPI_MIN;
    check(MPI_Allreduce(MPI_IN_PLACE, v.data(), checked_count(v.size(), "all-reduce"), MPI_DOUBLE,
                        mop, MPI_COMM_WORLD),
          "MPI_Allreduce");
  }

  void allgather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (recv.size() != send.size() * size_t(size_)) throw std::invalid_argument("allgather sizes");
    Guard g(*this, "all-gather", send.size() * size_t(size_ - 1));
    check(MPI_Allgather(send.data(), checked_count(send.size(), "all-gather"), MPI_BYTE,
                        recv.data(), checked_count(send.size(), "all-gather"), MPI_BYTE,
                        MPI_COMM_WORLD),
          "MPI_Allgather");
  }

  void alltoall(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (send.size() != recv.size() || send.size() % size_t(size_) != 0) {
      throw std::invalid_argument("alltoall sizes");
    }
    const size_t piece = send.size() / size_t(size_);
    Guard g(*this, "all-to-all", piece * size_t(size_ - 1));
    check(MPI_Alltoall(send.data(), checked_count(piece, "all-to-all"), MPI_BYTE, recv.data(),
                       checked_count(piece, "all-to-all"), MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Alltoall");
  }

  Request ialltoall(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (send.size() != recv.size() || send.size() % size_t(size_) != 0) {
      throw std::invalid_argument("alltoall sizes");
    }
    const size_t piece = send.size() / size_t(size_);
    count(piece * size_t(size_ - 1));
    // An all-to-all-v that sends nothing to this rank itself (process_group.h): the caller reads
    // its own piece from `send`, so copying it into `recv` would be a pass over memory for nothing.
    struct V {
      MPI_Request req = MPI_REQUEST_NULL;
      std::vector<int> counts, displs;
    };
    auto v = std::make_shared<V>();
    const int c = checked_count(piece, "all-to-all");
    for (int r = 0; r < size_; ++r) {
      v->counts.push_back(r == rank_ ? 0 : c);
      v->displs.push_back(checked_count(size_t(r) * piece, "all-to-all"));
    }
    check(MPI_Ialltoallv(send.data(), v->counts.data(), v->displs.data(), MPI_BYTE, recv.data(),
                         v->counts.data(), v->displs.data(), MPI_BYTE, MPI_COMM_WORLD, &v->req),
          "MPI_Ialltoall");
    return Request{std::shared_ptr<void>(v, &v->req)};
  }

  Request iallgather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (recv.size() != send.size() * size_t(size_)) throw std::invalid_argument("allgather sizes");
    count(send.size() * size_t(size_ - 1));
    const bool in_place = send.data() == recv.data() + size_t(rank_) * send.size();
    auto req = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
    check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send.data(),
                         checked_count(send.size(), "all-gather"), MPI_BYTE, recv.data(),
                         checked_count(send.size(), "all-gather"), MPI_BYTE, MPI_COMM_WORLD,
                         req.get()),
          "MPI_Iallgather");
    return Request{req};
  }

  Request ialltoallv(std::span<const std::byte> send, std::span<const size_t> send_counts,
                     std::span<std::byte> recv, std::span<const size_t> recv_counts) override {
    if (send_counts.size() != size_t(size_) || recv_counts.size() != size_t(size_)) {
      throw std::invalid_argument("alltoallv: one count per rank");
    }
    // MPI reads the counts and displacements until the request completes: they live with it.
    struct V {
      MPI_Request req = MPI_REQUEST_NULL;
      std::vector<int> sc, sd, rc, rd;
    };
    auto v = std::make_shared<V>();
    size_t so = 0, ro = 0, sent = 0;
    for (int r = 0; r < size_; ++r) {
      v->sc.push_back(checked_count(send_counts[size_t(r)], "all-to-all-v"));
      v->sd.push_back(checked_count(so, "all-to-all-v"));
      v->rc.push_back(checked_count(recv_counts[size_t(r)], "all-to-all-v"));
      v->rd.push_back(checked_count(ro, "all-to-all-v"));
      so += send_counts[size_t(r)];
      ro += recv_counts[size_t(r)];
      if (r != rank_) sent += send_counts[size_t(r)];
    }
    if (so > send.size() || ro > recv.size()) throw std::invalid_argument("alltoallv sizes");
    count(sent);
    check(MPI_Ialltoallv(send.data(), v->sc.data(), v->sd.data(), MPI_BYTE, recv.data(),
                         v->rc.data(), v->rd.data(), MPI_BYTE, MPI_COMM_WORLD, &v->req),
          "MPI_Ialltoallv");
    // An aliasing pointer: test() and wait() see an MPI_Request*, and the counts live as long.
    return Request{std::shared_ptr<void>(v, &v->req)};
  }

  bool test(Request& r) override {
    if (!r.pending()) return true;
    const double t0 = wall_ms();
    int done = 0;
    check(MPI_Test(static_cast<MPI_Request*>(r.handle.get()), &done, MPI_STATUS_IGNORE),
          "MPI_Test");
    stats_.ms += wall_ms() - t0;
    if (done) r.handle.reset();
    return done != 0;
  }

  void wait(Request& r) override {
    if (!r.pending()) return;
    Guard g(*this, "wait for a nonblocking collective", 0, /*counted=*/false);
    check(MPI_Wait(static_cast<MPI_Request*>(r.handle.get()), MPI_STATUS_IGNORE), "MPI_Wait");
    r.handle.reset();
  }

  void sendrecv(std::span<const std::byte> send, int to, std::span<std::byte> recv,
                int from) override {
    Guard g(*this, "send-receive", send.size());
    check(MPI_Sendrecv(send.data(), checked_count(send.size(), "send-receive"), MPI_BYTE, to, 7,
                       recv.data(), checked_count(recv.size(), "send-receive"), MPI_BYTE, from, 7,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
  }

  void broadcast(std::span<std::byte> data, int root) override {
    Guard g(*this, "broadcast", rank_ == root ? data.size() * size_t(size_ - 1) : 0);
    check(MPI_Bcast(data.data(), checked_count(data.size(), "broadcast"), MPI_BYTE, root,
                    MPI_COMM_WORLD),
          "MPI_Bcast");
  }

  void barrier() override {
    Guard g(*this, "barrier", 0);
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

  void set_timeout(double seconds) override {
    if (!(seconds >= 0)) throw std::invalid_argument("the communication timeout must be >= 0");
    timeout_s_.store(seconds);
  }
  double timeout() const override { return timeout_s_.load(); }

  void abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  // Marks a collective in flight for the watchdog and counts it.
  struct Guard {
    MpiGroup& g;
    double t0;
    Guard(MpiGroup& group, const char* what, size_t bytes, bool counted = true)
        : g(group), t0(wall_ms()) {
      g.what_.store(what);
      g.since_ms_.store(t0);
      if (counted) g.count(bytes);
    }
    ~Guard() {
      g.since_ms_.store(0);
      g.stats_.ms += wall_ms() - t0;
    }
  };

  // Counts a collective started (the bytes it will send).
  void count(size_t bytes) {
    stats_.bytes_sent += bytes;
    stats_.calls += 1;
  }

  void watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      const double since = since_ms_.load();
      const double limit = timeout_s_.load();
      if (stop_ || since == 0 || limit == 0) continue;
      const double waited = (wall_ms() - since) * 1e-3;
      if (waited < limit) continue;
      std::fprintf(stderr,
                   "error: rank %d of %d waited %.0f s in the %s for the other ranks; one of them "
                   "has died or hangs (see its output above). Stopping this rank; raise "
                   "--comm-timeout if a step legitimately takes longer.\n",
                   rank_, size_, waited, what_.load());
      std::fflush(stderr);
      std::_Exit(3);
    }
  }

  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  std::atomic<double> timeout_s_{60.0};
  std::atomic<double> since_ms_{0};
  std::atomic<const char*> what_{""};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

namespace detail {
std::unique_ptr<ProcessGroup> make_mpi_group() {
  return std::make_unique<MpiGroup>();
}
void mpi_abort(ProcessGroup& g, int code) {
  static_cast<MpiGroup&>(g).abort(code);
}
}  // namespace detail

}  // namespace mixp::dist
