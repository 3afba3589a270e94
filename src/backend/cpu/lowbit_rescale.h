// The packed models' rescale of s32 sums (internal; backend/lowbit_gemm.h, rescale_s32;
// docs/architecture.md 6.6): one tile of 16 positions at a time.
#pragma once
#include <cstdint>

namespace mixp::cpu::rescale {

// Sample n's positions [p0, p0 + pn) (pn <= 16), every channel; the arguments of rescale_s32.
using TileFn = void (*)(float* dst, const int32_t* acc, int64_t n, int64_t p0, int64_t pn,
                        int64_t P, int64_t O, const int32_t* off, const float* mult,
                        const float* bias);
void tile_generic(float* dst, const int32_t* acc, int64_t n, int64_t p0, int64_t pn, int64_t P,
                  int64_t O, const int32_t* off, const float* mult, const float* bias);
void tile_avx512(float* dst, const int32_t* acc, int64_t n, int64_t p0, int64_t pn, int64_t P,
                 int64_t O, const int32_t* off, const float* mult, const float* bias);

}  // namespace mixp::cpu::rescale
