// The normalization family's one scalar form (src/backend/math/norm_math.h): the ref backend runs
// it in double on one thread (bit for bit what the rows below give), the cuda kernels
// (src/backend/cuda/cuda_norm.cu) in fp32 on a block of threads that each walk the row with a
// stride and meet in block_reduce's tree. Here the block is simulated with std::threads and a
// barrier, the tree in the same order, and compared with the ref backend.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/math/norm_math.h"
#include "mixp/backend/backend.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"

namespace mixp {
namespace {

constexpr int64_t kRows = 5, kN = 77;
constexpr int kThreads = 8;  // a small block: the same walk and tree as cuda's 256

Backend& ref() {
  return get_backend(BackendKind::ref);
}
Tensor rand_t(const Shape& s, uint64_t seed, DType dt, double scale = 1.0) {
  Generator g(seed);
  return (randn(s, g) * scale).to(dt).contiguous();
}

// Runs fn(thread, total) on kThreads threads, as a cuda block: total(v) is block_reduce<false>'s
// tree sum of every thread's v (cuda_block_reduce.cuh), which each thread gets.
template <class Fn>
void run_block(Fn fn) {
  std::vector<float> buf(kThreads);
  std::barrier sync(kThreads);
  auto total = [&](int t, float v) {
    buf[static_cast<size_t>(t)] = v;
    sync.arrive_and_wait();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (t < s) buf[static_cast<size_t>(t)] += buf[static_cast<size_t>(t + s)];
      sync.arrive_and_wait();
    }
    const float r = buf[0];
    sync.arrive_and_wait();
    return r;
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] { fn(t, [&, t](float v) { return total(t, v); }); });
  for (std::thread& th : ts) th.join();
}

void expect_close(const Tensor& want, const std::vector<float>& got, double tol, const char* what) {
  const std::vector<double> w = want.to_double_vector();
  ASSERT_EQ(w.size(), got.size()) << what;
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_NEAR(got[i], w[i], tol * (1.0 + std::abs(w[i]))) << what << " element " << i;
}

TEST(NormMath, TheRefBackendRunsTheSharedRowsInDouble) {
  // The ref's LayerNorm and RMSNorm, forward and backward, are the shared rows bit for bit: the
  // family's arithmetic is written once (norm_math.h).
  const Tensor x = rand_t({kRows, kN}, 1, DType::fp64, 3.0), w = rand_t({kN}, 2, DType::fp64);
  const Tensor b = rand_t({kN}, 3, DType::fp64), g = rand_t({kRows, kN}, 4, DType::fp64);
  const auto o64 = TensorOptions{.dtype = DType::fp64};
  Tensor y = Tensor::empty({kRows, kN}, o64), mean = Tensor::empty({kRows}, o64);
  Tensor rstd = Tensor::empty({kRows}, o64), dx = Tensor::empty({kRows, kN}, o64);
  Tensor dw = Tensor::empty({kN}, o64), db = Tensor::empty({kN}, o64);
  ref().layer_norm(y, mean, rstd, x, w, b, 1e-5);
  ref().layer_norm_backward(dx, dw, db, g, x, w, mean, rstd);
  Tensor ry = Tensor::empty({kRows, kN}, o64), rr = Tensor::empty({kRows}, o64);
  Tensor rdx = Tensor::empty({kRows, kN}, o64), rdw = Tensor::empty({kN}, o64);
  ref().rms_norm(ry, rr, x, w, 1e-6);
  ref().rms_norm_backward(rdx, rdw, g, x, w, rr);

  const double* xp = x.data<double>();
  const double* wp = w.data<double>();
  const double* bp = b.data<double>();
  const double* gp = g.data<double>();
  const auto one = [](double v) { return v; };
  std::vector<double> pdw(kN, 0.0), pdb(kN, 0.0), prdw(kN, 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    const kern::RowLoop L{kN, 0, 1};
    auto xr = [&](int64_t j) { return xp[r * kN + j]; };
    auto gr = [&](int64_t j) { return gp[r * kN + j]; };
    auto wj = [&](int64_t j) { return wp[j]; };
    auto bj = [&](int64_t j) { return bp[j]; };
    double m = 0, rs = 0;
    kern::layer_norm_row(
        L, 1e-5, xr, true, wj, true, bj,
        [&](int64_t j, double v) { EXPECT_EQ(v, y.data<double>()[r * kN + j]) << r << "," << j; },
        one, m, rs);
    EXPECT_EQ(m, mean.data<double>()[r]);
    EXPECT_EQ(rs, rstd.data<double>()[r]);
    kern::layer_norm_backward_row(
        L, m, rs, xr, gr, true, wj,
        [&](int64_t j, double pw, double pb) {
          pdw[static_cast<size_t>(j)] += pw;
          pdb[static_cast<size_t>(j)] += pb;
        },
        [&](int64_t j, double v) { EXPECT_EQ(v, dx.data<double>()[r * kN + j]) << r << "," << j; },
        one);
    double rrs = 0;
    kern::rms_norm_row(
        L, 1e-6, xr, true, wj,
        [&](int64_t j, double v) { EXPECT_EQ(v, ry.data<double>()[r * kN + j]) << r << "," << j; },
        one, rrs);
    EXPECT_EQ(rrs, rr.data<double>()[r]);
    kern::rms_norm_backward_row(
        L, rrs, xr, gr, true, wj, [&](int64_t j, double pw) { prdw[static_cast<size_t>(j)] += pw; },
        [&](int64_t j, double v) {
          EXPECT_EQ(v, rdx.data<double>()[r * kN + j]) << r << "," << j;
        },
        one);
  }
  for (int64_t j = 0; j < kN; ++j) {
    EXPECT_EQ(pdw[static_cast<size_t>(j)], dw.data<double>()[j]);
    EXPECT_EQ(pdb[static_cast<size_t>(j)], db.data<double>()[j]);
    EXPECT_EQ(prdw[static_cast<size_t>(j)], rdw.data<double>()[j]);
  }
}

TEST(CudaNormMath, LayerNormOnABlockOfThreadsMatchesTheRefBackend) {
  const Tensor x = rand_t({kRows, kN}, 5, DType::fp32, 3.0), w = rand_t({kN}, 6, DType::fp32);
  const Tensor b = rand_t({kN}, 7, DType::fp32), g = rand_t({kRows, kN}, 8, DType::fp32);
  Tensor y = Tensor::empty({kRows, kN}), mean = Tensor::empty({kRows});
  Tensor rstd = Tensor::empty({kRows}), dx = Tensor::empty({kRows, kN});
  Tensor dw = Tensor::empty({kN}), db = Tensor::empty({kN});
  ref().layer_norm(y, mean, rstd, x, w, b, 1e-5);
  ref().layer_norm_backward(dx, dw, db, g, x, w, mean, rstd);

  // cuda_norm.cu's layer_norm_kernel and layer_norm_backward_kernel, one block per row.
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* bp = b.data<float>();
  const float* gp = g.data<float>();
  std::vector<float> cy(kRows * kN), cm(kRows), cr(kRows), cdx(kRows * kN);
  for (int64_t r = 0; r < kRows; ++r) {
    run_block([&](int t, auto total) {
      const kern::RowLoop L{kN, t, kThreads};
      auto xr = [&](int64_t j) { return xp[r * kN + j]; };
      auto wj = [&](int64_t j) { return wp[j]; };
      float mu = 0.0f, rs = 0.0f;
      kern::layer_norm_row(
          L, 1e-5f, xr, true, wj, true, [&](int64_t j) { return bp[j]; },
          [&](int64_t j, float v) { cy[static_cast<size_t>(r * kN + j)] = v; }, total, mu, rs);
      if (t == 0) {
        cm[static_cast<size_t>(r)] = mu;
        cr[static_cast<size_t>(r)] = rs;
      }
      kern::layer_norm_backward_row(
          L, mu, rs, xr, [&](int64_t j) { return gp[r * kN + j]; }, true, wj,
          [](int64_t, float, float) {},
          [&](int64_t j, float v) { cdx[static_cast<size_t>(r * kN + j)] = v; }, total);
    });
  }
  // layer_norm_params_kernel: one thread per column, rows in order.
  std::vector<float> cdw(kN), cdb(kN);
  for (int64_t j = 0; j < kN; ++j) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t r = 0; r < kRows; ++r) {
      sw += gp[r * kN + j] * kern::layer_norm_xhat(xp[r * kN + j], cm[static_cast<size_t>(r)],
                                                   cr[static_cast<size_t>(r)]);
      sb += gp[r * kN + j];
    }
    cdw[static_cast<size_t>(j)] = sw;
    cdb[static_cast<size_t>(j)] = sb;
  }
  expect_close(y, cy, 1e-5, "y");
  expect_close(mean, cm, 1e-5, "mean");
  expect_close(rstd, cr, 1e-5, "rstd");
  expect_close(dx, cdx, 1e-4, "dx");
  expect_close(dw, cdw, 1e-4, "dweight");
  expect_close(db, cdb, 1e-5, "dbias");
}

}  // namespace
}  // namespace mixp
