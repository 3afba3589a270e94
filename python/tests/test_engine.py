"""mixp.train: the same run as `mixp train` with the same flags (same final loss, same dict)."""
import threading

import pytest

import mixp
from conftest import run_cli

FLAGS = dict(steps=6, batch=16, seed=3, width=32, threads=1, lr=0.01)


def cli_flags(model, data, precision, flags):
    out = ["train", "--model", model, "--data", data, "--precision", precision]
    for k, v in flags.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_train_equals_cli(precision):
    steps = []
    r = mixp.train("mlp", data="synthetic", precision=precision, progress=steps.append, **FLAGS)
    cli = run_cli(*cli_flags("mlp", "synthetic", precision, FLAGS))
    assert r["final_loss"] == cli["final_loss"]
    assert r["test_loss"] == cli["test_loss"] and r["test_accuracy"] == cli["test_accuracy"]
    assert set(r) == set(cli)
    for k in ("model", "precision", "recipe", "steps", "batch", "parameters", "data"):
        assert r[k] == cli[k], k
    assert [s["step"] for s in steps] == list(range(1, FLAGS["steps"] + 1))
    assert steps[-1]["loss"] == r["final_loss"]


def test_train_releases_the_gil():
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        mixp.train("mlp", data="synthetic", precision="fp32", steps=30, batch=64, width=64,
                   threads=1, no_eval=True)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 5  # the other thread ran while the C++ loop trained


def test_train_errors():
    with pytest.raises(ValueError, match="unknown precision"):
        mixp.train("mlp", data="synthetic", precision="bf17", steps=1)
    with pytest.raises(ValueError, match="unknown flag"):
        mixp.train("mlp", data="synthetic", stepz=1)
    with pytest.raises(ValueError, match="steps"):
        mixp.train("mlp", data="synthetic", steps=-1)
    with pytest.raises(FileNotFoundError):
        mixp.train("gpt", data="/nonexistent/x.bin", steps=1)
    with pytest.raises(FileNotFoundError):
        mixp.train("mlp", data="/nonexistent/dir", steps=1)

    def boom(_):
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        mixp.train("mlp", data="synthetic", steps=3, batch=8, width=16, threads=1, progress=boom)


def test_compare_equals_cli(tmp_path):
    kinds = []
    flags = dict(steps=4, batch=16, threads=1)  # mixp compare has no --width
    r = mixp.compare("mlp", data="synthetic", precisions=["fp32", "bf16"], timing_rounds=0,
                     progress=lambda e: kinds.append(e["kind"]), **flags)
    cli = run_cli("compare", "--model", "mlp", "--data", "synthetic", "--precisions", "fp32,bf16",
                  "--steps", "4", "--batch", "16", "--threads", "1",
                  "--out", str(tmp_path / "study"))
    assert set(r) == set(cli)
    assert [(x["precision"], x["final_loss"], x["test_accuracy"]) for x in r["runs"]] == \
           [(x["precision"], x["final_loss"], x["test_accuracy"]) for x in cli["runs"]]
    assert kinds.count("run_begin") == 2 and kinds.count("step") == 8 and kinds[-1] == "run_end"
    with pytest.raises(ValueError):
        mixp.compare("mlp", data="synthetic", precisions=["bf17"], steps=1)


def test_on_step_callback_stops_cleanly():
    seen = []

    class Stop(Exception):
        pass

    def on_step(s):
        seen.append((s["step"], s["loss"], s["total_steps"]))
        if s["step"] == 2:
            raise Stop("enough")

    with pytest.raises(Stop, match="enough"):
        mixp.train("mlp", data="synthetic", steps=5, batch=8, width=16, threads=1, no_eval=True,
                   on_step=on_step)
    assert [s for s, _, _ in seen] == [1, 2] and seen[0][2] == 5  # no step after the raise
    # the interpreter and the library are fine after it: the same run again, to the end
    steps = []
    r = mixp.train("mlp", data="synthetic", steps=5, batch=8, width=16, threads=1, no_eval=True,
                   on_step=lambda s: steps.append(s["loss"]))
    assert len(steps) == 5 and steps[-1] == r["final_loss"]
    assert steps[:2] == [l for _, l, _ in seen]  # the interrupted run trained the same steps
    with pytest.raises(ValueError, match="not both"):
        mixp.train("mlp", data="synthetic", steps=1, on_step=print, progress=print)
    with pytest.raises(ValueError, match="callable"):
        mixp.train("mlp", data="synthetic", steps=1, on_step=3)


def test_other_threads_run_between_callbacks():
    """The GIL is held only for the callback: a Python thread counting meanwhile advances
    between two steps (it could not if training held the GIL)."""
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.0005)

    marks = []
    t = threading.Thread(target=ticker)
    t.start()
    try:
        mixp.train("mlp", data="synthetic", precision="fp32", steps=20, batch=64, width=64,
                   threads=1, no_eval=True, on_step=lambda s: marks.append(len(ticks)))
    finally:
        stop.set()
        t.join()
    assert len(marks) == 20
    assert marks[-1] > marks[0]  # the ticker ran while the steps in between trained
