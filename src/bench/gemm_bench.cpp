// run_gemm_bench (see mixp/bench/gemm_bench.h).
#include "mixp/bench/gemm_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>

#include "mixp/amp/fp8_quantize.h"
#include "mixp/amp/fp8_scaling.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/gemm.h"
#include "mixp/backend/lowbit_gemm.h"
#include "mixp/format/convert.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "util/text.h"

namespace mixp::bench {
namespace {

constexpr const char* kSupported =
    "fp32, bf16, int8 (uint8 x int8 -> int32), fp16 (emulated on fp32), fp8_e4m3 and fp8_e5m2 "
    "(fp32 operands quantized per call, GEMM emulated on bf16)";

// Why a known format has no GEMM here.
std::string why_not(DType d) {
  switch (d) {
    case DType::tf32:
      return "tf32 has no CPU instruction (oneDNN 2.6 has no fpmath mode); it is a GPU path, added "
             "with the cuda "
             "backend";
    case DType::fp64:
      return "fp64 GEMMs run on the ref backend only; they are a test oracle, not a benchmark";
    case DType::int4:
    case DType::nf4:
      return std::string(name(d)) +
             " is a weight-only format; its GEMM (dequantize to bf16/fp32) comes with the quant "
             "issue (int4/nf4 inference)";
    case DType::fp6_e2m3:
    case DType::fp6_e3m2:
    case DType::fp4_e2m1:
      return std::string(name(d)) +
             " is an MX element type; its GEMM (block-scaled, on the bf16 path) comes with the "
             "FP8/MX training issue";
    case DType::uint8:
      return "uint8 is the activation side of the int8 GEMM: ask for int8 (uint8 x int8 -> int32)";
    default:
      return std::string(name(d)) + " is not a GEMM input format";
  }
}

struct Operands {
  Tensor a, b;
};

Operands make_operands(DType d, int64_t n, uint64_t seed) {
  Generator g(seed);
  const Shape s{n, n};
  switch (d) {
    case DType::int8:
      return {randint(0, 256, s, g, {.dtype = DType::uint8}),
              randint(-128, 128, s, g, {.dtype = DType::int8})};
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      // fp32 operands, as FP8 training holds them (activations and master weights); the timed
      // path quantizes them on every call.
      return {uniform(s, -4, 4, g), uniform(s, -4, 4, g)};
    default:
      return {randn(s, g).to(d, Round::nearest_even), randn(s, g).to(d, Round::nearest_even)};
  }
}

// The emulated paths widen both inputs on every call, as a GEMM on formats without a kernel of
// their own must: with the bulk converters (mixp/format/convert.h, SIMD, exact), in parallel
// over chunks. Tensor::to is not used: from fp16/fp8 it does not reach the bulk converters yet
// (about 16 ns per element), which would bury the GEMM.
constexpr int64_t kChunk = 4096;

Tensor widened(const Tensor& src, DType to) {
  Tensor dst = empty(src.shape(), {.dtype = to});
  const int64_t n = src.numel(), chunks = (n + kChunk - 1) / kChunk;
  const auto* s = static_cast<const unsigned char*>(src.data_ptr());
  auto* d = static_cast<unsigned char*>(dst.data_ptr());
  const size_t in_size = src.element_size(), out_size = dst.element_size();
  const DType from = src.dtype();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    if (to == DType::fp32) {
      convert_to_f32(from, s + lo * in_size,
                     std::span<float>(reinterpret_cast<float*>(d) + lo, len));
    } else {  // to bf16 through fp32; both steps exact for fp8 inputs
      float buf[kChunk];
      convert_to_f32(from, s + lo * in_size, std::span<float>(buf, len));
      convert_f32_to(to, std::span<const float>(buf, len), d + lo * out_size,
                     {.round = Round::nearest_even, .overflow = Overflow::ieee});
    }
  }
  return dst;
}

struct Path {
  std::string label;
  bool emulated = false;
  DType kernel_a, kernel_b;  // the dtypes the kernel sees
  std::function<void(const Operands&)> run;
};

Path path_for(DType d) {
  switch (d) {
    case DType::fp32:
      return {"mixp::matmul fp32", false, DType::fp32, DType::fp32,
              [](const Operands& o) { (void)matmul(o.a, o.b); }};
    case DType::bf16:
      return {"mixp::gemm bf16 x bf16 -> fp32", false, DType::bf16, DType::bf16,
              [](const Operands& o) { (void)gemm(o.a, o.b); }};
    case DType::int8:
      return {"mixp::gemm u8 x s8 -> s32", false, DType::uint8, DType::int8,
              [](const Operands& o) { (void)gemm(o.a, o.b); }};
    case DType::fp16:
      return {"emulated: fp16 widened to fp32 + mixp::gemm fp32", true, DType::fp32, DType::fp32,
              [](const Operands& o) {
                (void)gemm(widened(o.a, DType::fp32), widened(o.b, DType::fp32));
              }};
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      // What an FP8 linear layer pays per GEMM (mixp/amp/fp8_quantize.h): both fp32 operands
      // quantized with a per-tensor scale (the delayed-scaling cast: one pass that also takes the
      // amax), the codes multiplied as bf16 (exact) with fp32 accumulation, scale_inv applied to
      // the fp32 output.
      return {"emulated: fp32 -> " + std::string(name(d)) +
                  " quantize x2 (per-tensor scale, amax fused) + mixp::gemm bf16 + output "
                  "scale_inv",
              true, DType::bf16, DType::bf16, [d](const Operands& o) {
                const float scale = amp::fp8_max(d) / 4.0f;  // the operands' amax
                (void)amp::fp8_gemm(amp::fp8_quantize(o.a, d, scale),
                                    amp::fp8_quantize(o.b, d, scale));
              }};
    default:
      throw std::invalid_argument("mixp bench gemm: " + why_not(d) + "; supported: " + kSupported);
  }
}

// A row below 8 bits: its operands live in the closure (made once, outside the timing).
struct LowBitPath {
  std::string label, implementation;
  std::function<void()> run;
};

LowBitPath lowbit_path(const std::string& f, int64_t n, uint64_t seed) {
  Generator g(seed);
  if (f == "int4" || f == "int2") {
    const int bits = f == "int4" ? 4 : 2;
    auto a = std::make_shared<Tensor>(randint(0, 256, Shape{n, n}, g, {.dtype = DType::uint8}));
    const int64_t row = (n * bits + 7) / 8;
    const Tensor packed = randint(0, 256, Shape{n, row}, g, {.dtype = DType::uint8});
    auto b = std::make_shared<LowBitB>(pack_lowbit_b(packed.data<uint8_t>(), n, n, bits));
    auto dst = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(n * n));
    return {"packed " + f + " B (" + std::to_string(bits) +
                " bits a code in memory) x u8 -> s32: mixp::lowbit_gemm_s32",
            lowbit_gemm_kernel_name(), [=] {
              lowbit_gemm_s32(dst->data(), a->data<uint8_t>(), n, *b, n);
            }};
  }
  if (f == "binary") {
    const int64_t words = ((n + 63) / 64 + 7) / 8 * 8;
    auto bits = [&] {
      const Tensor r = randint(0, 256, Shape{n, words * 8}, g, {.dtype = DType::uint8});
      auto v = std::make_shared<std::vector<uint64_t>>(static_cast<size_t>(n * words));
      std::memcpy(v->data(), r.data_ptr(), v->size() * 8);
      for (int64_t i = 0; i < n; ++i) {  // the bits past n are zero
        for (int64_t k = n; k < words * 64; ++k)
          (*v)[i * words + k / 64] &= ~(uint64_t{1} << (k % 64));
      }
      return v;
    };
    auto a = bits(), b = bits();
    auto dst = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(n * n));
    return {"bit-packed +-1 x +-1: XNOR + popcount -> s32", xnor_gemm_kernel_name(), [=] {
              xnor_gemm_s32(dst->data(), a->data(), b->data(), n, n, words,
                            static_cast<int32_t>(n));
            }};
  }
  throw std::invalid_argument("mixp bench gemm: unknown row below 8 bits '" + f +
                              "'; choose int4, int2 or binary");
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Restores the thread count on every exit.
struct ThreadsGuard {
  int prev;
  explicit ThreadsGuard(int n) : prev(get_num_threads()) { set_num_threads(n); }
  ~ThreadsGuard() { set_num_threads(prev); }
};

}  // namespace

std::vector<DType> gemm_bench_dtypes() {
  return {DType::fp32, DType::bf16, DType::int8, DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2};
}

PeakPath gemm_peak_path(DType d) {
  switch (d) {
    case DType::bf16:
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      return PeakPath::bf16;
    case DType::int8:
      return PeakPath::int8;
    default:
      return PeakPath::fp32;
  }
}

std::vector<DType> parse_gemm_bench_list(std::string_view list, std::vector<std::string>* lowbit) {
  std::string rest;
  for (const std::string& item : mixp::detail::split_list(list)) {
    std::vector<std::string> names;
    if (item == "lowbit") names = {"int4", "int2", "binary"};
    if (item == "int4" || item == "int2" || item == "binary") names = {item};
    for (const std::string& nm : names) {
      if (std::find(lowbit->begin(), lowbit->end(), nm) == lowbit->end()) lowbit->push_back(nm);
    }
    if (names.empty()) rest += item + ",";
  }
  if (rest.empty() && !lowbit->empty()) return {};
  return parse_gemm_bench_dtypes(rest);
}

std::vector<DType> parse_gemm_bench_dtypes(std::string_view list) {
  std::vector<DType> out;
  for (const std::string& item : mixp::detail::split_list(list)) {
    if (item == "all") {
      for (DType d : gemm_bench_dtypes()) {
        if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
      }
      continue;
    }
    const std::optional<DType> d = find_dtype(item);
    if (!d) {
      throw std::invalid_argument("unknown dtype '" + item + "'; supported: " + kSupported);
    }
    const std::vector<DType> ok = gemm_bench_dtypes();
    if (std::find(ok.begin(), ok.end(), *d) == ok.end()) {
      throw std::invalid_argument(why_not(*d) + "; supported: " + kSupported);
    }
    if (std::find(out.begin(), out.end(), *d) == out.end()) out.push_back(*d);
  }
  if (out.empty())
    throw std::invalid_argument(std::string("no dtypes given; supported: ") + kSupported);
  return out;
}

std::vector<GemmBenchResult> run_gemm_bench(const GemmBenchConfig& cfg) {
  if (cfg.n < 1)
    throw std::invalid_argument("run_gemm_bench: n must be at least 1, got " +
                                std::to_string(cfg.n));
  if (cfg.repeat < 1) {
    throw std::invalid_argument("run_gemm_bench: repeat must be at least 1, got " +
                                std::to_string(cfg.repeat));
  }
  std::vector<Path> paths;
  for (DType d : cfg.dtypes) paths.push_back(path_for(d));  // throws for unsupported dtypes first
  for (const std::string& f : cfg.lowbit) {
    if (f != "int4" && f != "int2" && f != "binary") (void)lowbit_path(f, 1, 0);  // throws
  }

  const int threads = cfg.threads > 0 ? cfg.threads : get_num_threads();
  ThreadsGuard tg(threads);
  NoGradGuard ng;
  const int64_t n = cfg.n;
  const double ops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  std::map<PeakPath, PeakResult> peaks;
  std::map<PeakPath, std::optional<PeakResult>> tile_peaks;

  // The best of cfg.repeat timed runs, after the warm-up runs.
  const auto best_seconds = [&](const std::function<void()>& run) {
    for (int w = 0; w < std::max(1, cfg.warmup); ++w) run();
    double best = 1e300;
    for (int r = 0; r < cfg.repeat; ++r) best = std::min(best, seconds_of(run));
    return best;
  };
  // The measured fields of r, against the peak of `pp` (measured once per peak path): the AMX
  // tile peak where r's implementation runs on tiles, else the vector one (peak.h).
  const auto measured = [&](GemmBenchResult& r, double best, PeakPath pp) {
    if (!peaks.count(pp)) peaks[pp] = measure_peak(pp, threads, cfg.peak_seconds);
    if (runs_on_amx_tiles(r.implementation) && !tile_peaks.count(pp)) {
      tile_peaks[pp] = measure_tile_peak(pp, threads, cfg.peak_seconds);
    }
    r.n = n;
    r.threads = threads;
    r.repeat = cfg.repeat;
    r.seconds = best;
    r.gflops = ops / best * 1e-9;
    r.peak = peak_for_implementation(r.implementation, peaks[pp],
                                     tile_peaks.count(pp) ? tile_peaks[pp] : std::nullopt);
    r.peak_gflops = r.peak.gflops;
    r.fraction_of_peak = r.gflops / r.peak_gflops;
  };

  std::vector<GemmBenchResult> out;
  for (size_t i = 0; i < cfg.dtypes.size(); ++i) {
    const DType d = cfg.dtypes[i];
    const Path& p = paths[i];
    const Operands o = make_operands(d, n, cfg.seed);
    const double best = best_seconds([&] { p.run(o); });
    GemmBenchResult r;
    r.dtype = d;
    r.format = std::string(name(d));
    r.path = p.label;
    r.implementation = gemm_implementation(p.kernel_a, p.kernel_b, n, n, n);
    r.emulated = p.emulated;
    measured(r, best, gemm_peak_path(d));
    out.push_back(std::move(r));
  }
  for (const std::string& f : cfg.lowbit) {
    const LowBitPath p = lowbit_path(f, n, cfg.seed);
    const double best = best_seconds(p.run);
    GemmBenchResult r;
    r.dtype = DType::int8;
    r.format = f;
    r.lowbit = true;
    r.path = p.label;
    r.implementation = p.implementation;
    measured(r, best, PeakPath::int8);
    out.push_back(std::move(r));
  }
  const auto int8 = std::find_if(out.begin(), out.end(), [](const GemmBenchResult& r) {
    return r.dtype == DType::int8 && !r.lowbit;
  });
  if (int8 != out.end()) {
    const double base = int8->gflops;
    for (GemmBenchResult& r : out) r.speedup_vs_int8 = r.gflops / base;
  }
  const auto fp32 = std::find_if(out.begin(), out.end(),
                                 [](const GemmBenchResult& r) { return r.dtype == DType::fp32; });
  if (fp32 != out.end()) {
    const double base = fp32->gflops;
    for (GemmBenchResult& r : out) r.speedup_vs_fp32 = r.gflops / base;
  }
  return out;
}

}  // namespace mixp::bench
