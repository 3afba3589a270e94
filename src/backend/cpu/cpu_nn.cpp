// CpuBackend kernels for embeddings, dropout and cross-entropy: fp32 contiguous fast paths;
// everything else falls through to the ref kernels. (Reductions and softmax: cpu_reduce.cpp;
// norms: cpu_norm.cpp; attention: cpu_attention.cpp; pooling: cpu_pool.cpp.)
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
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

// ---- embedding: row gathers (memcpy) and a row scatter-add, for contiguous weights/gradients
// (the ref loops index every element through the tensor accessors: ~40x slower on the gpt).
namespace {
bool index_ok(const Tensor& idx) {
  return idx.is_contiguous() && (idx.dtype() == DType::int64 || idx.dtype() == DType::int32);
}
int64_t row_index(const Tensor& idx, int64_t i) {
  return idx.dtype() == DType::int64 ? static_cast<const int64_t*>(idx.data_ptr())[i]
                                     : static_cast<const int32_t*>(idx.data_ptr())[i];
}
}  // namespace

void CpuBackend::embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) {
  if (!(dst.is_contiguous() && weight.is_contiguous() && index_ok(indices) &&
        dst.dtype() == weight.dtype())) {
    return RefBackend::embedding(dst, weight, indices);
  }
  const int64_t V = weight.shape()[0], E = weight.shape()[1], n = indices.numel();
  const size_t row_bytes = static_cast<size_t>(E) * weight.element_size();
  const char* w = static_cast<const char*>(weight.data_ptr());
  char* d = static_cast<char*>(dst.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = row_index(indices, i);
    if (row < 0 || row >= V) {
      throw std::out_of_range("mixp::embedding: index " + std::to_string(row) + " out of [0, " +
                              std::to_string(V) + ")");
    }
    std::memcpy(d + static_cast<size_t>(i) * row_bytes, w + static_cast<size_t>(row) * row_bytes,
                row_bytes);
  }
}

void CpuBackend::embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) {
  if (!(f32c(dweight) && f32c(ddst) && index_ok(indices)))
    return RefBackend::embedding_backward(dweight, ddst, indices);
  const int64_t E = dweight.shape()[1], n = indices.numel();
  float* dw = fp(dweight);
  const float* g = fp(ddst);
  // Parallel over column blocks: every thread sees every index, so repeated rows never race.
  parallel_for(E, n * E, [&](int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; ++i) {
      float* r = dw + row_index(indices, i) * E;
      const float* s = g + i * E;
#pragma omp simd
      for (int64_t e = lo; e < hi; ++e) r[e] += s[e];
    }
  });
}

namespace {
// The rows `indices` reference, in order of first occurrence, each with the positions that
// reference it in increasing order (CSR: rows[u]'s positions are pos[start[u] .. start[u + 1])).
struct RowOccurrences {
  std::vector<int64_t> rows, start, pos;
  std::vector<uint8_t> referenced;  // per weight row
};
RowOccurrences row_occurrences(const Tensor& indices, int64_t V) {
  const int64_t n = indices.numel();
  RowOccurrences o;
  o.referenced.assign(static_cast<size_t>(V), 0);
  std::vector<int64_t> slot(static_cast<size_t>(V), -1);  // row -> u
  std::vector<int64_t> count;
  std::vector<int64_t> which(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = row_index(indices, i);
    if (r < 0 || r >= V) {
      throw std::out_of_range("mixp::embedding: index " + std::to_string(r) + " out of [0, " +
                              std::to_string(V) + ")");
    }
    int64_t& u = slot[static_cast<size_t>(r)];
    if (u < 0) {
      u = static_cast<int64_t>(o.rows.size());
      o.rows.push_back(r);
      count.push_back(0);
      o.referenced[static_cast<size_t>(r)] = 1;
    }
    ++count[static_cast<size_t>(u)];
    which[static_cast<size_t>(i)] = u;
  }
  o.start.assign(o.rows.size() + 1, 0);
  for (size_t u = 0; u < o.rows.size(); ++u) o.start[u + 1] = o.start[u] + count[u];
  o.pos.resize(static_cast<size_t>(n));
  std::vector<int64_t> next(o.start.begin(), o.start.end() - 1);
  for (int64_t i = 0; i < n; ++i)
    o.pos[static_cast<size_t>(next[static_cast<size_t>(which[static_cast<size_t>(i)])]++)] = i;
  return o;
}
}  // namespace

void CpuBackend::embedding_backward_add(Tensor& dweight, const Tensor& ddst,
                                        const Tensor& indices) {
  if (!(f32c(dweight) && f32c(ddst) && index_ok(indices)))
    return RefBackend::embedding_backward_add(dweight, ddst, indices);
  const int64_t V = dweight.shape()[0], E = dweight.shape()[1];
  const RowOccurrences o = row_occurrences(indices, V);
  float* dw = fp(dweight);
  const float* g = fp(ddst);
  const int64_t U = static_cast<int64_t>(o.rows.size());
  // Referenced rows: the dense buffer's row (its contributions summed from +0 in index order,
  // as embedding_backward does), then added to the gradient's row: the same two roundings.
  parallel_for(U, indices.numel() * E + U * E, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kChunk = 256;
    float acc[kChunk];
    for (int64_t u = lo; u < hi; ++u) {
      float* r = dw + o.rows[static_cast<size_t>(u)] * E;
      for (int64_t e0 = 0; e0 < E; e0 += kChunk) {
        const int64_t m = std::min(kChunk, E - e0);
        for (int64_t k = 0; k < m; ++k) acc[k] = 0.0f;
        for (int64_t p = o.start[static_cast<size_t>(u)]; p < o.start[static_cast<size_t>(u) + 1];
             ++p) {
          const float* s = g + o.pos[static_cast<size_t>(p)] * E + e0;
#pragma omp simd
          for (int64_t k = 0; k < m; ++k) acc[k] += s[k];
        }
#pragma omp simd
        for (int64_t k = 0; k < m; ++k) r[e0 + k] += acc[k];
      }
    }
  });
  // Every other row: + 0, as the dense add of a zero row (-0 becomes +0; nothing else changes).
  parallel_for(V, V * E, [&](int64_t lo, int64_t hi) {
    for (int64_t v = lo; v < hi; ++v) {
      if (o.referenced[static_cast<size_t>(v)]) continue;
      float* r = dw + v * E;
#pragma omp simd
      for (int64_t e = 0; e < E; ++e) r[e] += 0.0f;
    }
  });
}

// ---- dropout
void CpuBackend::dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) {
  if (!(f32c(dst) && f32c(src))) return RefBackend::dropout(dst, src, p, seed);
  const uint32_t thr = kern::dropout_threshold(p);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const float* x = fp(src);
  float* y = fp(dst);
  parallel_for(src.numel(), src.numel() * 4, [&](int64_t lo, int64_t hi) {
    const uint32_t key = sr_key(seed, static_cast<uint64_t>(lo));
    for (int64_t i = lo; i < hi; ++i) {
      // sr_bits(seed, i) with the key of the chunk's high word (chunks never cross 2^32).
      const uint32_t bits = (static_cast<uint64_t>(i) >> 32) == (static_cast<uint64_t>(lo) >> 32)
                                ? sr_bits_with_key(key, static_cast<uint32_t>(i))
                                : sr_bits(seed, static_cast<uint64_t>(i));
      y[i] = bits >= thr ? x[i] * scale : 0.0f;
    }
  });
}

// ---- cross entropy
namespace {
int64_t class_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::int64 ? static_cast<const int64_t*>(t.data_ptr())[i]
                                   : static_cast<const int32_t*>(t.data_ptr())[i];
}
}  // namespace

void CpuBackend::cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                               const Tensor& targets) {
  if (!(f32c(loss) && f32c(lse) && f32c(logits)) || !targets.is_contiguous()) {
    return RefBackend::cross_entropy(loss, lse, logits, targets);
  }
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = class_at(targets, n);
    if (t < 0 || t >= C)
      throw std::out_of_range("mixp::cross_entropy: target " + std::to_string(t) + " out of [0, " +
                              std::to_string(C) + ")");
  }
  const auto& k = vec::kernels();
  const float* x = fp(logits);
  // Per-row losses, then one ordered sum: the result does not depend on the thread count.
  std::vector<double> row_loss(static_cast<size_t>(N));
  parallel_for(N, N * C * 8, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const float l = k.logsumexp(x + n * C, C);
      fp(lse)[n] = l;
      row_loss[static_cast<size_t>(n)] =
          static_cast<double>(l) - static_cast<double>(x[n * C + class_at(targets, n)]);
    }
  });
  double total = 0;
  for (double v : row_loss) total += v;
  fp(loss)[0] = N ? static_cast<float>(total / static_cast<double>(N)) : 0.0f;
}

void CpuBackend::cross_entropy_backward(Tensor& dlogits, const Tensor& dloss, const Tensor& logits,
                                        const Tensor& targets, const Tensor& lse) {
  if (!(f32c(dlogits) && f32c(dloss) && f32c(logits) && f32c(lse)) || !targets.is_contiguous()) {
    return RefBackend::cross_entropy_backward(dlogits, dloss, logits, targets, lse);
  }
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  const float g = fp(dloss)[0] / static_cast<float>(N);
  const auto& k = vec::kernels();
  parallel_for(N, N * C * 8, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      float* d = fp(dlogits) + n * C;
      k.exp_shift(d, fp(logits) + n * C, fp(lse)[n], C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) d[c] *= g;
      d[class_at(targets, n)] -= g;
    }
  });
}

// ---- the fused classifier (backend.h, cross_entropy_in_place): the row kernels of cross_entropy
// above on the first `classes` columns of each padded row, read in place (fp32) or through one
// fp32 row per thread (bf16, fp16: widened exactly, so the same values as cross_entropy on an fp32
// copy); backward writes the gradient over the row. Same arithmetic as cross_entropy and its
// backward, so the same bits (tests/ops/test_cross_entropy_in_place.cpp).
namespace {
bool in_place_layout(const Tensor& logits) {
  const DType d = logits.dtype();
  return logits.is_contiguous() && (d == DType::fp32 || d == DType::bf16 || d == DType::fp16);
}
const uint8_t* row_bits(const Tensor& t, int64_t n, int64_t cols) {
  return static_cast<const uint8_t*>(t.data_ptr()) +
         n * cols * static_cast<int64_t>(t.element_size());
}
}  // namespace

void CpuBackend::cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits,
                                        const Tensor& targets, int64_t classes) {
  if (!(f32c(loss) && f32c(lse) && in_place_layout(logits)) || !targets.is_contiguous()) {
    return RefBackend::cross_entropy_in_place(loss, lse, logits, targets, classes);
  }
  const int64_t N = logits.shape()[0], Cp = logits.shape()[1];
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = class_at(targets, n);
    if (t < 0 || t >= classes)
      throw std::out_of_range("mixp::cross_entropy_in_place: target " + std::to_string(t) +
                              " out of [0, " + std::to_string(classes) + ")");
  }
  const auto& k = vec::kernels();
  const bool wide = logits.dtype() == DType::fp32;
  std::vector<double> row_loss(static_cast<size_t>(N));
  parallel_for(N, N * classes * 8, [&](int64_t lo, int64_t hi) {
    std::vector<float> row(wide ? 0 : static_cast<size_t>(classes));
    for (int64_t n = lo; n < hi; ++n) {
      const float* x = fp(logits) + n * Cp;
      if (!wide) {
        convert_to_f32(logits.dtype(), row_bits(logits, n, Cp), row);
        x = row.data();
      }
      const float l = k.logsumexp(x, classes);
      fp(lse)[n] = l;
      row_loss[static_cast<size_t>(n)] =
          static_cast<double>(l) - static_cast<double>(x[class_at(targets, n)]);
    }
  });
  double total = 0;
  for (double v : row_loss) total += v;
  fp(loss)[0] = N ? static_cast<float>(total / static_cast<double>(N)) : 0.0f;
}

void CpuBackend::cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss,
                                                 const Tensor& targets, const Tensor& lse,
                                                 int64_t classes) {
  if (!(f32c(dloss) && f32c(lse) && in_place_layout(dlogits)) || !targets.is_contiguous()) {
    return RefBackend::cross_entropy_in_place_backward(dlogits, dloss, targets, lse, classes);
  }
  const int64_t N = dlogits.shape()[0], Cp = dlogits.shape()[1];
  const float g = fp(dloss)[0] / static_cast<float>(N);
  const auto& k = vec::kernels();
  const DType dt = dlogits.dtype();
  const bool wide = dt == DType::fp32;
  const size_t esize = dlogits.element_size();
  parallel_for(N, N * Cp * 8, [&](int64_t lo, int64_t hi) {
    std::vector<float> row(wide ? 0 : static_cast<size_t>(classes));
    for (int64_t n = lo; n < hi; ++n) {
      uint8_t* bits = const_cast<uint8_t*>(row_bits(dlogits, n, Cp));
      float* d = wide ? fp(dlogits) + n * Cp : row.data();
      if (!wide) convert_to_f32(dt, bits, row);
      k.exp_shift(d, d, fp(lse)[n], classes);
#pragma omp simd
      for (int64_t c = 0; c < classes; ++c) d[c] *= g;
      d[class_at(targets, n)] -= g;
      if (!wide) {
        convert_f32_to(dt, row, bits,
                       ConvertOptions{.round = Round::nearest_even, .overflow = Overflow::ieee});
      }
      // The padded columns: no class, no gradient.
      std::memset(bits + classes * esize, 0, static_cast<size_t>(Cp - classes) * esize);
    }
  });
}

}  // namespace mixp
