// When CpuBackend::matmul runs mixp's bf16 GEMM instead of oneDNN's (gemm_bf16.h). Kept out of
// gemm_bf16_avx512.cpp so that deciding never executes an AVX-512 instruction.
#include "backend/cpu/gemm_bf16.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "backend/cpu/cpu_bf16.h"
#include "mixp/format/cpu_features.h"
#include "mixp/tensor/tensor.h"

namespace mixp::cpu {
namespace {

// MIXP_CPU_GEMM=onednn sends every bf16 GEMM to oneDNN (to compare the two, or to rule this
// kernel out); unset or "auto": mixp's kernel where own_bf16_gemm says so; anything else is an
// error (std::invalid_argument, at the first bf16 GEMM).
bool kernel_enabled() {
  static const bool on = [] {
    const CpuFeatures& f = cpu_features();
    const char* e = std::getenv("MIXP_CPU_GEMM");
    if (e && *e && std::strcmp(e, "onednn") != 0 && std::strcmp(e, "auto") != 0)
      throw std::invalid_argument(
          std::string("MIXP_CPU_GEMM must be 'onednn' (every GEMM on ") +
          "oneDNN) or 'auto' (mixp's bf16 kernel where it is faster); got '" + e + "'");
    const bool forced_off = e && std::strcmp(e, "onednn") == 0;
    return !forced_off && simd_tier() == SimdTier::avx512 && f.avx512_bf16 && !f.amx_bf16 &&
           native_bf16();
  }();
  return on;
}

// A row-major A is read in place as 32-bit pairs: an even row stride and a 4-byte aligned start.
// A column-major A and either layout of B are packed (16-bit loads: any stride, any start).
bool a_layout(const Bf16Gemm& g) {
  const bool aligned = reinterpret_cast<uintptr_t>(g.a) % 4 == 0;
  return (g.a_cs == 1 && g.a_rs % 2 == 0 && aligned) || g.a_rs == 1;
}

}  // namespace

void* gemm_bf16_scratch(int slot, size_t bytes) {
  // 64-byte aligned blocks from the aligned operator new, freed by its matching delete.
  struct Free {
    void operator()(void* p) const { ::operator delete (p, std::align_val_t{64}); }
  };
  struct Buffer {
    std::unique_ptr<void, Free> data;
    size_t size = 0;
  };
  static thread_local Buffer buffers[4];
  Buffer& b = buffers[slot];
  if (b.size < bytes) {
    b.data.reset();  // free first: the old and the new buffer need not coexist
    b.size = 0;      // (and a failed allocation leaves an empty buffer, not a stale size)
    b.data.reset(::operator new (bytes, std::align_val_t{64}));
    b.size = bytes;
  }
  return b.data.get();
}

Bf16Gemm describe_bf16_gemm(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
                            bool accumulate) {
  Bf16Gemm g;
  g.m = dst.shape()[0];
  g.n = dst.shape()[1];
  g.k = a.shape()[1];
  g.a = static_cast<const uint16_t*>(a.data_ptr());
  g.a_rs = a.strides()[0];
  g.a_cs = a.strides()[1];
  g.b = static_cast<const uint16_t*>(b.data_ptr());
  g.b_rs = b.strides()[0];
  g.b_cs = b.strides()[1];
  g.dst = dst.data_ptr();
  g.ldd = dst.strides()[0];
  g.dst_bf16 = dst.dtype() == DType::bf16;
  g.accumulate = accumulate;
  if (bias.defined()) {
    g.bias = bias.data_ptr();
    g.bias_stride = bias.strides()[0];
    g.bias_bf16 = bias.dtype() == DType::bf16;
  }
  return g;
}

void* gemm_bf16_scratch_or_null(int slot, size_t bytes) noexcept {
  try {
    return gemm_bf16_scratch(slot, bytes);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

void gemm_bf16_out_of_memory() {
  throw std::bad_alloc();
}

bool own_bf16_gemm(const Bf16Gemm& g) {
  if (!kernel_enabled()) return false;
  // Packing B pays for itself over the rows of A: below 512 rows of a row-major A (the forward
  // and input-gradient GEMMs of 256 tokens) oneDNN is faster, and below about 4M multiply-adds
  // oneDNN's small-matrix kernels are; a column-major A (the weight gradient, M the layer's
  // width) wins from 256 tokens up (bench/bench_gemm_bf16_shapes.cpp --tokens=256|512|2048).
  if (g.m < 8 || g.n < 16 || g.k < 32 || g.m * g.n * g.k < (int64_t{1} << 22)) return false;
  if (g.a_cs == 1 && g.m < 512) return false;
  return g.k % 2 == 0 && a_layout(g) && (g.b_cs == 1 || g.b_rs == 1);
}

}  // namespace mixp::cpu
