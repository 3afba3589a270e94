// The attention kernels on the cpu backend against the ref oracle: plain, in batch-head chunks,
// per head in bf16, packed qkv, and the bit-identities between the cpu's own attention paths
// (split from test_ops_vs_ref.cpp; docs/architecture.md 6.3).
#include <fmt/format.h>

#include "common/cpu_class.h"
#include "ops/op_test_util.h"

namespace mixp {
namespace {
using namespace mixp::testing;
using V = std::vector<Tensor>;

TEST(CpuVsRef, Attention) {
  for (bool causal : {true, false}) {
    const Tensor q = rnd({2, 3, 9, 8}, 45), k = rnd({2, 3, 9, 8}, 46), v = rnd({2, 3, 9, 8}, 47);
    expect_cpu_matches_ref(
        causal ? "attention causal" : "attention",
        [causal](const V& a) { return scaled_dot_product_attention(a[0], a[1], a[2], causal); },
        {q, k, v});
  }
  const Tensor q = rnd({1, 2, 4, 8}, 48), k = rnd({1, 2, 7, 8}, 49), v = rnd({1, 2, 7, 8}, 50);
  expect_cpu_matches_ref(
      "attention Tq<Tk causal",
      [](const V& a) { return scaled_dot_product_attention(a[0], a[1], a[2], true); }, {q, k, v});
  // heads split from a [B, T, H*D] projection: non-contiguous q/k/v views
  const Tensor qkv = rnd({2, 16, 3 * 32}, 51);
  expect_cpu_matches_ref("attention from views",
                         [](const V& a) {
                           auto parts = chunk(a[0], 3, 2);
                           auto heads = [](const Tensor& t) {
                             return t.reshape({2, 16, 4, 8}).transpose(1, 2);
                           };
                           return scaled_dot_product_attention(heads(parts[0]), heads(parts[1]),
                                                               heads(parts[2]), true);
                         },
                         {qkv});
}

TEST(CpuVsRef, AttentionInBatchHeadChunks) {
  // The cpu kernels process batch-heads in chunks of about 2^18 scores (cpu_attention.cpp); at
  // T = 256 a chunk is 4 heads, so B * H = 10 runs chunks of 4, 4 and 2: every row of q, k, v,
  // the output, the log-sum-exp and the three gradients must land at its own offset. fp32 and
  // bf16 (the bf16 kernel rounds P and dS per chunk).
  for (DType dt : {DType::fp32, DType::bf16}) {
    const Tensor q = rnd({2, 5, 256, 8}, 81, dt), k = rnd({2, 5, 256, 8}, 82, dt),
                 v = rnd({2, 5, 256, 8}, 83, dt);
    for (bool causal : {true, false}) {
      expect_cpu_matches_ref(
          std::string(name(dt)) + (causal ? " chunked attention causal" : " chunked attention"),
          [causal](const V& a) { return scaled_dot_product_attention(a[0], a[1], a[2], causal); },
          {q, k, v}, dt == DType::bf16 ? kTolBf16 : kTolFp32);
    }
  }
}

TEST(CpuVsRef, AttentionPerHeadBf16) {
  // The bf16 kernel on the avx512 tier runs each batch-head on one thread in blocks of 32 query
  // rows, computing S only up to the diagonal when causal (cpu_attention.cpp): lengths that are
  // not multiples of the block or of 16, Tq != Tk, head sizes not a multiple of 16, B * H odd
  // (not divisible by the threads); within tolerance of the ref backend, and bit for bit the same
  // output and gradients with one thread and two.
  struct Case {
    int64_t B, H, Tq, Tk, D;
  };
  const int prev_threads = get_num_threads();
  for (const Case& c : {Case{1, 3, 130, 130, 64}, Case{3, 1, 64, 64, 24}, Case{1, 3, 70, 200, 32},
                        Case{1, 3, 200, 70, 32}, Case{2, 3, 17, 17, 64}}) {
    for (bool causal : {true, false}) {
      if (causal && c.Tq > c.Tk) continue;  // rows with no key to attend to
      const std::string what = fmt::format("bf16 per-head attention B{} H{} Tq{} Tk{} D{}{}", c.B,
                                           c.H, c.Tq, c.Tk, c.D, causal ? " causal" : "");
      const Tensor q = rnd({c.B, c.H, c.Tq, c.D}, 101, DType::bf16),
                   k = rnd({c.B, c.H, c.Tk, c.D}, 102, DType::bf16),
                   v = rnd({c.B, c.H, c.Tk, c.D}, 103, DType::bf16),
                   g = rnd({c.B, c.H, c.Tq, c.D}, 104, DType::bf16);
      auto fn = [causal](const V& a) {
        return scaled_dot_product_attention(a[0], a[1], a[2], causal);
      };
      expect_cpu_matches_ref(what, fn, {q, k, v}, kTolBf16);
      std::vector<std::vector<double>> runs[2];
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        BackendGuard guard(BackendKind::cpu);
        V in;
        for (const Tensor& t : {q, k, v}) in.push_back(t.detach().clone().requires_grad_(true));
        Tensor y = fn(in);
        y.backward(g);
        auto& r = runs[threads - 1];
        r.push_back(y.detach().to_double_vector());
        for (const Tensor& t : in) r.push_back(t.grad().to_double_vector());
      }
      EXPECT_EQ(runs[0], runs[1]) << what;
    }
  }
  set_num_threads(prev_threads);
}

TEST(CpuVsRef, AttentionPerHeadIsTheChunkedKernelBitForBit) {
  // The per-head bf16 kernel (causal block skipping, VDPBF16PS micro-kernels) against the chunked
  // oneDNN kernel, which the cpu backend still runs for a q whose rows cannot be read as bf16 pairs
  // (an odd element offset): the same output and the same gradients of q, k and v, bit for bit
  // (cpu_attention.cpp's design note says why). Lengths across several 64-row blocks, not
  // multiples of 16 or of the block, Tq != Tk, head sizes not a multiple of 16.
  // (Without AVX512_BF16 both runs take the same kernel.) Bit for bit only where the chunked
  // kernel's oneDNN matmuls do not run on AMX tiles: on an AMX host they sum in another order
  // (tests/common/cpu_class.h; B2 H3 T256 D64 causal differed in 21 output, 157 dq, 19 dk
  // elements there), and the two kernels agree within kTolBf16 (normalized error) instead.
  const bool tiles = test::onednn_bf16_on_amx_tiles();
  struct Case {
    int64_t B, H, Tq, Tk, D;
  };
  for (const Case& c : {Case{2, 3, 256, 256, 64}, Case{1, 3, 130, 130, 64}, Case{3, 1, 64, 64, 24},
                        Case{1, 3, 70, 200, 32}, Case{2, 3, 17, 17, 64}}) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(fmt::format("B{} H{} Tq{} Tk{} D{}{}", c.B, c.H, c.Tq, c.Tk, c.D,
                               causal ? " causal" : ""));
      const int64_t nq = c.B * c.H * c.Tq * c.D;
      const Tensor q1 = rnd({nq + 1}, 111, DType::bf16),
                   k = rnd({c.B, c.H, c.Tk, c.D}, 112, DType::bf16),
                   v = rnd({c.B, c.H, c.Tk, c.D}, 113, DType::bf16),
                   g = rnd({c.B, c.H, c.Tq, c.D}, 114, DType::bf16);
      BackendGuard guard(BackendKind::cpu);
      std::vector<std::vector<double>> runs[2];
      for (int odd : {0, 1}) {
        // q's values are elements [1, nq] of q1 either way; the odd run reads them in place (a
        // leaf that is a view at element offset 1 of its storage).
        const Tensor q1c = q1.detach().clone();
        Tensor q = odd ? q1c.slice(0, 1, nq + 1).view({c.B, c.H, c.Tq, c.D})
                       : q1c.slice(0, 1, nq + 1).clone().view({c.B, c.H, c.Tq, c.D});
        q.requires_grad_(true);
        if (odd) {
          EXPECT_EQ(q.storage_offset(), 1);
        } else {
          EXPECT_EQ(reinterpret_cast<uintptr_t>(q.data_ptr()) % 4, 0u);
        }
        Tensor kk = k.detach().clone(), vv = v.detach().clone();
        kk.requires_grad_(true);
        vv.requires_grad_(true);
        Tensor y = scaled_dot_product_attention(q, kk, vv, causal);
        y.backward(g);
        auto& r = runs[odd];
        r.push_back(y.detach().to_double_vector());
        r.push_back(q.grad().to_double_vector());
        r.push_back(kk.grad().to_double_vector());
        r.push_back(vv.grad().to_double_vector());
      }
      for (size_t i = 0; i < runs[0].size(); ++i) {
        ASSERT_EQ(runs[0][i].size(), runs[1][i].size());
        const char* what = i == 0 ? "output" : i == 1 ? "dq" : i == 2 ? "dk" : "dv";
        if (tiles) {
          double num = 0, den = 0;
          for (size_t j = 0; j < runs[0][i].size(); ++j) {
            const double d = runs[1][i][j] - runs[0][i][j];
            num += d * d;
            den += runs[0][i][j] * runs[0][i][j];
          }
          EXPECT_LE(std::sqrt(num / std::max(den, 1e-300)), kTolBf16)
              << what << " (AMX tiles: compared within the bf16 tolerance)";
          continue;
        }
        size_t differ = 0;
        for (size_t j = 0; j < runs[0][i].size(); ++j) {
          const double a = runs[0][i][j], b = runs[1][i][j];
          differ += (a != b || std::signbit(a) != std::signbit(b)) ? 1 : 0;
        }
        EXPECT_EQ(differ, 0u) << what;
      }
    }
  }
}

TEST(CpuVsRef, AttentionPackedQkv) {
  // attention_packed_qkv reads the heads out of [B, T, 3C] and writes [B, T, C] in place on the
  // cpu backend (strided GEMM operands and outputs); the ref backend gets contiguous copies. At
  // T = 256 a chunk is 4 heads, so 5 heads per batch element run chunks of 4 and 1.
  struct Case {
    int64_t B, T, H, D;
  };
  for (const Case& c : {Case{2, 9, 3, 8}, Case{1, 16, 4, 8}, Case{2, 256, 5, 8}}) {
    for (DType dt : {DType::fp32, DType::bf16}) {
      const Tensor qkv = rnd({c.B, c.T, 3 * c.H * c.D}, 91, dt);
      for (bool causal : {true, false}) {
        expect_cpu_matches_ref(
            fmt::format("{} packed attention B{} T{} H{}{}", name(dt), c.B, c.T, c.H,
                        causal ? " causal" : ""),
            [c, causal](const V& a) { return attention_packed_qkv(a[0], c.H, causal); }, {qkv},
            dt == DType::bf16 ? kTolBf16 : kTolFp32);
      }
    }
  }
}

TEST(CpuVsRef, AttentionPackedQkvIsTheSplitAttentionBitForBit) {
  // Against splitting qkv into heads, scaled_dot_product_attention and merging the heads (the
  // copies attention_packed_qkv saves): the same output and qkv gradient bit for bit on the cpu
  // backend, in fp32, bf16 and fp16, chunked (T = 256) or not, one thread and two.
  struct Case {
    int64_t B, T, H, D;
  };
  const int prev_threads = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : {Case{2, 9, 3, 8}, Case{3, 32, 4, 16}, Case{2, 256, 5, 8}}) {
      for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
        SCOPED_TRACE(fmt::format("{} B{} T{} H{} threads {}", name(dt), c.B, c.T, c.H, threads));
        const int64_t C = c.H * c.D;
        const Tensor qkv0 = rnd({c.B, c.T, 3 * C}, 92, dt), g = rnd({c.B, c.T, C}, 93, dt);
        auto run = [&](bool packed) {
          Tensor qkv = qkv0.detach().clone();
          qkv.requires_grad_(true);
          Tensor y;
          if (packed) {
            y = attention_packed_qkv(qkv, c.H, true);
          } else {
            const std::vector<Tensor> p = chunk(qkv, 3, 2);
            auto heads = [&](const Tensor& t) {
              return t.reshape({c.B, c.T, c.H, c.D}).transpose(1, 2);
            };
            y = scaled_dot_product_attention(heads(p[0]), heads(p[1]), heads(p[2]), true)
                    .transpose(1, 2)
                    .reshape({c.B, c.T, C});
          }
          y.backward(g);
          return std::pair<Tensor, Tensor>{y.detach(), qkv.grad()};
        };
        const auto [y1, g1] = run(true);
        const auto [y0, g0] = run(false);
        EXPECT_TRUE(y1.is_contiguous());
        EXPECT_EQ(y1.to_double_vector(), y0.to_double_vector());
        EXPECT_EQ(g1.to_double_vector(), g0.to_double_vector());
      }
    }
  }
  set_num_threads(prev_threads);
}

}  // namespace
}  // namespace mixp
