#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU (docs/cuda.md, "Running gpu-check.sh"):
# builds with -DMIXP_CUDA=ON in build/gpu, runs the GPU tests (tests/cuda: every implemented
# kernel on cuda:0 against the cpu backend, the MLP training steps against the cpu, the device
# allocator and copies) and the GEMM benchmark (bench/cuda_gemm.cpp), and writes a summary.
#
#   scripts/gpu-check.sh [SUMMARY_FILE]        (default: build/gpu/gpu-check-summary.txt)
#
# Exit status: 0 when every GPU test ran and passed; 1 when a test failed or was skipped (a skip
# here means no device was usable, which is itself the failure this script exists to catch);
# 2 when the build failed. MIXP_GPU_CHECK_N sets the benchmark's n (default 8192);
# MIXP_GPU_CHECK_BUILD another build folder (default build/gpu; build/release reuses CI's build).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="$root/${MIXP_GPU_CHECK_BUILD:-build/gpu}"
summary="${1:-$build/gpu-check-summary.txt}"
n="${MIXP_GPU_CHECK_N:-8192}"
jobs=$(nproc)

mkdir -p "$build"
echo "== configure and build (MIXP_CUDA=ON) in $build"
t0=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMIXP_WERROR=ON -DMIXP_CUDA=ON >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  echo "gpu-check: configure failed (is the CUDA toolkit installed? docs/cuda.md)" >&2
  exit 2
fi
if ! cmake --build "$build" -j "$jobs" --target mixp_cli mixp_test_cuda mixp_cuda_gemm; then
  echo "gpu-check: build failed" >&2
  exit 2
fi
build_s=$(( $(date +%s) - t0 ))

echo "== device"
smi="$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 || true)"
echo "$smi"
"$build/mixp" doctor --json >"$build/doctor.json" || true

echo "== GPU tests"
"$build/mixp_test_cuda" --gtest_output="json:$build/test_cuda.json" 2>&1 | tee "$build/test_cuda.log"
test_rc=${PIPESTATUS[0]}

echo "== GEMM benchmark (n=$n)"
"$build/mixp_cuda_gemm" --n="$n" --json="$build/cuda_gemm.json" 2>&1 | tee "$build/cuda_gemm.log"
bench_rc=${PIPESTATUS[0]}

python3 - "$build" "$summary" "$build_s" "$smi" "$test_rc" "$bench_rc" <<'PY'
import json, sys, os, datetime
build, summary, build_s, smi, test_rc, bench_rc = sys.argv[1:]
tests = json.load(open(os.path.join(build, "test_cuda.json")))
rows, skipped, failed = [], [], []
for suite in tests.get("testsuites", []):
    for t in suite.get("testsuite", []):
        name = f'{suite["name"]}.{t["name"]}'
        if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
            skipped.append(name)
        elif t.get("failures"):
            failed.append(name)
        rows.append(name)
doctor = {}
try:
    doctor = json.load(open(os.path.join(build, "doctor.json")))
except Exception:
    pass
gemm = None
try:
    gemm = json.load(open(os.path.join(build, "cuda_gemm.json")))
except Exception:
    pass
out = [f"# gpu-check summary ({datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC)", "",
       f"- GPU (nvidia-smi): {smi or 'not available'}",
       f"- CUDA backend: {json.dumps(doctor.get('cuda_backend', {}))}",
       f"- build (MIXP_CUDA=ON, all targets of the check): {build_s} s",
       f"- GPU tests: {len(rows)} run, {len(failed)} failed, {len(skipped)} skipped (exit {test_rc})"]
out += [f"  - FAILED {n}" for n in failed] + [f"  - SKIPPED {n}" for n in skipped]
out += ["", "## GEMM (bench/cuda_gemm.cpp)", ""]
if gemm:
    out += [f"n = {gemm['n']} on {gemm['gpu']}", "", "| dtype | TFLOP/s | vs fp32 | of datasheet peak |", "|---|---|---|---|"]
    out += [f"| {r['dtype']} | {r['tflops']:.1f} | {r['vs_fp32']:.2f}x | {100 * r['fraction_of_peak']:.0f}% |" for r in gemm["results"]]
else:
    out += [f"not run (exit {bench_rc}; see {build}/cuda_gemm.log)"]
tmp = summary + ".tmp"
with open(tmp, "w") as f:
    f.write("\n".join(out) + "\n")
os.replace(tmp, summary)
print("\n".join(out))
sys.exit(0 if int(test_rc) == 0 and not skipped and not failed and int(bench_rc) == 0 else 1)
PY
rc=$?
echo "summary: $summary"
exit $rc
