#!/usr/bin/env bash
# The demo: install, build, a short tour (how a value is stored in each format, what this machine
# supports), then mixp's main job: the precision study on Fashion-MNIST, which trains the same
# model in every precision this build has and writes a report. The study takes a few minutes
# (about 2-4 on a 2-core machine; docs/study.md).
#
# MIXP_DEMO_OUT names the report folder (default mixp-study, in the repository root); extra
# arguments go to `mixp compare` (e.g. scripts/demo.sh --seeds 3).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target mixp_cli
mixp=build/release/mixp
out="${MIXP_DEMO_OUT:-mixp-study}"

echo; echo "== How is pi stored?  (mixp formats 3.14159265)"
$mixp formats --formats fp64,fp32,tf32,bf16,fp16,fp8_e4m3,int8 3.14159265
echo; echo "== A value too large for fp16 and fp8_e4m3, fine in bf16  (mixp formats 70000)"
$mixp formats --formats fp32,bf16,fp16,fp8_e4m3,fp8_e5m2 70000
echo; echo "== This machine  (mixp doctor)"
$mixp doctor

echo; echo "== The precision study  (mixp compare --out $out)"
echo "   The mlp on Fashion-MNIST, one epoch per precision, same data and initialisation for all."
start=$(date +%s)
$mixp compare --out "$out" "$@"
echo
echo "The study took $(( $(date +%s) - start )) s. Open the report in a browser:"
echo "  $(cd "$out" && pwd)/report.html"
echo "(also $out/report.md, $out/results.json, $out/results.csv; docs/precision-guide.md explains the choices)"
