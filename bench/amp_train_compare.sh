#!/bin/bash
# Mixed-precision training speed and memory: mixp's recipes against each other and against the
# PyTorch CPU peer (torch.autocast bf16), interleaved round by round so that a machine shared with
# other work slows every configuration alike. Prints one JSON line per run; summarize with
#   bench/amp_train_summary.py < runs.jsonl
#
#   bench/amp_train_compare.sh [ROUNDS] [MODELS] > runs.jsonl
#
# Environment: MIXP (the mixp binary, default build/release/mixp), THREADS (default 1),
# MLP_STEPS (default 40), GPT_STEPS (default 12), RECIPES (default "fp32 bf16 fp16 bf16-pure tf32").
set -u
ROUNDS=${1:-3}
MODELS=${2:-"mlp gpt"}
MIXP=${MIXP:-build/release/mixp}
THREADS=${THREADS:-1}
MLP_STEPS=${MLP_STEPS:-40}
GPT_STEPS=${GPT_STEPS:-12}
RECIPES=${RECIPES:-"fp32 bf16 fp16 bf16-pure tf32"}
export OMP_WAIT_POLICY=passive
here=$(cd "$(dirname "$0")" && pwd)
for round in $(seq 1 "$ROUNDS"); do
  for model in $MODELS; do
    steps=$MLP_STEPS
    [ "$model" = gpt ] && steps=$GPT_STEPS
    for p in $RECIPES; do
      out=$("$MIXP" train --model "$model" --precision "$p" --steps "$steps" --threads "$THREADS" \
            --no-eval --json 2>/dev/null)
      echo "$out" | /usr/bin/python3 -c "
import json, sys
j = json.loads(sys.stdin.read())
print(json.dumps({'round': $round, 'who': 'mixp', 'model': j['model'], 'precision': j['precision'],
                  'ms_per_step': j['ms_per_step'], 'cpu_ms_per_step': j.get('cpu_ms_per_step'),
                  'peak_memory_bytes': j['peak_memory_bytes'],
                  'peak_requested_bytes': j.get('peak_requested_bytes'),
                  'skipped_steps': j['skipped_steps']}))"
    done
    for p in fp32 bf16; do
      /usr/bin/python3 "$here/peers/torch_peer.py" --model "$model" --precision "$p" \
        --steps "$steps" --warmup 3 --threads "$THREADS" --json 2>/dev/null | /usr/bin/python3 -c "
import json, sys
j = json.loads(sys.stdin.read())
print(json.dumps({'round': $round, 'who': 'torch', 'model': j['model'], 'precision': j['precision'],
                  'ms_per_step': j['ms_per_step_median'], 'cpu_ms_per_step': j.get('cpu_ms_per_step')}))"
    done
  done
done
