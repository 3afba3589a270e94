#!/bin/bash
# Issue 32's accuracy study (docs/fp4.md "Accuracy"): a GPT-2-architecture model (`--model gpt`)
# trained in bf16, fp8-block, nvfp4 and its ablations, mxfp4 with and without Hadamard + SR, over
# several seeds, then the table of final validation losses against bf16
# (bench/block_accuracy_summary.py).
#
#   bench/block_accuracy.sh [OUT]          # OUT defaults to block-accuracy/
#
# The defaults are the first study's (fortunes-min, 4 x 32 tokens a step). The second study, whose
# results are in the repository and which the next runs resume (docs/fp4.md "The second study"):
#   DATA=<Debian's fortunes, unpacked with dpkg -x> BATCH=16 CONTEXT=64 \
#     bench/block_accuracy.sh bench/results/block_accuracy_fortunes
#
# Resumable: a run whose result file OUT/<config>.s<seed>.json exists is skipped; results are
# written to a temporary name and renamed, so an interrupted run leaves no result behind. A run
# that fails (non-zero exit) leaves OUT/<config>.s<seed>.err and no result; the summary counts it
# as failed. Knobs (environment): MIXP, STEPS, BATCH, CONTEXT, WIDTH, LAYERS, HEADS, LR, WARMUP,
# MLP_WIDTH, CLIP, SEEDS ("0 1 2"), JOBS (runs at a time), THREADS (per run), DATA, TEST_LIMIT,
# CONFIGS (names below).
set -u
OUT=${1:-block-accuracy}
MIXP=${MIXP:-build/release/mixp}
STEPS=${STEPS:-1000}
BATCH=${BATCH:-4}
CONTEXT=${CONTEXT:-32}
WIDTH=${WIDTH:-384}
LAYERS=${LAYERS:-6}
HEADS=${HEADS:-6}
MLP_WIDTH=${MLP_WIDTH:-$((4 * WIDTH))}
CLIP=${CLIP:-1.0}
LR=${LR:-1e-3}
WARMUP=${WARMUP:-100}
SEEDS=${SEEDS:-0 1 2}
JOBS=${JOBS:-2}
THREADS=${THREADS:-1}
DATA=${DATA:-/usr/share/games/fortunes}
TEST_LIMIT=${TEST_LIMIT:-}  # validation windows (empty: the whole validation split)
export OMP_WAIT_POLICY=passive

# name -> --precision. "nvfp4" is the paper's recipe: every component, and the Linear layers of the
# last ~15% of the transformer blocks in bf16 (1 of 6), the head in bf16 too (the recipe's
# default). "nvfp4-no-bf16" has no bf16 Linear layer at all: bf16_last=0 and the head in nvfp4
# (LAYER below); the embedding lookups, norms, softmax and attention's batched products are not
# Linear layers and stay in bf16 under every recipe (docs/fp4.md "Accuracy").
declare -A PREC=(
  [bf16]=bf16
  [fp8-block]=fp8-block
  [nvfp4]='nvfp4:bf16_last=1'
  [nvfp4-no-rht]='nvfp4:rht=0,bf16_last=1'
  [nvfp4-no-2d]='nvfp4:2d=0,bf16_last=1'
  [nvfp4-no-sr]='nvfp4:sr=0,bf16_last=1'
  [nvfp4-no-bf16]='nvfp4:bf16_last=0'
  [mxfp4]='mxfp4:bf16_last=1'
  [mxfp4-no-rht-sr]='mxfp4:rht=0,sr=0,bf16_last=1'
)
# name -> --layer-precision, where a configuration has one.
declare -A LAYER=(
  [nvfp4-no-bf16]='head=nvfp4,*=nvfp4'
)
ALL="bf16 fp8-block nvfp4 nvfp4-no-rht nvfp4-no-2d nvfp4-no-sr nvfp4-no-bf16 mxfp4 mxfp4-no-rht-sr"
CONFIGS=${CONFIGS:-$ALL}

mkdir -p "$OUT"
cat >"$OUT/study.json.tmp" <<EOF
{"model": "gpt", "width": $WIDTH, "layers": $LAYERS, "heads": $HEADS, "mlp_width": $MLP_WIDTH,
 "clip": "$CLIP", "context": $CONTEXT,
 "batch": $BATCH, "steps": $STEPS, "lr": "$LR", "warmup": $WARMUP, "data": "$DATA",
 "test_limit": "$TEST_LIMIT", "seeds": "$SEEDS", "configs": "$CONFIGS"}
EOF
mv "$OUT/study.json.tmp" "$OUT/study.json"

run_one() {  # config seed
  local name=$1 seed=$2 res="$OUT/$1.s$2.json"
  [ -s "$res" ] && return 0
  local prec=${PREC[$name]:-}
  if [ -z "$prec" ]; then echo "block_accuracy: unknown config '$name'" >&2; return 1; fi
  local layer=${LAYER[$name]:-}
  "$MIXP" train --model gpt --data "$DATA" --precision "$prec" --width "$WIDTH" \
    --layers "$LAYERS" --heads "$HEADS" --mlp-width "$MLP_WIDTH" --context "$CONTEXT" \
    --batch "$BATCH" --steps "$STEPS" --lr "$LR" --clip "$CLIP" --warmup "$WARMUP" \
    --schedule cosine --seed "$seed" --threads "$THREADS" \
    ${layer:+--layer-precision "$layer"} ${TEST_LIMIT:+--test-limit "$TEST_LIMIT"} --json \
    --log "$OUT/$name.s$seed.log" >"$res.tmp" 2>"$OUT/$name.s$seed.err"
  local rc=$?
  # A run that did not train exits 1 after its JSON ("trained": false, a null loss); the NaN guard
  # stops a run at a non-finite loss or gradient with only the error line (docs/train.md). Both are
  # results (diverged), kept with the error line; any other failure leaves no result.
  if [ -s "$res.tmp" ] && { [ $rc -eq 0 ] || [ $rc -eq 1 ]; }; then
    mv "$res.tmp" "$res" && rm -f "$OUT/$name.s$seed.err"
  elif [ $rc -eq 1 ] && grep -q 'NaN\|infinite\|non-finite' "$OUT/$name.s$seed.err"; then
    /usr/bin/python3 -c 'import json, sys; print(json.dumps({"precision": sys.argv[1],
      "val_loss": None, "final_loss": None, "trained": False,
      "not_trained": open(sys.argv[2]).read().strip()}))' "$prec" "$OUT/$name.s$seed.err" \
      >"$res.tmp" && mv "$res.tmp" "$res" && rm -f "$OUT/$name.s$seed.err"
  else
    echo "block_accuracy: $name seed $seed failed (exit $rc), see $OUT/$name.s$seed.err" >&2
    rm -f "$res.tmp"
  fi
}

# Seeds outermost, so that a partial study has every configuration of the first seeds.
for seed in $SEEDS; do
  for name in $CONFIGS; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run_one "$name" "$seed" &
  done
done
wait
/usr/bin/python3 "$(dirname "$0")/block_accuracy_summary.py" "$OUT"
