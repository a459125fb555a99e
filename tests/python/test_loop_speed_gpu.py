"""How long one version's tooling takes: correctness + profile + kbs evidence on a Triton softmax.

A benchmark, reported and not asserted (timings depend on the machine): it prints one line per step
and the total, and writes them as JSON to ``$KERNEL_LOOP_BENCH_OUT`` when that is set.  Run on a GPU
machine with Nsight Compute: ``pytest -m gpu -s tests/python/test_loop_speed_gpu.py``.
Each step is run twice: the first pass includes cold caches (Triton compile, page cache), the
second is what an agent sees from the second version on.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from klcli import KERNELS, run

pytestmark = [pytest.mark.gpu, pytest.mark.bench]
STEPS = (("correctness",), ("profile",), ("kbs", "evidence", "--force"))


@pytest.mark.skipif(shutil.which("ncu") is None and not Path("/usr/local/cuda/bin/ncu").exists(),
                    reason="Nsight Compute (ncu) is not installed")
def test_one_version_of_tooling(tmp_path):
    out = tmp_path / "run"
    proc = run("init", out, "--kernel", "softmax", "--ref", KERNELS / "ref_softmax.py", "--impl", "triton",
               "--baseline", KERNELS / "triton_softmax.py", "--dims", "M=4096,N=8192", "--skip-env",
               "--clock-control", "none")
    assert proc.returncode == 0, proc.stderr
    passes = {}
    for name in ("cold", "warm"):
        times = {}
        for step in STEPS:
            t0 = time.monotonic()
            proc = run(*step, out)
            times[" ".join(step)] = round(time.monotonic() - t0, 2)
            assert proc.returncode == 0, f"{step}: {proc.stderr[-2000:]}"
        times["total"] = round(sum(times.values()), 2)
        passes[name] = times
        print(f"\nloop tooling, {name} pass: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    target = os.environ.get("KERNEL_LOOP_BENCH_OUT")
    if target:
        Path(target).write_text(json.dumps({"problem": "triton softmax 4096 x 8192 fp32", **passes}, indent=2) + "\n")
