// mixp's own bf16 GEMM for CPUs with AVX512_BF16 but no AMX (internal; docs/architecture.md,
// "The cpu GEMMs"). CpuBackend::matmul (cpu_matmul.cpp) sends rank-2 bf16 x bf16 GEMMs here and
// everything else to oneDNN.
//
// Why not oneDNN for these: oneDNN 2.6's brgemm (Debian bookworm's libdnnl2) predates AMD Zen 5
// and runs GPT-2's weight- and input-gradient GEMMs at 77-88% of the VDPBF16PS peak there; this
// kernel runs them 3-20% faster and the forward GEMMs as fast (bench/bench_gemm_bf16_shapes.cpp,
// docs/benchmarks.md). On CPUs with AMX-BF16 oneDNN's tile kernels are far faster than any
// VDPBF16PS kernel, so there oneDNN keeps every GEMM (cpu::own_bf16_gemm).
//
// Arithmetic: each output is one fp32 accumulator over the K pairs in order (VDPBF16PS: the two
// products of a pair are exact and summed without intermediate rounding into the accumulator),
// K blocks added in order; the thread count does not change any result. A bf16 dst is rounded
// once, to nearest even (VCVTNEPS2BF16), after the bias is added in fp32, as oneDNN does.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mixp {
class Tensor;
}

namespace mixp::cpu {

struct Bf16Gemm {
  int64_t m = 0, n = 0, k = 0;  // dst [m, n] = A [m, k] . B [k, n] (+ bias) (+ dst)
  // A(i, l) at a[i * a_rs + l * a_cs], B(l, j) at b[l * b_rs + j * b_cs]; each operand row-major
  // (column stride 1) or column-major (row stride 1); a row-major A with an even row stride
  // and a 4-byte aligned start (its K pairs are read in place).
  const uint16_t* a = nullptr;
  int64_t a_rs = 0, a_cs = 0;
  const uint16_t* b = nullptr;
  int64_t b_rs = 0, b_cs = 0;
  void* dst = nullptr;  // row-major, row stride ldd; fp32, or bf16 when dst_bf16
  int64_t ldd = 0;
  bool dst_bf16 = false;
  bool accumulate = false;     // dst += A . B (+ bias) instead of dst = ...
  const void* bias = nullptr;  // n values, stride bias_stride; fp32, or bf16 when bias_bf16
  int64_t bias_stride = 1;
  bool bias_bf16 = false;
  // Chunk-scaled mode (gemm_bf16_chunk_scaled; fp8-block, amp/block_linear.cpp): row i's scale
  // of K chunk c (128 wide) at row_scale[i * k / 128 + c], column j's at col_scale[c * n + j].
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
};

// The GEMM dst = a . b (+ bias) (+ dst when accumulate) of rank-2 tensors (bf16 a and b, dst and
// bias fp32 or bf16; bias may be undefined). Defined in gemm_bf16.cpp (Tensor stays out of the
// AVX-512 object).
Bf16Gemm describe_bf16_gemm(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
                            bool accumulate);

// Whether this GEMM runs mixp's kernel: the CPU has AVX512_BF16 and no AMX-BF16, MIXP_CPU_GEMM
// is not "onednn", K is even, the operands' layouts are as above and the problem is large enough
// for the packing to pay (smaller ones stay on oneDNN).
bool own_bf16_gemm(const Bf16Gemm& g);

// This thread's scratch buffer number `slot` (0..3), at least `bytes` long and 64-byte aligned;
// it grows and is kept for the thread's life. Defined in gemm_bf16.cpp: the AVX-512 object may
// not define weak symbols (tests/arch_objects), which std::vector's members would be.
void* gemm_bf16_scratch(int slot, size_t bytes);
// The same, nullptr where the allocation fails (inside the kernel's parallel region, where an
// exception may not escape); gemm_bf16_out_of_memory throws std::bad_alloc after it.
void* gemm_bf16_scratch_or_null(int slot, size_t bytes) noexcept;
[[noreturn]] void gemm_bf16_out_of_memory();

// Runs it on the OpenMP threads (omp_get_max_threads()). Requires own_bf16_gemm(g).
void gemm_bf16(const Bf16Gemm& g);
// fp8-block's GEMM in one pass (fp32 dst, no bias, no accumulate, k a multiple of 128):
//   dst(i, j) = sum over the 128-wide K chunks c, in order, of P_c(i, j) * (rs(i, c) * cs(c, j))
// with P_c the chunk's fp32 sum of products, each rounded as written (no FMA), the first term
// added to +0. The same numbers as gemm_bf16 on each chunk (a 128-deep GEMM: one accumulator
// over its pairs in order) followed by block_scaled_accumulate, without the M x N partial sums
// going through memory. Requires own_bf16_gemm of one chunk's GEMM (k = 128).
void gemm_bf16_chunk_scaled(const Bf16Gemm& g);
// The same, as slices of `cols` columns (one GEMM each): what gemm_bf16 does for a bf16 dst over
// several K blocks when the fp32 partial sums of all the columns would be large; for tests.
void gemm_bf16_columns(const Bf16Gemm& g, int64_t cols);

}  // namespace mixp::cpu
