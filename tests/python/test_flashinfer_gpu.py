"""GPU: the FlashInfer baseline for real, on an RMSNorm and a decode-attention problem.

Each problem is a one-version run (v0 made final with ``finish``) driven through correctness, profile, kbs evidence, the
final gate, ``benchmark --baselines all`` and the report; the FlashInfer row must be available, correct
before and after its timed calls, and counted in the speedups.  Skips cleanly when flashinfer cannot be
imported (bring it to an offline machine with ``scripts/flashinfer_offline.sh``).  Writes what it
measured to ``$KERNEL_LOOP_BENCH_OUT/flashinfer-<problem>.json`` when set.
"""

from __future__ import annotations

import json
import os
import subprocess

import klcli
import pytest
from kernel_loop import rundir
from test_benchmark_gpu import _ok, measure

pytestmark = pytest.mark.gpu

PROBLEMS = [
    ("rmsnorm", "ref_rmsnorm_fi.py", "triton_rmsnorm.py", "M=8192,N=4096", "norm"),
    ("decode", "ref_decode_fi.py", "torch_decode.py", "H=32,HKV=8,L=8192,D=128", "attention"),
]


@pytest.fixture(scope="module")
def flashinfer_version():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    fi = pytest.importorskip("flashinfer", reason="flashinfer is not importable (see scripts/flashinfer_offline.sh)")
    return fi.__version__


@pytest.mark.parametrize("name, ref, kernel, dims, ktype", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_flashinfer_baseline_in_the_benchmark(tmp_path, flashinfer_version, name, ref, kernel, dims, ktype):
    out = tmp_path / name
    _ok(klcli.run("init", out, "--kernel", name, "--ref", klcli.KERNELS / ref, "--impl", "triton",
                  "--baseline", klcli.KERNELS / kernel, "--dims", dims, "--iterations", "1", "--warmup", "10",
                  "--trials", "50", "--kernel-type", ktype, timeout=900))
    measure(out, "The final version; nothing follows it.")
    _ok(klcli.run("finish", out, "--reason", "a baseline check: v0 is the final version"))
    _ok(subprocess.run(["bash", str(rundir.gate_script()), str(out / "v0"), "--final"], capture_output=True, text=True))
    proc = _ok(klcli.run("benchmark", out, "--baselines", "all", "--trials", "50", timeout=900))
    bench = json.loads((out / "benchmark.json").read_text())
    rows = {r["name"]: r for r in bench["rows"]}
    fi = rows["flashinfer"]
    assert fi["available"], fi["why"]
    assert fi["correct"] and fi["correct_after_timing"], fi["error"]
    assert "flashinfer" in bench["speedups"] and fi["stats_us"]["median"] > 0
    _ok(klcli.run("report", out))
    assert "flashinfer" in (out / "final_report.md").read_text()
    record = {"problem": name, "dims": dims, "flashinfer": flashinfer_version,
              "medians_us": {n: (r["stats_us"] or {}).get("median") for n, r in rows.items()},
              "host_overhead_us": {n: r.get("host_overhead_us") for n, r in rows.items()},
              "speedups": bench["speedups"], "roofline": bench.get("roofline"), "stderr_tail": proc.stderr[-1500:]}
    print(json.dumps(record, indent=2))
    dest = os.environ.get("KERNEL_LOOP_BENCH_OUT")
    if dest:
        with open(os.path.join(dest, f"flashinfer-{name}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
