// End-to-end: `mixp doctor --json` has the contract's fields and agrees with the library.
#include <gtest/gtest.h>

#include <algorithm>

#include "cli_runner.h"
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
    const auto it = std::find_if(formats.begin(), formats.end(), [](const json& f) { return f["format"] == "bf16"; });
    ASSERT_NE(it, formats.end());
    EXPECT_EQ((*it)["support"], bf16 ? "native" : "emulated");
    EXPECT_EQ(j["recommended_precision"], bf16 ? "bf16" : "fp32");
    EXPECT_NE(j["gpu_status"].get<std::string>().find("no NVIDIA driver"), std::string::npos);
  }
}

TEST(DoctorCli, Text) {
  const CliResult r = run_cli("doctor");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Recommended precision:"), std::string::npos);
  EXPECT_NE(r.out.find("bf16"), std::string::npos);
  EXPECT_EQ(run_cli("doctor --help").exit_code, 0);
  EXPECT_NE(run_cli("doctor --bogus").exit_code, 0);
}

}  // namespace
}  // namespace mixp::test
