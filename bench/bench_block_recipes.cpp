// Step time of the block-scaled recipes against bf16, in one run (issue 32's speed target:
// fp8-block <= 1.3x bf16's step, nvfp4 and mxfp4 <= 1.5x, on GPT-2 124M at B8 T256;
// docs/fp4.md "Speed", docs/benchmarks.md "Block-scaled recipes"):
//
//   build/release/mixp_bench_block_recipes [--small] [--layers=N] [--pairs=5] [--threads=0]
//                                          [--recipes=bf16,fp8-block,nvfp4,mxfp4]
//
// One Trainer per recipe on the same model and synthetic data (GPT-2 124M, batch 8, context 256;
// --small: a 2-layer gpt of width 256, context 128, for a loaded or small machine; --layers=N:
// GPT-2 124M's blocks, N of them instead of 12, same per-block shapes), each warmed up
// by one step, then single optimizer steps interleaved round-robin (recipe A, B, C, ..., A, B, ...)
// for --pairs rounds: on a shared machine the load drifts between separate runs, the interleaved
// ratios do not. Prints each recipe's median and best step and the median's ratio to bf16's.
// --threads=0 uses every core (OpenMP's default). Four 124M trainers hold about 4 x 2 GB.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mixp/mixp.h"

namespace {
using namespace mixp;

struct Options {
  bool small = false;
  int layers = 0;  // 0: the model's own
  int pairs = 5;
  int threads = 0;
  std::vector<std::string> recipes{"bf16", "fp8-block", "nvfp4", "mxfp4"};
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

train::TrainConfig config(const Options& o, const std::string& recipe) {
  train::TrainConfig c;
  if (o.small) {
    c.model.name = "gpt";
    c.model.width = 256;
    c.model.layers = 2;
    c.model.heads = 4;
    c.model.mlp_width = 1024;
    c.model.context = 128;
  } else {
    c.model.name = "gpt2";  // GPT-2 124M: width 768, 12 layers, 12 heads
    c.model.context = 256;
    c.model.layers = o.layers;
  }
  c.data = train::kSyntheticData;
  c.batch = 8;
  c.steps = 1000000;
  c.evaluate = false;
  c.seed = 1;
  c.threads = o.threads;
  c.precision = recipe;
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") {
      o.small = true;
    } else if (a.rfind("--layers=", 0) == 0) {
      o.layers = std::max(1, std::atoi(a.c_str() + 9));
    } else if (a.rfind("--pairs=", 0) == 0) {
      o.pairs = std::max(1, std::atoi(a.c_str() + 8));
    } else if (a.rfind("--threads=", 0) == 0) {
      o.threads = std::max(0, std::atoi(a.c_str() + 10));
    } else if (a.rfind("--recipes=", 0) == 0) {
      o.recipes = split(a.substr(10));
    } else {
      std::fprintf(stderr,
                   "usage: mixp_bench_block_recipes [--small] [--layers=N] [--pairs=N] [--threads=N] "
                   "[--recipes=bf16,fp8-block,nvfp4,mxfp4]\n");
      return 2;
    }
  }
  if (std::find(o.recipes.begin(), o.recipes.end(), "bf16") == o.recipes.end())
    o.recipes.insert(o.recipes.begin(), "bf16");  // the reference of the ratios
  try {
    std::vector<std::unique_ptr<train::Trainer>> trainers;
    for (const std::string& r : o.recipes) {
      trainers.push_back(std::make_unique<train::Trainer>(config(o, r)));
      trainers.back()->train_steps(1);  // warm-up: primitives, caches, first allocations
    }
    std::vector<std::vector<double>> ms(o.recipes.size());
    for (int p = 0; p < o.pairs; ++p)
      for (size_t i = 0; i < trainers.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        trainers[i]->train_steps(1);
        ms[i].push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    const size_t ib = static_cast<size_t>(
        std::find(o.recipes.begin(), o.recipes.end(), "bf16") - o.recipes.begin());
    const double base = median(ms[ib]);
    const std::string model =
        o.small ? "gpt width 256, 2 layers, context 128 (--small)"
                : "GPT-2 124M" +
                      (o.layers ? " with " + std::to_string(o.layers) + " of its 12 blocks" : std::string()) +
                      ", context 256";
    std::printf("%s, batch 8, %d interleaved rounds, %s threads\n", model.c_str(), o.pairs,
                o.threads ? std::to_string(o.threads).c_str() : "all");
    std::printf("%-12s %12s %12s %10s %8s\n", "recipe", "median ms", "best ms", "x bf16", "target");
    for (size_t i = 0; i < o.recipes.size(); ++i) {
      const std::string& r = o.recipes[i];
      const char* target = r == "fp8-block" ? "1.3" : (r == "nvfp4" || r == "mxfp4") ? "1.5" : "-";
      std::printf("%-12s %12.1f %12.1f %10.2f %8s\n", r.c_str(), median(ms[i]),
                  *std::min_element(ms[i].begin(), ms[i].end()), median(ms[i]) / base, target);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixp_bench_block_recipes: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
