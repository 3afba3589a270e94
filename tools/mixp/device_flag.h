// `--device cpu|cuda|cuda:N` of the commands that compute (train): the device the run's tensors
// go on (a DefaultDeviceGuard around the run, docs/cuda.md). Parsing only; the library decides.
#pragma once
#include <string>

#include "mixp/tensor/device.h"

namespace mixp::cli {

inline constexpr const char* kDeviceHelp =
    "where to compute: cpu (default), cuda or cuda:N (an NVIDIA GPU; needs a mixp built with the "
    "CUDA backend, see mixp doctor and docs/cuda.md; under mpirun, cuda gives each rank of a host "
    "its own GPU, cuda:<local rank>)";

// What `mixp train --device` adds: the guarded test device.
inline constexpr const char* kGuardedDeviceHelp =
    "; guarded: a test device, host memory that only backend kernels may touch (a run on it "
    "proves that it reads no device memory on the host, as a GPU run must not: docs/distributed.md)";

// "cpu" -> cpu; "cuda" -> cuda:0, or under mpirun cuda:<the rank's local rank> (one GPU per
// rank, as torchrun's LOCAL_RANK; more ranks on a host than GPUs is an error); "cuda:N" ->
// cuda:N; "guarded" -> the guarded test device
// where `allow_guarded`. Anything else is a UsageError (exit 2). A cuda device that this build
// or this machine cannot use throws std::runtime_error (exit 1) with cuda_status()'s reason and
// what to do.
Device parse_device_flag(const std::string& s, bool allow_guarded = false);

}  // namespace mixp::cli
