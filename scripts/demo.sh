#!/usr/bin/env bash
# The demo: install, build, then show how numbers are stored in each format and what this machine
# supports. (It grows into the precision study as training lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target mixp_cli
mixp=build/release/mixp
echo; echo "== How is pi stored in each format?  (mixp formats 3.14159265)"
$mixp formats 3.14159265
echo; echo "== A value too large for fp16 and fp8_e4m3  (mixp formats 70000)"
$mixp formats --formats fp32,bf16,fp16,fp8_e4m3,fp8_e5m2 70000
echo; echo "== A tiny gradient: which formats keep it?  (mixp formats 1e-7)"
$mixp formats --formats fp32,bf16,fp16,fp8_e4m3,fp8_e5m2 1e-7
echo; echo "== Every format at a glance  (mixp formats --table)"
$mixp formats --table
echo; echo "== This machine  (mixp doctor)"
$mixp doctor
