// `mixp doctor`: this machine's CPU and GPUs, which formats run natively and which are emulated,
// and the precision to train in. The facts and the advice come from
// include/mixp/backend/platform.h.
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "mixp/backend/cuda.h"
#include "mixp/backend/platform.h"
#include "mixp/dist/process_group.h"
#include "mixp/bench/bench_record.h"
#include "output.h"

namespace mixp::cli {
namespace {

Json formats_json(const std::vector<FormatSupport>& fs) {
  Json out = Json::array();
  for (const FormatSupport& f : fs) {
    out.push_back({{"format", name(f.format)}, {"support", to_string(f.support)}, {"how", f.how}});
  }
  return out;
}

void print_formats(const std::vector<FormatSupport>& fs) {
  TextTable tt({"format", "support", "how"});
  for (const FormatSupport& f : fs) {
    tt.add({std::string(name(f.format)), std::string(to_string(f.support)), f.how});
  }
  tt.print(std::cout);
}

Json recipes_json(const std::vector<RecipeSupport>& rs) {
  Json out = Json::array();
  for (const RecipeSupport& r : rs) {
    Json j = {{"recipe", r.recipe}, {"support", to_string(r.support)}, {"how", r.how}};
    if (!r.gemm.empty()) j["gemm"] = r.gemm;  // a GPU's: the CUDA backend's GEMM path
    out.push_back(std::move(j));
  }
  return out;
}

void print_recipes(const std::vector<RecipeSupport>& rs) {
  TextTable tt({"recipe", "support", "how"});
  for (const RecipeSupport& r : rs) tt.add({r.recipe, std::string(to_string(r.support)), r.how});
  tt.print(std::cout);
}

std::string gib(uint64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1ULL << 30));
}

// What the CUDA backend of this build is and whether it can run here (backend/cuda.h).
std::string cuda_summary(const CudaStatus& c) {
  if (!c.built) return c.message;
  return fmt::format("backend built (CUDA {}, sm {}); {}", c.toolkit_version, c.architectures,
                     c.message);
}
constexpr const char* kCudaUntested =
    "the CUDA backend is untested on GPU hardware: run scripts/gpu-check.sh on a GPU machine "
    "(docs/cuda.md)";

void run(bool json) {
  const CudaStatus& cuda = cuda_status();
  const dist::NcclStatus nccl = dist::nccl_status();  // loads libnccl.so.2 when built (dlopen)
  const CpuFeatures& cpu = cpu_features();
  const HostInfo host = host_info();
  const GpuProbe& probe = probe_gpus();
  const PrecisionAdvice advice = recommend_precision(cpu, probe.gpus);
  const std::vector<FormatSupport> cpu_formats = cpu_format_support(cpu);
  // The top-level "formats" describe the device the advice is for.
  std::vector<FormatSupport> device_formats = cpu_formats;
  // The block-scaled recipes (nvfp4, mxfp4, fp8-block), likewise per device.
  const std::vector<RecipeSupport> cpu_recipes = cpu_recipe_support();
  std::vector<RecipeSupport> device_recipes = cpu_recipes;
  for (const GpuInfo& g : probe.gpus) {
    if (advice.device == "cuda:" + std::to_string(g.index)) {
      device_formats = gpu_format_support(g.cc_major, g.cc_minor);
      device_recipes = gpu_recipe_support(g.cc_major, g.cc_minor);
    }
  }

  // What `mixp bench gemm` measured here, when it has been run (bench/bench_record.h).
  const std::optional<bench::SavedGemmBench> measured = bench::load_gemm_bench_record();
  const std::vector<std::string> evidence = bench::gemm_evidence(measured, advice.precision);

  if (json) {
    Json gpus = Json::array();
    for (const GpuInfo& g : probe.gpus) {
      gpus.push_back({{"index", g.index},
                      {"name", g.name},
                      {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                      {"cc_major", g.cc_major},
                      {"cc_minor", g.cc_minor},
                      {"architecture", gpu_architecture(g.cc_major, g.cc_minor)},
                      {"memory_bytes", g.memory_bytes},
                      {"multiprocessors", g.multiprocessors},
                      {"formats", formats_json(gpu_format_support(g.cc_major, g.cc_minor))},
                      {"recipes", recipes_json(gpu_recipe_support(g.cc_major, g.cc_minor))}});
    }
    print_json(
        {{"cpu",
          {{"vendor", cpu.vendor},
           {"model", cpu.model},
           {"features", cpu.names()},
           {"cores", host.cores},
           {"online_cpus", host.online_cpus},
           {"simd_tier", to_string(simd_tier())},
           {"class", cpu_class()},
           {"formats", formats_json(cpu_formats)},
           {"recipes", recipes_json(cpu_recipes)}}},
         {"memory",
          {{"total_bytes", host.memory_bytes}, {"available_bytes", host.available_bytes}}},
         {"gpu_status", probe.status},
         {"cuda_driver_version", probe.driver_found ? Json(probe.driver_version) : Json(nullptr)},
         {"gpus", gpus},
         {"cuda_backend",
          {{"built", cuda.built},
           {"toolkit_version", cuda.built ? Json(cuda.toolkit_version) : Json(nullptr)},
           {"architectures", cuda.architectures},
           {"runtime_version", cuda.runtime_version ? Json(cuda.runtime_version) : Json(nullptr)},
           {"device_count", cuda.device_count},
           {"status", cuda.message},
           {"tested_on_hardware", cuda.tested_on_hardware},
           {"note", cuda.built && !cuda.tested_on_hardware ? Json(kCudaUntested)
                                                           : Json(nullptr)}}},
         {"nccl",
          {{"built", nccl.built},
           {"loaded", nccl.loaded},
           {"version", nccl.version ? Json(nccl.version) : Json(nullptr)},
           {"status", nccl.message}}},
         {"device", advice.device},
         {"formats", formats_json(device_formats)},
         {"recipes", recipes_json(device_recipes)},
         {"recommended_precision", advice.precision},
         {"reason", advice.reason},
         {"measured", measured ? Json::parse(bench::gemm_bench_record_to_json(*measured))
                               : Json(nullptr)},
         {"measured_notes", evidence}});
    return;
  }

  std::cout << "CPU      " << (cpu.model.empty() ? cpu.vendor : cpu.model) << "\n"
            << "         " << host.cores << " cores usable (" << host.online_cpus
            << " online), SIMD tier " << to_string(simd_tier()) << ", class " << cpu_class()
            << "\n"
            << "         features:";
  for (const std::string& f : cpu.names()) std::cout << " " << f;
  std::cout << "\nMemory   " << gib(host.memory_bytes) << " total";
  if (host.available_bytes) std::cout << ", " << gib(host.available_bytes) << " available";
  std::cout << "\nGPU      " << probe.status << "\n";
  std::cout << "CUDA     " << cuda_summary(cuda) << "\n";
  if (cuda.built && !cuda.tested_on_hardware) std::cout << "         " << kCudaUntested << "\n";
  std::cout << "NCCL     " << nccl.message << "\n";
  for (const GpuInfo& g : probe.gpus) {
    std::cout << fmt::format("  cuda:{}  {}  compute capability {}.{} ({}), {}, {} SMs\n", g.index,
                             g.name, g.cc_major, g.cc_minor,
                             gpu_architecture(g.cc_major, g.cc_minor), gib(g.memory_bytes),
                             g.multiprocessors);
  }
  std::cout << "\nFormats on the CPU:\n";
  print_formats(cpu_formats);
  for (const GpuInfo& g : probe.gpus) {
    std::cout << "\nFormats on cuda:" << g.index << ":\n";
    print_formats(gpu_format_support(g.cc_major, g.cc_minor));
  }
  std::cout << "\nBlock-scaled recipes (--precision; docs/fp4.md) on the CPU:\n";
  print_recipes(cpu_recipes);
  for (const GpuInfo& g : probe.gpus) {
    std::cout << "\nBlock-scaled recipes on cuda:" << g.index << " (mixp's CUDA backend):\n";
    print_recipes(gpu_recipe_support(g.cc_major, g.cc_minor));
  }
  std::cout << "\nRecommended precision: " << advice.precision << " on " << advice.device << "\n  "
            << advice.reason << "\n";
  for (const std::string& e : evidence) std::cout << "  " << e << "\n";
}

RegisterCommand reg(90, [](CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand(
      "doctor", "CPU/GPU features, which formats run natively, the precision to use");
  sub->add_flag("--json", *json, "print one JSON object on stdout");
  sub->footer(
      "Reads the CPU with cpuid and looks for NVIDIA GPUs through the CUDA driver (libcuda.so.1,\n"
      "loaded at run time; MIXP_LIBCUDA names another path), and says whether this mixp has the\n"
      "CUDA backend (built when CMake finds the CUDA toolkit, MIXP_CUDA=AUTO|ON|OFF) and whether\n"
      "it sees a CUDA device (docs/cuda.md). \"native\" formats run on the\n"
      "hardware's own instructions; \"emulated\" ones are rounded to their grid exactly and "
      "computed\n"
      "in a wider format. The advice follows the decision tree: Ampere or newer -> bf16,\n"
      "Volta/Turing -> fp16 with loss scaling, older GPUs -> fp32; without a GPU, bf16 where the\n"
      "CPU has AVX512_BF16 or AMX-BF16, else fp32.\n"
      "Block-scaled recipes: nvfp4 and mxfp4 run on cuBLASLt's block-scaled GEMMs (native) on\n"
      "Blackwell (sm100+), fp8-block on Hopper (sm90); on other GPUs they are quantized on the\n"
      "device and multiplied as dequantized bf16 (emulated); on a CPU all three are emulated,\n"
      "exactly.\n\n"
      "Examples:\n"
      "  mixp doctor\n"
      "  mixp doctor --json\n");
  sub->callback([json] { run(*json); });
});

}  // namespace
}  // namespace mixp::cli
