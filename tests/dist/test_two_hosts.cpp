// Data parallelism across two hosts (docs/distributed.md, "Two hosts on one machine"): the
// hosts are scripts/two-hosts.sh's namespaces (own host name, own /dev/shm, TCP over a veth pair
// between them), as two machines look to MPI. Skipped, with the reason, where the namespaces
// cannot be made (not root, no CAP_NET_ADMIN, no `ip`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "common/temp_dir.h"
#include "dist/mpi_runner.h"
#include "mixp/io/safetensors.h"
#include "common/test_paths.h"

namespace mixp::test {
namespace {

const std::string kGpt =
    "train --model gpt --width 64 --layers 2 --heads 2 --context 32 --no-eval --threads 1 ";
const std::string kScript = std::string(MIXP_SOURCE_DIR) + "/scripts/two-hosts.sh";

// One set-up of scripts/two-hosts.sh for one test, named after this process (tests may run in
// parallel), torn down when the test ends, failed assertions included.
class TwoHosts {
 public:
  TwoHosts() : env_("MIXP_TWO_HOSTS_ID=gt" + std::to_string(::getpid()) + " ") {
    if (::geteuid() != 0) {
      why_ = "not root: network namespaces need CAP_NET_ADMIN";
      return;
    }
    const CliResult r = run_shell(env_ + "'" + kScript + "' up");
    if (r.exit_code != 0) {
      why_ = "scripts/two-hosts.sh up failed: " + r.err;
      return;
    }
    up_ = true;
    options_ = run_shell(env_ + "'" + kScript + "' mpirun-options").out;
    if (!options_.empty() && options_.back() == '\n') options_.pop_back();
  }
  ~TwoHosts() {
    if (up_) run_shell(env_ + "'" + kScript + "' down");
  }
  bool up() const { return up_; }
  const std::string& why() const { return why_; }
  // The mpirun command line, started on host a, for `per_host` ranks on each host.
  std::string mpirun(int per_host) const {
    return env_ +
           "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
           "OMPI_MCA_mpi_yield_when_idle=1 timeout 300 '" +
           kScript + "' exec a mpirun --oversubscribe " + options_ + " -H 198.18.0.1:" +
           std::to_string(per_host) + ",198.18.0.2:" + std::to_string(per_host) + " -np " +
           std::to_string(2 * per_host) + " '" + MIXP_CLI + "' ";
  }
  CliResult run(int per_host, const std::string& args) const {
    return run_shell(mpirun(per_host) + args);
  }
  std::string host(char h) const {
    return "mixp-gt" + std::to_string(::getpid()) + "-" + std::string(1, h);
  }

 private:
  std::string env_, options_, why_;
  bool up_ = false;
};

#define MIXP_NEED_TWO_HOSTS(h)                                          \
  TwoHosts h;                                                           \
  if (!h.up()) {                                                        \
    std::printf("skipped: two hosts cannot be made here: %s\n", h.why().c_str()); \
    GTEST_SKIP() << h.why();                                            \
  }

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A failure injected into a run across the two hosts: what mpirun returned and said.
struct Injured {
  int status = 0;          // std::system's wait status of the script
  double seconds = 0;      // from the injury to the run's end
  std::string err;         // the run's stderr
};

// Starts a long gpt run on 1 rank per host (--comm-timeout 10, --save dir/ck, stderr to
// dir/err), waits until rank 0 has logged a step (both ranks are training then), runs the shell
// lines `injury`, and waits for mpirun.
Injured run_and_injure(const TwoHosts& h, const TempDir& dir, const std::string& injury) {
  const std::string log = (dir / "log.jsonl").string();
  const std::string script = (dir / "injure.sh").string();
  {
    std::ofstream s(script);
    s << h.mpirun(1) << kGpt << "--steps 100000 --batch 4 --comm-timeout 10 --log '" << log
      << "' --save '" << (dir / "ck").string() << "' >/dev/null 2>'" << (dir / "err").string()
      << "' </dev/null &\n"
      << "mp=$!\n"
      << "for j in $(seq 1 1200); do [ -s '" << log << "' ] && break; sleep 0.1; done\n"
      << injury << "date +%s.%N > '" << (dir / "injured").string() << "'\n"
      << "wait $mp\n";
  }
  Injured r;
  r.status = std::system(("timeout 200 bash '" + script + "'").c_str());
  const auto end = std::chrono::system_clock::now();
  const std::string injured = read_all(dir / "injured");
  r.seconds = std::chrono::duration<double>(end.time_since_epoch()).count() -
              (injured.empty() ? 0.0 : std::stod(injured));
  r.err = read_all(dir / "err");
  return r;
}


bool same_weights(const std::filesystem::path& a, const std::filesystem::path& b) {
  return read_all(a / "model.safetensors") == read_all(b / "model.safetensors") &&
         !read_all(a / "model.safetensors").empty();
}

// 2 hosts x 1 rank train exactly like 2 ranks on one host (fp32 wire): the same losses and
// weights, bit for bit, although one run reduces through shared memory and the other over TCP.
TEST(TwoHosts, OneRankPerHostTrainsLikeTwoRanksOnOneHost) {
  MIXP_NEED_TWO_HOSTS(h);
  TempDir dir;
  const std::string args = kGpt + "--steps 4 --batch 4 --json ";
  const CliResult one = run_mpi(2, args + "--log '" + (dir / "1.jsonl").string() + "' --save '" +
                                       (dir / "1").string() + "'");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const CliResult two = h.run(1, args + "--log '" + (dir / "2.jsonl").string() + "' --save '" +
                                     (dir / "2").string() + "'");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(one.json()["hosts"], 1);
  EXPECT_EQ(one.json()["shared_memory"], true);
  const nlohmann::json j = two.json();
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["hosts"], 2);
  EXPECT_EQ(j["threads_per_rank"], 1);
  EXPECT_EQ(j["grad_comm"], "fp32");
  EXPECT_EQ(j["shared_memory"], false);
  EXPECT_EQ(j["ranks_per_host"][0]["host"], h.host('a'));
  EXPECT_EQ(j["ranks_per_host"][1]["host"], h.host('b'));
  EXPECT_EQ(j["comm_bytes_per_step"], one.json()["comm_bytes_per_step"]);
  const std::vector<double> a = log_losses(dir / "1.jsonl"), b = log_losses(dir / "2.jsonl");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(same_weights(dir / "1", dir / "2"));
}

// 2 hosts x 2 ranks: the same results as 4 ranks on one host; the shared-memory reduction runs on
// one host and not across hosts, and the summary says so.
TEST(TwoHosts, TwoRanksPerHostSayWhereSharedMemoryRan) {
  MIXP_NEED_TWO_HOSTS(h);
  TempDir dir;
  const std::string args = kGpt + "--steps 3 --batch 2 ";
  const CliResult one = run_mpi(4, args + "--log '" + (dir / "1.jsonl").string() + "'");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("shared-memory reduction on"), std::string::npos) << one.out;
  const CliResult two = h.run(2, args + "--log '" + (dir / "2.jsonl").string() + "'");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.out.find("ranks:     4 on 2 hosts (" + h.host('a') + " x 2, " + h.host('b') +
                         " x 2), 1 thread per rank, gradients fp32 on the wire, shared-memory "
                         "reduction off (ranks on 2 hosts"),
            std::string::npos)
      << two.out;
  EXPECT_NE(two.out.find("sent per step per rank"), std::string::npos) << two.out;
  EXPECT_EQ(log_losses(dir / "1.jsonl"), log_losses(dir / "2.jsonl"));
}

// A host whose rank dies ends the run on the other host at once (well within --comm-timeout),
// with a message naming the lost rank and its host; no checkpoint is published.
TEST(TwoHosts, AKilledHostEndsTheRunNamingIt) {
  MIXP_NEED_TWO_HOSTS(h);
  TempDir dir;
  // Host b's rank: the mixp processes in host b's namespace, by process id.
  const Injured r = run_and_injure(
      h, dir,
      "for p in $(ip netns pids " + h.host('b') + "); do\n"
      "  [ \"$(cat /proc/$p/comm 2>/dev/null)\" = mixp ] && kill -KILL $p\n"
      "done\n");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_NE(WEXITSTATUS(r.status), 0);
  EXPECT_NE(WEXITSTATUS(r.status), 124) << "the run hung";
  EXPECT_LT(r.seconds, 10.0) << "within --comm-timeout";
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("198.18.0.2"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "ck")) << "a checkpoint was published";
  // No staging folder either (io/atomic_file.h: `ck.tmp-XXXXXX`; `ck.lock`, the run's advisory
  // lock file, stays, as after any run).
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find("ck.tmp-"), std::string::npos)
        << "left behind: " << e.path();
  }
}

// A cut link between the hosts (host a's end of the veth pair down) ends the run within
// --comm-timeout (measured: 4 s), with mpirun naming the host it lost, not a hang: the
// daemons' TCP keepalive of scripts/two-hosts.sh's options notices the link is gone (without it,
// rank 0's watchdog fired but mpirun hung trying to reach host b).
TEST(TwoHosts, ACutLinkEndsTheRunNamingTheHost) {
  MIXP_NEED_TWO_HOSTS(h);
  TempDir dir;
  const Injured r = run_and_injure(
      h, dir,
      "v=$(ip -n " + h.host('a') + " -br link | awk '/^mx/ {print $1}' | cut -d@ -f1)\n"
      "ip -n " + h.host('a') + " link set \"$v\" down\n");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_NE(WEXITSTATUS(r.status), 0);
  EXPECT_NE(WEXITSTATUS(r.status), 124) << "the run hung";
  EXPECT_LT(r.seconds, 10.0) << "within --comm-timeout";
  EXPECT_NE(r.err.find("198.18.0.2"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "ck")) << "a checkpoint was published";
}

// A checkpoint written on two hosts resumes on one host (the same 2 ranks), and the reverse,
// bit-identically to an uninterrupted run.
TEST(TwoHosts, CheckpointsMoveBetweenOneAndTwoHosts) {
  MIXP_NEED_TWO_HOSTS(h);
  TempDir dir;
  const std::string ck = (dir / "ck").string();
  const CliResult a = h.run(1, kGpt + "--steps 2 --batch 4 --save '" + ck + "'");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const CliResult b = run_mpi(2, "train --resume '" + ck + "' --steps 4 --batch 4 --no-eval " +
                                     "--threads 1 --save '" + (dir / "resumed").string() + "'");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const CliResult c =
      run_mpi(2, kGpt + "--steps 4 --batch 4 --save '" + (dir / "straight").string() + "'");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_TRUE(same_weights(dir / "resumed", dir / "straight"));
  // The reverse: written on one host, resumed on two.
  const std::string ck1 = (dir / "ck1").string();
  const CliResult d = run_mpi(2, kGpt + "--steps 2 --batch 4 --save '" + ck1 + "'");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const CliResult e = h.run(1, "train --resume '" + ck1 + "' --steps 4 --batch 4 --no-eval " +
                                   "--threads 1 --save '" + (dir / "resumed2").string() + "'");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_TRUE(same_weights(dir / "resumed2", dir / "straight"));
}

}  // namespace
}  // namespace mixp::test
