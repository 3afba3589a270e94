#!/usr/bin/env bash
# Runs the PyTorch peer for mlp, cnn and gpt in fp32 and bf16 and prints a table.
#
#   bench/peers/run_matrix.sh [OUT.jsonl]
#
# Environment (all optional):
#   MODELS="mlp cnn gpt"  PRECISIONS="fp32 bf16"  THREADS=2  STEPS=30  WARMUP=5
#   GPT_FP32_STEPS=5 GPT_FP32_WARMUP=1   gpt fp32 takes ~16 s/step here (reference BLAS), so fewer steps
#   PYTHON=/usr/bin/python3   (Debian's python3 with python3-torch; the pyenv python3 has no torch)
# Each run's JSON object is appended to OUT.jsonl (default: a temporary file, removed at exit).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
MODELS="${MODELS:-mlp cnn gpt}"
PRECISIONS="${PRECISIONS:-fp32 bf16}"
THREADS="${THREADS:-2}"
STEPS="${STEPS:-30}"
WARMUP="${WARMUP:-5}"
GPT_FP32_STEPS="${GPT_FP32_STEPS:-5}"
GPT_FP32_WARMUP="${GPT_FP32_WARMUP:-1}"

if [[ $# -ge 1 ]]; then
  out="$1"
  : > "$out"
else
  out="$(mktemp)"
  trap 'rm -f "$out"' EXIT
fi

for model in $MODELS; do
  for prec in $PRECISIONS; do
    steps="$STEPS" warmup="$WARMUP"
    if [[ "$model" == gpt && "$prec" == fp32 ]]; then steps="$GPT_FP32_STEPS" warmup="$GPT_FP32_WARMUP"; fi
    echo "run_matrix: $model $prec ($steps steps, $warmup warmup, $THREADS threads)" >&2
    "$PYTHON" "$here/torch_peer.py" --model "$model" --precision "$prec" --steps "$steps" \
      --warmup "$warmup" --threads "$THREADS" --json >> "$out"
  done
done

"$PYTHON" - "$out" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
hdr = f"{'model':5} {'prec':5} {'steps':>5} {'ms/step med':>12} {'ms/step mean':>12} {'cpu ms':>9} {'samples/s':>11} " \
      f"{'unit':5} {'final loss':>10} {'RSS MiB':>8} {'load':>5}"
print(hdr)
print("-" * len(hdr))
fp32 = {}
for r in rows:
    if r.get("status") != "ok":
        print(f"{r['model']:5} {r['precision']:5} unsupported: {r.get('reason', '')}")
        continue
    if r["precision"] == "fp32":
        fp32[r["model"]] = r["ms_per_step"]
    print(f"{r['model']:5} {r['precision']:5} {r['steps']:5d} {r['ms_per_step_median']:12.2f} "
          f"{r['ms_per_step_mean']:12.2f} {r['cpu_ms_per_step']:9.2f} {r['samples_per_s']:11.1f} {r['sample_unit']:5} "
          f"{r['final_loss']:10.4f} {r['peak_rss_bytes'] / 2**20:8.0f} {r['loadavg_end']:5.2f}")
for r in rows:
    if r.get("status") == "ok" and r["precision"] != "fp32" and r["model"] in fp32:
        print(f"{r['model']} {r['precision']} speed-up over fp32: {fp32[r['model']] / r['ms_per_step']:.2f}x")
if rows:
    r = rows[0]
    print(f"torch {r['torch_version']}, {r['threads']} threads, env {r['env']}; "
          "cpu ms = process CPU time per step (all threads, median); load = 1-minute load average at "
          "the end of the run (above ~0.5: the CPU was shared, timings are noisy)")
EOF
