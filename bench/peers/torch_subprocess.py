"""Runs a PyTorch timing snippet in a fresh /usr/bin/python3 (its own thread count, a clean
process for its peak RSS) and returns the JSON object its last line prints. Shared by the step-time
peers: bench/peers/gpt2_step_time.py and bench/llama_speed.py."""
import json
import os
import subprocess


def run_torch_snippet(code, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"torch failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])
