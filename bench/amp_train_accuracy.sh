#!/bin/bash
# Fashion-MNIST mlp, 3 epochs, the same seed, in every recipe: test accuracy and final loss.
#   bench/amp_train_accuracy.sh [SEED] > acc.jsonl
set -u
SEED=${1:-0}
MIXP=${MIXP:-build/release/mixp}
export OMP_WAIT_POLICY=passive
for p in ${RECIPES:-fp32 tf32 bf16 fp16 fp16-o2 fp16-pure bf16-pure fp64}; do
  "$MIXP" train --model mlp --epochs 3 --precision "$p" --seed "$SEED" --threads "${THREADS:-1}" \
    --json 2>/dev/null | /usr/bin/python3 -c "
import json, sys
j = json.loads(sys.stdin.read())
print(json.dumps({k: j[k] for k in ('precision', 'seed', 'steps', 'skipped_steps', 'loss_scale',
                                    'test_accuracy', 'test_loss', 'final_loss', 'ms_per_step')}))"
done
