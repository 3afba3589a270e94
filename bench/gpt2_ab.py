#!/usr/bin/python3
"""GPT-2 step time of two mixp builds, A/B interleaved (docs/benchmarks.md, "GPT-2 124M step: the
work outside the GEMMs").

Runs `mixp train --model gpt2 --data TOKENS --batch B --context T --steps N --no-eval --threads K
--precision P --log L` with the base build and the new build alternately (base first in even
rounds, new first in odd ones) and prints each run's median wall ms/step and the median `cpu_ms`
of its steps after the first (process CPU time: on a loaded shared machine the wall time of a step
moves with the load, its CPU time much less; with --threads 1 it is the step's work), then the
medians over rounds and the ratios new / base. The token file is random GPT-2 tokens
(bench/peers/gpt2_step_time.py write_tokens; made here when --data is not given).

    /usr/bin/python3 bench/gpt2_ab.py --base /tmp/base/mixp --base-lib /tmp/base \\
        --new build/release/mixp --shape B8T256 --precision bf16 --threads 1 --rounds 2

--base-lib puts a saved copy of the base build's libmixp first on LD_LIBRARY_PATH (a copied
`mixp` otherwise loads the libmixp of the build directory it was linked in).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--base-lib", default="")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--shape", default="B8T256")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="")
    a = ap.parse_args()
    data = a.data
    if not data:
        from gpt2_step_time import write_tokens
        data = os.path.join(tempfile.mkdtemp(), "tokens.bin")
        write_tokens(data, 300_000, 0)
    B, T = (int(v) for v in a.shape[1:].split("T"))
    res = {"base": [], "new": []}
    for r in range(a.rounds):
        for which in (["base", "new"] if r % 2 == 0 else ["new", "base"]):
            exe = a.base if which == "base" else a.new
            env = dict(os.environ)
            if which == "base" and a.base_lib:
                env["LD_LIBRARY_PATH"] = a.base_lib
            log = tempfile.mktemp(suffix=".jsonl")
            cmd = [exe, "train", "--model", "gpt2", "--data", data, "--batch", str(B),
                   "--context", str(T), "--steps", str(a.steps), "--no-eval", "--json",
                   "--threads", str(a.threads), "--precision", a.precision, "--log", log]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
            j = json.loads(out.stdout)
            steps = [s for s in map(json.loads, open(log)) if "step" in s]
            os.unlink(log)
            cpu = statistics.median(s["cpu_ms"] for s in steps[1:])
            res[which].append((j["ms_per_step"], cpu, j["final_loss"]))
            print(f"round {r} {which}: ms/step {j['ms_per_step']:.0f} cpu_ms {cpu:.0f} "
                  f"loss {j['final_loss']!r} load {os.getloadavg()[0]:.1f}", flush=True)
    med = {w: (statistics.median(x[0] for x in res[w]), statistics.median(x[1] for x in res[w]))
           for w in res}
    for w in ("base", "new"):
        print(f"{w}: median ms/step {med[w][0]:.0f}, median cpu_ms {med[w][1]:.0f}")
    print(f"new / base: ms/step {med['new'][0] / med['base'][0]:.3f}, "
          f"cpu_ms {med['new'][1] / med['base'][1]:.3f}")


if __name__ == "__main__":
    main()
