#!/usr/bin/env python3
"""Step time of two mixp builds, A and B, measured interleaved in one run: the engine redesign's
"no slower" check (issue 12: mlp/cnn/gpt in fp32, bf16 and fp16 within 3% of before).

For every model and precision it runs `A train ... --json` and `B train ...` alternately
(`--rounds` times, so drifting load hits both alike) and prints the median cpu ms/step of each
and the ratio B/A (< 1.03 is the target). The same command line for both; --threads 1 by
default, because oneDNN's thread scheduling adds more noise than the differences looked for.

    python3 bench/engine_ab.py --a /tmp/base/build/release/mixp --b build/release/mixp
    python3 bench/engine_ab.py --a OLD --b NEW --models mlp --precisions bf16 --rounds 9 --json

Build A from the commit before the change in a worktree (git worktree add /tmp/base REV; then
cmake --preset release && cmake --build --preset release --target mixp_cli there).
"""
import argparse
import json
import statistics
import subprocess
import sys

STEPS = {"mlp": 150, "cnn": 20, "gpt": 8}


def run(binary, model, precision, steps, threads):
    cmd = [binary, "train", "--model", model, "--precision", precision, "--steps", str(steps),
           "--threads", str(threads), "--no-eval", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr.strip()}")
    text = out.stdout
    r = json.loads(text[text.index("{"):])  # the object (indented), after any progress lines
    return r["cpu_ms_per_step"], r["final_loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the mixp binary before the change")
    ap.add_argument("--b", required=True, help="the mixp binary after the change")
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    rows = []
    for model in args.models.split(","):
        for prec in args.precisions.split(","):
            a_ms, b_ms = [], []
            losses = set()
            for k in range(args.rounds):
                order = [("a", args.a), ("b", args.b)] if k % 2 == 0 else [("b", args.b), ("a", args.a)]
                for side, binary in order:
                    ms, loss = run(binary, model, prec, STEPS[model], args.threads)
                    (a_ms if side == "a" else b_ms).append(ms)
                    losses.add((side, loss))
                print(f"  {model} {prec} round {k + 1}/{args.rounds}", file=sys.stderr)
            a, b = statistics.median(a_ms), statistics.median(b_ms)
            same = len({loss for _, loss in losses}) == 1
            rows.append({"model": model, "precision": prec, "a_cpu_ms": a, "b_cpu_ms": b,
                         "ratio": b / a, "same_final_loss": same})
    if args.json:
        print(json.dumps({"rounds": args.rounds, "threads": args.threads, "rows": rows}))
        return
    print(f"{'model':6} {'precision':9} {'A ms':>8} {'B ms':>8} {'B/A':>6}  same loss")
    for r in rows:
        print(f"{r['model']:6} {r['precision']:9} {r['a_cpu_ms']:8.2f} {r['b_cpu_ms']:8.2f} "
              f"{r['ratio']:6.3f}  {'yes' if r['same_final_loss'] else 'NO'}")


if __name__ == "__main__":
    main()
