#!/bin/bash
# Does llm.c itself read the model files mixp writes? Builds llm.c's CPU trainer code (train_gpt2.c,
# from a checkout given as $1) around check_mixp.c, makes a GPT-2 with fixed random weights in
# PyTorch (gpt2_reference.py, Hugging Face layout), converts it with `mixp convert --layout llmc`,
# and prints PyTorch's loss next to the loss llm.c computes from mixp's file on the same batch.
# Usage: bench/peers/llmc/llmc_load_check.sh LLMC_CHECKOUT [MIXP_BINARY]
set -euo pipefail
llmc=${1:?usage: $0 LLMC_CHECKOUT [MIXP_BINARY]}
here=$(cd "$(dirname "$0")" && pwd)
mixp=${2:-$here/../../../build/release/mixp}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -fopenmp -I"$llmc" "$here/check_mixp.c" -lm -o "$work/check_mixp"
/usr/bin/python3 "$here/../gpt2_reference.py" --out "$work/ref" --vocab 100 --context 32 \
  --width 64 --layers 2 --heads 2 --batch 2 --seq 16 | sed 's/^/pytorch: /'
/usr/bin/python3 - "$work" <<'PY'
import json, struct, sys
d = sys.argv[1]
b = open(d + "/ref/reference.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
get = lambda k: b[8 + n + h[k]["data_offsets"][0]:8 + n + h[k]["data_offsets"][1]]
open(d + "/xy.bin", "wb").write(get("x") + get("y"))
PY
"$mixp" convert "$work/ref/model.safetensors" -o "$work/m.bin" --layout llmc --heads 2 >/dev/null
"$work/check_mixp" "$work/m.bin" "$work/xy.bin" 2 16 | tail -1
