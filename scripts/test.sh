#!/usr/bin/env bash
# The test command: install what is needed, build the release preset, run every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" "$@"
