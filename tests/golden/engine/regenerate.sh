#!/usr/bin/env bash
# Records the golden runs of this host's CPU class (tests/golden/engine/<class>/<run>.json, the
# class from mixp::cpu_class(), src/format/cpu_features.cpp): the one command to record a new
# class on a machine of that class, or to rewrite a class's files for a change that is meant to
# alter training results (say why in the commit message; docs/engine.md, Golden runs).
#
#   tests/golden/engine/regenerate.sh                          every run (stale files removed)
#   tests/golden/engine/regenerate.sh --gtest_filter='*gpt_*'  some runs
#
# Needs the release build (a debug build skips the runs). A class is recorded on a machine of that
# class (the test refuses MIXP_GOLDEN_CLASS naming another); a change meant to alter results
# rewrites every recorded class, one machine of each (or removes the classes it cannot rewrite:
# their hosts then check the nearest class within tolerance).
set -euo pipefail
cd "$(dirname "$0")/../../.."
cmake --build --preset release --target mixp_cli mixp_test_golden_runs
# This host's class: `mixp doctor --json`'s cpu.class (mixp::cpu_class()).
cls="${MIXP_GOLDEN_CLASS:-$(build/release/mixp doctor --json | grep -o '"class": *"[^"]*"' | head -n 1 | sed 's/.*"\([^"]*\)"$/\1/')}"
if [[ -z "$cls" ]]; then
  echo "regenerate.sh: error: cannot read this host's CPU class from mixp doctor --json" >&2
  exit 1
fi
echo "recording class $cls into tests/golden/engine/$cls/"
filter='--gtest_filter=Engine/GoldenRunTest.*'
if [[ $# -eq 0 ]]; then
  rm -f "tests/golden/engine/$cls"/*.json
else
  filter="$1"
  shift
fi
MIXP_GOLDEN_CLASS="$cls" MIXP_UPDATE_GOLDEN=1 build/release/mixp_test_golden_runs "$filter" "$@"
git status --short tests/golden/engine
