#!/usr/bin/python3
"""GPT-2 step time and peak memory: mixp against PyTorch, measured in one run (issue 15).

For each shape (--shapes B4T64,B8T256) and precision (--precisions fp32,bf16) it runs, alternately
for --rounds rounds so that drifting load on a shared machine hits both sides alike:

  mixp   `mixp train --model gpt2 --data tokens.bin --batch B --context T --precision P --steps N
          --no-eval --json` on a token file of random GPT-2 tokens (median ms/step of the run,
          its first step excluded by mixp; peak tensor memory and peak RSS);
  torch  the GPT-2 of gpt2_reference.py (same architecture, vocabulary 50257 unpadded as in
          PyTorch code, tied head), AdamW with PyTorch's defaults, bf16 through
          torch.autocast("cpu"), `--warmup` untimed steps then the median of N timed steps.

It prints the medians over rounds and the ratio mixp / torch (< 1: mixp is faster). Extra mixp
recipes (--mixp-only bf16-pure,bf16+ckpt,bf16+ckpt+oib) are run for their memory (no PyTorch counterpart).
Use Debian's /usr/bin/python3 (python3-torch).

    /usr/bin/python3 bench/peers/gpt2_step_time.py --shapes B4T64 --precisions fp32,bf16 --steps 4
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from torch_subprocess import run_torch_snippet  # noqa: E402
sys.path.insert(0, HERE)


def write_tokens(path, n, seed):
    import random
    import struct
    rng = random.Random(seed)
    header = struct.pack("<256i", 20240520, 1, n, *([0] * 253))
    with open(path, "wb") as f:
        f.write(header)
        f.write(struct.pack(f"<{n}H", *(rng.randrange(50257) for _ in range(n))))


def run_mixp(args, tokens, B, T, recipe, steps):
    cmd = [args.mixp, "train", "--model", "gpt2", "--data", tokens, "--batch", str(B),
           "--context", str(T), "--steps", str(steps), "--no-eval", "--json",
           "--threads", str(args.threads)]
    # Suffixes: +ckpt (--checkpointing), +oib (--optimizer-in-backward), e.g. bf16+ckpt+oib.
    recipe, *extras = recipe.split("+")
    flags = {"ckpt": "--checkpointing", "oib": "--optimizer-in-backward"}
    for e in extras:
        if e not in flags:
            raise SystemExit(f"unknown recipe suffix +{e} (known: +ckpt, +oib)")
        cmd.append(flags[e])
    cmd += ["--precision", recipe]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"mixp failed: {' '.join(cmd)}\n{out.stderr}")
    j = json.loads(out.stdout)
    return {"ms": j["ms_per_step"], "peak_tensor_bytes": j["peak_memory_bytes"],
            "peak_rss_bytes": j["peak_rss_bytes"]}


def run_torch(args, B, T, precision, steps):
    code = f"""
import json, statistics, sys, time, resource, torch, torch.nn.functional as F
sys.path.insert(0, {HERE!r})
from gpt2_reference import Gpt2
torch.manual_seed(0)
torch.set_num_threads({args.threads})
m = Gpt2(50257, 1024, 768, 12, 12, 3072)
with torch.no_grad():
    for p in m.parameters():
        p.normal_(0, 0.02) if p.dim() > 1 else None
opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
def step():
    x = torch.randint(0, 50257, ({B}, {T})); y = torch.randint(0, 50257, ({B}, {T}))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled={precision == 'bf16'}):
        logits = m(x)
    loss = F.cross_entropy(logits.float().view(-1, 50257), y.view(-1))
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
for _ in range({args.warmup}): step()
ts = []
for _ in range({steps}):
    t0 = time.perf_counter(); step(); ts.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({{"ms": statistics.median(ts),
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
    return run_torch_snippet(code, args.threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="B4T64")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--mixp-only", default="", help="extra mixp recipes, e.g. bf16-pure,bf16+ckpt,bf16+ckpt+oib (+ckpt: --checkpointing, +oib: --optimizer-in-backward)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mixp", default=os.path.join(ROOT, "build", "release", "mixp"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    tokens = os.path.join(tmp, "tokens.bin")
    write_tokens(tokens, 300_000, 0)
    rows = []
    for shape in args.shapes.split(","):
        B, T = (int(v) for v in shape[1:].split("T"))
        for prec in [p for p in args.precisions.split(",") if p]:
            mixp, torch = [], []
            for _ in range(args.rounds):
                # mixp's median excludes its first step; one more step keeps the counts alike.
                mixp.append(run_mixp(args, tokens, B, T, prec, args.steps + args.warmup))
                torch.append(run_torch(args, B, T, prec, args.steps))
            mm = statistics.median(r["ms"] for r in mixp)
            tm = statistics.median(r["ms"] for r in torch)
            rows.append({"shape": shape, "precision": prec, "mixp_ms": mm, "torch_ms": tm,
                         "ratio": mm / tm, "mixp_peak_tensor_bytes": mixp[-1]["peak_tensor_bytes"],
                         "mixp_peak_rss_bytes": mixp[-1]["peak_rss_bytes"],
                         "torch_peak_rss_bytes": torch[-1]["peak_rss_bytes"]})
            print(json.dumps(rows[-1]), flush=True)
        for prec in [p for p in args.mixp_only.split(",") if p]:
            r = run_mixp(args, tokens, B, T, prec, args.steps + args.warmup)
            rows.append({"shape": shape, "precision": prec, "mixp_ms": r["ms"],
                         "mixp_peak_tensor_bytes": r["peak_tensor_bytes"],
                         "mixp_peak_rss_bytes": r["peak_rss_bytes"]})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'shape':8} {'precision':11} {'mixp ms':>9} {'torch ms':>9} {'mixp/torch':>10} "
          f"{'mixp peak tensors':>18} {'mixp RSS':>10} {'torch RSS':>10}")
    mib = lambda b: f"{b / 2**20:.0f} MiB" if b else "-"
    for r in rows:
        print(f"{r['shape']:8} {r['precision']:11} {r['mixp_ms']:9.0f} "
              f"{r.get('torch_ms', 0):9.0f} {r.get('ratio', float('nan')):10.2f} "
              f"{mib(r['mixp_peak_tensor_bytes']):>18} {mib(r['mixp_peak_rss_bytes']):>10} "
              f"{mib(r.get('torch_peak_rss_bytes', 0)):>10}")


if __name__ == "__main__":
    main()
