// An energy estimate from counted operations, for machines where no energy counter can be read
// (RAPL unreadable, no NVML): multiply-adds by the precision they run in, plus bytes moved from
// DRAM and from on-chip SRAM, each priced by a published per-operation table. The result is
// labelled energy_source "estimate" everywhere it is shown.
//
// Table: M. Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014,
// 45 nm, 0.9 V. Values used (pJ per operation):
//
//   fp32 add 0.9     fp32 mult 3.7     fp16 add 0.4     fp16 mult 1.1
//   int8 add 0.03    int8 mult 0.2     int32 add 0.1    int32 mult 3.1
//   64-bit read from an 8 KB SRAM 10     64-bit DRAM access 1300-2600
//
// (as quoted in secondary sources; see docs/report.md for which and for what was checked).
//
// Formats the table does not list are derived, and every derivation is an assumption:
// - Float multiply: E(p) = a + b*p^2 with p the significand width (mantissa + implicit bit),
//   fitted exactly through the table's fp16 (p = 11) and fp32 (p = 24) multiplies: an array
//   multiplier's partial-product array grows with p^2, the exponent/rounding logic (a) does not.
//   This gives tf32 (p = 11) = fp16, bf16 (p = 8), fp8 E4M3 (p = 4), fp64 (p = 53).
// - Float add: linear in operand width through fp16 and fp32 (fp64 add extrapolated).
// - Integer multiply: quadratic in width, anchored at int8 (int8 * (32/8)^2 = 3.2 ~ the table's
//   3.1, so the table itself follows the square law); int4 = int8 / 4.
// - Accumulation: a multiply-add is one multiply in its format plus one add in its accumulator:
//   fp32 for tf32/bf16/fp16/fp8 (what tensor cores, AVX512-BF16 and mixp's emulation do), int32
//   for int8/int4, fp64 for fp64, fp32 for fp32.
// - DRAM: the midpoint 1950 pJ per 64 bits (243.75 pJ/byte) for the central estimate, with the
//   table's range giving a low and a high bound. SRAM: 10 pJ per 64 bits (1.25 pJ/byte).
//
// Limits: 45 nm dynamic energy of arithmetic and data movement only. Instruction fetch/decode,
// register files, caches other than one 8 KB SRAM, static (leakage) power and the rest of the
// machine are not counted, so the absolute joules are far below what a wall meter or RAPL shows;
// ratios between precisions on the same counts are what the estimate is for.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "mixp/format/dtype.h"

namespace mixp::study {

// The precision a multiply-add runs in. fp8 covers E4M3 and E5M2 (priced as E4M3, the wider
// significand); fp6/fp4 MX elements count as fp8 (an upper bound).
enum class MacKind : uint8_t { fp64, fp32, tf32, bf16, fp16, fp8, int8, int4 };
inline constexpr int kNumMacKinds = 8;
std::string_view to_string(MacKind k);

// The MacKind a GEMM whose inputs are stored in `d` runs in. Throws std::invalid_argument for
// formats that are not multiplied (bool, e8m0, int32/int64 accumulators). nf4 counts as bf16
// (weight-only formats are dequantized to bf16 before the multiply); uint8 as int8.
MacKind mac_kind_for(DType d);

// Counted work. Doubles so that counts over a whole run add up without overflow concerns; whole
// numbers stay exact up to 2^53.
struct OpCounts {
  std::array<double, kNumMacKinds> macs{};  // multiply-adds, indexed by MacKind
  double dram_bytes = 0;                    // bytes read from or written to DRAM
  double sram_bytes = 0;                    // bytes read from or written to on-chip SRAM

  double& operator[](MacKind k) { return macs[static_cast<int>(k)]; }
  double operator[](MacKind k) const { return macs[static_cast<int>(k)]; }
  double total_macs() const;
  OpCounts& operator+=(const OpCounts& o);
  OpCounts& operator*=(double times);  // e.g. per-step counts times the number of steps
};
OpCounts operator+(OpCounts a, const OpCounts& b);
OpCounts operator*(OpCounts a, double times);

// Per-operation energies in picojoules.
struct EnergyTable {
  std::array<double, kNumMacKinds> mac_pj{};  // one multiply + one accumulate, by MacKind
  double dram_pj_per_byte = 0;
  double dram_pj_per_byte_low = 0;  // the table's range for DRAM
  double dram_pj_per_byte_high = 0;
  double sram_pj_per_byte = 0;
  std::string_view citation;
};

// The Horowitz ISSCC 2014 table with the derivations described at the top of this file.
const EnergyTable& horowitz_45nm();

// The derivations, exposed for tests and docs (picojoules).
double float_multiply_pj(int significand_bits);  // a + b*p^2 through fp16 and fp32
double float_add_pj(int width_bits);             // linear through fp16 and fp32
double int_multiply_pj(int width_bits);          // 0.2 * (w/8)^2

struct EnergyBreakdown {
  std::array<double, kNumMacKinds> mac_joules{};
  double compute_joules = 0;  // sum of mac_joules
  double sram_joules = 0;
  double dram_joules = 0;
  double total_joules = 0;       // compute + sram + dram (central DRAM value)
  double total_low_joules = 0;   // with the low end of the DRAM range
  double total_high_joules = 0;  // with the high end
};

EnergyBreakdown estimate_energy(const OpCounts& counts, const EnergyTable& table = horowitz_45nm());
double estimate_joules(const OpCounts& counts, const EnergyTable& table = horowitz_45nm());

// --- counting helpers (a Trainer counts its ops per step with these)
// ------------------------------

// Where operands live while a GEMM runs: one pass over A, B and C through DRAM (perfect reuse, a
// lower bound on traffic), and through SRAM once per cache tile: A is read ceil(n / tile) times,
// B ceil(m / tile) times, C written once. tile = 0 means no tiling (each operand once).
struct GemmTraffic {
  int tile = 64;
};

// C[m x n] = A[m x k] * B[k x n]: m*n*k multiply-adds in mac_kind_for(input), A and B stored in
// `input` (sub-byte formats packed), C written in `output`.
OpCounts count_matmul(int64_t m, int64_t n, int64_t k, DType input, DType output,
                      GemmTraffic traffic = {});

// A linear layer y = x W^T + b on a batch: x [batch x in], W [out x in].
//   forward: one GEMM (batch, out, in).
//   backward (when `backward`): dX = dY W (batch, in, out) and dW = dY^T X (out, in, batch),
//   so a training step costs three times the forward multiply-adds. Bias adds are not counted
//   (they are not multiply-adds; the elementwise work is small next to the GEMMs).
OpCounts count_linear(int64_t batch, int64_t in_features, int64_t out_features, DType compute,
                      bool backward = false, GemmTraffic traffic = {});

// A 2-D convolution as the GEMM it lowers to (im2col): M = batch*out_h*out_w, N = out_channels,
// K = in_channels/groups * kernel_h * kernel_w, per group. Backward as for linear (3x forward).
struct Conv2dShape {
  int64_t batch = 1, in_channels = 1, out_channels = 1, in_h = 1, in_w = 1;
  int64_t kernel_h = 1, kernel_w = 1, stride = 1, padding = 0, groups = 1;
};
OpCounts count_conv2d(const Conv2dShape& s, DType compute, bool backward = false,
                      GemmTraffic traffic = {});

}  // namespace mixp::study
