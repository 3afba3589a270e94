// The NCCL process group (process_group.h: nccl_group, group_for): the collectives of GPU memory
// over NCCL, one communicator per process on its GPU, on the CUDA backend's stream of that GPU
// (so a collective is ordered after the kernels that produced its buffers, as every kernel of the
// backend is), which it gets through the device interface (DeviceMemoryHooks::stream,
// mixp/tensor/allocator.h) without including the backend. Compiled with the CUDA backend when
// nccl.h is found (cmake/MixpCuda.cmake); libnccl.so.2 is loaded with dlopen on first use, so no
// binary links it (it is 200+ MB, and a machine without it still runs everything else).
//
// Bootstrap: rank 0 makes the ncclUniqueId, the bootstrap group (world(): MPI under mpirun)
// broadcasts it, every rank calls ncclCommInitRank. A single process without MPI calls
// ncclCommInitAll for its one GPU. Buffers may be device memory (read and written in place) or
// host memory (staged through a device copy; blocking then, even for the i* collectives).
//
// Untested on hardware, as the whole CUDA backend; multi-GPU is untested anywhere.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "mixp/dist/process_group.h"
#include "mixp/tensor/allocator.h"

namespace mixp::dist {
namespace {

// libnccl.so.2's entry points, resolved once.
struct Nccl {
  std::string reason;  // why it is unusable; empty when loaded
  int version = 0;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
};

const Nccl& nccl() {
  static const Nccl n = [] {
    Nccl r;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      r.reason = fmt::format("libnccl.so.2 cannot be loaded ({}); install NCCL or put its "
                             "folder on LD_LIBRARY_PATH",
                             e ? e : "not found");
      return r;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) {
        ok = false;
        r.reason = fmt::format("libnccl.so.2 has no {}", name);
      }
    };
    sym(r.error_string, "ncclGetErrorString");
    sym(r.get_version, "ncclGetVersion");
    sym(r.unique_id, "ncclGetUniqueId");
    sym(r.init_rank, "ncclCommInitRank");
    sym(r.init_all, "ncclCommInitAll");
    sym(r.destroy, "ncclCommDestroy");
    sym(r.all_reduce, "ncclAllReduce");
    sym(r.all_gather, "ncclAllGather");
    sym(r.broadcast, "ncclBroadcast");
    sym(r.send, "ncclSend");
    sym(r.recv, "ncclRecv");
    sym(r.group_start, "ncclGroupStart");
    sym(r.group_end, "ncclGroupEnd");
    if (ok) r.get_version(&r.version);
    return r;
  }();
  return n;
}

void check(ncclResult_t res, const char* call) {
  if (res == ncclSuccess) return;
  throw std::runtime_error(
      fmt::format("mixp: NCCL {} failed: {}", call, nccl().error_string(res)));
}
#define MIXP_NCCL_CHECK(call) check((call), #call)

// The CUDA runtime calls of the group (staging copies, events, syncs), checked as the backend
// checks its own (the same message: src/backend/cuda/cuda_device.cpp).
void check_cuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(fmt::format("mixp: CUDA error {} ({}) in {}", cudaGetErrorName(e),
                                       cudaGetErrorString(e), call));
}
#define MIXP_CUDA_CHECK(call) check_cuda((call), #call)

// The stream the CUDA backend of `device` runs its kernels on (device made current): throws
// "no CUDA device: ..." as the backend does.
cudaStream_t backend_stream(int device) {
  const DeviceMemoryHooks* hooks = device_memory(DeviceKind::cuda);
  if (!hooks || !hooks->stream)
    throw std::runtime_error("mixp: NCCL: the CUDA backend is not registered in this build");
  return static_cast<cudaStream_t>(hooks->stream(device));
}

bool is_device_memory(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // a host pointer the runtime never saw
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

ncclRedOp_t op_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// A device buffer for a host span (freed on the stream when done).
struct DeviceBuffer {
  void* ptr = nullptr;
  cudaStream_t stream = nullptr;
  DeviceBuffer(size_t n, cudaStream_t s) : stream(s) {
    MIXP_CUDA_CHECK(cudaMallocAsync(&ptr, n ? n : 1, s));
  }
  ~DeviceBuffer() { cudaFreeAsync(ptr, stream); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(ProcessGroup* boot, int device) : device_(device) {
    const Nccl& n = nccl();
    if (!n.reason.empty()) throw std::runtime_error("mixp: NCCL: " + n.reason);
    stream_ = backend_stream(device);  // throws "no CUDA device: ..."
    rank_ = boot ? boot->rank() : 0;
    size_ = boot ? boot->size() : 1;
    local_size_ = boot ? boot->local_size() : 1;
    if (size_ == 1) {
      MIXP_NCCL_CHECK(n.init_all(&comm_, 1, &device_));
    } else {
      ncclUniqueId id{};
      if (rank_ == 0) MIXP_NCCL_CHECK(n.unique_id(&id));
      boot->broadcast(std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1)), 0);
      MIXP_NCCL_CHECK(n.init_rank(&comm_, size_, id, rank_));
    }
  }
  ~NcclGroup() override {
    if (comm_) nccl().destroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string backend_name() const override { return "nccl"; }

  void allreduce(std::span<double> values, ReduceOp op) override {
    Timed t(*this, values.size_bytes());
    Staged s(*this, values.data(), values.size_bytes(), true);
    MIXP_NCCL_CHECK(nccl().all_reduce(s.ptr, s.ptr, values.size(), ncclDouble, op_of(op), comm_,
                                      stream_));
    s.copy_back(values.data());
    sync();
  }
  void allgather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    Request r = iallgather(send, recv);
    wait(r);
  }
  void alltoall(std::span<const std::byte> send, std::span<std::byte> recv) override {
    Request r = all_to_all(send, recv, /*own_piece=*/true);
    wait(r);
  }
  Request ialltoall(std::span<const std::byte> send, std::span<std::byte> recv) override {
    return all_to_all(send, recv, /*own_piece=*/false);
  }
  Request iallgather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    Timed t(*this, send.size() * static_cast<size_t>(size_ - 1));
    const bool in_place = send.data() == recv.data() + send.size() * static_cast<size_t>(rank_);
    Staged r(*this, recv.data(), recv.size(), in_place);
    const void* sp =
        in_place ? static_cast<const std::byte*>(r.ptr) + send.size() * rank_ : nullptr;
    std::unique_ptr<Staged> s;
    if (!in_place) {
      s = std::make_unique<Staged>(*this, const_cast<std::byte*>(send.data()), send.size(), true);
      sp = s->ptr;
    }
    MIXP_NCCL_CHECK(nccl().all_gather(sp, r.ptr, send.size(), ncclUint8, comm_, stream_));
    return finish(r, recv.data());
  }
  Request ialltoallv(std::span<const std::byte> send, std::span<const size_t> send_counts,
                     std::span<std::byte> recv, std::span<const size_t> recv_counts) override {
    return exchange(send, send_counts, recv, recv_counts, /*own_piece=*/true);
  }
  bool test(Request& r) override {
    if (!r.pending()) return true;
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(r.handle.get()));
    if (e == cudaErrorNotReady) return false;
    MIXP_CUDA_CHECK(e);
    r.handle.reset();
    return true;
  }
  void wait(Request& r) override {
    if (!r.pending()) return;
    const auto t0 = std::chrono::steady_clock::now();
    MIXP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(r.handle.get())));
    stats_.ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.handle.reset();
  }
  void sendrecv(std::span<const std::byte> send, int to, std::span<std::byte> recv,
                int from) override {
    Timed t(*this, send.size());
    Staged s(*this, const_cast<std::byte*>(send.data()), send.size(), true);
    Staged r(*this, recv.data(), recv.size(), false);
    MIXP_NCCL_CHECK(nccl().group_start());
    MIXP_NCCL_CHECK(nccl().send(s.ptr, send.size(), ncclUint8, to, comm_, stream_));
    MIXP_NCCL_CHECK(nccl().recv(r.ptr, recv.size(), ncclUint8, from, comm_, stream_));
    MIXP_NCCL_CHECK(nccl().group_end());
    r.copy_back(recv.data());
    sync();
  }
  void broadcast(std::span<std::byte> data, int root) override {
    Timed t(*this, rank_ == root ? data.size() * static_cast<size_t>(size_ - 1) : 0);
    Staged s(*this, data.data(), data.size(), true);
    MIXP_NCCL_CHECK(nccl().broadcast(s.ptr, s.ptr, data.size(), ncclUint8, root, comm_, stream_));
    s.copy_back(data.data());
    sync();
  }
  void barrier() override {
    double one = 1;
    allreduce(std::span<double>(&one, 1), ReduceOp::sum);
  }
  // NCCL's blocking calls have no timeout of their own: kept for the interface, not enforced.
  void set_timeout(double seconds) override { timeout_ = seconds; }
  double timeout() const override { return timeout_; }

 private:
  // A device pointer for [p, p + n): p itself when it is device memory, else a device buffer
  // (filled from p when `copy_in`); copy_back writes a staged buffer back to the host.
  struct Staged {
    NcclGroup& g;
    void* ptr = nullptr;
    std::unique_ptr<DeviceBuffer> buf;
    Staged(NcclGroup& grp, void* p, size_t n, bool copy_in) : g(grp) {
      if (n == 0 || is_device_memory(p)) {
        ptr = p;
        return;
      }
      buf = std::make_unique<DeviceBuffer>(n, g.stream_);
      ptr = buf->ptr;
      if (copy_in)
        MIXP_CUDA_CHECK(cudaMemcpyAsync(ptr, p, n, cudaMemcpyHostToDevice, g.stream_));
      bytes = n;
    }
    void copy_back(void* host) const {
      if (buf)
        MIXP_CUDA_CHECK(cudaMemcpyAsync(host, ptr, bytes, cudaMemcpyDeviceToHost, g.stream_));
    }
    size_t bytes = 0;
  };
  // Counts a collective's bytes and the time until it is queued (wait() adds the rest).
  struct Timed {
    NcclGroup& g;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    Timed(NcclGroup& grp, size_t bytes) : g(grp) {
      g.stats_.bytes_sent += bytes;
      ++g.stats_.calls;
    }
    ~Timed() {
      g.stats_.ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  void sync() { MIXP_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // The all-to-all of ialltoallv; own_piece false leaves recv's piece of this rank unwritten
  // (ialltoall's contract).
  Request exchange(std::span<const std::byte> send, std::span<const size_t> send_counts,
                   std::span<std::byte> recv, std::span<const size_t> recv_counts,
                   bool own_piece) {
    size_t sent = 0;
    for (int j = 0; j < size_; ++j)
      if (j != rank_) sent += send_counts[static_cast<size_t>(j)];
    Timed t(*this, sent);
    Staged s(*this, const_cast<std::byte*>(send.data()), send.size(), true);
    // Staged with its old bytes when this rank's piece must stay as it was.
    Staged r(*this, recv.data(), recv.size(), !own_piece);
    size_t so = 0, ro = 0;
    MIXP_NCCL_CHECK(nccl().group_start());
    for (int j = 0; j < size_; ++j) {
      const size_t sc = send_counts[static_cast<size_t>(j)],
                   rc = recv_counts[static_cast<size_t>(j)];
      if (j == rank_) {
        if (own_piece && sc)
          MIXP_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(r.ptr) + ro,
                                          static_cast<const std::byte*>(s.ptr) + so, sc,
                                          cudaMemcpyDeviceToDevice, stream_));
      } else {
        if (sc)
          MIXP_NCCL_CHECK(
              nccl().send(static_cast<std::byte*>(s.ptr) + so, sc, ncclUint8, j, comm_, stream_));
        if (rc)
          MIXP_NCCL_CHECK(
              nccl().recv(static_cast<std::byte*>(r.ptr) + ro, rc, ncclUint8, j, comm_, stream_));
      }
      so += sc;
      ro += rc;
    }
    MIXP_NCCL_CHECK(nccl().group_end());
    return finish(r, recv.data());
  }
  Request all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, bool own_piece) {
    const size_t piece = send.size() / static_cast<size_t>(size_);
    const std::vector<size_t> counts(static_cast<size_t>(size_), piece);
    return exchange(send, counts, recv, counts, own_piece);
  }
  // A request for work queued on the stream: staged results are copied back and waited for
  // now (the host buffer must be complete on return); device results complete with an event.
  Request finish(Staged& r, void* host) {
    if (r.buf) {
      r.copy_back(host);
      sync();
      return {};
    }
    cudaEvent_t ev = nullptr;
    MIXP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    MIXP_CUDA_CHECK(cudaEventRecord(ev, stream_));
    Request req;
    req.handle =
        std::shared_ptr<void>(ev, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
    return req;
  }

  int device_ = 0, rank_ = 0, size_ = 1, local_size_ = 1;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  double timeout_ = 60;
};

}  // namespace

NcclStatus nccl_status() {
  NcclStatus s;
  s.built = true;
  const Nccl& n = nccl();
  s.loaded = n.reason.empty();
  s.version = n.version;
  s.message = s.loaded ? fmt::format("NCCL {}.{}.{} (libnccl.so.2)", n.version / 10000,
                                     n.version / 100 % 100, n.version % 100)
                       : "NCCL: " + n.reason;
  return s;
}

std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup* bootstrap, int device) {
  return std::make_unique<NcclGroup>(bootstrap, device);
}

}  // namespace mixp::dist
