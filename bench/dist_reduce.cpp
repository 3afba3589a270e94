// How exact each gradient wire format is, on real gradients (docs/distributed.md, "What goes over
// the wire"; results in docs/benchmarks.md). Run under mpirun:
//
//   mpirun -np N build/release/bench/mixp_dist_reduce [--steps S] [--json]
//
// Every rank trains the default gpt (fp32) data-parallel for S steps and keeps its own gradients
// of the last step before they are reduced (TrainCallback::on_backward_end). Then each format
// reduces copies of them to the mean, and the result is compared with the exact mean, computed in
// fp64 from every rank's fp32 gradients (all-gathered). Printed per format, by rank 0:
//   bound_ratio  max over elements of |error| / (sum over ranks of |g_r| / N): the error in units
//                of the contributions' size; bf16 with fp32 accumulation stays <= 2^-8 = 0.0039
//   median_rel   median of |error| / |exact mean| over the elements with a non-zero mean
//   p99_rel      its 99th percentile (cancellation makes the largest relative errors unbounded)
//   ms           wall time of one reduction of all the gradients
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixp/dist/grad_reduce.h"
#include "mixp/dist/process_group.h"
#include "mixp/train/callbacks.h"
#include "mixp/train/trainer.h"

namespace {

struct Capture : mixp::train::TrainCallback {
  std::vector<float> grads;
  void on_backward_end(mixp::train::StepContext& ctx) override {
    grads.clear();
    for (const mixp::Tensor& p : ctx.parameters) {
      const std::vector<double> g = p.grad().to_double_vector();
      grads.insert(grads.end(), g.begin(), g.end());
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: mpirun -np N %s [--steps S] [--json]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  mixp::train::TrainConfig cfg;
  cfg.model.name = "gpt";
  cfg.steps = steps;
  cfg.evaluate = false;
  mixp::train::Trainer trainer(cfg);
  auto cap = std::make_shared<Capture>();
  trainer.add_callback(cap);
  trainer.train_steps(steps);

  mixp::dist::ProcessGroup& g = mixp::dist::world();
  const int n = g.size();
  const size_t len = cap->grads.size();
  // Every rank's gradients, for the exact mean in fp64 and the size of the contributions.
  std::vector<float> all(len * size_t(n));
  g.allgather(std::as_bytes(std::span<const float>(cap->grads)),
              std::as_writable_bytes(std::span<float>(all)));
  std::vector<double> exact(len, 0.0), scale(len, 0.0);
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < len; ++k) {
      exact[k] += double(all[size_t(r) * len + k]) / n;
      scale[k] += std::fabs(double(all[size_t(r) * len + k])) / n;
    }
  }
  nlohmann::json out = {{"ranks", n}, {"gradients", len}, {"formats", nlohmann::json::object()}};
  if (g.rank() == 0 && !json) {
    fmt::print("{} ranks, {} gradients of the gpt (fp32, step {}):\n", n, len, steps);
    fmt::print("{:>10} {:>12} {:>12} {:>12} {:>9}\n", "format", "bound_ratio", "median_rel",
               "p99_rel", "ms");
  }
  for (const std::string& name : mixp::dist::grad_comm_names()) {
    std::vector<float> buf = cap->grads;
    g.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    mixp::dist::reduce_weighted_sum(g, buf, 1.0f / float(n), mixp::dist::parse_grad_comm(name));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double bound = 0;
    std::vector<double> rel;
    for (size_t k = 0; k < len; ++k) {
      const double err = std::fabs(double(buf[k]) - exact[k]);
      if (scale[k] > 0) bound = std::max(bound, err / scale[k]);
      if (exact[k] != 0) rel.push_back(err / std::fabs(exact[k]));
    }
    std::sort(rel.begin(), rel.end());
    const double median = rel.empty() ? 0 : rel[rel.size() / 2];
    const double p99 = rel.empty() ? 0 : rel[rel.size() * 99 / 100];
    out["formats"][name] = {
        {"bound_ratio", bound}, {"median_rel", median}, {"p99_rel", p99}, {"ms", ms}};
    if (g.rank() == 0 && !json) {
      fmt::print("{:>10} {:>12.3e} {:>12.3e} {:>12.3e} {:>9.2f}\n", name, bound, median, p99, ms);
    }
  }
  if (g.rank() == 0 && json) fmt::print("{}\n", out.dump(2));
  return 0;
}
