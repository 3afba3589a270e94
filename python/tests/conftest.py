"""Shared helpers for the mixp Python tests (run by ctest's `python` test, cmake/MixpPython.cmake)."""
import json
import os
import subprocess

import pytest

mixp = pytest.importorskip("mixp", reason="the mixp module is not on PYTHONPATH (build with MIXP_PYTHON=ON)")


def run_cli(*args):
    """`mixp ARGS --json` through the built CLI (MIXP_CLI, set by ctest); skips without it."""
    cli = os.environ.get("MIXP_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("MIXP_CLI is not set to the built mixp CLI")
    r = subprocess.run([cli, args[0], "--json", *args[1:]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)
