#!/usr/bin/env bash
# The test command: install what is needed, build the release preset, run every test with CTest.
# MIXP_WERROR=ON (set by .ci/run) makes every compiler warning in mixp's own sources an error.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
jobs=$(nproc)
cmake --preset release -DMIXP_WERROR="${MIXP_WERROR:-OFF}" >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" "$@"
