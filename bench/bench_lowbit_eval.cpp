// The packed low-bit cnn against its int8 model, evaluating the whole Fashion-MNIST test set in
// one run (docs/benchmarks.md, "Below 8 bits"; issue 17's target: the packed binary cnn >= 3x
// faster than the int8 model):
//
//   build/release/mixp_bench_lowbit_eval [--int8=FILE] [--packed=FILE]... [--rounds=5]
//                                        [--batch=128] [--threads=N] [--data=DIR]
//                                        [--schemes=binary-act,binary]
//
// --int8 names an int8_model.safetensors (a `mixp train --precision int8-qat --save` checkpoint)
// and --packed one or more packed_model.safetensors (binary-act, binary, ternary, ... runs).
// Without them the built-in cnn (seed 1) is converted to int8 and to each of --schemes after a calibration on 512
// training images: the speed does not depend on the weights' values. Each round evaluates the
// test set once with every model in turn (interleaved, so that a shared machine's load drifts
// into all of them alike); the best round of each is reported, with the accuracy and the ratio
// to the int8 model, and each packed model's time per step (Amdahl: which layer is left).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "mixp/data/image_dataset.h"
#include "mixp/mixp.h"
#include "mixp/nn/models.h"
#include "mixp/quant/quant.h"

namespace {
using namespace mixp;

struct Candidate {
  Candidate(std::string n, std::shared_ptr<nn::Module> m) : name(std::move(n)), model(std::move(m)) {}
  std::string name;
  std::shared_ptr<nn::Module> model;
  quant::PackedModel* packed = nullptr;
  double best = 1e300, best_cpu = 1e300;
  double accuracy = 0;
  std::vector<double> steps, best_steps;
};

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// One pass over the test set; returns wall seconds, sets *cpu to the process's CPU seconds (all
// threads: on a loaded machine the wall time holds the waits for a core, the CPU time does not)
// and sets the accuracy.
double evaluate(Candidate& c, const Tensor& images, const std::vector<int32_t>& labels,
                int64_t batch, double* cpu) {
  NoGradGuard ng;
  const int64_t n = images.size(0);
  int64_t correct = 0;
  c.steps.assign(c.steps.size(), 0.0);
  if (c.packed) c.packed->time_steps(&c.steps);
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  for (int64_t b0 = 0; b0 < n; b0 += batch) {
    const int64_t b1 = std::min(n, b0 + batch);
    const Tensor out = c.model->forward(images.slice(0, b0, b1)).contiguous();
    const float* o = out.data<float>();
    for (int64_t i = 0; i < b1 - b0; ++i) {
      const float* row = o + i * 10;
      correct += std::max_element(row, row + 10) - row == labels[size_t(b0 + i)];
    }
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *cpu = cpu_seconds() - c0;
  if (c.packed) c.packed->time_steps(nullptr);
  c.accuracy = double(correct) / double(n);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string int8_file, data_dir = data::kFashionMnistDir;
  std::vector<std::string> packed_files;
  std::string schemes = "binary-act,binary";
  int rounds = 5, threads = 0;
  int64_t batch = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* k) { return a.substr(std::strlen(k)); };
    if (a.rfind("--int8=", 0) == 0) {
      int8_file = val("--int8=");
    } else if (a.rfind("--packed=", 0) == 0) {
      packed_files.push_back(val("--packed="));
    } else if (a.rfind("--rounds=", 0) == 0) {
      rounds = std::atoi(val("--rounds=").c_str());
    } else if (a.rfind("--batch=", 0) == 0) {
      batch = std::atoll(val("--batch=").c_str());
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::atoi(val("--threads=").c_str());
    } else if (a.rfind("--schemes=", 0) == 0) {
      schemes = val("--schemes=");
    } else if (a.rfind("--data=", 0) == 0) {
      data_dir = val("--data=");
    } else {
      std::fprintf(stderr,
                   "usage: mixp_bench_lowbit_eval [--int8=FILE] [--packed=FILE]... [--rounds=5] "
                   "[--batch=128] [--threads=N] [--data=DIR] [--schemes=binary-act,binary]\n(unknown "
                   "argument '%s')\n",
                   a.c_str());
      return 2;
    }
  }
  if (rounds < 1 || batch < 1) {
    std::fprintf(stderr, "--rounds and --batch must be at least 1\n");
    return 2;
  }
  if (threads > 0) set_num_threads(threads);
  data::ImageDataset test;
  try {
    test = data::load_fashion_mnist(data_dir, data::Split::test, {.normalize = true});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot load the Fashion-MNIST test set: %s\n", e.what());
    return 1;
  }
  const Tensor images = from_vector(test.images, Shape{test.count, 1, test.rows, test.cols});

  std::vector<Candidate> cands;
  try {
    if (!int8_file.empty()) {
      cands.emplace_back("int8 (" + int8_file + ")", quant::load_int8_model(int8_file));
    } else {
      auto qm = nn::make_model({.name = "cnn", .seed = 1});
      quant::prepare_ptq(*qm);
      NoGradGuard ng;
      qm->forward(images.slice(0, 0, 512));
      cands.emplace_back("int8 (built-in cnn, calibrated)", quant::convert_to_int8(*qm));
    }
    if (packed_files.empty()) {
      for (size_t at = 0; at < schemes.size();) {
        const size_t comma = std::min(schemes.find(',', at), schemes.size());
        const quant::LowBitScheme scheme =
            quant::parse_lowbit_scheme(schemes.substr(at, comma - at));
        at = comma + 1;
        auto m = nn::make_model({.name = "cnn", .seed = 1});
        quant::prepare_lowbit_qat(*m, {scheme, {}});
        NoGradGuard ng;
        m->forward(images.slice(0, 0, 512));  // observe (train mode: batch norm statistics)
        quant::set_lowbit_observers_enabled(*m, false);
        m->eval();
        cands.emplace_back("packed " + std::string(quant::name(scheme)) + " (built-in cnn)",
                         quant::convert_to_packed(*m));
      }
    }
    for (const std::string& f : packed_files) {
      cands.emplace_back("packed (" + f + ")", quant::load_packed_model(f));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot build the models: %s\n", e.what());
    return 1;
  }
  for (Candidate& c : cands) c.packed = dynamic_cast<quant::PackedModel*>(c.model.get());

  std::printf("Fashion-MNIST test set: %lld images, batch %lld, %d threads, best of %d "
              "interleaved rounds\n",
              (long long)test.count, (long long)batch, get_num_threads(), rounds);
  double cpu = 0;
  for (Candidate& c : cands) evaluate(c, images, test.labels, batch, &cpu);  // warm-up
  for (int r = 0; r < rounds; ++r) {
    for (Candidate& c : cands) {
      const double s = evaluate(c, images, test.labels, batch, &cpu);
      if (s < c.best) {
        c.best = s;
        c.best_steps = c.steps;
      }
      c.best_cpu = std::min(c.best_cpu, cpu);
    }
  }
  const double base = cands.front().best, base_cpu = cands.front().best_cpu;
  std::printf("%-50s %9s %8s %9s %8s %9s\n", "model", "wall s", "speed", "CPU s", "speed",
              "accuracy");
  for (const Candidate& c : cands) {
    std::printf("%-50s %9.3f %7.2fx %9.3f %7.2fx %9.4f\n", c.name.c_str(), c.best, base / c.best,
                c.best_cpu, base_cpu / c.best_cpu, c.accuracy);
  }
  std::printf("(speed: the int8 model's time / the model's; CPU s: summed over the threads)\n");
  for (const Candidate& c : cands) {
    if (!c.packed) continue;
    std::printf("\n%s, time per step (best round):\n", c.name.c_str());
    double total = 0;
    for (double v : c.best_steps) total += v;
    const auto& steps = c.packed->steps();
    for (size_t i = 0; i < steps.size(); ++i) {
      if (c.best_steps[i] <= 0) continue;
      const quant::PackedStep& s = steps[i];
      std::printf("  %-22s %-10s %-10s %8.2f ms  %5.1f%%\n", s.name.c_str(), s.kind.c_str(),
                  s.kind == "layer" ? std::string(quant::name(s.scheme)).c_str() : "",
                  c.best_steps[i] * 1e3, 100.0 * c.best_steps[i] / total);
    }
  }
  return 0;
}
