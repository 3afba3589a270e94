// fp8-block's three GEMMs at shapes where this CPU runs them in one pass (mixp::gemm_chunk_scaled,
// and the wgrad operands quantized without a transpose: fp8_block_columns_factors) give the bits
// of the chunk loop built from the public pieces: the operands quantized along each GEMM's
// reduction dimension (block_scaled_fake_quantize_factors), one bf16 gemm per 128-wide chunk and
// block_scaled_accumulate, which is what src/amp/block_linear.cpp runs where there is no fused
// kernel (hosts with AMX, small shapes). On those hosts the test checks that path the same way.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "mixp/amp/fp8_linear.h"
#include "mixp/backend/gemm.h"
#include "mixp/format/block_scaled.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/fp8_recipe.h"

namespace mixp {
namespace {

using Vec = std::vector<float>;

Vec transpose(const Vec& a, int64_t r, int64_t c) {
  Vec t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[static_cast<size_t>(j * r + i)] = a[static_cast<size_t>(i * c + j)];
  return t;
}

struct Quantized {
  Tensor v;  // bf16 E4M3 values [R, C]
  std::vector<float> tiles;
  int tile_rows;
};
Quantized quantize(const Vec& x, int64_t r, int64_t c, int tile_rows) {
  Quantized q{empty({r, c}, {.dtype = DType::bf16}), {}, tile_rows};
  const BlockScaledOptions o{.scheme = BlockScheme::fp8_block, .tile_rows = tile_rows};
  q.tiles = block_scaled_fake_quantize_factors(
                x, r, c, o, std::span<uint16_t>(static_cast<uint16_t*>(q.v.data_ptr()), x.size()))
                .tile_scales;
  return q;
}

// a [M, K] . b [N, K]^T as the chunk loop computes it, from the operands' bf16 values (any
// layout) and their chunk scales: ta(m, c), tb(n, c).
template <class TileA, class TileB>
Vec chunk_loop(const Tensor& av, TileA ta, const Tensor& bv, TileB tb, int64_t M, int64_t N,
               int64_t K) {
  const int64_t C = (K + 127) / 128;
  Tensor y = empty({M, N}), part = empty({M, N});
  std::vector<float> sa(static_cast<size_t>(M)), sb(static_cast<size_t>(N));
  for (int64_t c = 0; c < C; ++c) {
    const int64_t k0 = c * 128, k1 = std::min(K, k0 + 128);
    gemm(part, av.slice(1, k0, k1), bv.slice(1, k0, k1).t());
    for (int64_t m = 0; m < M; ++m) sa[static_cast<size_t>(m)] = ta(m, c);
    for (int64_t n = 0; n < N; ++n) sb[static_cast<size_t>(n)] = tb(n, c);
    block_scaled_accumulate(std::span<float>(y.data<float>(), static_cast<size_t>(M * N)),
                            std::span<const float>(part.data<float>(), static_cast<size_t>(M * N)),
                            M, N, sa, sb, c == 0);
  }
  return y.to_vector<float>();
}

// Both operands quantized along K (a with 1x128 tiles, b with b_tile_rows x 128).
Vec chunk_loop(const Vec& a, const Vec& b, int b_tile_rows, int64_t M, int64_t N, int64_t K) {
  const Quantized qa = quantize(a, M, K, 1), qb = quantize(b, N, K, b_tile_rows);
  const int64_t C = (K + 127) / 128;
  return chunk_loop(
      qa.v, [&](int64_t m, int64_t c) { return qa.tiles[static_cast<size_t>(m * C + c)]; }, qb.v,
      [&](int64_t n, int64_t c) { return qb.tiles[static_cast<size_t>((n / b_tile_rows) * C + c)]; },
      M, N, K);
}

void expect_same_bits(const Vec& got, const Vec& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " differs at " << i << ": " << got[i] << " vs " << want[i];
}

TEST(Fp8BlockChunks, OnePassGemmsGiveTheChunkLoopsBits) {
  // Tokens 512, in 256 (two chunks), out 640 (five 128-row weight tiles, not a multiple of the
  // kernel's 48 columns); values spread over several binades so the tiles' scales differ.
  const int64_t M = 512, K = 256, N = 640;
  Generator gen(5);
  auto spread = [&](int64_t r, int64_t c, float s) {
    Vec v = randn({r, c}, gen).to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] *= s * static_cast<float>(1 + (i * 7919) % 97);
    return v;
  };
  const Vec xs = spread(M, K, 0.01f), ws = spread(N, K, 0.001f), gs = spread(M, N, 1e-4f);
  amp::Fp8LinearMeta meta(amp::Fp8Recipe::fp8_block());
  Tensor x = from_vector(xs, Shape{M, K}).requires_grad_();
  Tensor w = from_vector(ws, Shape{N, K}).requires_grad_();
  Tensor y = amp::fp8_linear(x, w, Tensor(), Activation::none, meta);
  sum(y * from_vector(gs, Shape{M, N})).backward();
  if (!gemm_chunk_scaled_runs(M, N, K)) std::printf("(no fused kernel here: the chunk loop is checked)\n");
  expect_same_bits(y.to_vector<float>(), chunk_loop(xs, ws, 128, M, N, K), "y");
  // dx = g . W: W's 128x128 values reused as W^T (a transposed view and tile grid, as the layer
  // keeps them: the same layout for the chunk GEMMs on every host).
  const Quantized qg = quantize(gs, M, N, 1), qw = quantize(ws, N, K, 128);
  const int64_t CN = N / 128, CK = K / 128;
  expect_same_bits(
      x.grad().to_vector<float>(),
      chunk_loop(
          qg.v, [&](int64_t m, int64_t c) { return qg.tiles[static_cast<size_t>(m * CN + c)]; },
          qw.v.t(), [&](int64_t k, int64_t c) { return qw.tiles[static_cast<size_t>(c * CK + k / 128)]; },
          M, K, N),
      "dx");
  expect_same_bits(w.grad().to_vector<float>(),
                   chunk_loop(transpose(gs, M, N), transpose(xs, M, K), 1, N, K, M), "dw");
}

}  // namespace
}  // namespace mixp
