"""mixp.plan: the dict `mixp plan --json` prints, with the same flags (study/plan_request.h)."""
import pytest

import mixp
from conftest import run_cli

# Measured now (timings, the GEMM throughput behind the estimate): equal keys, not equal values.
TIMED = {"step_ms", "estimated_step_ms", "gemm_gflops", "non_gemm_factor", "probes", "gemm_source"}
# Measured by the probes' peak tensor memory, which counts every tensor alive in the process
# (the allocator's peak since reset_peak_memory, src/train/trainer.cpp): a CLI process holds none
# before the probes, this pytest process may hold some from earlier tests (docs/python.md).
PROBED = {"activation_bytes", "peak_bytes"}
SLACK = 64 << 10


def same_plan(py, cli):
    assert list(py) == list(cli)  # the same keys in the same order
    for k in cli:
        if k in PROBED and not py["analytic"]:
            assert abs(py[k] - cli[k]) <= SLACK, (k, py[k], cli[k])
        elif k not in TIMED:
            assert py[k] == cli[k], k
    assert [(p["layers"], p["parameters"]) for p in py["probes"]] == \
           [(p["layers"], p["parameters"]) for p in cli["probes"]]
    for a, b in zip(py["probes"], cli["probes"]):
        assert abs(a["peak_bytes"] - b["peak_bytes"]) <= SLACK


def test_plan_probed_equals_cli():
    py = mixp.plan(model="gpt", data="synthetic", precision="bf16", batch=2, context=16, width=32,
                   layers=3, heads=2, threads=1, checkpointing=True)
    cli = run_cli("plan", "--model", "gpt", "--data", "synthetic", "--precision", "bf16",
                  "--batch", "2", "--context", "16", "--width", "32", "--layers", "3",
                  "--heads", "2", "--threads", "1", "--checkpointing")
    same_plan(py, cli)
    assert py["layers"] == 3 and py["checkpointing"] and py["peak_bytes"] > 0
    assert len(py["probes"]) == 2


def test_plan_shape_equals_cli():
    py = mixp.plan(model_shape="llama-7b", precision="bf16", batch=4, context=512,
                   checkpointing=True, zero_stage=2, ranks=8, threads=1, gemm_record=True)
    cli = run_cli("plan", "--model-shape", "llama-7b", "--precision", "bf16", "--batch", "4",
                  "--context", "512", "--checkpointing", "--zero-stage", "2", "--ranks", "8",
                  "--threads", "1", "--gemm-record")
    same_plan(py, cli)
    assert py["analytic"] and py["zero_stage"] == 2 and py["ranks"] == 8
    custom = dict(family="llama", layers=2, width=64, heads=4, vocab=1000, context=32)
    py = mixp.plan(model_shape="custom", ffn=176, threads=1, gemm_record=True, **custom)
    cli = run_cli("plan", "--model-shape", "custom", "--family", "llama", "--layers", "2",
                  "--width", "64", "--heads", "4", "--vocab", "1000", "--context", "32",
                  "--ffn", "176", "--threads", "1", "--gemm-record")
    same_plan(py, cli)


def test_plan_errors():
    with pytest.raises(ValueError, match="model or model_shape"):
        mixp.plan()
    with pytest.raises(ValueError, match="model or model_shape"):
        mixp.plan(model="gpt", model_shape="llama-7b")
    with pytest.raises(ValueError, match="unknown flag"):
        mixp.plan(model="mlp", data="synthetic", lr=1.0)
    with pytest.raises(ValueError, match="batch"):
        mixp.plan(model="mlp", data="synthetic", batch=0)
    with pytest.raises(ValueError, match="--model-shape custom needs --vocab"):
        mixp.plan(model_shape="custom", layers=2, width=64, heads=4)
    with pytest.raises(ValueError, match="llama-8b"):
        mixp.plan(model_shape="llama-8b")
    with pytest.raises(ValueError, match="zero-stage"):
        mixp.plan(model_shape="gpt2", zero_stage=4)
    with pytest.raises(ValueError, match="unknown precision"):
        mixp.plan(model="mlp", data="synthetic", precision="bf17")
