// CpuBackend attention. Two kernels:
//
// Per head (bf16 q, k, v on the avx512 tier with AVX512_BF16: GPT-2's case). One OpenMP region
// per call (forward, and backward), each thread taking whole batch-heads from a dynamic schedule
// (so dK and dV need no cross-thread sum, and one thread or two give the same bits), everything
// for a head on that thread in its own scratch (about 0.12 MB forward, 0.6 MB backward at
// T = 256, D = 64: L2-resident). q and dO rows are read in place from their [B, H, T, D] views (the
// heads of a packed [B, T, 3C] qkv: unit stride along D, row_offset); k and v are pair-packed per
// head (attention_kernels.h). Query rows go in blocks of 32 (kQBlock); with a causal mask S is
// computed only for the keys up to the block's last row (ncols: 56% of the square at T = 256),
// P V and dQ = dS K sum over those keys only, and dV = P^T dO, dK = dS^T Q over panels of 32 keys
// start at the panel's first query row with a nonzero P (first_pair). The GEMMs are VDPBF16PS
// micro-kernels (attention_kernels_avx512.cpp, 6 x 64 register blocks), each output one fp32
// accumulator over the pairs of K in order, as oneDNN's brgemm does; the skipped terms are exact
// zeros at the end (or, from a zero accumulator, the start) of each sum, and P and dS are rounded
// by the same converter, so the results are bit for bit those of the chunked kernel below
// (tests/ops/test_attention_vs_ref.cpp: CpuVsRef.AttentionPerHeadIsTheChunkedKernelBitForBit, and
// AttentionPerHeadBf16 against ref; docs/benchmarks.md, "GPT-2 attention: one region, whole heads
// per thread").
//
// Chunked (fp32, fp16 widened, and bf16 elsewhere: another tier, odd head sizes, views with odd
// strides): S = q k^T and P V as batched oneDNN matmuls over [B*H] in chunks of about 2^18
// scores, softmax rows between; P and dS rounded per chunk for bf16. q, k, v, the output and the
// gradients may also be strided [B, H, T, D] views (unit stride along D): each chunk's heads are
// then gathered into (and its results scattered from) a chunk-sized contiguous buffer while they
// are in cache, so the GEMMs see exactly the contiguous operands they see otherwise (oneDNN 2.6
// runs such head-strided batches on its slower gemm:jit kernels instead of brgemm).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/cpu_layout.h"
#include "backend/cpu/cpu_parallel.h"
#include "backend/cpu/vec_kernels.h"
#include "backend/kernel_util.h"
#include "backend/narrow.h"
#include "mixp/format/convert.h"
#include "mixp/format/cpu_features.h"
#include "mixp/tensor/factories.h"

namespace mixp {
using cpu::f32c;
using cpu::fp;
using cpu::pack_rows_avx512;
using cpu::pack_transpose_avx512;
using cpu::parallel_for;
using cpu::view_of;

// ---- attention: S = q k^T and P V as batched oneDNN matmuls over [B*H]; softmax rows between.
//
// bf16 q, k, v run natively: the GEMMs take bf16 operands with fp32 accumulation; S, the softmax
// and dS are fp32, and P (and dS) are rounded to bf16 (nearest even) where they become a GEMM
// operand, as in PyTorch's bf16 math attention. fp16 (no native fp16 GEMM here) is widened
// exactly and runs the fp32 path.
namespace {
// A [B, H, T, D] operand the kernels take: contiguous, or unit stride along D (the rows of a head,
// the heads and the batch elements may be anywhere else).
bool head_layout(const Tensor& t) {
  return t.dim() == 4 && (t.is_contiguous() || (t.strides()[3] == 1 && t.strides()[2] >= 0 &&
                                                t.strides()[1] >= 0 && t.strides()[0] >= 0));
}
bool attn_native_bf16(std::initializer_list<const Tensor*> ins,
                      std::initializer_list<const Tensor*> outs) {
  if (!cpu::native_bf16()) return false;
  for (const Tensor* t : ins) {
    if (t->dtype() != DType::bf16 || !head_layout(*t)) return false;
  }
  for (const Tensor* t : outs) {
    if ((t->dtype() != DType::bf16 && t->dtype() != DType::fp32) || !head_layout(*t)) return false;
  }
  return true;
}
bool attn_f32(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->dtype() != DType::fp32 || !head_layout(*t)) return false;
  }
  return true;
}
// Element offset (from t's data pointer) of row i of head g of a [B, H, T, D] tensor, the heads
// numbered over B*H.
int64_t row_offset(const Tensor& t, int64_t g, int64_t i) {
  const int64_t H = t.shape()[1];
  return (g / H) * t.strides()[0] + (g % H) * t.strides()[1] + i * t.strides()[2];
}
// Heads [g0, g0 + nb) of a [B, H, T, D] operand as the contiguous [nb, T, D] block the GEMMs
// take: a view when t is contiguous, else `buf` (a [chunk, T, D] buffer of t's dtype), filled
// with those heads when `gather` (an input; an output is scattered back by scatter_heads).
Tensor head_block(const Tensor& t, int64_t g0, int64_t nb, const Tensor& buf, bool gather) {
  const int64_t T = t.shape()[2], D = t.shape()[3];
  if (t.is_contiguous())
    return view_of(t, Shape{nb, T, D}, Shape{T * D, D, 1}, t.storage_offset() + g0 * T * D);
  const Tensor b = view_of(buf, Shape{nb, T, D}, Shape{T * D, D, 1}, buf.storage_offset());
  if (gather) {
    // One thread: a chunk is about 128 KiB per operand, copied in microseconds, where a parallel
    // region would cost a synchronization (and, on a loaded machine, a wait for a descheduled
    // thread) per operand and chunk.
    const size_t es = t.element_size(), row = static_cast<size_t>(D) * es;
    const auto* src = static_cast<const unsigned char*>(t.data_ptr());
    auto* dst = static_cast<unsigned char*>(b.data_ptr());
    for (int64_t r = 0; r < nb * T; ++r)
      std::memcpy(dst + static_cast<size_t>(r) * row,
                  src + static_cast<size_t>(row_offset(t, g0 + r / T, r % T)) * es, row);
  }
  return b;
}
// Writes the contiguous [nb, T, D] block `b` (from head_block) back to heads [g0, g0 + nb) of t
// when t is strided (when it is contiguous, b is a view of t: nothing to do).
void scatter_heads(const Tensor& t, int64_t g0, const Tensor& b) {
  if (t.is_contiguous()) return;
  const int64_t nb = b.shape()[0], T = t.shape()[2], D = t.shape()[3];
  const size_t es = t.element_size(), row = static_cast<size_t>(D) * es;
  const auto* src = static_cast<const unsigned char*>(b.data_ptr());
  auto* dst = static_cast<unsigned char*>(t.data_ptr());
  for (int64_t r = 0; r < nb * T; ++r)  // one thread, as head_block's gather
    std::memcpy(dst + static_cast<size_t>(row_offset(t, g0 + r / T, r % T)) * es,
                src + static_cast<size_t>(r) * row, row);
}
// A [chunk, T, D] buffer of t's dtype for head_block when t is strided, else none: `reuse` (a
// buffer whose contents are dead by the time t's block is written) when it is of t's dtype and
// large enough. Short sequences put every head in one chunk, where each buffer is a whole
// operand's size.
Tensor chunk_buffer(const Tensor& t, int64_t chunk, const Tensor& reuse = Tensor()) {
  if (t.is_contiguous()) return Tensor();
  const int64_t n = chunk * t.shape()[2] * t.shape()[3];
  if (reuse.defined() && reuse.dtype() == t.dtype() && reuse.numel() >= n) return reuse;
  return Tensor::empty(Shape{chunk, t.shape()[2], t.shape()[3]}, {.dtype = t.dtype()});
}
// The ref kernels index contiguous tensors: strided operands are copied to contiguous ones (and
// strided outputs written back).
Tensor contiguous_of(Backend& be, const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  be.copy(c, t);
  return c;
}
template <class F>
void with_contiguous_dst(Backend& be, Tensor& dst, F&& f) {
  if (!dst.defined() || dst.is_contiguous()) {
    f(dst);
    return;
  }
  Tensor c = Tensor::empty(dst.shape(), {.dtype = dst.dtype(), .device = dst.device()});
  f(c);
  be.copy(dst, c);
}
// Batch-heads per chunk of the attention kernels: enough that one chunk's [chunk, Tq, Tk] fp32
// score buffer is about 1 MB (2^18 floats; 16 heads at T = 128), at least one.
int64_t attention_chunk(int64_t BH, int64_t Tq, int64_t Tk) {
  const int64_t per_head = std::max<int64_t>(1, Tq * Tk);
  return std::clamp<int64_t>((int64_t{1} << 18) / per_head, 1, std::max<int64_t>(BH, 1));
}

// What the chunked attention kernels (forward and backward) share: their GEMMs' precision (bf16
// with fp32 accumulation when the operands are bf16, else fp32), the sizes of q [B, H, Tq, D] and
// k [B, H, Tk, D], and the batch-heads per chunk.
struct ChunkedAttention {
  MatmulConfig cfg;
  int64_t BH, Tq, Tk, D, chunk;
};
ChunkedAttention chunked_attention(const Tensor& q, const Tensor& k, bool bf16) {
  MatmulConfig cfg;
  cfg.compute = bf16 ? DType::bf16 : DType::fp32;
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], Tk = k.shape()[2];
  return {cfg, BH, Tq, Tk, q.shape()[3], attention_chunk(BH, Tq, Tk)};
}
// Rounds n fp32 values (nearest even) to bf16 at dst with the bulk (AVX-512) converter: P and dS
// where they become a GEMM operand, in both kernels.
void round_bf16(uint16_t* dst, const float* src, int64_t n) {
  convert_f32_to(DType::bf16, std::span<const float>(src, static_cast<size_t>(n)), dst,
                 ConvertOptions{Round::nearest_even, Overflow::ieee});
}
// round_bf16 into elements [off, off + n) of the bf16 tensor t. Callers pass groups of rows
// (kRowGroup): one call per row of a head (128 values) cost more in call overhead than the
// conversion.
void store_bf16_row(const Tensor& t, int64_t off, const float* src, int64_t n) {
  round_bf16(static_cast<uint16_t*>(t.data_ptr()) + off, src, n);
}
constexpr int64_t kRowGroup = 16;
// The n contiguous elements of t (fp32 or bf16) from element off on (one row of a head), as
// fp32.
const float* row_f32(const Tensor& t, int64_t off, int64_t n, float* buf) {
  if (t.dtype() == DType::fp32) return fp(t) + off;
  // bf16 -> fp32 is a shift; inline (rows are one head wide, 64 values: a converter call per
  // row cost more than the conversion).
  const uint16_t* src = static_cast<const uint16_t*>(t.data_ptr()) + off;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    buf[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
  return buf;
}
// delta = sum_d dO O over one row of each (fp32 or bf16, element offsets go and o): the
// backward's softmax term, one loop for both kernels (the same summation order).
float row_delta(const Tensor& g, int64_t go, const Tensor& y, int64_t yo, int64_t D, float* bg,
                float* by) {
  const float* a = row_f32(g, go, D, bg);
  const float* b = row_f32(y, yo, D, by);
  float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
  for (int64_t d = 0; d < D; ++d) delta += a[d] * b[d];
  return delta;
}
// ---- The per-head kernel (native bf16 on the avx512 tier; the design note at the top).
// Query rows per block of S, and keys per panel of dV and dK: 32 computes 56% of the causal
// square at T = 256 (64: 62.5%), about 5% less time for forward + backward in bench_attention
// than 64 or 96, within noise of 16 and 24 (one thread, B8 T256 D64).
constexpr int64_t kQBlock = 32;
int64_t round16(int64_t n) {
  return (n + 15) / 16 * 16;
}

// bf16 rows readable as pairs (attention_kernels.h): even strides and a 4-byte aligned start.
bool pair_aligned(const Tensor& t) {
  if (t.dtype() != DType::bf16) return true;
  for (int i = 0; i < 3; ++i) {
    if (t.strides()[i] % 2 != 0) return false;
  }
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 4 == 0;
}
// Whether the per-head kernel takes these operands (already on the native bf16 path): the
// avx512 tier, an even head size, nonempty sequences and pair-aligned rows.
bool per_head_path(std::initializer_list<const Tensor*> ins,
                   std::initializer_list<const Tensor*> outs) {
  if (simd_tier() != SimdTier::avx512) return false;
  const Tensor& q = **ins.begin();
  if (q.shape()[3] % 2 != 0 || q.numel() == 0) return false;
  for (const Tensor* t : ins) {
    if (t->numel() == 0 || !pair_aligned(*t)) return false;
  }
  for (const Tensor* t : outs) {
    if (t->numel() == 0) return false;
  }
  return true;
}

// The sizes of one head and the causal structure.
struct Geom {
  int64_t BH, Tq, Tk, D;
  int64_t nk, nd;  // Tk and D rounded up to 16 (the GEMMs' N)
  int64_t off;     // Tk - Tq: query row i sees keys j <= i + off when causal
  bool causal;
  Geom(const Tensor& q, const Tensor& k, bool c)
      : BH(q.shape()[0] * q.shape()[1]),
        Tq(q.shape()[2]),
        Tk(k.shape()[2]),
        D(q.shape()[3]),
        nk(round16(Tk)),
        nd(round16(D)),
        off(Tk - Tq),
        causal(c) {}
  int64_t valid(int64_t i) const { return causal ? std::min(Tk, i + 1 + off) : Tk; }
  // Columns of S computed for a block of query rows ending at i1 (its last row's valid keys,
  // in 16s): the causal skip.
  int64_t ncols(int64_t i1) const {
    return causal ? round16(std::clamp<int64_t>(i1 + off, 0, Tk)) : nk;
  }
  // The first pair of query rows with a nonzero P (or dS) at a key j >= j0.
  int64_t first_pair(int64_t j0) const {
    return causal ? std::clamp<int64_t>(j0 - off, 0, Tq) / 2 : 0;
  }
};

// Carves 64-byte aligned arrays out of a thread's scratch (base null: only counts the bytes).
class Bump {
 public:
  explicit Bump(unsigned char* base) : base_(base) {}
  template <class T>
  T* take(int64_t n) {
    T* r = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (static_cast<int64_t>(sizeof(T)) * n + 63) / 64 * 64;
    return r;
  }
  int64_t used() const { return used_; }

 private:
  unsigned char* base_;
  int64_t used_ = 0;
};

// Runs f(g, scratch) for every batch-head g in one parallel region, each thread taking whole
// heads one at a time from a shared counter (a dynamic schedule: on a loaded machine a thread
// descheduled for a time slice holds up one head, not half of them) with its own zeroed scratch
// of `bytes` (from the caching allocator). A head's results do not depend on which thread
// computes it or after which other heads.
template <class F>
void over_heads(int64_t BH, int64_t work, int64_t bytes, F&& f) {
  const int nt = cpu::parallel_worth(work)
                     ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), BH))
                     : 1;
  const int64_t per = (bytes + 63) / 64 * 16;  // floats, a multiple of 64 bytes
  const Tensor scratch = Tensor::empty(Shape{nt, per}, {.dtype = DType::fp32});
  float* base = fp(scratch);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    float* mine = base + omp_get_thread_num() * per;
    std::memset(mine, 0, static_cast<size_t>(per) * sizeof(float));
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t g = 0; g < BH; ++g) f(g, reinterpret_cast<unsigned char*>(mine));
  }
}

const uint16_t* rows16(const Tensor& t, int64_t g, int64_t i) {
  return static_cast<const uint16_t*>(t.data_ptr()) + row_offset(t, g, i);
}
const uint32_t* pairs(const uint16_t* p) {
  return reinterpret_cast<const uint32_t*>(p);
}
// Writes rows [i0, i0 + rows) of head g of t (fp32 or bf16) from fp32 rows of stride lds.
void write_rows(const Tensor& t, int64_t g, int64_t i0, int64_t rows, const float* src,
                int64_t lds) {
  const int64_t D = t.shape()[3], ld = t.strides()[2];
  if (t.dtype() == DType::bf16) {
    cpu::attn::store_bf16_rows_avx512(static_cast<uint16_t*>(t.data_ptr()) + row_offset(t, g, i0),
                                      ld, src, lds, rows, D);
    return;
  }
  float* d = fp(t) + row_offset(t, g, i0);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(d + r * ld, src + r * lds, static_cast<size_t>(D) * sizeof(float));
}
struct FwdScratch {
  uint32_t* kt;  // k^T pair-packed: [D/2][nk]
  uint32_t* vr;  // v pair-packed along its rows: [nk/2][nd]
  float* s;      // a block's S, then P: [kQBlock][nc]
  uint16_t* p;   // P in bf16: [kQBlock][nc]
  float* o;      // a block's output: [kQBlock][nd]
  FwdScratch(Bump& b, const Geom& G)
      : kt(b.take<uint32_t>(G.D / 2 * G.nk)),
        vr(b.take<uint32_t>(G.nk / 2 * G.nd)),
        s(b.take<float>(kQBlock * G.nk)),
        p(b.take<uint16_t>(kQBlock * G.nk)),
        o(b.take<float>(kQBlock * G.nd)) {}
};

void attention_per_head(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        bool causal, float sc) {
  const Geom G(q, k, causal);
  const auto& kern = vec::kernels();
  Bump count(nullptr);
  FwdScratch{count, G};
  over_heads(G.BH, G.BH * G.Tq * G.Tk, count.used(), [&](int64_t g, unsigned char* mem) {
    Bump b(mem);
    const FwdScratch W(b, G);
    const int64_t ldq = q.strides()[2];
    cpu::pack_transpose_avx512(W.kt, rows16(k, g, 0), k.strides()[2], G.Tk, G.D, G.nk);
    cpu::pack_rows_avx512(W.vr, G.nd, rows16(v, g, 0), v.strides()[2], G.Tk, G.D, G.nd);
    for (int64_t i0 = 0; i0 < G.Tq; i0 += kQBlock) {
      const int64_t mb = std::min(kQBlock, G.Tq - i0), nc = G.ncols(i0 + mb);
      cpu::attn::gemm_bf16_avx512(W.s, nc, pairs(rows16(q, g, i0)), ldq / 2, 1, W.kt, G.nk, mb, nc,
                                  G.D / 2);
      for (int64_t r = 0; r < mb; ++r) {
        float* row = W.s + r * nc;
        const int64_t valid = G.valid(i0 + r);
#pragma omp simd
        for (int64_t j = 0; j < valid; ++j) row[j] *= sc;
        fp(lse)[g * G.Tq + i0 + r] = kern.softmax_inplace_masked(row, valid, nc);
      }
      round_bf16(W.p, W.s, mb * nc);
      cpu::attn::gemm_bf16_avx512(W.o, G.nd, pairs(W.p), nc / 2, 1, W.vr, G.nd, mb, G.nd, nc / 2);
      write_rows(dst, g, i0, mb, W.o, G.nd);
    }
  });
}

struct BwdScratch {
  uint32_t *kt, *vt;     // k^T and v^T pair-packed: [D/2][nk]
  uint32_t* kr;          // k pair-packed along its rows: [nk/2][nd]
  uint32_t *qr, *gr;     // q and dO pair-packed along their rows: [(Tq + 1)/2][nd]
  float *s, *dp;         // a block's S (then P) and dP (then dS): [kQBlock][nc]
  uint16_t *p16, *ds16;  // those in bf16
  uint32_t *ppk, *dspk;  // P and dS of the head pair-packed along rows: [(Tq + 1)/2][nk]
  float* o;              // dQ of a block, dV, dK: [max(Tk, kQBlock)][nd]
  float *bg, *by;        // one row of dO and of O in fp32
  BwdScratch(Bump& b, const Geom& G) {
    const int64_t q2 = (G.Tq + 1) / 2;
    kt = b.take<uint32_t>(G.D / 2 * G.nk);
    vt = b.take<uint32_t>(G.D / 2 * G.nk);
    kr = b.take<uint32_t>(G.nk / 2 * G.nd);
    qr = b.take<uint32_t>(q2 * G.nd);
    gr = b.take<uint32_t>(q2 * G.nd);
    s = b.take<float>(kQBlock * G.nk);
    dp = b.take<float>(kQBlock * G.nk);
    p16 = b.take<uint16_t>(kQBlock * G.nk);
    ds16 = b.take<uint16_t>(kQBlock * G.nk);
    ppk = b.take<uint32_t>(q2 * G.nk);
    dspk = b.take<uint32_t>(q2 * G.nk);
    o = b.take<float>(std::max(G.Tk, kQBlock) * G.nd);
    bg = b.take<float>(G.D);
    by = b.take<float>(G.D);
  }
};

void attention_backward_per_head(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst,
                                 const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& dst, const Tensor& lse, bool causal, float sc) {
  const Geom G(q, k, causal);
  const auto& kern = vec::kernels();
  Bump count(nullptr);
  BwdScratch{count, G};
  const int64_t q2 = (G.Tq + 1) / 2;
  over_heads(G.BH, G.BH * G.Tq * G.Tk, count.used(), [&](int64_t g, unsigned char* mem) {
    Bump b(mem);
    const BwdScratch W(b, G);
    using namespace cpu::attn;
    pack_transpose_avx512(W.kt, rows16(k, g, 0), k.strides()[2], G.Tk, G.D, G.nk);
    pack_transpose_avx512(W.vt, rows16(v, g, 0), v.strides()[2], G.Tk, G.D, G.nk);
    pack_rows_avx512(W.kr, G.nd, rows16(k, g, 0), k.strides()[2], G.Tk, G.D, G.nd);
    pack_rows_avx512(W.qr, G.nd, rows16(q, g, 0), q.strides()[2], G.Tq, G.D, G.nd);
    pack_rows_avx512(W.gr, G.nd, rows16(ddst, g, 0), ddst.strides()[2], G.Tq, G.D, G.nd);
    for (int64_t i0 = 0; i0 < G.Tq; i0 += kQBlock) {
      const int64_t mb = std::min(kQBlock, G.Tq - i0), nc = G.ncols(i0 + mb);
      // Recompute P from the saved log-sum-exp; dP = dO V^T.
      gemm_bf16_avx512(W.s, nc, pairs(rows16(q, g, i0)), q.strides()[2] / 2, 1, W.kt, G.nk, mb, nc,
                       G.D / 2);
      gemm_bf16_avx512(W.dp, nc, pairs(rows16(ddst, g, i0)), ddst.strides()[2] / 2, 1, W.vt, G.nk,
                       mb, nc, G.D / 2);
      for (int64_t r = 0; r < mb; ++r) {
        const int64_t i = i0 + r, valid = G.valid(i);
        float* prow = W.s + r * nc;
        float* dprow = W.dp + r * nc;
#pragma omp simd
        for (int64_t j = 0; j < valid; ++j) prow[j] *= sc;
        kern.exp_shift(prow, prow, fp(lse)[g * G.Tq + i], valid);
        for (int64_t j = std::max<int64_t>(valid, 0); j < nc; ++j) prow[j] = 0.0f;
        const float delta =
            row_delta(ddst, row_offset(ddst, g, i), dst, row_offset(dst, g, i), G.D, W.bg, W.by);
        // dS = P (dP - delta) * scale (into dp)
#pragma omp simd
        for (int64_t j = 0; j < nc; ++j) dprow[j] = prow[j] * (dprow[j] - delta) * sc;
      }
      round_bf16(W.p16, W.s, mb * nc);
      round_bf16(W.ds16, W.dp, mb * nc);
      // Only the block's nc columns: those past them are zero from the scratch's zeroing, and
      // no head writes them (nc depends on the block alone).
      pack_rows_avx512(W.ppk + i0 / 2 * G.nk, G.nk, W.p16, nc, mb, nc, nc);
      pack_rows_avx512(W.dspk + i0 / 2 * G.nk, G.nk, W.ds16, nc, mb, nc, nc);
      // dQ = dS K
      gemm_bf16_avx512(W.o, G.nd, pairs(W.ds16), nc / 2, 1, W.kr, G.nd, mb, G.nd, nc / 2);
      write_rows(dq, g, i0, mb, W.o, G.nd);
    }
    // dV = P^T dO and dK = dS^T Q over panels of keys, from the panel's first nonzero row.
    auto grad_kv = [&](const uint32_t* apk, const uint32_t* br, const Tensor& out) {
      for (int64_t j0 = 0; j0 < G.Tk; j0 += kQBlock) {
        const int64_t jb = std::min(kQBlock, G.Tk - j0), kp0 = G.first_pair(j0);
        gemm_bf16_avx512(W.o + j0 * G.nd, G.nd, apk + kp0 * G.nk + j0, 1, G.nk, br + kp0 * G.nd,
                         G.nd, jb, G.nd, q2 - kp0);
      }
      write_rows(out, g, 0, G.Tk, W.o, G.nd);
    };
    grad_kv(W.ppk, W.gr, dv);
    grad_kv(W.dspk, W.qr, dk);
  });
}
}  // namespace

void CpuBackend::attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, bool causal, double scale) {
  const bool bf16 = attn_native_bf16({&q, &k, &v}, {&dst}) && f32c(lse);
  if (!bf16 && kern::any_narrow({&dst, &q, &k, &v})) {  // fp16: widened exactly, computed in fp32
    auto w = [&](const Tensor& t) { return kern::widen(*this, t, DType::fp32); };
    const Tensor q32 = w(q), k32 = w(k), v32 = w(v);
    kern::with_dst_as(*this, dst, DType::fp32, false,
                      [&](Tensor& d) { attention(d, lse, q32, k32, v32, causal, scale); });
    return;
  }
  if (!bf16 && !(f32c(lse) && attn_f32({&dst, &q, &k, &v}))) {
    const Tensor qc = contiguous_of(*this, q), kc = contiguous_of(*this, k),
                 vc = contiguous_of(*this, v);
    with_contiguous_dst(
        *this, dst, [&](Tensor& d) { RefBackend::attention(d, lse, qc, kc, vc, causal, scale); });
    return;
  }
  if (bf16 && per_head_path({&q, &k, &v}, {&dst})) {
    attention_per_head(dst, lse, q, k, v, causal, static_cast<float>(scale));
    return;
  }
  const ChunkedAttention ca = chunked_attention(q, k, bf16);
  const int64_t BH = ca.BH, Tq = ca.Tq, Tk = ca.Tk, D = ca.D, chunk = ca.chunk;
  const auto& kern = vec::kernels();
  const float sc = static_cast<float>(scale);
  // Batch-heads in chunks, so that the fp32 scores S (and bf16 P) exist for one chunk at a time
  // (about 1 MB) rather than for all B*H heads: the full [B*H, Tq, Tk] buffer was the largest
  // temporary of a transformer step.
  Tensor s = empty(Shape{std::min(chunk, BH), Tq, Tk});
  Tensor p16 = bf16 ? Tensor::empty(s.shape(), {.dtype = DType::bf16}) : Tensor();
  const int64_t cb = std::min(chunk, BH);
  // The output's block reuses q's buffer: q is dead once S = q k^T is formed.
  const Tensor qbuf = chunk_buffer(q, cb), kbuf = chunk_buffer(k, cb), vbuf = chunk_buffer(v, cb),
               obuf = chunk_buffer(dst, cb, qbuf);
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t nb = std::min(chunk, BH - h0);
    const Tensor sb = nb == s.shape()[0] ? s : view_of(s, Shape{nb, Tq, Tk}, s.strides(), 0);
    const Tensor pb =
        !bf16 || nb == p16.shape()[0] ? p16 : view_of(p16, Shape{nb, Tq, Tk}, p16.strides(), 0);
    const Tensor q3 = head_block(q, h0, nb, qbuf, true), k3 = head_block(k, h0, nb, kbuf, true);
    const Tensor kT = view_of(k3, Shape{nb, D, Tk}, Shape{Tk * D, 1, D}, k3.storage_offset());
    Tensor sm = sb;
    matmul(sm, q3, kT, Tensor(), ca.cfg);
    parallel_for(nb * Tq, sb.numel() * 8, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t i = r % Tq;
        float* row = fp(sb) + r * Tk;
        const int64_t valid = causal ? std::min(Tk, i + 1 + (Tk - Tq)) : Tk;
#pragma omp simd
        for (int64_t j = 0; j < valid; ++j) row[j] *= sc;
        fp(lse)[h0 * Tq + r] = kern.softmax_inplace_masked(row, valid, Tk);
        // bf16: P rounded by groups of rows while they are in cache (not in a second pass).
        if (bf16 && ((r + 1 - lo) % kRowGroup == 0 || r + 1 == hi)) {
          const int64_t g0 = r + 1 - ((r - lo) % kRowGroup + 1);
          store_bf16_row(pb, g0 * Tk, fp(sb) + g0 * Tk, (r + 1 - g0) * Tk);
        }
      }
    });
    const Tensor v3 = head_block(v, h0, nb, vbuf, true);
    Tensor o3 = head_block(dst, h0, nb, obuf, false);
    matmul(o3, bf16 ? pb : sb, v3, Tensor(), ca.cfg);
    scatter_heads(dst, h0, o3);
  }
}

void CpuBackend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst,
                                    const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& dst, const Tensor& lse, bool causal,
                                    double scale) {
  const bool bf16 = attn_native_bf16({&ddst, &q, &k, &v, &dst}, {&dq, &dk, &dv}) && f32c(lse);
  if (!bf16 && kern::any_narrow({&dq, &dk, &dv, &ddst, &q, &k, &v, &dst})) {
    auto w = [&](const Tensor& t) { return kern::widen(*this, t, DType::fp32); };
    const Tensor g = w(ddst), q32 = w(q), k32 = w(k), v32 = w(v), y32 = w(dst);
    kern::with_dst_as(*this, dq, DType::fp32, false, [&](Tensor& a) {
      kern::with_dst_as(*this, dk, DType::fp32, false, [&](Tensor& b) {
        kern::with_dst_as(*this, dv, DType::fp32, false, [&](Tensor& c) {
          attention_backward(a, b, c, g, q32, k32, v32, y32, lse, causal, scale);
        });
      });
    });
    return;
  }
  if (!bf16 && !(f32c(lse) && attn_f32({&dq, &dk, &dv, &ddst, &q, &k, &v, &dst}))) {
    auto c = [&](const Tensor& t) { return contiguous_of(*this, t); };
    const Tensor g = c(ddst), qc = c(q), kc = c(k), vc = c(v), yc = c(dst);
    with_contiguous_dst(*this, dq, [&](Tensor& a) {
      with_contiguous_dst(*this, dk, [&](Tensor& b) {
        with_contiguous_dst(*this, dv, [&](Tensor& d) {
          RefBackend::attention_backward(a, b, d, g, qc, kc, vc, yc, lse, causal, scale);
        });
      });
    });
    return;
  }
  if (bf16 && per_head_path({&ddst, &q, &k, &v, &dst}, {&dq, &dk, &dv})) {
    attention_backward_per_head(dq, dk, dv, ddst, q, k, v, dst, lse, causal,
                                static_cast<float>(scale));
    return;
  }
  const ChunkedAttention ca = chunked_attention(q, k, bf16);
  const int64_t BH = ca.BH, Tq = ca.Tq, Tk = ca.Tk, D = ca.D, chunk = ca.chunk;
  const auto& kern = vec::kernels();
  const float sc = static_cast<float>(scale);
  // Batch-heads in chunks, as in the forward: P, dP (fp32) and their bf16 copies exist for one
  // chunk at a time.
  const Shape ps{std::min(chunk, BH), Tq, Tk};
  Tensor p = empty(ps), dp = empty(ps);
  Tensor p16 = bf16 ? Tensor::empty(ps, {.dtype = DType::bf16}) : Tensor();
  Tensor ds16 = bf16 ? Tensor::empty(ps, {.dtype = DType::bf16}) : Tensor();
  const int64_t cb = std::min(chunk, BH);
  // The three gradient blocks are formed and scattered one after another into v's buffer (v is
  // dead once dP = dO v^T is formed).
  const Tensor qbuf = chunk_buffer(q, cb), kbuf = chunk_buffer(k, cb), vbuf = chunk_buffer(v, cb),
               gbuf = chunk_buffer(ddst, cb);
  const Tensor dvbuf = chunk_buffer(dv, cb, vbuf);
  const Tensor dqbuf = chunk_buffer(dq, cb, dvbuf.defined() ? dvbuf : vbuf);
  const Tensor dkbuf = chunk_buffer(dk, cb, dqbuf.defined() ? dqbuf : vbuf);
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t nb = std::min(chunk, BH - h0);
    auto part = [&](const Tensor& t) {
      return !t.defined() || nb == t.shape()[0]
                 ? t
                 : view_of(t, Shape{nb, Tq, Tk}, t.strides(), t.storage_offset());
    };
    // The chunk's heads of q, k, v and dO as contiguous [nb, T, D] blocks (gathered when
    // strided), and the transposed views of k and v.
    const Tensor q3 = head_block(q, h0, nb, qbuf, true), k3 = head_block(k, h0, nb, kbuf, true),
                 v3 = head_block(v, h0, nb, vbuf, true), g3 = head_block(ddst, h0, nb, gbuf, true);
    auto tr = [&](const Tensor& t3, int64_t T) {
      return view_of(t3, Shape{nb, D, T}, Shape{T * D, 1, D}, t3.storage_offset());
    };
    Tensor pb = part(p), dpb = part(dp);
    const Tensor p16b = part(p16), ds16b = part(ds16);
    // Recompute P from the saved log-sum-exp.
    matmul(pb, q3, tr(k3, Tk), Tensor(), ca.cfg);
    // dP = dO V^T
    matmul(dpb, g3, tr(v3, Tk), Tensor(), ca.cfg);
    parallel_for(nb * Tq, pb.numel() * 8, [&](int64_t lo, int64_t hi) {
      std::vector<float> bg(static_cast<size_t>(D)), bo(static_cast<size_t>(D));
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t i = r % Tq, rg = h0 * Tq + r;  // row within the chunk, row overall
        float* prow = fp(pb) + r * Tk;
        float* dprow = fp(dpb) + r * Tk;
        const int64_t valid = causal ? std::min(Tk, i + 1 + (Tk - Tq)) : Tk;
#pragma omp simd
        for (int64_t j = 0; j < valid; ++j) prow[j] *= sc;
        kern.exp_shift(prow, prow, fp(lse)[rg], valid);
        for (int64_t j = valid; j < Tk; ++j) prow[j] = 0.0f;
        const float delta =
            row_delta(g3, r * D, dst, row_offset(dst, h0 + r / Tq, i), D, bg.data(), bo.data());
          // dS = P (dP - delta) * scale (into dp)
#pragma omp simd
        for (int64_t j = 0; j < Tk; ++j) dprow[j] = prow[j] * (dprow[j] - delta) * sc;
        if (bf16 && ((r + 1 - lo) % kRowGroup == 0 || r + 1 == hi)) {
          const int64_t g0 = r + 1 - ((r - lo) % kRowGroup + 1);
          store_bf16_row(p16b, g0 * Tk, fp(pb) + g0 * Tk, (r + 1 - g0) * Tk);
          store_bf16_row(ds16b, g0 * Tk, fp(dpb) + g0 * Tk, (r + 1 - g0) * Tk);
        }
      }
    });
    const Tensor pg = bf16 ? p16b : pb, dsg = bf16 ? ds16b : dpb;
    const Tensor pT = view_of(pg, Shape{nb, Tk, Tq}, Shape{Tq * Tk, 1, Tk}, pg.storage_offset());
    const Tensor dsT = view_of(dsg, Shape{nb, Tk, Tq}, Shape{Tq * Tk, 1, Tk}, dsg.storage_offset());
    Tensor dv3 = head_block(dv, h0, nb, dvbuf, false);
    matmul(dv3, pT, g3, Tensor(), ca.cfg);  // dV = P^T dO
    scatter_heads(dv, h0, dv3);
    Tensor dq3 = head_block(dq, h0, nb, dqbuf, false);
    matmul(dq3, dsg, k3, Tensor(), ca.cfg);  // dQ = dS K
    scatter_heads(dq, h0, dq3);
    Tensor dk3 = head_block(dk, h0, nb, dkbuf, false);
    matmul(dk3, dsT, q3, Tensor(), ca.cfg);  // dK = dS^T Q
    scatter_heads(dk, h0, dk3);
  }
}

}  // namespace mixp
