#!/bin/bash
# llm.c's CPU trainer step time on GPT-2 124M (vocab 50257, random weights written here in llm.c's
# model layout), for the ratios in docs/benchmarks.md "GPT-2 124M step time".
# Usage: bench/peers/llmc/llmc_step_time.sh LLMC_CHECKOUT B T [STEPS] [THREADS]
set -euo pipefail
llmc=${1:?usage: $0 LLMC_CHECKOUT B T [STEPS] [THREADS]}
B=${2:?B}; T=${3:?T}; steps=${4:-3}; threads=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# llm.c's Makefile flags for its CPU build.
gcc -Ofast -march=native -fopenmp -Wno-unused-result -I"$llmc" "$here/time_llmc.c" -lm -o "$work/t"
/usr/bin/python3 - "$work" <<'PY'
import struct, sys, numpy as np
d = sys.argv[1]
V, Vp, C, L, T = 50257, 50304, 768, 12, 1024
sizes = [Vp*C, T*C, L*C, L*C, L*3*C*C, L*3*C, L*C*C, L*C, L*C, L*C, L*4*C*C, L*4*C, L*C*4*C, L*C, C, C]
rng = np.random.default_rng(0)
with open(d + "/gpt2_124M.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240326, 3, T, V, L, 12, C, Vp, *([0] * 248)))
    for i, n in enumerate(sizes):
        ones = i in (2, 8, 14)
        a = np.ones(n, np.float32) if ones else (rng.standard_normal(n, dtype=np.float32) * 0.02)
        f.write(a.tobytes())
PY
OMP_NUM_THREADS=$threads "$work/t" "$work/gpt2_124M.bin" "$B" "$T" "$steps" | tail -1
