// The CUDA backend on a GPU: every implemented kernel on cuda:0 against the cpu backend (bit for
// bit where the kernel rounds as the CPU does: copies, conversions, the optimizer step; within a
// tolerance per dtype elsewhere, as tests/ops does for cpu against ref), the device allocator's
// statistics, host<->device copies, and a few training steps of an MLP against the same steps
// on the cpu. Without a GPU each test is skipped with the reason (ctest reports it as skipped:
// gtest's "[  SKIPPED ]" is CTest's skip pattern); only the no-device error itself is tested then.
// scripts/gpu-check.sh runs these on a GPU machine.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "mixp/backend/backend.h"
#include "mixp/backend/cuda.h"
#include "mixp/backend/nvml_energy.h"
#include "mixp/backend/platform.h"
#include "mixp/format/cpu_features.h"
#include "mixp/ops/matmul_precision.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"
#include "cuda/cuda_test_util.h"
#include "common/test_paths.h"

namespace mixp {
namespace {

using namespace cuda_test;

// Tolerances of the normalized error: fp32 kernels differ from the CPU by summation order and
// by the GPU's libm (a few ulps); 16-bit results by one rounding of the result (2^-8 for bf16).
constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16 = 1e-2;
constexpr double kTolF16 = 2e-3;

// Runs on every machine: without a device, cuda:0 is missing; with one, the index past the last.
TEST(CudaDevice, AMissingDeviceSaysWhatToDo) {
  const int missing = cuda_status().device_count;
  try {
    (void)zeros(Shape{4}, {.device = Device::cuda(missing)});
    FAIL() << "allocating on a missing cuda device should throw";
  } catch (const std::exception& e) {
    // Built: the runtime's reason (or the device range); not built: how to build it.
    const char* says = !cuda_status().built ? "-DMIXP_CUDA=ON"
                       : missing > 0        ? "does not exist"
                                            : "no CUDA device";
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
  if (missing == 0) {
    EXPECT_NE(cuda_status().message.find(cuda_status().built ? "no CUDA device" : "not built"),
              std::string::npos)
        << cuda_status().message;
  }
}

TEST(CudaDevice, CopiesRoundTripAndTheAllocatorCounts) {
  REQUIRE_GPU();
  Tensor x = host_randn(Shape{257, 33}, 1);
  const AllocatorStats before = cuda_allocator(0).stats();
  Tensor d = x.to(kGpu);
  EXPECT_EQ(d.device(), kGpu);
  EXPECT_GE(cuda_allocator(0).stats().requested_bytes - before.requested_bytes,
            static_cast<int64_t>(x.nbytes()));
  expect_same_bits(d, x, "round trip");
  expect_same_bits(d.transpose(0, 1).contiguous(), x.transpose(0, 1).contiguous(), "transpose");
  EXPECT_EQ(d.at({3, 5}), x.at({3, 5}));
  d = Tensor();
  const AllocatorStats after = cuda_allocator(0).stats();
  EXPECT_EQ(after.requested_bytes, before.requested_bytes);
  EXPECT_GE(after.peak_requested_bytes, static_cast<int64_t>(x.nbytes()));
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
}

TEST(CudaDevice, ConversionsEqualTheCpuBitForBit) {
  REQUIRE_GPU();
  Tensor x = mul(host_randn(Shape{4099}, 2), 30.0);
  Tensor d = x.to(kGpu);
  for (DType t : {DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2, DType::tf32}) {
    for (Round r : {Round::nearest_even, Round::stochastic, Round::toward_zero}) {
      for (Overflow ov : {Overflow::ieee, Overflow::saturate}) {
        expect_same_bits(d.to(t, r, ov, 77), x.to(t, r, ov, 77), name(t).data());
      }
    }
  }
}

TEST(CudaDevice, PointwiseOpsMatchTheCpu) {
  REQUIRE_GPU();
  Tensor a = host_randn(Shape{64, 65}, 3), b = add(mul(host_randn(Shape{65}, 4), 0.1), 2.0);
  Tensor da = a.to(kGpu), db = b.to(kGpu);
  EXPECT_LT(rel_error(relu(da), relu(a)), kTolF32);
  EXPECT_LT(rel_error(gelu(da, GeluApprox::tanh), gelu(a, GeluApprox::tanh)), kTolF32);
  EXPECT_LT(rel_error(gelu(da), gelu(a)), kTolF32);
  EXPECT_LT(rel_error(tanh(da), tanh(a)), kTolF32);
  EXPECT_LT(rel_error(sigmoid(da), sigmoid(a)), kTolF32);
  EXPECT_LT(rel_error(exp(da), exp(a)), kTolF32);
  EXPECT_LT(rel_error(log(db), log(b)), kTolF32);
  EXPECT_LT(rel_error(add(da, db), add(a, b)), kTolF32);  // broadcast
  EXPECT_LT(rel_error(div(da, db), div(a, b)), kTolF32);
  EXPECT_LT(rel_error(mul(da, 3.0), mul(a, 3.0)), kTolF32);
  EXPECT_LT(rel_error(sum(da, Shape{0}), sum(a, Shape{0})), kTolF32);
  EXPECT_LT(rel_error(mean(da), mean(a)), kTolF32);
  EXPECT_LT(rel_error(softmax(da, -1), softmax(a, -1)), kTolF32);
  EXPECT_LT(rel_error(log_softmax(da, -1), log_softmax(a, -1)), kTolF32);
  expect_same_bits(argmax(da, 1), argmax(a, 1), "argmax");
}

TEST(CudaDevice, RowKernelsAndTheirGradientsMatchTheCpu) {
  REQUIRE_GPU();
  Tensor x = host_randn(Shape{12, 96}, 5), w = host_randn(Shape{96}, 6), b = host_randn(Shape{96}, 7);
  Tensor cx = x.clone().requires_grad_(), cw = w.clone().requires_grad_(),
         cb = b.clone().requires_grad_();
  Tensor gx = x.to(kGpu).requires_grad_(), gw = w.to(kGpu).requires_grad_(),
         gb = b.to(kGpu).requires_grad_();
  Tensor yc = layer_norm(cx, Shape{96}, cw, cb), yg = layer_norm(gx, Shape{96}, gw, gb);
  EXPECT_LT(rel_error(yg, yc), kTolF32);
  Tensor t = from_vector(std::vector<int64_t>{1, 5, 7, 0, 95, 3, 2, 2, 9, 11, 40, 60}, Shape{12});
  Tensor lc = cross_entropy(yc, t), lg = cross_entropy(yg, t.to(kGpu));
  EXPECT_LT(rel_error(lg, lc), kTolF32);
  lc.backward();
  lg.backward();
  EXPECT_LT(rel_error(gx.grad(), cx.grad()), 1e-4);
  EXPECT_LT(rel_error(gw.grad(), cw.grad()), 1e-4);
  EXPECT_LT(rel_error(gb.grad(), cb.grad()), 1e-4);

  Tensor emb = host_randn(Shape{50, 8}, 8);
  Tensor idx = from_vector(std::vector<int64_t>{3, 3, 49, 0}, Shape{4});
  expect_same_bits(embedding(idx.to(kGpu), emb.to(kGpu)), embedding(idx, emb), "embedding");
}

TEST(CudaDevice, MatmulMatchesTheCpuPerDtype) {
  REQUIRE_GPU();
  Tensor a = host_randn(Shape{70, 130}, 9), b = host_randn(Shape{130, 90}, 10),
         bias = host_randn(Shape{90}, 11);
  Tensor da = a.to(kGpu), db = b.to(kGpu), dbias = bias.to(kGpu);
  EXPECT_LT(rel_error(matmul(da, db), matmul(a, b)), kTolF32);
  // Transposed views (what backward passes): read with CUBLAS_OP_T, no copy.
  Tensor at = a.transpose(0, 1).contiguous().transpose(0, 1);
  EXPECT_LT(rel_error(matmul(at.to(kGpu).transpose(0, 1).contiguous().transpose(0, 1), db),
                      matmul(at, b)),
            kTolF32);
  // linear with the fused bias + activation epilogue: w is [out, in].
  Tensor w = b.transpose(0, 1).contiguous();
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
    EXPECT_LT(rel_error(linear(da, w.to(kGpu), dbias, act), linear(a, w, bias, act)), kTolF32)
        << static_cast<int>(act);
  }
  {
    // float32_matmul_precision "high": operands rounded to tf32 by the front end (on the device),
    // products on the TF32 Tensor Cores; the cpu rounds the same operands, so only the
    // accumulation order differs.
    const Tf32Guard tf32(MatmulPrecision::high);
    EXPECT_LT(rel_error(matmul(da, db), matmul(a, b)), kTolF32) << "tf32";
  }
  for (DType t : {DType::bf16, DType::fp16}) {
    Tensor a16 = a.to(t, Round::nearest_even, Overflow::ieee, 0);
    Tensor b16 = b.to(t, Round::nearest_even, Overflow::ieee, 0);
    EXPECT_LT(rel_error(matmul(a16.to(kGpu), b16.to(kGpu)), matmul(a16, b16)),
              t == DType::bf16 ? kTolBf16 : kTolF16)
        << name(t);
  }
}

TEST(CudaDevice, AttentionAndItsGradientMatchTheCpu) {
  REQUIRE_GPU();
  for (bool causal : {false, true}) {
    Tensor q = host_randn(Shape{2, 3, 16, 32}, 20), k = host_randn(Shape{2, 3, 16, 32}, 21),
           v = host_randn(Shape{2, 3, 16, 32}, 22);
    Tensor cq = q.clone().requires_grad_(), ck = k.clone().requires_grad_(),
           cv = v.clone().requires_grad_();
    Tensor gq = q.to(kGpu).requires_grad_(), gk = k.to(kGpu).requires_grad_(),
           gv = v.to(kGpu).requires_grad_();
    Tensor oc = scaled_dot_product_attention(cq, ck, cv, causal);
    Tensor og = scaled_dot_product_attention(gq, gk, gv, causal);
    EXPECT_LT(rel_error(og, oc), kTolF32) << causal;
    sum(mul(oc, oc)).backward();
    sum(mul(og, og)).backward();
    EXPECT_LT(rel_error(gq.grad(), cq.grad()), 1e-4) << causal;
    EXPECT_LT(rel_error(gk.grad(), ck.grad()), 1e-4) << causal;
    EXPECT_LT(rel_error(gv.grad(), cv.grad()), 1e-4) << causal;
  }
}

TEST(CudaDevice, StepKernelsMatchTheCpu) {
  REQUIRE_GPU();
  Tensor g = host_randn(Shape{1000}, 12);
  Tensor found = zeros(Shape{1}, {.device = kGpu});
  Tensor dg = g.to(kGpu);
  backend_for(dg).unscale_check(dg, found, 0.25);
  EXPECT_EQ(found.item(), 0.0);
  expect_same_bits(dg, mul(g, 0.25), "unscale");
  Tensor ss = zeros(Shape{1}, {.dtype = DType::fp64, .device = kGpu});
  backend_for(dg).sum_squares(ss, dg);
  Tensor sc = zeros(Shape{1}, {.dtype = DType::fp64});
  backend().sum_squares(sc, mul(g, 0.25));
  EXPECT_NEAR(ss.item(), sc.item(), 1e-12 * sc.item());
}

// Three AdamW steps of a two-layer MLP on cuda:0 and on the cpu from the same start: the losses
// agree to fp32 tolerance, and the parameters too.
TEST(CudaDevice, MlpTrainingStepsMatchTheCpu) {
  REQUIRE_GPU();
  Tensor x = host_randn(Shape{32, 20}, 13);
  std::vector<int64_t> labels;
  for (int i = 0; i < 32; ++i) labels.push_back(i % 5);
  Tensor y = from_vector(labels, Shape{32});
  const std::vector<Tensor> init = {mul(host_randn(Shape{64, 20}, 14), 0.2), zeros(Shape{64}),
                                    mul(host_randn(Shape{5, 64}, 15), 0.2), zeros(Shape{5})};
  std::vector<double> losses[2];
  std::vector<Tensor> finals[2];
  for (int dev = 0; dev < 2; ++dev) {
    const Device where = dev == 0 ? Device::cpu() : kGpu;
    std::vector<Tensor> p;
    for (const Tensor& t : init) p.push_back(t.clone().to(where).detach().requires_grad_());
    optim::AdamW opt(p, {.lr = 1e-2});
    const Tensor xd = x.to(where), yd = y.to(where);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      Tensor h = linear(xd, p[0], p[1], Activation::relu);
      Tensor loss = cross_entropy(linear(h, p[2], p[3]), yd);
      loss.backward();
      opt.step();
      losses[dev].push_back(loss.item());
    }
    finals[dev] = p;
  }
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(losses[1][s], losses[0][s], 1e-4 * std::fabs(losses[0][s]));
  for (size_t k = 0; k < init.size(); ++k) EXPECT_LT(rel_error(finals[1][k], finals[0][k]), 1e-4);
}

// A few steps of the gpt (embedding, LayerNorm, attention, GELU, cross-entropy, AdamW) on
// cuda:0 through the CLI, against the cpu.
TEST(CudaDevice, GptTrainsOnCudaLikeOnTheCpu) {
  REQUIRE_GPU();
  expect_trains_like_the_cpu(
      "train --model gpt --data synthetic --steps 3 --batch 4 --context 32 --seed 1 --json", "gpt");
}

TEST(CudaDevice, OpsNotBuiltOnCudaSaySo) {
  REQUIRE_GPU();
  try {
    // fp64 has no kernels on cuda (docs/cuda.md): its fill says so.
    (void)zeros(Shape{4}, {.dtype = DType::fp64, .device = kGpu});
    FAIL() << "an fp64 tensor on cuda should say it is not implemented on cuda";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("not implemented on cuda"), std::string::npos) << e.what();
  }
}

// `mixp train --device`: a bad name is a usage error; a missing device a clear failure; on a GPU
// the mlp trains and its losses agree with the cpu's.
TEST(CudaDevice, TrainDeviceFlag) {
  const std::string run = "train --model mlp --data synthetic --steps 3 --batch 16 --seed 3 --json";
  std::string out, err;
  EXPECT_EQ(run_cli(run + " --device tpu", out, err), 2) << err;
  EXPECT_NE(err.find("use cpu, cuda or cuda:N"), std::string::npos) << err;
  EXPECT_TRUE(out.empty()) << out;
  if (!cuda_available()) {
    EXPECT_EQ(run_cli(run + " --device cuda", out, err), 1) << err;
    EXPECT_NE(err.find(cuda_status().built ? "no CUDA device" : "not built"), std::string::npos)
        << err;
    EXPECT_TRUE(out.empty()) << out;
    GTEST_SKIP() << "the training half needs a GPU: " << cuda_status().message;
  }
  const auto [cpu, gpu] = expect_trains_like_the_cpu(run, "mlp");
  ASSERT_FALSE(cpu.is_null() || gpu.is_null());
  // The peaks are the training device's allocator: the GPU's own under --device cuda.
  EXPECT_EQ(cpu.at("memory_device").get<std::string>(), "cpu");
  EXPECT_EQ(gpu.at("memory_device").get<std::string>(), "cuda:0");
  EXPECT_GT(gpu.at("peak_memory_bytes").get<int64_t>(), 0);
  EXPECT_GE(gpu.at("peak_reserved_bytes").get<int64_t>(),
            gpu.at("peak_memory_bytes").get<int64_t>());
}

// `mixp doctor --json` says what this build has and what it sees, and that the backend is
// untested on hardware (runs everywhere: the CLI is the user's way to find out).
TEST(CudaDevice, DoctorReportsTheCudaBackend) {
  std::string out, err;
  ASSERT_EQ(run_cli("doctor --json", out, err), 0) << out << err;
  const nlohmann::json j = nlohmann::json::parse(out);
  const nlohmann::json& c = j.at("cuda_backend");
  EXPECT_EQ(c.at("built").get<bool>(), cuda_status().built);
  EXPECT_EQ(c.at("device_count").get<int>(), cuda_status().device_count);
  EXPECT_EQ(c.at("status").get<std::string>(), cuda_status().message);
  EXPECT_FALSE(c.at("tested_on_hardware").get<bool>());
  if (cuda_status().built) {
    EXPECT_NE(c.at("note").get<std::string>().find("untested"), std::string::npos);
  }
}

// NVML's energy counter (dlopen, no link dependency): without a driver the meter says why; on a
// GPU it counts the board's energy over 200 large GEMMs.
TEST(CudaDevice, NvmlEnergyMeterMeasuresOrSaysWhy) {
  NvmlEnergyMeter meter(0);
  if (!cuda_available()) {
    EXPECT_FALSE(meter.available());
    EXPECT_FALSE(meter.unavailable_reason().empty());
    EXPECT_FALSE(meter.joules().has_value());
    return;
  }
  ASSERT_TRUE(meter.available()) << meter.unavailable_reason();
  meter.start();
  Tensor a = host_randn(Shape{4096, 4096}, 30).to(kGpu);
  // About half a second of work: the counter advances in steps of the driver's sampling.
  for (int i = 0; i < 200; ++i) a = matmul(a, a).mul_(1.0 / 64.0);
  cuda_synchronize(0);
  const std::optional<double> j = meter.joules();
  ASSERT_TRUE(j.has_value());
  EXPECT_GT(*j, 0.0);
  std::printf("NVML: %.2f J over 200 GEMMs of 4096\n", *j);
}

// `mixp compare --device cuda`: each precision trains on the GPU; energy is NVML's, labelled.
TEST(CudaDevice, CompareOnCudaMeasuresEnergyWithNvml) {
  REQUIRE_GPU();
  const std::string dir = ::testing::TempDir() + "mixp_cuda_compare_" + std::to_string(getpid());
  std::string out, err;
  ASSERT_EQ(run_cli("compare --device cuda --data synthetic --precisions fp32,bf16,fp8 --steps 5 "
                    "--batch 32 --json --force --out " + dir,
                    out, err),
            0)
      << err;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j.at("runs").size(), 3u);
  for (const auto& r : j.at("runs")) {
    EXPECT_EQ(r.at("energy_source").get<std::string>(), "nvml") << r.dump();
    EXPECT_EQ(r.value("memory_device", ""), "cuda:0") << "peak memory from the GPU's allocator";
    EXPECT_GT(r.at("peak_memory_bytes").get<int64_t>(), 0) << r.dump();
    EXPECT_TRUE(std::isfinite(r.at("final_loss").get<double>())) << r.dump();
  }
}

// The seeds' precision matrix by GPU architecture, as `mixp doctor` prints it (runs everywhere).
TEST(CudaDevice, DoctorRecommendsPrecisionByArchitecture) {
  auto advice = [](const char* name, int major, int minor) {
    GpuInfo g;
    g.name = name;
    g.cc_major = major;
    g.cc_minor = minor;
    return recommend_precision(cpu_features(), std::vector<GpuInfo>{g});
  };
  const PrecisionAdvice hopper = advice("H100", 9, 0), ampere = advice("A100", 8, 0),
                        volta = advice("V100", 7, 0);
  EXPECT_EQ(hopper.precision, "bf16");
  EXPECT_NE(hopper.reason.find("FP8"), std::string::npos) << hopper.reason;
  EXPECT_EQ(ampere.precision, "bf16");
  EXPECT_NE(ampere.reason.find("TF32"), std::string::npos) << ampere.reason;
  EXPECT_EQ(ampere.reason.find("and FP8"), std::string::npos) << ampere.reason;
  EXPECT_EQ(volta.precision, "fp16");
  EXPECT_NE(volta.reason.find("loss scaling"), std::string::npos) << volta.reason;
}

}  // namespace
}  // namespace mixp

namespace mixp::cuda_test {
std::string cli_path() {
  const char* env = std::getenv("MIXP_CLI");
  return env && *env ? std::string(env) : std::string(MIXP_CLI);
}

// Runs `mixp ARGS` with stderr captured apart; returns the exit status.
int run_cli(const std::string& args, std::string& out, std::string& err) {
  // One file per process: CTest runs the tests of this binary in parallel processes.
  const std::string err_file =
      ::testing::TempDir() + "mixp_cuda_cli_err_" + std::to_string(getpid()) + ".txt";
  FILE* p = popen((cli_path() + " " + args + " 2>" + err_file).c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  out.clear();
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  err.clear();
  if (FILE* e = fopen(err_file.c_str(), "r")) {
    while (size_t n = fread(buf, 1, sizeof buf, e)) err.append(buf, n);
    fclose(e);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::pair<nlohmann::json, nlohmann::json> expect_trains_like_the_cpu(const std::string& run,
                                                                     const std::string& what) {
  std::pair<nlohmann::json, nlohmann::json> res;
  std::string out, err;
  if (run_cli(run + " --device cpu", out, err) != 0) {
    ADD_FAILURE() << what << " (cpu): " << err;
    return res;
  }
  res.first = nlohmann::json::parse(out);
  if (run_cli(run + " --device cuda", out, err) != 0) {
    ADD_FAILURE() << what << " (cuda): " << err;
    return res;
  }
  res.second = nlohmann::json::parse(out);
  const double cpu_loss = res.first.at("final_loss").get<double>();
  EXPECT_NEAR(res.second.at("final_loss").get<double>(), cpu_loss, 1e-3 * std::fabs(cpu_loss))
      << what;
  return res;
}

}  // namespace mixp::cuda_test
