#include "mixp/format/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "util/enum_names.h"

namespace mixp {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

unsigned long long xgetbv0() {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

bool bit(unsigned v, int b) {
  return (v >> b) & 1U;
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs v = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  f.vendor = vendor;
  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    std::string_view s(brand);
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.remove_suffix(1);
    f.model = std::string(s);
  }
  const unsigned max_leaf = v.a;
  const Regs l1 = cpuid(1);
  const bool osxsave = bit(l1.c, 27);
  const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  f.os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;
  f.os_amx = (xcr0 & 0x60000) == 0x60000;
  f.fma = bit(l1.c, 12) && os_avx;
  f.f16c = bit(l1.c, 29) && os_avx;
  if (max_leaf >= 7) {
    const Regs l7 = cpuid(7, 0);
    const Regs l71 = cpuid(7, 1);
    f.avx2 = bit(l7.b, 5) && os_avx;
    f.avx512f = bit(l7.b, 16);
    f.avx512dq = bit(l7.b, 17);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.avx512_vnni = bit(l7.c, 11);
    f.avx512_vpopcntdq = bit(l7.c, 14);
    f.avx512_fp16 = bit(l7.d, 23);
    f.amx_bf16 = bit(l7.d, 22);
    f.amx_tile = bit(l7.d, 24);
    f.amx_int8 = bit(l7.d, 25);
    f.avx512_bf16 = bit(l71.a, 5);
    f.avx_vnni = bit(l71.a, 4);
  }
  return f;
}

}  // namespace

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> out;
  const std::pair<const char*, bool> all[] = {{"avx2", avx2},
                                              {"fma", fma},
                                              {"f16c", f16c},
                                              {"avx512f", avx512f},
                                              {"avx512bw", avx512bw},
                                              {"avx512vl", avx512vl},
                                              {"avx512dq", avx512dq},
                                              {"avx512_bf16", avx512_bf16},
                                              {"avx512_fp16", avx512_fp16},
                                              {"avx512_vnni", avx512_vnni},
                                              {"avx_vnni", avx_vnni},
                                              {"amx_tile", amx_tile},
                                              {"amx_bf16", amx_bf16},
                                              {"amx_int8", amx_int8}};
  for (const auto& [n, on] : all) {
    if (on) out.emplace_back(n);
  }
  return out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

SimdTier simd_tier() {
  static const SimdTier t = [] {
    const CpuFeatures& f = cpu_features();
    SimdTier best =
        f.use_avx512() ? SimdTier::avx512 : (f.use_avx2() ? SimdTier::avx2 : SimdTier::scalar);
    if (const char* cap = std::getenv("MIXP_CPU_TIER")) {
      const std::string_view c(cap);
      if (c == "scalar") best = SimdTier::scalar;
      if (c == "avx2" && best == SimdTier::avx512) best = SimdTier::avx2;
    }
    return best;
  }();
  return t;
}

namespace {
constexpr detail::EnumName<SimdTier> kTierNames[] = {
    {SimdTier::scalar, "scalar"}, {SimdTier::avx2, "avx2"}, {SimdTier::avx512, "avx512"}};
}  // namespace

const char* to_string(SimdTier t) {
  return detail::name_of(kTierNames, t);
}

const char* cpu_class() {
  const CpuFeatures& f = cpu_features();
  switch (simd_tier()) {
    case SimdTier::avx512:
      if (f.amx_tile && f.amx_bf16 && f.os_amx) return "amx";
      return f.avx512_bf16 ? "avx512-bf16" : "avx512";
    case SimdTier::avx2:
      return "avx2";
    default:
      return "scalar";
  }
}

const std::vector<std::string>& cpu_classes() {
  static const std::vector<std::string> all = {"amx", "avx512-bf16", "avx512", "avx2", "scalar"};
  return all;
}

}  // namespace mixp
