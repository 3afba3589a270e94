// The AVX512-BF16 GEMM of gemm_bf16.h, BLIS-style: K blocks of at most kKcMax; per K block and
// column block of kNc, B packed into panels of 48 columns of bf16 pairs by both threads together
// (pack_b_panel); a row-major A read in place (its K pairs are adjacent), a column-major one
// packed into panels of 8 rows (pack_a_panels), once per K block for all of a thread's rows when
// that fits in kWholeA, else per row block of kMc; the threads split the rows.
// The register block is 8 x 48 (24 zmm accumulators): each K pair costs 3 loads of B, 8
// broadcasts of A and 24 VDPBF16PS, enough to keep both of Zen 5's 512-bit FMA pipes busy
// (97% of the instruction's peak on one core with the operands in L2).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "backend/cpu/bf16_pack.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/vdpbf16_block.h"

namespace mixp::cpu {
namespace {

constexpr int kMR = 8;             // rows of the register block
constexpr int kNV = 3;             // zmm columns of the register block
constexpr int kNR = 16 * kNV;      // columns of a B panel
constexpr int64_t kKcMax = 4096;   // elements of K per block (a B panel of up to 384 KiB: L2)
constexpr int64_t kNc = 16 * kNR;  // columns per block of packed B (768)
constexpr int64_t kMcMax = 256;    // rows per block of A (and of packed A), at most
constexpr int64_t kABlockBytes = 384 << 10;          // a block of A: about a third of a 1 MiB L2
constexpr int64_t kWholeA = int64_t{4} << 20;        // bytes of packed A per thread for one K block
constexpr int64_t kPartialBytes = int64_t{8} << 20;  // fp32 partial sums per thread, at most

// Where a register block's results go. c32: fp32 partial sums or the fp32 dst (row stride
// ldc32); add_c32: add what is there first. On the last K block with c16 set, the result
// (+ bias) is rounded to bf16 into c16 (row stride ldc16), after adding c16's old values when
// add_c16; without c16 it (+ bias on the last block) is stored to c32.
struct Out {
  float* c32 = nullptr;
  int64_t ldc32 = 0;
  bool add_c32 = false;
  bool last = false;
  const float* bias = nullptr;  // at the block's first column; only read on the last block
  uint16_t* c16 = nullptr;
  int64_t ldc16 = 0;
  bool add_c16 = false;
  // Chunk-scaled mode (micro_chunked): the register block's row scales (row r, chunk c at
  // rs[r * rs_ld + c]) and column scales (cs[c * cs_ld + col]), c counted from the first chunk
  // of the matrix; c0 is the K block's first chunk.
  const float* rs = nullptr;
  int64_t rs_ld = 0;
  const float* cs = nullptr;
  int64_t cs_ld = 0;
  int64_t c0 = 0;
};

// An MR x (16 NV) block: A is a packed panel (pair kp of row r at a[kp * kMR + r]), B the
// panel b[kp * kNR + col]; `last_mask` masks the last vector's columns (< 16 at the right edge
// of the matrix).
template <int MR, int NV, bool INPLACE>
void micro(const uint32_t* a, int64_t as, const uint32_t* b, int64_t k2, const Out& o,
           __mmask16 last_mask) {
  __m512 acc[MR][NV];
  if constexpr (INPLACE)
    vdpbf16_block(
        acc, [&](int r, int64_t kp) { return a[r * as + kp]; }, b, kNR, k2);
  else
    vdpbf16_block(
        acc, [&](int r, int64_t kp) { return a[kp * kMR + r]; }, b, kNR, k2);
  // The epilogue fully unrolled with its choices hoisted, so that the accumulators stay in
  // registers (a runtime row loop made GCC keep them on the stack: 8% of a K = 768 call).
  const bool add32 = o.add_c32, bias = o.last && o.bias != nullptr;
  const bool to16 = o.last && o.c16 != nullptr, add16 = to16 && o.add_c16;
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last_mask : __mmask16(0xFFFF);
      __m512 x = acc[r][v];
      if (add32) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, o.c32 + r * o.ldc32 + 16 * v));
      if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, o.bias + 16 * v));
      if (to16) {
        uint16_t* d = o.c16 + r * o.ldc16 + 16 * v;
        if (add16) {
          const __m512i old = _mm512_maskz_cvtepu16_epi32(m, _mm256_maskz_loadu_epi16(m, d));
          x = _mm512_add_ps(x, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, old, 16)));
        }
        __m256bh h = _mm512_cvtneps_pbh(x);
        _mm256_mask_storeu_epi16(d, m, reinterpret_cast<__m256i&>(h));
      } else {
        _mm512_mask_storeu_ps(o.c32 + r * o.ldc32 + 16 * v, m, x);
      }
    }
  }
}

// fp8-block (gemm_bf16_chunk_scaled): per 128-deep chunk of the K block, the chunk's sums of
// products from zero (what micro computes for a K = 128 GEMM), then
// c32 = (first chunk ? +0 : c32) + P * (rs * cs). The _round_ forms (zero-masked: all lanes) (round
// to nearest even, as MXCSR's default) are builtins the compiler never contracts into an FMA, so
// each multiply and the add round separately, as block_scaled_accumulate's scalar code does.
template <int MR, int NV, bool INPLACE>
void micro_chunked(const uint32_t* a, int64_t as, const uint32_t* b, int64_t k2, const Out& o,
                   __mmask16 last_mask) {
  constexpr int kRnd = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  constexpr int64_t kChunkPairs = 64;
  for (int64_t q = 0; q * kChunkPairs < k2; ++q) {
    __m512 acc[MR][NV];
    const int64_t p0 = q * kChunkPairs;
    if constexpr (INPLACE)
      vdpbf16_block(
          acc, [&](int r, int64_t kp) { return a[r * as + p0 + kp]; }, b + p0 * kNR, kNR,
          kChunkPairs);
    else
      vdpbf16_block(
          acc, [&](int r, int64_t kp) { return a[(p0 + kp) * kMR + r]; }, b + p0 * kNR, kNR,
          kChunkPairs);
    const int64_t c = o.c0 + q;
    const bool first = c == 0;
    __m512 sb[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      sb[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last_mask : __mmask16(0xFFFF),
                                    o.cs + c * o.cs_ld + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 sa = _mm512_set1_ps(o.rs[r * o.rs_ld + c]);
      float* y = o.c32 + r * o.ldc32;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const __mmask16 m = v == NV - 1 ? last_mask : __mmask16(0xFFFF);
        const __m512 s = _mm512_maskz_mul_round_ps(0xFFFF, sa, sb[v], kRnd);
        const __m512 x = _mm512_maskz_mul_round_ps(0xFFFF, acc[r][v], s, kRnd);
        const __m512 old = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + 16 * v);
        _mm512_mask_storeu_ps(y + 16 * v, m, _mm512_maskz_add_round_ps(0xFFFF, old, x, kRnd));
      }
    }
  }
}

using MicroFn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, const Out&, __mmask16);

// The register block for mr rows (1..8) and nv vectors (1..3): the ragged edges of M and N.
template <int NV, bool IP, bool CH, size_t... R>
MicroFn micro_rows(int64_t mr, std::index_sequence<R...>) {
  static constexpr MicroFn table[] = {
      (CH ? &micro_chunked<static_cast<int>(R) + 1, NV, IP>
          : &micro<static_cast<int>(R) + 1, NV, IP>)...};
  return table[std::clamp<int64_t>(mr, 1, kMR) - 1];
}
template <bool IP, bool CH = false>
MicroFn micro_for(int64_t mr, int64_t nv) {
  constexpr auto rows = std::make_index_sequence<kMR>{};
  return nv == 1   ? micro_rows<1, IP, CH>(mr, rows)
         : nv == 2 ? micro_rows<2, IP, CH>(mr, rows)
                   : micro_rows<3, IP, CH>(mr, rows);
}

// Packs B rows [k0, k0 + kc) x columns [n0, n0 + nc) (nc <= kNR) as one panel of pairs.
void pack_b_panel(uint32_t* dst, const Bf16Gemm& g, int64_t k0, int64_t kc, int64_t n0,
                  int64_t nc) {
  if (g.b_cs == 1)  // B row-major: pairs are two rows' elements interleaved
    pack_rows_avx512(dst, kNR, g.b + k0 * g.b_rs + n0, g.b_rs, kc, nc, kNR);
  else  // B column-major: B^T's rows hold the pairs
    pack_transpose_avx512(dst, g.b + n0 * g.b_cs + k0, g.b_cs, nc, kc, kNR);
}

// Packs A(i, l) for i in [m0, m0 + rows), l in [k0, k0 + kc) of a column-major A (A^T [K, M]
// row-major, row stride a_cs) as register-block panels: panel q holds rows m0 + 8q .. + 7, its
// pair kp at dst[q * kc / 2 * 8 + kp * 8 + r] (rows past the end are zero). Each
// K pair of a panel is then 32 contiguous bytes, read in order by the micro-kernel.
void pack_a_panels(uint32_t* dst, const Bf16Gemm& g, int64_t m0, int64_t rows, int64_t k0,
                   int64_t kc) {
  const int64_t k2 = kc / 2;
  // 32 columns (a 64-byte line of each of the two rows) per step: four panels.
  for (int64_t c0 = 0; c0 < rows; c0 += 32) {
    uint32_t* panel = dst + (c0 / kMR) * k2 * kMR;
    for (int64_t kp = 0; kp < k2; ++kp) {
      const uint16_t* r0 = g.a + (k0 + 2 * kp) * g.a_cs + m0 + c0;
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t left = rows - c0 - 16 * h;
        if (left <= 0) break;
        const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        const __m512i x = pair_rows_x16(r0 + 16 * h, r0 + g.a_cs + 16 * h, m);
        uint32_t* p0 = panel + (2 * h) * k2 * kMR + kp * kMR;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p0),
                            _mm512_maskz_extracti64x4_epi64(0xF, x, 0));
        if (left > kMR)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(p0 + k2 * kMR),
                              _mm512_maskz_extracti64x4_epi64(0xF, x, 1));
      }
    }
  }
}

void run(const Bf16Gemm& g) {
  const int64_t M = g.m, N = g.n, K = g.k;
  const bool chunked = g.row_scale != nullptr;  // gemm_bf16_chunk_scaled
  const int64_t kblocks = (K + kKcMax - 1) / kKcMax;
  // Even, the blocks balanced; whole 128-deep chunks in the chunk-scaled mode.
  const int64_t kalign = chunked ? 128 : 2;
  const int64_t kc_max = ((K + kblocks - 1) / kblocks + kalign - 1) / kalign * kalign;
  // Bias as fp32 once (n values; bf16 widened exactly).
  float* bias32 = nullptr;
  if (g.bias) {
    bias32 = static_cast<float*>(gemm_bf16_scratch(3, static_cast<size_t>(N) * 4));
    for (int64_t j = 0; j < N; ++j) {
      if (g.bias_bf16) {
        const uint32_t u = uint32_t{static_cast<const uint16_t*>(g.bias)[j * g.bias_stride]} << 16;
        std::memcpy(&bias32[j], &u, 4);
      } else {
        bias32[j] = static_cast<const float*>(g.bias)[j * g.bias_stride];
      }
    }
  }
  auto* bp = static_cast<uint32_t*>(gemm_bf16_scratch(0, static_cast<size_t>(kNc * kc_max) * 2));
  // Rows per block of A: the block (rows x K block, bf16) stays in L2 next to a B panel while
  // every panel of the column block sweeps it.
  const int64_t kMc = std::clamp<int64_t>(kABlockBytes / (kc_max * 2) / kMR * kMR, 4 * kMR, kMcMax);
  const int nt =
      std::max(1, std::min<int>(omp_get_max_threads(), static_cast<int>((M + kMR - 1) / kMR)));
  // Rows per thread, in whole register blocks.
  const int64_t mblocks = (M + kMR - 1) / kMR;
  int out_of_memory = 0;

#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t m_lo = std::min(M, mblocks * t / T * kMR);
    const int64_t m_hi = std::min(M, mblocks * (t + 1) / T * kMR);
    const int64_t rows = m_hi - m_lo;
    // A is packed for the whole of this thread's rows once per K block when that fits in
    // kWholeA (then every column block reuses it), else per row block of kMc.
    const int64_t rows_p = (rows + 31) / 32 * 32;
    // A row-major is read in place: its K pairs are adjacent (3-7% faster than packing it,
    // bench/bench_gemm_bf16_shapes.cpp); a column-major A is packed.
    const bool inplace = g.a_cs == 1;
    const bool whole = !inplace && rows_p * kc_max * 2 <= kWholeA;
    // This thread's scratch (its own buffers: thread_local in gemm_bf16_scratch). An allocation
    // that fails must not throw out of the parallel region (std::terminate): every thread
    // learns of it at the barrier, skips the work, and the calling thread throws after it.
    auto* ap = static_cast<uint32_t*>(
        gemm_bf16_scratch_or_null(1, static_cast<size_t>((whole ? rows_p : kMc) * kc_max) * 2));
    // fp32 partial sums of a bf16 dst over K blocks: this thread's rows x N.
    float* pt = nullptr;
    if (g.dst_bf16 && kblocks > 1)
      pt = static_cast<float*>(
          gemm_bf16_scratch_or_null(2, static_cast<size_t>(std::max<int64_t>(rows, 1) * N) * 4));
    if (!ap || (g.dst_bf16 && kblocks > 1 && !pt)) {
#pragma omp atomic write
      out_of_memory = 1;
    }
#pragma omp barrier
    int failed;
#pragma omp atomic read
    failed = out_of_memory;
    for (int64_t k0 = 0; failed == 0 && k0 < K; k0 += kc_max) {
      const int64_t kc = std::min(kc_max, K - k0), k2 = kc / 2;
      const bool first = k0 == 0, last = k0 + kc >= K;
      if (whole && rows > 0) pack_a_panels(ap, g, m_lo, rows, k0, kc);
      for (int64_t n0 = 0; n0 < N; n0 += kNc) {
        const int64_t nc = std::min(kNc, N - n0);
        const int64_t panels = (nc + kNR - 1) / kNR;
        for (int64_t p = t; p < panels; p += T)
          pack_b_panel(bp + p * k2 * kNR, g, k0, kc, n0 + p * kNR,
                       std::min<int64_t>(kNR, nc - p * kNR));
#pragma omp barrier
        for (int64_t m0 = m_lo; m0 < m_hi; m0 += kMc) {
          const int64_t mc = std::min(kMc, m_hi - m0);
          // A column-major (A^T [K, M] row-major, a pair two of its rows interleaved): this
          // block of rows is packed once for all the column block's panels.
          if (!whole && !inplace) pack_a_panels(ap, g, m0, mc, k0, kc);
          const uint32_t* ablk = whole ? ap + (m0 - m_lo) * (kc / 2) : ap;
          for (int64_t p = 0; p < panels; ++p) {
            const int64_t j0 = n0 + p * kNR, cols = std::min<int64_t>(kNR, N - j0);
            const int64_t nv = (cols + 15) / 16;
            const int64_t tail = cols - 16 * (nv - 1);
            const __mmask16 mask = tail >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << tail) - 1);
            Out o;
            o.last = last;
            o.bias = g.bias ? bias32 + j0 : nullptr;
            if (g.dst_bf16) {
              o.c16 = static_cast<uint16_t*>(g.dst) + j0;
              o.ldc16 = g.ldd;
              o.add_c16 = g.accumulate;
              if (pt) {
                o.c32 = pt + j0;
                o.ldc32 = N;
                o.add_c32 = !first;
              }
            } else {
              o.c32 = static_cast<float*>(g.dst) + j0;
              o.ldc32 = g.ldd;
              o.add_c32 = !first || g.accumulate;
            }
            const uint32_t* bpan = bp + p * k2 * kNR;
            for (int64_t r0 = 0; r0 < mc; r0 += kMR) {
              const int64_t mr = std::min<int64_t>(kMR, mc - r0);
              const int64_t row = m0 + r0;
              Out orow = o;
              if (orow.c16) orow.c16 += row * orow.ldc16;
              if (orow.c32) orow.c32 += (g.dst_bf16 ? row - m_lo : row) * orow.ldc32;
              if (chunked) {
                orow.rs = g.row_scale + row * (K / 128);
                orow.rs_ld = K / 128;
                orow.cs = g.col_scale + j0;
                orow.cs_ld = N;
                orow.c0 = k0 / 128;
              }
              const MicroFn f = chunked ? (inplace ? micro_for<true, true>(mr, nv)
                                                   : micro_for<false, true>(mr, nv))
                                        : (inplace ? micro_for<true>(mr, nv)
                                                   : micro_for<false>(mr, nv));
              if (inplace)
                f(reinterpret_cast<const uint32_t*>(g.a + row * g.a_rs + k0), g.a_rs / 2, bpan,
                  k2, orow, mask);
              else
                f(ablk + r0 * k2, 0, bpan, k2, orow, mask);
            }
          }
        }
#pragma omp barrier
      }
    }
  }
  if (out_of_memory) gemm_bf16_out_of_memory();
}
}  // namespace

void gemm_bf16_columns(const Bf16Gemm& g, int64_t cols) {
  for (int64_t j0 = 0; j0 < g.n; j0 += cols) {
    Bf16Gemm s = g;
    s.n = std::min(cols, g.n - j0);
    s.b = g.b + j0 * g.b_cs;
    s.dst = g.dst_bf16 ? static_cast<void*>(static_cast<uint16_t*>(g.dst) + j0)
                       : static_cast<void*>(static_cast<float*>(g.dst) + j0);
    if (g.bias)
      s.bias =
          g.bias_bf16
              ? static_cast<const void*>(static_cast<const uint16_t*>(g.bias) + j0 * g.bias_stride)
              : static_cast<const void*>(static_cast<const float*>(g.bias) + j0 * g.bias_stride);
    run(s);
  }
}

void gemm_bf16_chunk_scaled(const Bf16Gemm& g) {
  run(g);
}

void gemm_bf16(const Bf16Gemm& g) {
  // A bf16 dst over several K blocks keeps fp32 partial sums for a thread's rows x N; where that
  // would pass kPartialBytes (a wide output with K > kKcMax) the columns go in slices.
  const int64_t kblocks = (g.k + kKcMax - 1) / kKcMax;
  const int64_t rows = (g.m + omp_get_max_threads() - 1) / omp_get_max_threads() + kMR;
  const int64_t cols = std::max(kNc, kPartialBytes / (rows * 4) / kNc * kNc);
  if (!g.dst_bf16 || kblocks == 1 || g.n <= cols) return run(g);
  gemm_bf16_columns(g, cols);
}

}  // namespace mixp::cpu
