#!/usr/bin/env bash
# The demo: install, build, a short tour (how a value is stored in each format, what this machine
# supports), then mixp's main job: the precision study on Fashion-MNIST, which trains the same
# model in every precision of the seeds' list (fp32, tf32, bf16, fp16, bf16-pure, fp8, int8-qat)
# and writes a report. On a 2-core AVX-512 machine the study took 17 s (the whole demo 18 s with
# the build up to date; docs/study.md); it is meant to stay within 5 minutes on any 2-core machine.
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
echo "   The mlp on Fashion-MNIST, one epoch per precision (fp32 ... fp8, int8-qat), same data and"
echo "   initialisation for all."
start=$(date +%s)
$mixp compare --out "$out" "$@"
echo
echo "The study took $(( $(date +%s) - start )) s. Open the report in a browser:"
echo "  $(cd "$out" && pwd)/report.html"
echo "(also $out/report.md, $out/results.json, $out/results.csv; docs/precision-guide.md explains the choices)"
