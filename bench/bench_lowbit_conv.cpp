// Why the packed models' int4/int2 convolutions stay on oneDNN (docs/benchmarks.md, "Below 8
// bits"): the cnn's conv2 shape (32 -> 64 channels, 3 x 3, 14 x 14, padded) as oneDNN's int8
// convolution of the codes unpacked at load (what the packed models run) against im2col +
// lowbit_gemm_s32 (the codes kept 4 or 2 bits, expanded in registers), and that GEMM alone. The
// sums are checked equal before anything is timed.
//
//   build/release/mixp_bench_lowbit_conv [--batch=16] [--threads=1] [--repeat=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mixp/backend/lowbit_gemm.h"
#include "mixp/mixp.h"
#include "mixp/quant/int8_model.h"

namespace {
using namespace mixp;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  int64_t N = 16;
  int threads = 1, repeat = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--batch=", 0) == 0) {
      N = std::atoll(a.c_str() + 8);
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::atoi(a.c_str() + 10);
    } else if (a.rfind("--repeat=", 0) == 0) {
      repeat = std::atoi(a.c_str() + 9);
    } else {
      std::fprintf(stderr,
                   "usage: mixp_bench_lowbit_conv [--batch=16] [--threads=1] [--repeat=20]\n"
                   "(unknown argument '%s')\n",
                   a.c_str());
      return 2;
    }
  }
  if (N < 1 || threads < 1 || repeat < 1) {
    std::fprintf(stderr, "--batch, --threads and --repeat must be at least 1\n");
    return 2;
  }
  set_num_threads(threads);
  const int64_t C = 32, H = 14, W = 14, O = 64, KS = 3, HP = H + 2, WP = W + 2, K = C * KS * KS;
  const int64_t M = N * H * W;
  std::mt19937 rng(1);
  Tensor src = empty(Shape{N, HP, WP, C}, {.dtype = DType::uint8});
  for (int64_t i = 0; i < src.numel(); ++i) src.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  std::printf("conv %lld -> %lld channels, 3x3, %lldx%lld, batch %lld, %d thread(s), best of %d\n",
              (long long)C, (long long)O, (long long)H, (long long)W, (long long)N, threads,
              repeat);
  std::printf("%-6s %12s %22s %12s %10s\n", "codes", "oneDNN ms", "im2col + lowbit ms", "GEMM ms",
              "speed");
  for (const int bits : {4, 2}) {
    std::vector<uint8_t> packed(static_cast<size_t>(O * K * bits / 8));
    for (auto& v : packed) v = static_cast<uint8_t>(rng());
    Tensor w =
        empty(Shape{O, C, KS, KS}, {.dtype = DType::int8});  // OIHW: k = (ci * 3 + kh) * 3 + kw
    for (int64_t o = 0; o < O; ++o) {
      (bits == 4 ? unpack_int4_to_int8 : unpack_int2_to_int8)(w.data<int8_t>() + o * K,
                                                              packed.data() + o * K * bits / 8, K);
    }
    const LowBitB lb = pack_lowbit_b(packed.data(), O, K, bits);
    Conv2dParams cp;
    std::vector<uint8_t> cols(static_cast<size_t>(M * K));
    std::vector<int32_t> acc(static_cast<size_t>(M * O));
    double t_dnn = 1e9, t_low = 1e9, t_gemm = 1e9;
    for (int r = 0; r <= repeat; ++r) {
      auto t0 = Clock::now();
      const Tensor out = quant::int8_conv2d_s32(src, w, cp);  // [N, H, W, O]
      const double a = since(t0);
      t0 = Clock::now();
      const uint8_t* s = src.data<uint8_t>();
      for (int64_t m = 0; m < M; ++m) {
        const int64_t n = m / (H * W), oh = m / W % H, ow = m % W;
        uint8_t* row = cols.data() + m * K;
        for (int64_t ci = 0; ci < C; ++ci) {
          for (int64_t kh = 0; kh < KS; ++kh) {
            for (int64_t kw = 0; kw < KS; ++kw) {
              row[(ci * KS + kh) * KS + kw] = s[((n * HP + oh + kh) * WP + ow + kw) * C + ci];
            }
          }
        }
      }
      const auto tg = Clock::now();
      lowbit_gemm_s32(acc.data(), cols.data(), K, lb, M);
      const double g = since(tg), b = since(t0);
      if (r == 0) {  // warm-up: check the sums
        if (std::memcmp(out.data<int32_t>(), acc.data(), acc.size() * sizeof(int32_t)) != 0) {
          std::fprintf(stderr, "int%d: the two convolutions' sums differ\n", bits);
          return 1;
        }
        continue;
      }
      t_dnn = std::min(t_dnn, a);
      t_low = std::min(t_low, b);
      t_gemm = std::min(t_gemm, g);
    }
    std::printf("int%-3d %12.3f %22.3f %12.3f %9.2fx\n", bits, t_dnn * 1e3, t_low * 1e3,
                t_gemm * 1e3, t_dnn / t_low);
  }
  std::printf(
      "(speed: oneDNN's time / im2col + lowbit_gemm_s32's; the packed models run oneDNN)\n");
  return 0;
}
