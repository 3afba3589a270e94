#!/usr/bin/env bash
# The sanitizer run (docs/architecture.md 6.10): build the `asan` preset (ASan + UBSan, -O1 -g,
# assertions on, no benchmarks) into build/asan and run every test under it, the CLI end-to-end
# tests included (they run the instrumented `mixp`). Any report fails the run: UBSan does not
# recover, ASan aborts, and LeakSanitizer checks each test process at exit. Not part of CI: a cold
# build takes about three times as long as the release build (see docs/engine.md, "Sanitizers").
# Extra arguments go to ctest (e.g. -R Attention, -L ops).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
jobs=$(nproc)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs" "$@"
