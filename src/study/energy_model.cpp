// Energy estimate from counted operations; the table and its derivations are documented in
// include/mixp/study/energy_model.h and docs/report.md.
#include "mixp/study/energy_model.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "util/enum_names.h"

namespace mixp::study {
namespace {

// Horowitz, ISSCC 2014, 45 nm (pJ).
constexpr double kFp16Add = 0.4, kFp16Mult = 1.1;
constexpr double kFp32Add = 0.9, kFp32Mult = 3.7;
constexpr double kInt8Mult = 0.2;
constexpr double kInt32Add = 0.1;
constexpr double kSram64bit = 10.0;                                // 64-bit read, 8 KB SRAM
constexpr double kDram64bitLow = 1300.0, kDram64bitHigh = 2600.0;  // 64-bit DRAM access

double bytes_of(DType d, int64_t elements) {
  return double(elements) * double(mixp::traits(d).bits) / 8.0;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

void check_positive(int64_t v, const char* what) {
  if (v <= 0) {
    throw std::invalid_argument(std::string("energy model: ") + what + " must be positive, got " +
                                std::to_string(v));
  }
}

constexpr mixp::detail::EnumName<MacKind> kMacNames[] = {
    {MacKind::fp64, "fp64"}, {MacKind::fp32, "fp32"}, {MacKind::tf32, "tf32"},
    {MacKind::bf16, "bf16"}, {MacKind::fp16, "fp16"}, {MacKind::fp8, "fp8"},
    {MacKind::int8, "int8"}, {MacKind::int4, "int4"}};
}  // namespace

std::string_view to_string(MacKind k) {
  return mixp::detail::name_of(kMacNames, k);
}

MacKind mac_kind_for(DType d) {
  switch (d) {
    case DType::fp64:
      return MacKind::fp64;
    case DType::fp32:
      return MacKind::fp32;
    case DType::tf32:
      return MacKind::tf32;
    case DType::bf16:
      return MacKind::bf16;
    case DType::nf4:
      return MacKind::bf16;
    case DType::fp16:
      return MacKind::fp16;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
    case DType::fp6_e2m3:
    case DType::fp6_e3m2:
    case DType::fp4_e2m1:
      return MacKind::fp8;
    case DType::int8:
    case DType::uint8:
      return MacKind::int8;
    case DType::int4:
      return MacKind::int4;
    case DType::e8m0:
    case DType::int32:
    case DType::int64:
    case DType::boolean:
      break;
  }
  throw std::invalid_argument("energy model: " + std::string(mixp::name(d)) +
                              " is not a multiply format (use the format the GEMM inputs are "
                              "stored in: fp32, tf32, bf16, fp16, fp8_*, int8, int4, ...)");
}

double OpCounts::total_macs() const {
  double t = 0;
  for (double m : macs) t += m;
  return t;
}

OpCounts& OpCounts::operator+=(const OpCounts& o) {
  for (int i = 0; i < kNumMacKinds; ++i) macs[i] += o.macs[i];
  dram_bytes += o.dram_bytes;
  sram_bytes += o.sram_bytes;
  return *this;
}

OpCounts& OpCounts::operator*=(double times) {
  for (double& m : macs) m *= times;
  dram_bytes *= times;
  sram_bytes *= times;
  return *this;
}

OpCounts operator+(OpCounts a, const OpCounts& b) {
  return a += b;
}
OpCounts operator*(OpCounts a, double times) {
  return a *= times;
}

double float_multiply_pj(int p) {
  // E(p) = a + b p^2 through (11, 1.1) and (24, 3.7).
  const double b = (kFp32Mult - kFp16Mult) / (24.0 * 24.0 - 11.0 * 11.0);
  const double a = kFp16Mult - b * 11.0 * 11.0;
  return a + b * double(p) * double(p);
}

double float_add_pj(int width) {
  // Linear through (16, 0.4) and (32, 0.9).
  const double slope = (kFp32Add - kFp16Add) / 16.0;
  return kFp16Add + slope * double(width - 16);
}

double int_multiply_pj(int width) {
  const double r = double(width) / 8.0;
  return kInt8Mult * r * r;
}

const EnergyTable& horowitz_45nm() {
  static const EnergyTable t = [] {
    EnergyTable e;
    auto set = [&](MacKind k, double pj) { e.mac_pj[static_cast<int>(k)] = pj; };
    set(MacKind::fp64, float_multiply_pj(53) + float_add_pj(64));
    set(MacKind::fp32, kFp32Mult + kFp32Add);
    set(MacKind::tf32, float_multiply_pj(11) + kFp32Add);
    set(MacKind::bf16, float_multiply_pj(8) + kFp32Add);
    set(MacKind::fp16, kFp16Mult + kFp32Add);
    set(MacKind::fp8, float_multiply_pj(4) + kFp32Add);
    set(MacKind::int8, kInt8Mult + kInt32Add);
    set(MacKind::int4, int_multiply_pj(4) + kInt32Add);
    e.dram_pj_per_byte_low = kDram64bitLow / 8.0;
    e.dram_pj_per_byte_high = kDram64bitHigh / 8.0;
    e.dram_pj_per_byte = (e.dram_pj_per_byte_low + e.dram_pj_per_byte_high) / 2.0;
    e.sram_pj_per_byte = kSram64bit / 8.0;
    e.citation =
        "M. Horowitz, \"Computing's energy problem (and what we can do about it)\", ISSCC 2014 "
        "(45 nm); bf16/tf32/fp8/fp64/int4 derived (docs/report.md)";
    return e;
  }();
  return t;
}

EnergyBreakdown estimate_energy(const OpCounts& c, const EnergyTable& t) {
  constexpr double pj = 1e-12;
  EnergyBreakdown b;
  for (int i = 0; i < kNumMacKinds; ++i) {
    b.mac_joules[i] = c.macs[i] * t.mac_pj[i] * pj;
    b.compute_joules += b.mac_joules[i];
  }
  b.sram_joules = c.sram_bytes * t.sram_pj_per_byte * pj;
  b.dram_joules = c.dram_bytes * t.dram_pj_per_byte * pj;
  b.total_joules = b.compute_joules + b.sram_joules + b.dram_joules;
  b.total_low_joules =
      b.compute_joules + b.sram_joules + c.dram_bytes * t.dram_pj_per_byte_low * pj;
  b.total_high_joules =
      b.compute_joules + b.sram_joules + c.dram_bytes * t.dram_pj_per_byte_high * pj;
  return b;
}

double estimate_joules(const OpCounts& c, const EnergyTable& t) {
  return estimate_energy(c, t).total_joules;
}

OpCounts count_matmul(int64_t m, int64_t n, int64_t k, DType input, DType output,
                      GemmTraffic traffic) {
  check_positive(m, "m");
  check_positive(n, "n");
  check_positive(k, "k");
  if (traffic.tile < 0) throw std::invalid_argument("energy model: tile must be >= 0");
  OpCounts c;
  c[mac_kind_for(input)] = double(m) * double(n) * double(k);
  const double a = bytes_of(input, m * k), b = bytes_of(input, k * n),
               out = bytes_of(output, m * n);
  c.dram_bytes = a + b + out;
  const int64_t a_passes = traffic.tile > 0 ? ceil_div(n, traffic.tile) : 1;
  const int64_t b_passes = traffic.tile > 0 ? ceil_div(m, traffic.tile) : 1;
  c.sram_bytes = a * double(a_passes) + b * double(b_passes) + out;
  return c;
}

OpCounts count_linear(int64_t batch, int64_t in_features, int64_t out_features, DType compute,
                      bool backward, GemmTraffic traffic) {
  // Forward y = x W^T: (batch x in) * (in x out). Outputs are written in the compute format.
  OpCounts c = count_matmul(batch, out_features, in_features, compute, compute, traffic);
  if (backward) {
    c += count_matmul(batch, in_features, out_features, compute, compute, traffic);  // dX = dY W
    c += count_matmul(out_features, in_features, batch, compute, compute, traffic);  // dW = dY^T X
  }
  return c;
}

OpCounts count_conv2d(const Conv2dShape& s, DType compute, bool backward, GemmTraffic traffic) {
  check_positive(s.batch, "batch");
  check_positive(s.groups, "groups");
  check_positive(s.stride, "stride");
  if (s.in_channels % s.groups || s.out_channels % s.groups) {
    throw std::invalid_argument("energy model: channels must be divisible by groups");
  }
  const int64_t out_h = (s.in_h + 2 * s.padding - s.kernel_h) / s.stride + 1;
  const int64_t out_w = (s.in_w + 2 * s.padding - s.kernel_w) / s.stride + 1;
  check_positive(out_h, "output height");
  check_positive(out_w, "output width");
  const int64_t m = s.batch * out_h * out_w;
  const int64_t n = s.out_channels / s.groups;
  const int64_t k = s.in_channels / s.groups * s.kernel_h * s.kernel_w;
  OpCounts one = count_matmul(m, n, k, compute, compute, traffic);
  if (backward) {
    one += count_matmul(m, k, n, compute, compute, traffic);  // d(input columns) = dY W
    one += count_matmul(n, k, m, compute, compute, traffic);  // dW = dY^T columns
  }
  return one * double(s.groups);
}

}  // namespace mixp::study
