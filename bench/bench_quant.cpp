// INT8 inference throughput in one run (docs/architecture.md 7; docs/benchmarks.md
// "INT8 and 4-bit"):
//
//   build/release/mixp_bench_quant [--threads=N] [--pairs=20]
//
// 1. Int8 GEMM: mixp's Int8Linear (u8 x s8 -> s32 with the requantization fused: per-channel
//    output scales, bias, ReLU, u8 result) against oneDNN's matmul called directly at the same
//    shape (primitive, memory objects and weights in the primitive's layout prepared once):
//    (a) plain u8 x s8 -> s32, (b) the same fused primitive mixp builds. Target: mixp / oneDNN
//    (a) >= 0.9. Also Int8Conv2d against oneDNN's fused int8 convolution.
// 2. Model evaluation: the built-in mlp and cnn (batch 128, random weights, calibrated on random
//    images: the speed does not depend on the values), fp32 forward against the converted int8
//    model's forward. Target: int8 >= 1.5x faster.
// Every comparison interleaves the two sides call by call (--pairs calls each, best of each side):
// on a shared machine the load drifts between two separate measurements, the interleaved ratio
// does not.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "mixp/mixp.h"
#include "mixp/nn/models.h"
#include "mixp/quant/quant.h"

namespace {
using namespace mixp;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

int g_threads = 0;
int g_pairs = 20;

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best time of each side over g_pairs interleaved calls (after one warm-up call each).
std::pair<double, double> interleaved(const std::function<void()>& a,
                                      const std::function<void()>& b) {
  a();
  b();
  double ba = 1e300, bb = 1e300;
  for (int i = 0; i < g_pairs; ++i) {
    ba = std::min(ba, seconds_of(a));
    bb = std::min(bb, seconds_of(b));
  }
  return {ba, bb};
}

std::vector<float> scales(int64_t n, float base) {
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) s[size_t(i)] = base * (1.0f + 0.01f * float(i % 7));
  return s;
}

// oneDNN called directly: matmul u8 [M, K] x s8 [K, N] with weights in the layout the primitive
// picks (reordered once here), dst s32 (plain) or u8 with the fused attributes mixp uses.
struct OnednnMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  std::unique_ptr<dnnl::matmul> prim;
  std::unordered_map<int, dnnl::memory> args;
  Tensor w_reordered, dst, bias;
  OnednnMatmul(const Tensor& x, const Tensor& w_nk, bool fused, const std::vector<float>& oscale) {
    const int64_t M = x.size(0), K = x.size(1), N = w_nk.size(0);
    const dnnl::memory::desc a_md({M, K}, dt::u8, tag::ab);
    const dnnl::memory::desc w_any({K, N}, dt::s8, tag::any);
    const dnnl::memory::desc c_md({M, N}, fused ? dt::u8 : dt::s32, tag::ab);
    const dnnl::memory::desc b_md({1, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (fused) {
      attr.set_output_scales(1 << 1, oscale);
      dnnl::post_ops po;
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    const auto pd =
        fused ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, w_any, b_md, c_md), attr, eng)
              : dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, w_any, c_md), eng);
    prim = std::make_unique<dnnl::matmul>(pd);
    w_reordered = empty({int64_t(pd.weights_desc().get_size())}, {.dtype = DType::uint8});
    const dnnl::memory::desc w_plain({K, N}, dt::s8, dnnl::memory::dims{1, K});
    dnnl::memory from(w_plain, eng, w_nk.data_ptr()),
        to(pd.weights_desc(), eng, w_reordered.data_ptr());
    dnnl::reorder(from, to).execute(s, from, to);
    s.wait();
    dst = empty({M, N}, {.dtype = fused ? DType::uint8 : DType::int32});
    bias = zeros({1, N});
    args = {{DNNL_ARG_SRC, dnnl::memory(a_md, eng, x.data_ptr())},
            {DNNL_ARG_WEIGHTS, to},
            {DNNL_ARG_DST, dnnl::memory(c_md, eng, dst.data_ptr())}};
    if (fused) args.insert({DNNL_ARG_BIAS, dnnl::memory(b_md, eng, bias.data_ptr())});
  }
  void run() {
    prim->execute(s, args);
    s.wait();
  }
};

// The int8 layer both cases time: u8 input at scale 0.02, weight scales 1e-3, zero bias, ReLU
// and a u8 output at scale 50.
quant::Int8WeightLayerParams layer_params(const char* name, const Tensor& w, int64_t outputs) {
  quant::Int8WeightLayerParams p;
  p.name = name;
  p.weight = w;
  p.weight_scale = scales(outputs, 1e-3f);
  p.bias.assign(size_t(outputs), 0.0f);
  p.input = {0.02f, 0, 0, 255};
  p.output = QParams{50.0f, 0, 0, 255};
  p.relu = true;
  return p;
}

void gemm_case(int64_t M, int64_t K, int64_t N) {
  Generator g(1);
  const Tensor x = randint(0, 256, {M, K}, g, {.dtype = DType::uint8});
  const Tensor w = randint(-128, 128, {N, K}, g, {.dtype = DType::int8});
  quant::Int8WeightLayerParams p = layer_params("fc", w, N);
  quant::Int8Linear layer(p);
  const quant::QAct in{x, p.input};
  std::vector<float> osc(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    osc[size_t(i)] = p.input.scale * p.weight_scale[size_t(i)] / 50.0f;
  OnednnMatmul plain(x, w, false, osc), fused(x, w, true, osc);
  const double ops = 2.0 * double(M) * double(K) * double(N);
  const auto [tm, tp] = interleaved([&] { layer.forward(in); }, [&] { plain.run(); });
  const auto [tm2, tf] = interleaved([&] { layer.forward(in); }, [&] { fused.run(); });
  const double best_m = std::min(tm, tm2);
  std::printf(
      "int8 GEMM %5lld x %5lld x %5lld: mixp Int8Linear %7.1f GOP/s | oneDNN u8s8s32 %7.1f "
      "(ratio %.2f) | oneDNN fused u8 %7.1f (ratio %.2f)\n",
      (long long)M, (long long)K, (long long)N, ops / best_m * 1e-9, ops / tp * 1e-9, tp / tm,
      ops / tf * 1e-9, tf / tm2);
}

void conv_case(int64_t N, int64_t C, int64_t H, int64_t O) {
  Generator g(2);
  const Tensor x = randint(0, 256, {N, H, H, C}, g, {.dtype = DType::uint8});
  const Tensor w = randint(-128, 128, {O, C, 3, 3}, g, {.dtype = DType::int8});
  quant::Int8WeightLayerParams p = layer_params("conv", w, O);
  p.conv.pad_h = p.conv.pad_w = 1;
  quant::Int8Conv2d layer(p);
  const quant::QAct in{x, p.input};
  // oneDNN direct: the same fused convolution.
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dnnl::memory::desc src({N, C, H, H}, dt::u8, tag::nhwc),
      dst({N, O, H, H}, dt::u8, tag::nhwc);
  const dnnl::memory::desc wa({O, C, 3, 3}, dt::s8, tag::any), b({O}, dt::f32, tag::a);
  dnnl::primitive_attr attr;
  std::vector<float> osc(static_cast<size_t>(O));
  for (int64_t i = 0; i < O; ++i) osc[size_t(i)] = 0.02f * p.weight_scale[size_t(i)] / 50.0f;
  attr.set_output_scales(1 << 1, osc);
  dnnl::post_ops po;
  po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  attr.set_post_ops(po);
  const dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::convolution_direct, src, wa, b, dst, {1, 1},
                                      {1, 1}, {1, 1}),
      attr, eng);
  dnnl::convolution_forward prim(pd);
  Tensor wr = empty({int64_t(pd.weights_desc().get_size())}, {.dtype = DType::uint8});
  dnnl::memory wfrom({{O, C, 3, 3}, dt::s8, tag::oihw}, eng, w.data_ptr());
  dnnl::memory wto(pd.weights_desc(), eng, wr.data_ptr());
  dnnl::reorder(wfrom, wto).execute(s, wfrom, wto);
  Tensor out = empty({N, H, H, O}, {.dtype = DType::uint8}), bias = zeros({O});
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(src, eng, x.data_ptr())},
      {DNNL_ARG_WEIGHTS, wto},
      {DNNL_ARG_BIAS, dnnl::memory(b, eng, bias.data_ptr())},
      {DNNL_ARG_DST, dnnl::memory(dst, eng, out.data_ptr())}};
  const auto [tm, to] = interleaved([&] { layer.forward(in); },
                                    [&] {
                                      prim.execute(s, args);
                                      s.wait();
                                    });
  const double ops = 2.0 * double(N) * double(H * H) * double(O) * double(C * 9);
  std::printf(
      "int8 conv %lldx%lldx%lldx%lld -> %lld 3x3: mixp Int8Conv2d %7.1f GOP/s | oneDNN fused "
      "%7.1f (ratio %.2f)   [%s]\n",
      (long long)N, (long long)C, (long long)H, (long long)H, (long long)O, ops / tm * 1e-9,
      ops / to * 1e-9, to / tm, pd.impl_info_str());
}

Tensor images(int64_t n, Generator& g) {
  return randn({n, 1, 28, 28}, g);
}

void model_case(const std::string& name) {
  auto fp = nn::make_model({.name = name, .seed = 1});
  auto qm = nn::make_model({.name = name, .seed = 1});
  Generator g(3);
  quant::prepare_ptq(*qm);
  {
    NoGradGuard ng;
    for (int i = 0; i < 2; ++i) qm->forward(images(128, g));
  }
  auto int8 = quant::convert_to_int8(*qm);
  fp->eval();
  const Tensor x = images(128, g);
  NoGradGuard ng;
  const auto [tf, ti] = interleaved([&] { fp->forward(x); }, [&] { int8->forward(x); });
  std::printf("%s eval, batch 128: fp32 %.3f ms, int8 %.3f ms: int8 %.2fx faster\n", name.c_str(),
              tf * 1e3, ti * 1e3, tf / ti);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) g_threads = std::atoi(argv[i] + 10);
    if (std::strncmp(argv[i], "--pairs=", 8) == 0) g_pairs = std::atoi(argv[i] + 8);
  }
  if (g_threads > 0) set_num_threads(g_threads);
  std::printf("threads %d, best of %d interleaved calls per side\n", get_num_threads(), g_pairs);
  gemm_case(2048, 2048, 2048);
  gemm_case(128, 784, 512);
  gemm_case(128, 3136, 128);
  conv_case(128, 32, 14, 64);
  conv_case(128, 1, 28, 32);
  model_case("mlp");
  model_case("cnn");
  return 0;
}
