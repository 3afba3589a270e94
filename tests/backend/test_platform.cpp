// platform.h: the recommendation and the support tables, fed with made-up CPUs and GPUs, plus
// sanity of what the real machine reports.
#include <gtest/gtest.h>

#include <vector>

#include "mixp/backend/cuda_block.h"
#include "mixp/backend/platform.h"
#include "mixp/format/describe.h"

namespace mixp {
namespace {

CpuFeatures zen4() {
  CpuFeatures c;
  c.avx2 = c.fma = c.f16c = true;
  c.avx512f = c.avx512bw = c.avx512vl = c.avx512dq = true;
  c.avx512_bf16 = c.avx512_vnni = true;
  c.os_avx512 = true;
  return c;
}

CpuFeatures haswell() {
  CpuFeatures c;
  c.avx2 = c.fma = c.f16c = true;
  return c;
}

GpuInfo gpu(int index, const char* name, int major, int minor) {
  GpuInfo g;
  g.index = index;
  g.name = name;
  g.cc_major = major;
  g.cc_minor = minor;
  return g;
}

Support support_of(const std::vector<FormatSupport>& fs, DType t) {
  for (const auto& f : fs) {
    if (f.format == t) return f.support;
  }
  ADD_FAILURE() << "format missing: " << name(t);
  return Support::emulated;
}

TEST(Recommend, GpuDecisionTree) {
  const CpuFeatures cpu = haswell();
  const std::vector<GpuInfo> a100 = {gpu(0, "A100", 8, 0)};
  EXPECT_EQ(recommend_precision(cpu, a100).precision, "bf16");
  EXPECT_EQ(recommend_precision(cpu, a100).device, "cuda:0");
  EXPECT_EQ(recommend_precision(cpu, std::vector{gpu(0, "H100", 9, 0)}).precision, "bf16");
  EXPECT_EQ(recommend_precision(cpu, std::vector{gpu(0, "RTX 4090", 8, 9)}).precision, "bf16");
  EXPECT_EQ(recommend_precision(cpu, std::vector{gpu(0, "V100", 7, 0)}).precision, "fp16");
  EXPECT_EQ(recommend_precision(cpu, std::vector{gpu(0, "RTX 2080 Ti", 7, 5)}).precision, "fp16");
  EXPECT_EQ(recommend_precision(cpu, std::vector{gpu(0, "P100", 6, 0)}).precision, "fp32");
  // The best GPU decides.
  const std::vector<GpuInfo> mixed = {gpu(0, "T4", 7, 5), gpu(1, "A10", 8, 6)};
  const PrecisionAdvice m = recommend_precision(cpu, mixed);
  EXPECT_EQ(m.precision, "bf16");
  EXPECT_EQ(m.device, "cuda:1");
  EXPECT_NE(m.reason.find("A10"), std::string::npos);
  EXPECT_NE(m.reason.find("Ampere"), std::string::npos);
}

TEST(Recommend, CpuOnly) {
  const PrecisionAdvice z = recommend_precision(zen4(), {});
  EXPECT_EQ(z.precision, "bf16");
  EXPECT_EQ(z.device, "cpu");
  EXPECT_NE(z.reason.find("AVX512_BF16"), std::string::npos);
  EXPECT_EQ(recommend_precision(haswell(), {}).precision, "fp32");
  CpuFeatures no_os = zen4();
  no_os.os_avx512 = false;  // the OS does not save AVX-512 state: the instructions are unusable
  EXPECT_EQ(recommend_precision(no_os, {}).precision, "fp32");
  CpuFeatures amx;
  amx.amx_bf16 = amx.os_amx = true;
  EXPECT_EQ(recommend_precision(amx, {}).precision, "bf16");
}

TEST(FormatSupportTable, CpuZen4) {
  const auto fs = cpu_format_support(zen4());
  ASSERT_EQ(fs.size(), describe_default_formats().size());
  EXPECT_EQ(support_of(fs, DType::fp32), Support::native);
  EXPECT_EQ(support_of(fs, DType::bf16), Support::native);
  EXPECT_EQ(support_of(fs, DType::fp16), Support::emulated);
  EXPECT_EQ(support_of(fs, DType::tf32), Support::emulated);
  EXPECT_EQ(support_of(fs, DType::fp8_e4m3), Support::emulated);
  EXPECT_EQ(support_of(fs, DType::fp4_e2m1), Support::emulated);
  EXPECT_EQ(support_of(fs, DType::int8), Support::native);
  EXPECT_EQ(support_of(fs, DType::int4), Support::emulated);
  EXPECT_EQ(support_of(fs, DType::nf4), Support::emulated);
  CpuFeatures spr = zen4();
  spr.avx512_fp16 = true;
  // fp16 GEMMs are widened to fp32 even with AVX512_FP16 (platform.cpp says why): emulated, and
  // the line says so and names bf16 as the CPU's choice.
  EXPECT_EQ(support_of(cpu_format_support(spr), DType::fp16), Support::emulated);
  for (const auto& f : cpu_format_support(spr)) {
    if (f.format != DType::fp16) continue;
    EXPECT_NE(f.how.find("widened to fp32"), std::string::npos) << f.how;
    EXPECT_NE(f.how.find("arithmetic in fp32"), std::string::npos) << f.how;
    EXPECT_NE(f.how.find("AVX512_FP16 is not used"), std::string::npos) << f.how;
    EXPECT_NE(f.how.find("bf16 is this CPU's 16-bit format"), std::string::npos) << f.how;
  }
  EXPECT_EQ(support_of(cpu_format_support(haswell()), DType::bf16), Support::emulated);
  for (const auto& f : cpu_format_support(haswell())) {
    if (f.format == DType::fp16) {
      EXPECT_EQ(f.how.find("bf16"), std::string::npos) << f.how;
    }
  }
  for (const auto& f : fs) EXPECT_FALSE(f.how.empty());
}

TEST(FormatSupportTable, GpuByComputeCapability) {
  const auto v100 = gpu_format_support(7, 0);
  EXPECT_EQ(support_of(v100, DType::fp16), Support::native);
  EXPECT_EQ(support_of(v100, DType::bf16), Support::emulated);
  EXPECT_EQ(support_of(v100, DType::tf32), Support::emulated);
  EXPECT_EQ(support_of(v100, DType::int8), Support::native);  // DP4A
  const auto t4 = gpu_format_support(7, 5);
  EXPECT_EQ(support_of(t4, DType::int8), Support::native);
  const auto a100 = gpu_format_support(8, 0);
  EXPECT_EQ(support_of(a100, DType::tf32), Support::native);
  EXPECT_EQ(support_of(a100, DType::bf16), Support::native);
  EXPECT_EQ(support_of(a100, DType::fp8_e4m3), Support::emulated);
  EXPECT_EQ(support_of(gpu_format_support(8, 9), DType::fp8_e4m3), Support::native);
  EXPECT_EQ(support_of(gpu_format_support(9, 0), DType::fp8_e5m2), Support::native);
  EXPECT_EQ(support_of(gpu_format_support(9, 0), DType::fp4_e2m1), Support::emulated);
  EXPECT_EQ(support_of(gpu_format_support(10, 0), DType::fp4_e2m1), Support::native);
  EXPECT_EQ(support_of(gpu_format_support(5, 2), DType::fp16), Support::emulated);
}

// The block-scaled recipes (issue 32): the CUDA backend runs nvfp4/mxfp4 on cuBLASLt's FP4 GEMMs
// on Blackwell (sm100+) and fp8-block on its fp32 128-block scales on Hopper (sm90, which only
// Hopper has: emulated on Blackwell); elsewhere emulated (dequantized bf16 GEMMs); a CPU
// emulates all three.
TEST(RecipeSupportTable, ByDevice) {
  const auto support = [](const std::vector<RecipeSupport>& rs) {
    std::string out;
    for (const RecipeSupport& r : rs)
      out += r.recipe + "=" + std::string(to_string(r.support)) + " ";
    return out;
  };
  EXPECT_EQ(support(cpu_recipe_support()), "nvfp4=emulated mxfp4=emulated fp8-block=emulated ");
  EXPECT_NE(cpu_recipe_support()[0].how.find("exact"), std::string::npos);
  EXPECT_EQ(support(gpu_recipe_support(8, 9)), "nvfp4=emulated mxfp4=emulated fp8-block=emulated ");
  EXPECT_EQ(support(gpu_recipe_support(9, 0)), "nvfp4=emulated mxfp4=emulated fp8-block=native ");
  EXPECT_EQ(support(gpu_recipe_support(10, 0)), "nvfp4=native mxfp4=native fp8-block=emulated ");
  EXPECT_EQ(support(gpu_recipe_support(12, 0)), "nvfp4=native mxfp4=native fp8-block=emulated ");
  for (const RecipeSupport& r : gpu_recipe_support(7, 5)) EXPECT_FALSE(r.how.empty());
  // The GEMM path each line names is block_gemm_path's, the rule the backend selects with.
  for (const auto& [maj, min] : {std::pair{8, 0}, {9, 0}, {10, 0}}) {
    const std::vector<RecipeSupport> rs = gpu_recipe_support(maj, min);
    for (size_t i = 0; i < rs.size(); ++i) {
      const BlockScheme s = i == 0 ? BlockScheme::nvfp4 : i == 1 ? BlockScheme::mxfp4 : BlockScheme::fp8_block;
      EXPECT_EQ(rs[i].recipe, to_string(s));
      EXPECT_EQ(rs[i].gemm, to_string(block_gemm_path(s, maj, min))) << rs[i].recipe;
      EXPECT_EQ(rs[i].support == Support::native, rs[i].gemm == "cublaslt") << rs[i].recipe;
    }
  }
  for (const RecipeSupport& r : cpu_recipe_support()) EXPECT_TRUE(r.gemm.empty());
}

TEST(GpuArchitecture, Names) {
  EXPECT_EQ(gpu_architecture(7, 0), "Volta");
  EXPECT_EQ(gpu_architecture(7, 5), "Turing");
  EXPECT_EQ(gpu_architecture(8, 6), "Ampere");
  EXPECT_EQ(gpu_architecture(8, 9), "Ada Lovelace");
  EXPECT_EQ(gpu_architecture(9, 0), "Hopper");
  EXPECT_EQ(gpu_architecture(10, 0), "Blackwell");
  EXPECT_EQ(gpu_architecture(6, 1), "Pascal");
}

TEST(ThisMachine, HostAndProbeAreSane) {
  const HostInfo h = host_info();
  EXPECT_GE(h.cores, 1);
  EXPECT_GE(h.online_cpus, h.cores);
  EXPECT_GT(h.memory_bytes, uint64_t{1} << 26);
  const GpuProbe& p = probe_gpus();
  EXPECT_FALSE(p.status.empty());
  if (!p.driver_found) {
    EXPECT_TRUE(p.gpus.empty());
    EXPECT_NE(p.status.find("no NVIDIA driver found"), std::string::npos);
  }
  for (const GpuInfo& g : p.gpus) {
    EXPECT_GE(g.cc_major, 3);
    EXPECT_FALSE(g.name.empty());
  }
}

}  // namespace
}  // namespace mixp
