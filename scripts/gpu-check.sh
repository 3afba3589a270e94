#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU (docs/cuda.md, "Running gpu-check.sh"),
# in one go, writing one summary:
#   1. the binaries: built here with -DMIXP_CUDA=ON for this GPU's architecture (a machine with
#      mixp's dependencies), or unpacked from a pack made by scripts/gpu-pack.sh on a CPU machine
#      (--prebuilt: the lent GPU machines have CUDA but not oneDNN & co., and no network);
#   2. the GPU and the backend as `mixp doctor --json` sees them;
#   3. every GPU test (tests/cuda: each kernel on cuda:0 against the cpu backend, the 8-bit GEMMs,
#      NVML, `mixp compare --device cuda`, the recipes through the CLI);
#   4. the GEMM benchmark (`mixp bench gemm --device cuda --n 8192`: fp32, tf32, bf16, fp16, fp8,
#      int8 against the datasheet peak, with the issue's targets);
#   5. a few training steps of every recipe of the mlp and the gpt, and of the cnn's guarded set,
#      on cuda against the cpu (final loss of 3 steps, relative difference);
# and writes SUMMARY (markdown, .txt) atomically. About 4-6 minutes on an H100 with --prebuilt (no
# build), plus the build otherwise (~3-5 minutes at -j 16 for one architecture).
#
#   scripts/gpu-check.sh [--prebuilt PACK.tar.xz] [--out DIR]
#
# DIR (default build/gpu) gets gpu-check-summary.txt and the logs behind it (test_cuda.json,
# test_cuda.log, gemm.json, gemm.err, recipes.tsv, doctor.json: 7 files, within the 8 a device
# call returns). Exit status: 0 when everything ran and passed; 1 when a test failed or was
# SKIPPED (on a GPU machine a skip means the device was not usable, which this script exists to
# catch), the benchmark failed, or a recipe failed or differed
# from the cpu; 2 when the build or the pack failed. MIXP_GPU_CHECK_N sets the benchmark's n
# (default 8192); MIXP_GPU_CHECK_BUILD the build folder (default build/gpu);
# MIXP_GPU_CHECK_BUDGET_S (default 480) the time after which no further recipe run starts (the
# ones left are reported as not run, a failure), so that a hanging kernel cannot eat a device
# lease: the tests stop at 330 s, the benchmark at 150 s, each recipe run at 60 s.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
pack=""
out="$root/build/gpu"
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) pack="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
n="${MIXP_GPU_CHECK_N:-8192}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/gpu-check-summary.txt"
t_start=$(date +%s)
phase() { echo; echo "== $1 ($(( $(date +%s) - t_start )) s)"; }

# --- 1. binaries
phase "binaries"
t0=$(date +%s)
if [ -n "$pack" ]; then
  bin=$(mktemp -d)
  # tar's xz, or Python's lzma where the machine has no xz.
  if ! tar -C "$bin" -xJf "$pack" 2>/dev/null &&
     ! python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$pack" "$bin"; then
    echo "gpu-check: cannot unpack $pack (make it with scripts/gpu-pack.sh)" >&2
    exit 2
  fi
  cat "$bin/MANIFEST"
  export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bin="$bin/bin"
  how="prebuilt: $(head -1 "$bin/../MANIFEST")"
else
  build="$root/${MIXP_GPU_CHECK_BUILD:-build/gpu}"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  mkdir -p "$build"
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIXP_WERROR=ON -DMIXP_CUDA=ON \
      ${arch:+-DMIXP_CUDA_ARCHITECTURES=$arch} >"$out/configure.log" 2>&1; then
    tail -30 "$out/configure.log" >&2
    echo "gpu-check: configure failed (CUDA toolkit and mixp's dependencies: docs/cuda.md; on a" \
         "machine without them use --prebuilt with a pack from scripts/gpu-pack.sh)" >&2
    exit 2
  fi
  if ! cmake --build "$build" -j "$(nproc)" --target mixp_cli mixp_test_cuda mixp_cuda_gemm; then
    echo "gpu-check: build failed" >&2
    exit 2
  fi
  bin="$build"
  how="built here (MIXP_CUDA=ON, sm ${arch:-default}, -j $(nproc)), commit $(git rev-parse --short HEAD 2>/dev/null)"
fi
bin_s=$(( $(date +%s) - t0 ))
export MIXP_CLI="$bin/mixp"

# --- 2. device
phase "device"
smi="$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1)"
echo "$smi"
"$bin/mixp" doctor --json >"$out/doctor.json" 2>&1 || true
"$bin/mixp" doctor 2>&1 | sed -n '/^GPU/,/^$/p'

# --- 3. GPU tests
phase "GPU tests"
t0=$(date +%s)
timeout 330 "$bin/mixp_test_cuda" --gtest_output="json:$out/test_cuda.json" >"$out/test_cuda.log" 2>&1
test_rc=$?
grep -E '^\[  (FAILED|SKIPPED|PASSED) |^\[==========\]' "$out/test_cuda.log" | tail -40
test_s=$(( $(date +%s) - t0 ))

# --- 4. GEMM benchmark
phase "GEMM benchmark (n=$n)"
t0=$(date +%s)
timeout 150 "$bin/mixp" bench gemm --device cuda --n "$n" --json >"$out/gemm.json" 2>"$out/gemm.err"
bench_rc=$?
cat "$out/gemm.err"
bench_s=$(( $(date +%s) - t0 ))

# --- 5. recipes: 3 steps on cuda and on the cpu, the final losses compared
phase "recipes on cuda vs cpu"
t0=$(date +%s)
printf 'model\tprecision\tcpu_loss\tcuda_loss\tstatus\tnote\n' >"$out/recipes.tsv"
budget="${MIXP_GPU_CHECK_BUDGET_S:-480}"  # no recipe starts after this many seconds of the check
run_pair() {  # model precision args...
  local model=$1 p=$2; shift 2
  if [ $(( $(date +%s) - t_start )) -gt "$budget" ]; then
    printf '%s\t%s\t\t\tFAIL\tnot run: the check passed its %s s budget\n' "$model" "$p" "$budget" \
      | tee -a "$out/recipes.tsv"
    return
  fi
  local args="train --model $model --data synthetic --steps 3 --seed 1 --json --precision $p $*"
  local cpu gpu cerr gerr cjson gjson
  cerr=$(mktemp); gerr=$(mktemp); cjson=$(mktemp); gjson=$(mktemp)
  # The cpu run beside the cuda one (only the losses are compared, not times).
  timeout 60 "$bin/mixp" $args --device cpu >"$cjson" 2>"$cerr" &
  local cpid=$!
  timeout 60 "$bin/mixp" $args --device cuda >"$gjson" 2>"$gerr"
  wait $cpid
  loss='import json,sys; print(json.load(sys.stdin)["final_loss"])'
  cpu=$(python3 -c "$loss" <"$cjson" 2>/dev/null)
  gpu=$(python3 -c "$loss" <"$gjson" 2>/dev/null)
  python3 - "$model" "$p" "${cpu:-}" "${gpu:-}" "$cerr" "$gerr" >>"$out/recipes.tsv" <<'PY'
import math, sys
model, p, cpu, gpu, cerr, gerr = sys.argv[1:]
def last_line(f):
    lines = [l.strip() for l in open(f, errors="replace") if l.strip()]
    return (lines[-1] if lines else "")[:200].replace("\t", " ")
if not gpu:
    print(f"{model}\t{p}\t{cpu}\t\tFAIL\tcuda: {last_line(gerr)}")
elif not cpu:
    print(f"{model}\t{p}\t\t{gpu}\tFAIL\tcpu: {last_line(cerr)}")
else:
    c, g = float(cpu), float(gpu)
    rel = abs(g - c) / max(abs(c), 1e-12)
    ok = math.isfinite(g) and rel <= 1e-2
    print(f"{model}\t{p}\t{c:.6g}\t{g:.6g}\t{'ok' if ok else 'FAIL'}\trelative difference {rel:.2e}")
PY
  rm -f "$cerr" "$gerr" "$cjson" "$gjson"
  tail -1 "$out/recipes.tsv"
}
for p in fp32 tf32 bf16 bf16-pure fp16 fp16-o2 fp16-pure fp8 fp8-current mxfp8 int8-qat int4-qat \
         int2-qat ternary binary binary-act auto; do
  run_pair mlp "$p" --batch 32
done
for p in fp32 tf32 bf16 bf16-pure fp16 fp16-pure fp8 fp8-current mxfp8; do
  run_pair gpt "$p" --batch 4 --context 32
done
for p in fp32 tf32 bf16 fp16-o2 bf16-pure fp8 mxfp8 int8-qat int4-qat binary-act; do
  run_pair cnn "$p" --batch 16
done
recipes_s=$(( $(date +%s) - t0 ))

# --- summary
phase "summary"
python3 - "$out" "$summary" "$smi" "$how" "$test_rc" "$bench_rc" "$bin_s" "$test_s" "$bench_s" \
    "$recipes_s" "$(( $(date +%s) - t_start ))" <<'PY'
import datetime, json, os, sys
out, summary, smi, how, test_rc, bench_rc, bin_s, test_s, bench_s, recipes_s, total_s = sys.argv[1:]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
tests, doctor, gemm = load("test_cuda.json"), load("doctor.json") or {}, load("gemm.json")
ran, skipped, failed = [], [], []
for suite in (tests or {}).get("testsuites", []):
    for t in suite.get("testsuite", []):
        name = f'{suite["name"]}.{t["name"]}'
        ran.append(name)
        if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
            skipped.append(name)
        elif t.get("failures"):
            failed.append((name, t["failures"][0].get("failure", "").splitlines()[0:3]))
recipes = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "recipes.tsv"))][1:]
bad_recipes = [r for r in recipes if r[4] != "ok"]
o = [f"# gpu-check summary ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
     f"- GPU (nvidia-smi): {smi or 'not available'}",
     f"- binaries: {how} ({bin_s} s)",
     f"- CUDA backend (doctor): {json.dumps(doctor.get('cuda_backend', {}))}",
     f"- recommended precision (doctor): {doctor.get('recommended_precision', '?')}",
     f"- wall time: {total_s} s (binaries {bin_s}, tests {test_s}, GEMM {bench_s}, recipes {recipes_s})",
     "", "## GPU tests (tests/cuda)", "",
     f"{len(ran)} run, {len(failed)} failed, {len(skipped)} skipped (exit {test_rc})"
     + ("" if tests else f"; no test report: the binary crashed or timed out, see test_cuda.log")]
for name, lines in failed:
    o.append(f"- FAILED {name}: " + " / ".join(l.strip() for l in lines))
o += [f"- SKIPPED {name}" for name in skipped]
o += ["", "## GEMM (mixp bench gemm --device cuda)", ""]
if gemm:
    o += [f"n = {gemm['n']} on {gemm['gpu']} (sm {gemm['compute_capability']})", "",
          "| format | TFLOP/s | vs fp32 | vs bf16 | of datasheet peak | path |", "|---|---|---|---|---|---|"]
    for r in gemm["results"]:
        peak = f"{100 * r['fraction_of_peak']:.0f}%" if r["peak_tflops"] else "-"
        o.append(f"| {r['format']} | {r['tflops']:.1f} | {r['vs_fp32']:.2f}x | {r['vs_bf16']:.2f}x | {peak} | {r['path']} |")
    o += [""] + [f"- target {t}" for t in gemm.get("targets", [])]
else:
    o.append(f"not run (exit {bench_rc}; see gemm.json / the output above)")
o += ["", "## Recipes: 3 steps on cuda vs cpu (final loss)", "",
      "| model | precision | cpu | cuda | status | note |", "|---|---|---|---|---|---|"]
o += [f"| {' | '.join(r)} |" for r in recipes]
o += ["", "Not run: fp64 (no fp64 kernels on cuda)."]
ok = int(test_rc) == 0 and tests and not skipped and not failed and int(bench_rc) == 0 and not bad_recipes
o += ["", f"**{'PASS' if ok else 'FAIL'}**" + ("" if ok else
      f": {len(failed)} test(s) failed, {len(skipped)} skipped, benchmark exit {bench_rc}, {len(bad_recipes)} recipe(s) failed")]
tmp = summary + ".tmp"
with open(tmp, "w") as f:
    f.write("\n".join(o) + "\n")
os.replace(tmp, summary)
print("\n".join(o))
sys.exit(0 if ok else 1)
PY
rc=$?
echo "summary: $summary"
exit $rc
