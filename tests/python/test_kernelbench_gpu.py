"""KernelBench level 1 as published, on a GPU: every problem at its own sizes through init and correctness
(``ModelNew = Model``), ten of them through profile, and a CUDA C++ solution built with load_inline.

The problems are read from ``$KERNEL_LOOP_KERNELBENCH`` or ``../shared/kernelbench/level1`` beside the
repository (skipped when neither exists).  The sweep prints one line per problem (result, seconds,
peak device memory) and a total, and writes them to ``$KERNEL_LOOP_BENCH_OUT`` when that is set.
Problems run two at a time (one GPU has room for both), so each problem's seconds include that sharing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO
from klcli import run

pytestmark = pytest.mark.gpu
LEVEL1 = Path(os.environ.get("KERNEL_LOOP_KERNELBENCH") or REPO.parent / "shared" / "kernelbench" / "level1")
PROFILED = int(os.environ.get("KERNEL_LOOP_KB_PROFILE", "10"))  # how many problems also go through profile


def _number(p: Path) -> int:
    return int(re.match(r"(\d+)", p.name).group(1))


def _problems() -> list[Path]:
    """Every level-1 problem, or those whose numbers $KERNEL_LOOP_KB_ONLY lists (e.g. "1,2,9")."""
    only = {int(x) for x in os.environ.get("KERNEL_LOOP_KB_ONLY", "").split(",") if x.strip()}
    return sorted((p for p in LEVEL1.glob("*.py") if not only or _number(p) in only), key=_number)


def _one(tmp: Path, ref: Path) -> dict:
    out = tmp / ref.stem
    kernel = tmp / f"{ref.stem}_new.py"
    kernel.write_text(ref.read_text() + "\n\nModelNew = Model\n")
    t0 = time.monotonic()
    proc = run("init", out, "--kernel", ref.stem, "--ref", ref, "--impl", "triton", "--baseline", kernel,
               "--skip-env", "--clock-control", "none", "--warmup", "3", "--trials", "10")
    if proc.returncode != 0:
        return {"problem": ref.stem, "result": "INIT-FAILED", "seconds": time.monotonic() - t0,
                "why": proc.stderr.strip().splitlines()[-1:]}
    t1 = time.monotonic()
    proc = run("correctness", out)
    seconds = time.monotonic() - t1
    data = json.loads((out / "v0" / "correctness.json").read_text()) if (out / "v0" / "correctness.json").exists() else {}
    mem = (data.get("memory") or {})
    return {"problem": ref.stem, "result": data.get("result") or f"exit {proc.returncode}", "seconds": round(seconds, 2),
            "peak_gib": round((mem.get("peak_mem_bytes") or 0) / 2**30, 2),
            "inputs_gib": round((mem.get("inputs_bytes") or 0) / 2**30, 2),
            "outputs_gib": round((mem.get("outputs_bytes") or 0) / 2**30, 2),
            "why": None if proc.returncode == 0 else (data.get("error") or proc.stderr.strip()[-400:]),
            "out": str(out)}


@pytest.mark.skipif(not LEVEL1.is_dir(), reason="KernelBench level 1 is not beside the repository")
@pytest.mark.skipif(shutil.which("ncu") is None and not Path("/usr/local/cuda/bin/ncu").exists(),
                    reason="Nsight Compute (ncu) is not installed")
def test_level1_sweep_at_own_sizes(tmp_path):
    problems = _problems()
    everything = not os.environ.get("KERNEL_LOOP_KB_ONLY")
    assert len(problems) == 100 or not everything
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = list(pool.map(lambda p: _one(tmp_path, p), problems))
    lines = [f"{r['problem']:45s} {r['result']:5s} {r['seconds']:6.1f} s  peak {r.get('peak_gib', 0):6.2f} GiB "
             f"(inputs {r.get('inputs_gib', 0):.2f}, outputs {r.get('outputs_gib', 0):.2f})"
             + (f"  {r['why']}" if r["why"] else "") for r in rows]
    passed = [r for r in rows if r["result"] == "PASS"]
    secs = [r["seconds"] for r in rows]
    lines.append(f"total: {len(passed)} of {len(rows)} PASS; correctness seconds median {statistics.median(secs):.1f}, "
                 f"max {max(secs):.1f}; sweep wall {time.monotonic() - t0:.0f} s (two problems at a time)")
    # ten problems through profile, spread over the list
    profiled = []
    for r in (passed[:: max(1, len(passed) // PROFILED)][:PROFILED] if PROFILED else []):
        t1 = time.monotonic()
        proc = run("profile", r["out"])
        profiled.append((r["problem"], proc.returncode, round(time.monotonic() - t1, 1),
                         (proc.stdout.strip().splitlines() or [""])[0] if proc.returncode == 0
                         else proc.stderr.strip().splitlines()[-1:]))
    lines += [f"profile {name}: exit {rc} in {s} s: {what}" for name, rc, s, what in profiled]
    print("\n" + "\n".join(lines))
    target = os.environ.get("KERNEL_LOOP_BENCH_OUT")
    if target:
        Path(target).write_text("\n".join(lines) + "\n")
    assert len(passed) >= (99 if everything else len(rows)), [r for r in rows if r["result"] != "PASS"]
    assert all(rc == 0 for _, rc, _, _ in profiled), profiled


LOAD_INLINE_RELU = r'''"""A KernelBench-style CUDA C++ solution: ReLU built with torch.utils.cpp_extension.load_inline."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_ext = load_inline(name="kl_relu_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                   cuda_sources=_SRC, functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_cuda(x.contiguous())
'''


@pytest.mark.skipif(not (LEVEL1 / "19_ReLU.py").is_file(), reason="KernelBench level 1 is not beside the repository")
def test_load_inline_cuda_solution_for_a_kernelbench_problem(tmp_path):
    kernel = tmp_path / "relu_new.py"
    kernel.write_text(LOAD_INLINE_RELU)
    out = tmp_path / "run"
    cache = tmp_path / "cache"
    env = {"KERNEL_LOOP_CACHE": str(cache)}
    proc = run("init", out, "--kernel", "relu", "--ref", LEVEL1 / "19_ReLU.py", "--impl", "cuda-cpp",
               "--baseline", kernel, "--skip-env", "--clock-control", "none", "--warmup", "3", "--trials", "10",
               env=env)
    assert proc.returncode == 0, proc.stderr
    proc = run("correctness", out, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (cache / "torch_extensions").is_dir() and not list(out.rglob("*.so"))  # the build lives in the cache
    proc = run("profile", out, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = [k["name"] for k in json.loads((out / "v0" / "ncu.json").read_text())["kernels"]]
    assert any("relu_kernel" in n for n in names), names
