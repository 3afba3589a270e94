#!/usr/bin/env bash
# Rewrites the golden runs (tests/golden/engine/<run>.json) from the current code, for a change that
# is meant to alter training results; say why in the commit message (docs/engine.md, Golden runs).
#
#   tests/golden/engine/regenerate.sh                          every run (stale files removed)
#   tests/golden/engine/regenerate.sh --gtest_filter='*gpt_*'  some runs
#
# Needs the release build (a debug build skips the runs) and this machine's CPU tier is recorded
# in every file: regenerate on the kind of machine CI runs on.
set -euo pipefail
cd "$(dirname "$0")/../../.."
cmake --build --preset release --target mixp_cli mixp_test_golden_runs
filter='--gtest_filter=Engine/*'
if [[ $# -eq 0 ]]; then
  rm -f tests/golden/engine/*.json
else
  filter="$1"
  shift
fi
MIXP_UPDATE_GOLDEN=1 build/release/mixp_test_golden_runs "$filter" "$@"
git status --short tests/golden/engine
