// The MPI process group (process_group.h): OpenMPI from Debian (libopenmpi-dev), started by
// `mpirun`. MPI is initialised with MPI_THREAD_MULTIPLE where the library provides it, so that a
// duplicate of the group (ProcessGroup::duplicate, its own communicator) can be called from a
// second thread (ZeRO 3's prefetching gathers, src/train/zero3_prefetch.h); each group is still
// called by one thread only. A watchdog thread per group only reads two atomics and ends the
// process when a collective has waited too long.
#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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
      // MIXP_MPI_THREAD=funneled asks for MPI_THREAD_FUNNELED instead (only the training thread
      // calls MPI; ZeRO 3's prefetch is then off): to measure what MPI_THREAD_MULTIPLE costs
      // the other runs (docs/benchmarks.md, "The cost of MPI_THREAD_MULTIPLE").
      const char* level = std::getenv("MIXP_MPI_THREAD");
      const std::string want = level ? level : "multiple";
      if (want != "multiple" && want != "funneled") {
        throw std::runtime_error("MIXP_MPI_THREAD must be multiple (the default) or funneled, not '" +
                                 want + "'");
      }
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr,
                            want == "funneled" ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE,
                            &provided),
            "MPI_Init_thread");
    }
    MPI_Query_thread(&thread_level_);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // Errors come back as codes (turned into exceptions by check()) rather than aborting inside
    // MPI without a word about what mixp was doing.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    local_size_ = detail::env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    init_shared_memory();
    watchdog_ = std::thread([this] { watch(); });
  }

  // A duplicate of `parent` (duplicate()): its own communicator, no shared memory, MPI finalised
  // by the world's group only.
  MpiGroup(const MpiGroup& parent, MPI_Comm comm)
      : comm_(comm), owns_mpi_(false), rank_(parent.rank_), size_(parent.size_),
        local_size_(parent.local_size_), thread_level_(parent.thread_level_) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    timeout_s_.store(parent.timeout_s_.load());
    watchdog_ = std::thread([this] { watch(); });
  }

  ~MpiGroup() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (!owns_mpi_) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&comm_);
      return;
    }
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
                        mop, comm_),
          "MPI_Allreduce");
  }

  void allgather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (recv.size() != send.size() * size_t(size_)) throw std::invalid_argument("allgather sizes");
    Guard g(*this, "all-gather", send.size() * size_t(size_ - 1));
    check(MPI_Allgather(send.data(), checked_count(send.size(), "all-gather"), MPI_BYTE,
                        recv.data(), checked_count(send.size(), "all-gather"), MPI_BYTE,
                        comm_),
          "MPI_Allgather");
  }

  void alltoall(std::span<const std::byte> send, std::span<std::byte> recv) override {
    if (send.size() != recv.size() || send.size() % size_t(size_) != 0) {
      throw std::invalid_argument("alltoall sizes");
    }
    const size_t piece = send.size() / size_t(size_);
    Guard g(*this, "all-to-all", piece * size_t(size_ - 1));
    check(MPI_Alltoall(send.data(), checked_count(piece, "all-to-all"), MPI_BYTE, recv.data(),
                       checked_count(piece, "all-to-all"), MPI_BYTE, comm_),
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
                         v->counts.data(), v->displs.data(), MPI_BYTE, comm_, &v->req),
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
                         checked_count(send.size(), "all-gather"), MPI_BYTE, comm_,
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
                         v->rc.data(), v->rd.data(), MPI_BYTE, comm_, &v->req),
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
                       comm_, MPI_STATUS_IGNORE),
          "MPI_Sendrecv");
  }

  void broadcast(std::span<std::byte> data, int root) override {
    Guard g(*this, "broadcast", rank_ == root ? data.size() * size_t(size_ - 1) : 0);
    check(MPI_Bcast(data.data(), checked_count(data.size(), "broadcast"), MPI_BYTE, root,
                    comm_),
          "MPI_Bcast");
  }

  Request ibroadcast(std::span<std::byte> data, int root) override {
    count(rank_ == root ? data.size() * size_t(size_ - 1) : 0);
    auto req = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
    check(MPI_Ibcast(data.data(), checked_count(data.size(), "broadcast"), MPI_BYTE, root, comm_,
                     req.get()),
          "MPI_Ibcast");
    return Request{req};
  }

  void barrier() override {
    Guard g(*this, "barrier", 0);
    check(MPI_Barrier(comm_), "MPI_Barrier");
  }

  void set_timeout(double seconds) override {
    if (!(seconds >= 0)) throw std::invalid_argument("the communication timeout must be >= 0");
    timeout_s_.store(seconds);
  }
  double timeout() const override { return timeout_s_.load(); }

  std::unique_ptr<ProcessGroup> duplicate() override {
    // Every rank agrees (the lowest level any has), so that all or none get the duplicate.
    int multiple = thread_level_ >= MPI_THREAD_MULTIPLE ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &multiple, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    if (!multiple) return nullptr;
    MPI_Comm dup = MPI_COMM_NULL;
    check(MPI_Comm_dup(comm_, &dup), "MPI_Comm_dup");
    return std::make_unique<MpiGroup>(*this, dup);
  }

  void abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

  std::unique_ptr<SharedMemory> map_shared(size_t bytes) override;

 private:
  friend class MpiShared;

  // Whether the ranks may map each other's memory: all on this machine (MPI's shared-memory
  // communicator spans the world) and not turned off with MIXP_SHARED_MEMORY=0, agreed by every
  // rank. Rank 0's process id names the memory (with a counter), so that two jobs never meet.
  void init_shared_memory() {
    MPI_Comm node = MPI_COMM_NULL;
    int node_size = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) ==
            MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
      MPI_Comm_size(node, &node_size);
      MPI_Comm_free(&node);
    }
    const char* env = std::getenv("MIXP_SHARED_MEMORY");
    shared_required_ = env && std::strcmp(env, "1") == 0;
    int ok = node_size == size_ && !(env && std::strcmp(env, "0") == 0) ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    shared_ok_ = ok != 0;
    long long id = static_cast<long long>(::getpid());
    check(MPI_Bcast(&id, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
    shared_id_ = id;
  }
  // True on every rank when `mine` is true on every rank.
  bool all(bool mine) {
    int v = mine ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    return v != 0;
  }

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

  MPI_Comm comm_ = MPI_COMM_WORLD;
  bool owns_mpi_ = true;  // the world's group: finalises MPI
  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  int thread_level_ = MPI_THREAD_SINGLE;
  std::atomic<double> timeout_s_{60.0};
  std::atomic<double> since_ms_{0};
  std::atomic<const char*> what_{""};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
  bool shared_ok_ = false;
  bool shared_required_ = false;  // MIXP_SHARED_MEMORY=1: not having it is an error
  long long shared_id_ = 0;
  uint64_t shared_count_ = 0;  // map_shared calls, the same on every rank
};

// One mapping per rank: a 64-byte line holding the rank's flag, then its region. Each rank
// creates its own (POSIX shared memory, reserved up front with posix_fallocate so that a full
// /dev/shm is an error now rather than a SIGBUS later) and maps the others' read-only; the names
// are unlinked once every rank has mapped every one, so nothing is left behind.
class MpiShared final : public SharedMemory {
 public:
  static constexpr size_t kHeader = 64;

  MpiShared(MpiGroup& g, size_t bytes)
      : g_(g), size_(bytes), mapped_((kHeader + bytes + 4095) / 4096 * 4096),
        maps_(size_t(g.size_), nullptr) {}

  ~MpiShared() override {
    for (void* m : maps_) {
      if (m) ::munmap(m, mapped_);
    }
  }

  std::string name(int rank) const {
    return fmt::format("/mixp-{}-{}-{}", g_.shared_id_, g_.shared_count_, rank);
  }

  // This rank's mapping; false (with nothing left behind) when it cannot be had.
  bool create() {
    const std::string n = name(g_.rank_);
    const int fd = ::shm_open(n.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return false;
    void* m = MAP_FAILED;
    if (::posix_fallocate(fd, 0, off_t(mapped_)) == 0) {
      m = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    ::close(fd);
    if (m == MAP_FAILED) {
      ::shm_unlink(n.c_str());
      return false;
    }
    maps_[size_t(g_.rank_)] = m;
    return true;
  }
  // The other ranks' mappings, read-only.
  bool open_others() {
    bool ok = true;
    for (int r = 0; r < g_.size_; ++r) {
      if (r == g_.rank_) continue;
      const int fd = ::shm_open(name(r).c_str(), O_RDONLY, 0);
      if (fd < 0) {
        ok = false;
        continue;
      }
      void* m = ::mmap(nullptr, mapped_, PROT_READ, MAP_SHARED, fd, 0);
      ::close(fd);
      if (m == MAP_FAILED) {
        ok = false;
        continue;
      }
      maps_[size_t(r)] = m;
    }
    return ok;
  }
  void unlink_mine() {
    if (maps_[size_t(g_.rank_)]) ::shm_unlink(name(g_.rank_).c_str());
  }

  std::byte* region(int rank) const override {
    return static_cast<std::byte*>(maps_[size_t(rank)]) + kHeader;
  }
  size_t size() const override { return size_; }

  void post(uint64_t value, size_t bytes) override {
    flag(g_.rank_).store(value, std::memory_order_release);
    g_.count(bytes);
  }
  bool ready(int rank, uint64_t value) const override {
    return flag(rank).load(std::memory_order_acquire) >= value;
  }
  void wait(int rank, uint64_t value) override {
    if (ready(rank, value)) return;
    MpiGroup::Guard guard(g_, "gradient reduction (shared memory)", 0,
                          /*counted=*/false);
    // Spin a little (the other rank is usually a few microseconds away), then give up the core
    // at each try, so that ranks sharing a core (--oversubscribe) do not starve each other.
    for (int spins = 0; !ready(rank, value); ++spins) {
      if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#endif
      } else {
        ::sched_yield();
      }
    }
  }

 private:
  std::atomic_ref<uint64_t> flag(int rank) const {
    return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(maps_[size_t(rank)]));
  }

  MpiGroup& g_;
  size_t size_;
  size_t mapped_;
  std::vector<void*> maps_;
};

std::unique_ptr<SharedMemory> MpiGroup::map_shared(size_t bytes) {
  auto none = [&](const char* why) -> std::unique_ptr<SharedMemory> {
    if (shared_required_) {
      throw std::runtime_error(fmt::format(
          "MIXP_SHARED_MEMORY=1, but the ranks cannot share memory: {}", why));
    }
    return nullptr;
  };
  if (!shared_ok_) {
    return none("they do not all run on one machine, or a rank has MIXP_SHARED_MEMORY=0");
  }
  ++shared_count_;
  auto m = std::make_unique<MpiShared>(*this, bytes);
  const bool created = all(m->create());
  if (!created) {
    m->unlink_mine();
    return none("a rank could not create its region in /dev/shm");
  }
  const bool opened = all(m->open_others());
  m->unlink_mine();  // every rank has mapped every region (or given up): the names can go
  if (!opened) return none("a rank could not map another rank's region");
  return m;
}

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
