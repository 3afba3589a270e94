// GPT-2's loss at the head, before and after the fused classifier, in one run (issue 15;
// docs/benchmarks.md "GPT-2 124M memory at B8 T256"):
//
//   build/release/mixp_bench_gpt2_loss [--threads=1] [--pairs=5] [--tokens=256]
//
// Forward and backward of the loss over GPT-2's padded logits [tokens, 50304] (50257 classes):
//   before: what nn::Gpt computed until the fused classifier: the [.., 50257] slice of the padded
//           head output, cross_entropy on it (16-bit logits: cast to fp32 first, as autocast and
//           the recipes' output cast do), backward into a padded gradient;
//   fused:  cross_entropy_in_place on the padded buffer (nn/gpt.h).
// Both start from the same intermediate (the head output) and end with its gradient; each side
// also reports the allocator's peak above what was live before it. Interleaved call by call (best
// of --pairs each): on a shared machine the load drifts between two separate measurements, the
// interleaved ratio does not.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "mixp/mixp.h"

namespace {
using namespace mixp;

constexpr int64_t kVocab = 50257, kPadded = 50304;

int g_threads = 1;
int g_pairs = 5;
int64_t g_tokens = 256;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Side {
  double best_s = 1e300;
  int64_t peak_bytes = 0;
};

void run(const char* label, DType dt) {
  Generator gen(1);
  const Tensor x = normal({g_tokens, kPadded}, 0.0, 2.0, gen).to(dt, Round::nearest_even);
  const Tensor tgt = randint(0, kVocab, {g_tokens}, gen);
  auto before = [&] {
    Tensor h = x.detach().requires_grad_();
    Tensor logits = mul(h, 1.0).slice(1, 0, kVocab);  // the head output, cut to the vocabulary
    if (dt != DType::fp32) logits = logits.to(DType::fp32, Round::nearest_even);
    cross_entropy(logits, tgt).backward();
  };
  auto fused = [&] {
    Tensor h = x.detach().requires_grad_();
    // Its own statement: the head output must be gone before backward, as in nn::Gpt (a
    // temporary alive during backward would make the op write into a copy).
    Tensor loss = cross_entropy_in_place(mul(h, 1.0), tgt, kVocab);
    loss.backward();
  };
  Side a, b;
  auto measure = [](Side& s, const std::function<void()>& f) {
    const int64_t live = allocator_stats().allocated_bytes;
    reset_peak_memory();
    s.best_s = std::min(s.best_s, seconds_of(f));
    s.peak_bytes = allocator_stats().peak_allocated_bytes - live;
  };
  before();
  fused();
  for (int i = 0; i < g_pairs; ++i) {
    measure(a, before);
    measure(b, fused);
  }
  std::printf("%-5s logits [%lld, %lld]: before %8.2f ms, %7.1f MiB | fused %8.2f ms, %7.1f MiB | "
              "fused / before: time %.3f, memory %.3f\n",
              label, static_cast<long long>(g_tokens), static_cast<long long>(kPadded),
              a.best_s * 1e3, double(a.peak_bytes) / (1 << 20), b.best_s * 1e3,
              double(b.peak_bytes) / (1 << 20), b.best_s / a.best_s,
              double(b.peak_bytes) / double(a.peak_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) {
      g_threads = std::atoi(a.c_str() + 10);
    } else if (a.rfind("--pairs=", 0) == 0) {
      g_pairs = std::max(1, std::atoi(a.c_str() + 8));
    } else if (a.rfind("--tokens=", 0) == 0) {
      g_tokens = std::max(1, std::atoi(a.c_str() + 9));
    } else {
      std::fprintf(stderr,
                   "usage: mixp_bench_gpt2_loss [--threads=N] [--pairs=N] [--tokens=N]\n"
                   "  GPT-2's loss over [tokens, 50304] padded logits: the sliced cross_entropy "
                   "against the fused classifier, forward + backward, interleaved\n");
      return a == "--help" ? 0 : 2;
    }
  }
  set_num_threads(g_threads);
  std::printf("threads %d, best of %d interleaved pairs\n", g_threads, g_pairs);
  run("fp32", DType::fp32);
  run("bf16", DType::bf16);
  return 0;
}
