#!/usr/bin/env python3
"""Peak tensor memory of LoRA and QLoRA fine-tuning against full fine-tuning (issue 31): runs
`mixp train --json` three times on the same LLaMA shape and data, bf16 full fine-tuning, bf16 with
LoRA adapters, and qlora-nf4 with the same adapters, and prints each run's measured
`peak_memory_bytes` and the ratios to full fine-tuning (the issue's bars: QLoRA <= 0.35x, LoRA
<= 0.6x). Results in docs/benchmarks.md ("LoRA and QLoRA memory").

    python3 bench/qlora_memory.py                       # smollm-135m, B1 T128, 2 steps
    python3 bench/qlora_memory.py --model tinyllama-1.1b --batch 4 --context 256 --checkpointing
"""
import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(a, precision, lora):
    cmd = [a.mixp, "train", "--model", a.model, "--data", "synthetic", "--train-limit", "200000",
           "--batch", str(a.batch), "--context", str(a.context), "--steps", str(a.steps),
           "--threads", str(a.threads), "--no-eval", "--json", "--precision", precision]
    if a.checkpointing:
        cmd.append("--checkpointing")
    if lora:
        cmd += ["--lora", a.lora]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm-135m", help="llama preset or llama")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2, help="the second step has the Adam states")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--lora", default="r=16,alpha=32,dropout=0.05,"
                    "targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    ap.add_argument("--mixp", default=os.path.join(ROOT, "build", "release", "mixp"))
    a = ap.parse_args()
    runs = [("bf16 full", "bf16", False), ("bf16 LoRA", "bf16", True),
            ("qlora-nf4 LoRA", "qlora-nf4", True)]
    peaks = {}
    print(f"{a.model} B{a.batch} T{a.context}{' checkpointing' if a.checkpointing else ''}, "
          f"--lora {a.lora}")
    print(f"{'run':<16} {'parameters':>12} {'peak MiB':>10} {'vs full':>8}")
    for label, precision, lora in runs:
        r = train(a, precision, lora)
        peaks[label] = r["peak_memory_bytes"]
        ratio = peaks[label] / peaks["bf16 full"]
        print(f"{label:<16} {r['parameters']:>12} {peaks[label] / 2**20:>10.1f} {ratio:>8.3f}")
    ok = (peaks["qlora-nf4 LoRA"] <= 0.35 * peaks["bf16 full"]
          and peaks["bf16 LoRA"] <= 0.6 * peaks["bf16 full"])
    print("bars (QLoRA <= 0.35x, LoRA <= 0.6x):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
