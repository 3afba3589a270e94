// CpuBackend attention: S = q k^T and P V as batched oneDNN matmuls over [B*H] in chunks of about
// 2^18 scores, softmax rows between; fp32 and bf16 (P and dS rounded per chunk).
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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
using cpu::parallel_for;
using cpu::view_of;

// ---- attention: S = q k^T and P V as batched oneDNN matmuls over [B*H]; softmax rows between.
//
// bf16 q, k, v run natively: the GEMMs take bf16 operands with fp32 accumulation; S, the softmax
// and dS are fp32, and P (and dS) are rounded to bf16 (nearest even) where they become a GEMM
// operand, as in PyTorch's bf16 math attention. fp16 (no native fp16 GEMM here) is widened
// exactly and runs the fp32 path.
namespace {
bool attn_native_bf16(std::initializer_list<const Tensor*> ins,
                      std::initializer_list<const Tensor*> outs) {
  if (!cpu::native_bf16()) return false;
  for (const Tensor* t : ins) {
    if (t->dtype() != DType::bf16 || !t->is_contiguous()) return false;
  }
  for (const Tensor* t : outs) {
    if ((t->dtype() != DType::bf16 && t->dtype() != DType::fp32) || !t->is_contiguous())
      return false;
  }
  return true;
}
// Batch-heads per chunk of the attention kernels: enough that one chunk's [chunk, Tq, Tk] fp32
// score buffer is about 1 MB (2^18 floats; 16 heads at T = 128), at least one.
int64_t attention_chunk(int64_t BH, int64_t Tq, int64_t Tk) {
  const int64_t per_head = std::max<int64_t>(1, Tq * Tk);
  return std::clamp<int64_t>((int64_t{1} << 18) / per_head, 1, std::max<int64_t>(BH, 1));
}
// Rounds n fp32 values (nearest even) into elements [off, off + n) of the bf16 tensor t, with
// the bulk (AVX-512) converter. Callers pass groups of rows (kRowGroup): one call per row of a
// head (128 values) cost more in call overhead than the conversion.
void store_bf16_row(const Tensor& t, int64_t off, const float* src, int64_t n) {
  convert_f32_to(DType::bf16, std::span<const float>(src, static_cast<size_t>(n)),
                 static_cast<uint16_t*>(t.data_ptr()) + off,
                 ConvertOptions{Round::nearest_even, Overflow::ieee});
}
constexpr int64_t kRowGroup = 16;
// One row of n elements of t (fp32 or bf16, contiguous) starting at element off, as fp32.
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
  if (!bf16 && !(f32c(dst) && f32c(lse) && f32c(q) && f32c(k) && f32c(v)))
    return RefBackend::attention(dst, lse, q, k, v, causal, scale);
  const DType gd = bf16 ? DType::bf16 : DType::fp32;
  MatmulConfig cfg;
  cfg.compute = gd;
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], Tk = k.shape()[2],
                D = q.shape()[3];
  const auto& kern = vec::kernels();
  const float sc = static_cast<float>(scale);
  // Batch-heads in chunks, so that the fp32 scores S (and bf16 P) exist for one chunk at a time
  // (about 1 MB) rather than for all B*H heads: the full [B*H, Tq, Tk] buffer was the largest
  // temporary of a transformer step.
  const int64_t chunk = attention_chunk(BH, Tq, Tk);
  Tensor s = empty(Shape{std::min(chunk, BH), Tq, Tk});
  Tensor p16 = bf16 ? Tensor::empty(s.shape(), {.dtype = DType::bf16}) : Tensor();
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t nb = std::min(chunk, BH - h0);
    const Tensor sb = nb == s.shape()[0] ? s : view_of(s, Shape{nb, Tq, Tk}, s.strides(), 0);
    const Tensor pb =
        !bf16 || nb == p16.shape()[0] ? p16 : view_of(p16, Shape{nb, Tq, Tk}, p16.strides(), 0);
    const Tensor q3 =
        view_of(q, Shape{nb, Tq, D}, Shape{Tq * D, D, 1}, q.storage_offset() + h0 * Tq * D);
    const Tensor kT =
        view_of(k, Shape{nb, D, Tk}, Shape{Tk * D, 1, D}, k.storage_offset() + h0 * Tk * D);
    const Tensor v3 =
        view_of(v, Shape{nb, Tk, D}, Shape{Tk * D, D, 1}, v.storage_offset() + h0 * Tk * D);
    Tensor sm = sb;
    matmul(sm, q3, kT, Tensor(), cfg);
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
    Tensor o3 =
        view_of(dst, Shape{nb, Tq, D}, Shape{Tq * D, D, 1}, dst.storage_offset() + h0 * Tq * D);
    matmul(o3, bf16 ? pb : sb, v3, Tensor(), cfg);
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
  if (!bf16 && !(f32c(dq) && f32c(dk) && f32c(dv) && f32c(ddst) && f32c(q) && f32c(k) && f32c(v) &&
                 f32c(dst) && f32c(lse))) {
    return RefBackend::attention_backward(dq, dk, dv, ddst, q, k, v, dst, lse, causal, scale);
  }
  const DType gd = bf16 ? DType::bf16 : DType::fp32;
  MatmulConfig cfg;
  cfg.compute = gd;
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], Tk = k.shape()[2],
                D = q.shape()[3];
  const auto& kern = vec::kernels();
  const float sc = static_cast<float>(scale);
  // Batch-heads in chunks, as in the forward: P, dP (fp32) and their bf16 copies exist for one
  // chunk at a time.
  const int64_t chunk = attention_chunk(BH, Tq, Tk);
  const Shape ps{std::min(chunk, BH), Tq, Tk};
  Tensor p = empty(ps), dp = empty(ps);
  Tensor p16 = bf16 ? Tensor::empty(ps, {.dtype = DType::bf16}) : Tensor();
  Tensor ds16 = bf16 ? Tensor::empty(ps, {.dtype = DType::bf16}) : Tensor();
  for (int64_t h0 = 0; h0 < BH; h0 += chunk) {
    const int64_t nb = std::min(chunk, BH - h0);
    auto part = [&](const Tensor& t) {
      return !t.defined() || nb == t.shape()[0]
                 ? t
                 : view_of(t, Shape{nb, Tq, Tk}, t.strides(), t.storage_offset());
    };
    auto v3 = [&](const Tensor& t, int64_t T) {
      return view_of(t, Shape{nb, T, D}, Shape{T * D, D, 1}, t.storage_offset() + h0 * T * D);
    };
    auto v3T = [&](const Tensor& t, int64_t T) {
      return view_of(t, Shape{nb, D, T}, Shape{T * D, 1, D}, t.storage_offset() + h0 * T * D);
    };
    Tensor pb = part(p), dpb = part(dp);
    const Tensor p16b = part(p16), ds16b = part(ds16);
    // Recompute P from the saved log-sum-exp.
    matmul(pb, v3(q, Tq), v3T(k, Tk), Tensor(), cfg);
    // dP = dO V^T
    matmul(dpb, v3(ddst, Tq), v3T(v, Tk), Tensor(), cfg);
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
        // delta = sum_d dO O
        const float* go = row_f32(ddst, rg * D, D, bg.data());
        const float* o = row_f32(dst, rg * D, D, bo.data());
        float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
        for (int64_t d = 0; d < D; ++d) delta += go[d] * o[d];
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
    Tensor dv3 = v3(dv, Tk), dq3 = v3(dq, Tq), dk3 = v3(dk, Tk);
    matmul(dv3, pT, v3(ddst, Tq), Tensor(), cfg);  // dV = P^T dO
    matmul(dq3, dsg, v3(k, Tk), Tensor(), cfg);    // dQ = dS K
    matmul(dk3, dsT, v3(q, Tq), Tensor(), cfg);    // dK = dS^T Q
  }
}

}  // namespace mixp
