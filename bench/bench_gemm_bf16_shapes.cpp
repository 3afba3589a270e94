// The bf16 GEMMs of a GPT-2 training step, one by one: the cpu backend's matmul (mixp's own
// VDPBF16PS kernel where src/backend/cpu/gemm_bf16.h takes the GEMM, oneDNN elsewhere) against
// oneDNN's matmul primitive called directly on the same operands, strides and output dtype,
// interleaved call by call (best of --reps each), and both against the measured VDPBF16PS peak
// on the same threads. MIXP_CPU_GEMM=onednn sends the backend's GEMMs to oneDNN too (the ratio
// is then the backend's own overhead).
//
//   build/release/mixp_bench_gemm_bf16_shapes [--tokens=2048] [--threads=2] [--reps=5]
//
// Shapes (GPT-2 124M, C = 768, tokens = B x T, vocabulary padded to 50304): per linear of
// [out, in], the forward Y[tokens, out] = X . W^T (+ bias, bf16 out), the input gradient
// dX[tokens, in] = dY . W (bf16 out) and the weight gradient dW[out, in] = dY^T . X (fp32 out).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixp/backend/backend.h"
#include "mixp/bench/peak.h"
#include "mixp/mixp.h"

namespace {
using namespace mixp;

struct Case {
  const char* name;
  int64_t m, n, k;
  bool a_t, b_t;  // operand given as the transpose of a row-major tensor
  bool dst_bf16, bias;
};

// A [m, k] (a_t: the transposed view of a row-major [k, m]); B [k, n] (b_t: of [n, k]).
Tensor operand(int64_t r, int64_t c, bool t, Generator& g) {
  Tensor x = randn(t ? Shape{c, r} : Shape{r, c}, g).to(DType::bf16, Round::nearest_even);
  return t ? x.t() : x;
}

dnnl::memory::desc md(const Tensor& t, dnnl::memory::data_type dt) {
  return dnnl::memory::desc({t.shape()[0], t.shape()[1]}, dt, {t.strides()[0], t.strides()[1]});
}

template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  const size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=')
      return std::atoll(argv[i] + n + 1);
  return def;
}
}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: mixp_bench_gemm_bf16_shapes [--tokens=2048] [--threads=2] [--reps=5]\n");
      return 0;
    }
    if (a.rfind("--tokens=", 0) && a.rfind("--threads=", 0) && a.rfind("--reps=", 0)) {
      std::fprintf(stderr, "unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  const int64_t T = arg(argc, argv, "--tokens", 2048);
  const int threads = static_cast<int>(arg(argc, argv, "--threads", 2));
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 5));
  set_num_threads(threads);
  const double peak = bench::measure_peak(bench::PeakPath::bf16, threads, 0.2).gflops;
  std::printf("tokens %lld, %d threads, vdpbf16ps peak %.1f GFLOP/s\n", static_cast<long long>(T),
              threads, peak);
  const int64_t C = 768, V = 50304;
  const std::vector<Case> cases = {
      {"qkv fwd", T, 3 * C, C, false, true, true, true},
      {"qkv dX", T, C, 3 * C, false, false, true, false},
      {"qkv dW", 3 * C, C, T, true, false, false, false},
      {"proj fwd", T, C, C, false, true, true, true},
      {"fc fwd", T, 4 * C, C, false, true, true, true},
      {"fc dX", T, C, 4 * C, false, false, true, false},
      {"fc dW", 4 * C, C, T, true, false, false, false},
      {"fcproj fwd", T, C, 4 * C, false, true, true, true},
      {"fcproj dX", T, 4 * C, C, false, false, true, false},
      {"fcproj dW", C, 4 * C, T, true, false, false, false},
      {"head fwd", T, V, C, false, true, true, false},
      {"head dX", T, C, V, false, false, true, false},
      {"head dW", V, C, T, true, false, false, false},
  };
  std::printf("%-11s %6s %6s %6s  %9s %9s  %6s %7s\n", "gemm", "m", "n", "k", "mixp GF/s", "oneDNN",
              "ratio", "of peak");
  Generator g(7);
  Backend& be = get_backend(BackendKind::cpu);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  using dt = dnnl::memory::data_type;
  double tm = 0, to = 0, fl = 0;
  for (const Case& c : cases) {
    NoGradGuard ng;
    const Tensor a = operand(c.m, c.k, c.a_t, g), b = operand(c.k, c.n, c.b_t, g);
    const Tensor bias = c.bias ? randn({c.n}, g).to(DType::bf16, Round::nearest_even) : Tensor();
    const DType dd = c.dst_bf16 ? DType::bf16 : DType::fp32;
    Tensor d1 = empty({c.m, c.n}, {.dtype = dd}), d2 = empty({c.m, c.n}, {.dtype = dd});
    MatmulConfig cfg;
    cfg.compute = DType::bf16;
    const dnnl::memory::desc a_md = md(a, dt::bf16), b_md = md(b, dt::bf16),
                             d_md = md(d2, c.dst_bf16 ? dt::bf16 : dt::f32);
    const dnnl::memory::desc bias_md({1, c.n}, dt::bf16, {c.n, 1});
    const dnnl::matmul::primitive_desc pd(c.bias ? dnnl::matmul::desc(a_md, b_md, bias_md, d_md)
                                                 : dnnl::matmul::desc(a_md, b_md, d_md),
                                          eng);
    dnnl::matmul prim(pd);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(a_md, eng, a.data_ptr())},
        {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, eng, b.data_ptr())},
        {DNNL_ARG_DST, dnnl::memory(d_md, eng, d2.data_ptr())}};
    if (c.bias) args.insert({DNNL_ARG_BIAS, dnnl::memory(bias_md, eng, bias.data_ptr())});
    auto mine = [&] { be.matmul(d1, a, b, bias, cfg); };
    auto theirs = [&] {
      prim.execute(s, args);
      s.wait();
    };
    mine();
    theirs();
    double bm = 1e300, bo = 1e300;
    for (int r = 0; r < reps; ++r) {
      bm = std::min(bm, seconds_of(mine));
      bo = std::min(bo, seconds_of(theirs));
    }
    const double f = 2.0 * c.m * c.n * c.k;
    tm += bm;
    to += bo;
    fl += f;
    std::printf("%-11s %6lld %6lld %6lld  %9.1f %9.1f  %6.3f %6.1f%%\n", c.name,
                static_cast<long long>(c.m), static_cast<long long>(c.n),
                static_cast<long long>(c.k), f / bm * 1e-9, f / bo * 1e-9, bo / bm,
                100 * f / bm * 1e-9 / peak);
  }
  std::printf("%-11s %6s %6s %6s  %9.1f %9.1f  %6.3f %6.1f%%  (time-weighted over the rows)\n",
              "all", "", "", "", fl / tm * 1e-9, fl / to * 1e-9, to / tm,
              100 * fl / tm * 1e-9 / peak);
  return 0;
}
