// MIXP_HD marks the kernel math that is compiled twice: by nvcc for the GPU kernels
// (src/backend/cuda/*.cu) and by the host C++ compiler for the ref backend and tests/cuda, which
// checks it against the ref backend on any machine (docs/cuda.md, "What is tested where"). Only
// what both compilers accept goes in these headers: no host-only library calls, no CUDA
// intrinsics (src/backend/math/: the scalar math ref and cuda share; cuda/math/: cuda's own).
#pragma once

#if defined(__CUDACC__)
#define MIXP_HD __host__ __device__ inline
#else
#define MIXP_HD inline
#endif
