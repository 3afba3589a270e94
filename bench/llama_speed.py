#!/usr/bin/python3
"""LLaMA fine-tuning step time: mixp against the PyTorch reference, and QLoRA against LoRA, in one
interleaved run (issue 31 "Speed"; docs/benchmarks.md "LLaMA fine-tuning step").

Four runs per round on the same shape, the same random tokens and the same thread count, in a
rotating order (so drifting load on a shared machine hits each alike):

  full   `mixp train --model smollm-135m --precision bf16` (bf16 autocast, AdamW, every parameter)
  torch  bench/peers/llama_reference.py's LLaMA (written by hand in PyTorch 1.13) with
         torch.autocast("cpu", bf16), torch.optim.AdamW (defaults), fp32 weights: the same work
  lora   `mixp train ... --precision bf16 --lora r=16,alpha=32,targets=q_proj,...,down_proj`
  qlora  `mixp train ... --precision qlora-nf4` with the same --lora

Shape: SmolLM-135M's (width 576, 30 layers, 9 heads on 3 k/v heads, SwiGLU 1536, vocabulary
49152, head tied to the embedding as in its config.json), B8 T256 by default. `--small` keeps the
width, heads and vocabulary but runs 4 layers at B2 T128, for loaded machines. mixp's median
excludes its first step; the torch side runs --warmup untimed steps. For each it prints the
median wall ms/step and the median process CPU ms/step (on a shared machine the wall time moves
with the load, the CPU time much less), then the ratios mixp/torch (target <= 0.5) and QLoRA/LoRA
(target <= 1.3). Use Debian's /usr/bin/python3 (python3-torch).

    /usr/bin/python3 bench/llama_speed.py --threads 2 --rounds 2
    /usr/bin/python3 bench/llama_speed.py --small --only full,torch
"""
import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from torch_subprocess import run_torch_snippet  # noqa: E402
VOCAB = 49152
LORA = "r=16,alpha=32,targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


def write_tokens(path, n, seed):
    """An llm.c uint16 token file (header version 1) whose header states SmolLM's vocabulary."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, VOCAB, *([0] * 252)))
        f.write(struct.pack(f"<{n}H", *(rng.randrange(VOCAB) for _ in range(n))))


def run_mixp(a, tokens, which):
    cmd = [a.mixp, "train", "--model", "smollm-135m", "--data", tokens, "--batch", str(a.B),
           "--context", str(a.T), "--layers", str(a.layers), "--steps", str(a.steps + 1),
           "--no-eval", "--json", "--threads", str(a.threads)]
    cmd += {"full": ["--precision", "bf16"], "lora": ["--precision", "bf16", "--lora", LORA],
            "qlora": ["--precision", "qlora-nf4", "--lora", LORA]}[which]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"mixp failed: {' '.join(cmd)}\n{out.stderr}")
    j = json.loads(out.stdout)
    return {"ms": j["ms_per_step"], "cpu_ms": j["cpu_ms_per_step"],
            "peak_tensor_bytes": j["peak_memory_bytes"], "peak_rss_bytes": j["peak_rss_bytes"]}


def run_torch(a):
    cfg = {"model_type": "llama", "vocab_size": VOCAB, "hidden_size": 576,
           "intermediate_size": 1536, "num_hidden_layers": a.layers, "num_attention_heads": 9,
           "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": True}
    code = f"""
import json, resource, statistics, sys, time, torch, torch.nn.functional as F
sys.path.insert(0, {os.path.join(HERE, 'peers')!r})
from llama_reference import forward, names_and_shapes
torch.manual_seed(0)
torch.set_num_threads({a.threads})
cfg = {cfg!r}
w = {{}}
for name, shape in names_and_shapes(cfg):
    t = torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape) * 0.02
    w[name] = t.requires_grad_()
opt = torch.optim.AdamW(w.values(), lr=3e-4)
def step():
    x = torch.randint(0, {VOCAB}, ({a.B}, {a.T})); y = torch.randint(0, {VOCAB}, ({a.B}, {a.T}))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = forward(cfg, w, x)
    loss = F.cross_entropy(logits.float().view(-1, {VOCAB}), y.view(-1))
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
for _ in range({a.warmup}): step()
ts, cs = [], []
for _ in range({a.steps}):
    t0, c0 = time.perf_counter(), time.process_time()
    step()
    ts.append((time.perf_counter() - t0) * 1e3); cs.append((time.process_time() - c0) * 1e3)
print(json.dumps({{"ms": statistics.median(ts), "cpu_ms": statistics.median(cs),
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
    return run_torch_snippet(code, a.threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="B8T256")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--small", action="store_true", help="4 layers at B2 T128 (loaded machines)")
    ap.add_argument("--only", default="full,torch,lora,qlora")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mixp", default=os.path.join(ROOT, "build", "release", "mixp"))
    a = ap.parse_args()
    if a.small:
        a.shape, a.layers = "B2T128", 4
    a.B, a.T = (int(v) for v in a.shape[1:].split("T"))
    tokens = os.path.join(tempfile.mkdtemp(), "tokens.bin")
    write_tokens(tokens, max(200_000, 4 * a.B * (a.T + 1) * (a.steps + 2)), 0)
    kinds = [k for k in a.only.split(",") if k]
    res = {k: [] for k in kinds}
    print(f"shape B{a.B} T{a.T}, SmolLM-135M width 576, {a.layers} layers, 9/3 heads, vocab "
          f"{VOCAB} (tied head), {a.threads} threads", flush=True)
    for r in range(a.rounds):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        for k in order:
            x = run_torch(a) if k == "torch" else run_mixp(a, tokens, k)
            res[k].append(x)
            print(f"round {r} {k:6}: ms/step {x['ms']:.0f} cpu_ms {x['cpu_ms']:.0f} "
                  f"rss {x['peak_rss_bytes'] / 2**20:.0f} MiB load {os.getloadavg()[0]:.1f}",
                  flush=True)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("ms", "cpu_ms")}
           for k, v in res.items()}
    for k, m in med.items():
        print(f"{k:6} median ms/step {m['ms']:.0f}, cpu_ms {m['cpu_ms']:.0f}")
    for num, den, target in (("full", "torch", 0.5), ("qlora", "lora", 1.3)):
        if num in med and den in med:
            print(f"{num}/{den}: ms/step {med[num]['ms'] / med[den]['ms']:.3f}, cpu_ms "
                  f"{med[num]['cpu_ms'] / med[den]['cpu_ms']:.3f} (target <= {target})")


if __name__ == "__main__":
    main()
