// OpenMP's wait policy for the commands that train (docs/benchmarks.md, "fp32 training"): with
// libgomp's default, a thread that reaches a barrier first spins for a while before it sleeps. On
// a loaded machine with few cores the spinning thread takes the time slice its partner needs to
// reach the barrier, and a 2-thread training step measured 20-30x slower than with
// OMP_WAIT_POLICY=passive. libgomp reads the variable once, when it is loaded, so setting it from
// inside the process is too late: the process re-executes itself with the variable set.
#pragma once

namespace mixp::cli {

// When OMP_WAIT_POLICY is not set, sets it to "passive" and re-executes this program with the
// same arguments (/proc/self/exe, /proc/self/cmdline). Returns normally when the variable was
// already set (the user's choice is kept) or when re-executing is not possible.
void ensure_passive_omp_wait();

}  // namespace mixp::cli
