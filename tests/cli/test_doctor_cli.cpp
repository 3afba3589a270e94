// End-to-end: `mixp doctor --json` has the contract's fields and agrees with the library.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "common/cli_runner.h"
#include "mixp/backend/platform.h"

namespace mixp::test {
namespace {

using nlohmann::json;

TEST(DoctorCli, JsonFieldsMatchTheLibrary) {
  const CliResult r = run_cli("doctor --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = r.json();
  const CpuFeatures& cpu = cpu_features();
  EXPECT_EQ(j.at("cpu").at("model"), cpu.model);
  EXPECT_EQ(j["cpu"].at("features").get<std::vector<std::string>>(), cpu.names());
  EXPECT_GE(j["cpu"].at("cores").get<int>(), 1);
  // The CPU class the golden runs are recorded per (tests/golden/engine/regenerate.sh reads it).
  EXPECT_EQ(j["cpu"].at("class"), cpu_class());
  EXPECT_EQ(j["cpu"]["cores"].get<int>(), host_info().cores);
  EXPECT_GT(j.at("memory").at("total_bytes").get<uint64_t>(), 0u);
  ASSERT_TRUE(j.at("gpus").is_array());
  EXPECT_TRUE(j.at("gpu_status").is_string());
  const GpuProbe& probe = probe_gpus();
  EXPECT_EQ(j["gpus"].size(), probe.gpus.size());
  for (const json& g : j["gpus"]) {
    EXPECT_TRUE(g.contains("name"));
    EXPECT_TRUE(g.contains("compute_capability"));
  }
  const PrecisionAdvice advice = recommend_precision(cpu, probe.gpus);
  EXPECT_EQ(j.at("recommended_precision"), advice.precision);
  EXPECT_EQ(j.at("reason"), advice.reason);
  EXPECT_EQ(j.at("device"), advice.device);
  const json& formats = j.at("formats");
  ASSERT_EQ(formats.size(), 13u);
  for (const json& f : formats) {
    EXPECT_TRUE(f.at("support") == "native" || f.at("support") == "emulated") << f;
    EXPECT_FALSE(f.at("how").get<std::string>().empty());
  }
  if (probe.gpus.empty()) {
    // On the CPU: bf16 native exactly when the CPU has AVX512_BF16 (or AMX-BF16) enabled by the OS.
    const bool bf16 = (cpu.avx512_bf16 && cpu.os_avx512) || (cpu.amx_bf16 && cpu.os_amx);
    const auto it = std::find_if(formats.begin(), formats.end(),
                                 [](const json& f) { return f["format"] == "bf16"; });
    ASSERT_NE(it, formats.end());
    EXPECT_EQ((*it)["support"], bf16 ? "native" : "emulated");
    EXPECT_EQ(j["recommended_precision"], bf16 ? "bf16" : "fp32");
    EXPECT_NE(j["gpu_status"].get<std::string>().find("no NVIDIA driver"), std::string::npos);
  }
  // The block-scaled recipes: one line each, emulated (exactly) on the CPU.
  ASSERT_EQ(j["cpu"].at("recipes").size(), 3u);
  for (const json& r : j["cpu"]["recipes"]) EXPECT_EQ(r.at("support"), "emulated") << r;
  EXPECT_EQ(j["cpu"]["recipes"][0]["recipe"], "nvfp4");
  EXPECT_EQ(j["cpu"]["recipes"][2]["recipe"], "fp8-block");
  EXPECT_EQ(j.at("recipes").size(), 3u);
  if (probe.gpus.empty()) {
    EXPECT_EQ(j["recipes"], j["cpu"]["recipes"]);
  }
  // fp16 is emulated on every CPU, AVX512_FP16 or not: widened to fp32 (platform.cpp).
  const auto cpu_fp16 = std::find_if(j["cpu"]["formats"].begin(), j["cpu"]["formats"].end(),
                                     [](const json& f) { return f["format"] == "fp16"; });
  ASSERT_NE(cpu_fp16, j["cpu"]["formats"].end());
  EXPECT_EQ((*cpu_fp16)["support"], "emulated");
  EXPECT_NE((*cpu_fp16)["how"].get<std::string>().find("widened to fp32"), std::string::npos);
}

TEST(DoctorCli, Text) {
  const CliResult r = run_cli("doctor");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Recommended precision:"), std::string::npos);
  EXPECT_NE(r.out.find("bf16"), std::string::npos);
  EXPECT_NE(r.out.find("Block-scaled recipes (--precision; docs/fp4.md) on the CPU:"),
            std::string::npos);
  EXPECT_NE(r.out.find("fp8-block  emulated  exact: the published quantizers"), std::string::npos) << r.out;
  EXPECT_EQ(run_cli("doctor --help").exit_code, 0);
  EXPECT_NE(run_cli("doctor --bogus").exit_code, 0);
}

// A stand-in for libcuda.so.1 with two GPUs, compiled when the test runs (the build makes no
// shared libraries for tests), so the driver-API path of the probe runs on machines without GPUs.
constexpr const char* kFakeDriver = R"(
#include <string.h>
#include <stddef.h>
int cuInit(unsigned f) { return 0; }
int cuDriverGetVersion(int* v) { *v = 12040; return 0; }
int cuDeviceGetCount(int* n) { *n = 2; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDeviceGetName(char* s, int len, int d) { strncpy(s, d == 0 ? "Fake T4" : "Fake A100", len); return 0; }
int cuDeviceGetAttribute(int* v, int attr, int d) {
  if (attr == 75) *v = d == 0 ? 7 : 8;
  else if (attr == 76) *v = d == 0 ? 5 : 0;
  else if (attr == 16) *v = d == 0 ? 40 : 108;
  else return 1;
  return 0;
}
int cuDeviceTotalMem_v2(size_t* b, int d) { *b = (size_t)(d == 0 ? 16 : 40) << 30; return 0; }
)";

TEST(DoctorCli, ReportsGpusThroughTheDriverApi) {
  TempDir dir;
  {
    std::ofstream src(dir / "fake_cuda.c");
    src << kFakeDriver;
  }
  const std::string lib = dir / "libfakecuda.so";
  const std::string cc =
      "cc -shared -fPIC -o '" + lib + "' '" + (dir / "fake_cuda.c").string() + "' 2>/dev/null";
  if (std::system(cc.c_str()) != 0) GTEST_SKIP() << "no C compiler to build the fake driver";
  const CliResult r = run_cli("doctor --json", {{"MIXP_LIBCUDA", lib}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = r.json();
  ASSERT_EQ(j.at("gpus").size(), 2u);
  EXPECT_EQ(j["cuda_driver_version"], 12040);
  EXPECT_EQ(j["gpus"][0]["name"], "Fake T4");
  EXPECT_EQ(j["gpus"][0]["compute_capability"], "7.5");
  EXPECT_EQ(j["gpus"][0]["architecture"], "Turing");
  EXPECT_EQ(j["gpus"][1]["compute_capability"], "8.0");
  EXPECT_EQ(j["gpus"][1]["memory_bytes"].get<uint64_t>(), uint64_t{40} << 30);
  EXPECT_EQ(j["gpus"][1]["multiprocessors"], 108);
  EXPECT_EQ(j["recommended_precision"], "bf16");  // the best GPU (sm80) decides
  EXPECT_EQ(j["device"], "cuda:1");
  for (const json& f : j["formats"]) {
    if (f["format"] == "tf32") {
      EXPECT_EQ(f["support"], "native");  // the A100's table
    }
  }
  for (const json& f : j["gpus"][0]["formats"]) {
    if (f["format"] == "bf16") {
      EXPECT_EQ(f["support"], "emulated");  // no bf16 on Turing
    }
  }
  // The fake GPUs (sm75, sm80) have no block-scaled tensor cores.
  for (const json& r : j["gpus"][1]["recipes"]) {
    EXPECT_EQ(r["support"], "emulated") << r;
    EXPECT_EQ(r["gemm"], "dequantize") << r;  // the CUDA backend's path on an A100
  }
  for (const json& r : j["cpu"]["recipes"]) EXPECT_FALSE(r.contains("gemm")) << r;
  EXPECT_EQ(j["recipes"], j["gpus"][1]["recipes"]);
  const CliResult text = run_cli("doctor", {{"MIXP_LIBCUDA", lib}});
  EXPECT_NE(text.out.find("Fake A100"), std::string::npos);
  EXPECT_NE(text.out.find("Block-scaled recipes on cuda:1"), std::string::npos);
  EXPECT_NE(text.out.find("CUDA 12.4"), std::string::npos);
}

TEST(DoctorCli, DriverFailuresAreDescribedNotFatal) {
  CliResult r = run_cli("doctor --json", {{"MIXP_LIBCUDA", "/nonexistent/libcuda.so.1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.json()["gpu_status"].get<std::string>().find("no NVIDIA driver found"),
            std::string::npos);
  EXPECT_TRUE(r.json()["gpus"].empty());
  r = run_cli("doctor --json",
              {{"MIXP_LIBCUDA", "libm.so.6"}});  // a library without the driver API
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.json()["gpu_status"].get<std::string>().find("lacks the driver API"),
            std::string::npos);
}

}  // namespace
}  // namespace mixp::test
