// MIXP_HD marks the kernel math that is compiled twice: by nvcc for the GPU kernels
// (src/backend/cuda/*.cu) and by the host C++ compiler for tests/cuda, which checks it against the
// ref backend on any machine (docs/cuda.md, "What is tested where"). Only what both compilers
// accept goes in these headers: no host-only library calls, no CUDA intrinsics.
#pragma once

#if defined(__CUDACC__)
#define MIXP_HD __host__ __device__ inline
#else
#define MIXP_HD inline
#endif
