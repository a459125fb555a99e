"""KernelBench as published, on a GPU: every problem of a level at its own sizes through init and
correctness (``ModelNew = Model``), some or all of them through profile, and a CUDA C++ solution built
with load_inline.

The problems are read from ``$KERNEL_LOOP_KERNELBENCH`` (a level's folder: level 1, 2 or 3) or
``../shared/kernelbench/level1`` beside the repository (skipped when neither exists).  The sweep prints
one line per problem (result, seconds, peak device memory) and a total, and appends them as they come to
``kernelbench-sweep.txt`` in the folder ``$KERNEL_LOOP_BENCH_OUT`` when that is set.  Correctness runs ``$KERNEL_LOOP_KB_PARALLEL`` problems at a
time (2 by default; one GPU has room for them, so each problem's seconds include that sharing); profile
runs one at a time (it times, and refuses a GPU another process computes on), for ``$KERNEL_LOOP_KB_PROFILE``
problems spread over the list (10 by default, ``all`` for every one that passed) until
``$KERNEL_LOOP_KB_BUDGET_S`` seconds of profiling are spent (the ones left are named as not profiled, and
the test fails: it did not check them).  With every problem profiled, the log's last line is
``KernelBench level L sweep: P of T pass (init, correctness, profile); median profile S s; max profile S s``
(for a chunk, ``$KERNEL_LOOP_KB_ONLY``, the line says which problems; chunks of one sweep name one code digest).

On a machine of several GPUs (``$KERNEL_LOOP_KB_GPUS``, default every visible one) the problems are dealt
to the GPUs in turn, each problem's steps see only its GPU (``CUDA_VISIBLE_DEVICES``), correctness runs
``$KERNEL_LOOP_KB_PARALLEL`` at a time on each GPU and profile one at a time on each: all 100 level-2
problems through profile take about 2200 s on one H200, a ninth of that on eight (not yet run on several).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO
from klcli import run

pytestmark = pytest.mark.gpu
LEVEL = Path(os.environ.get("KERNEL_LOOP_KERNELBENCH") or REPO.parent / "shared" / "kernelbench" / "level1")
LEVEL1 = LEVEL if LEVEL.name == "level1" else LEVEL.parent / "level1"
EXPECTED = {"level1": 100, "level2": 100, "level3": 25}  # problems per level (level 3: the odd-numbered 25)
CENSUS = re.compile(r"the call launched (\d+) kernels \(ncu's census\); full sections for (\d+)")
PROFILED = os.environ.get("KERNEL_LOOP_KB_PROFILE", "10")  # how many problems also go through profile, or "all"
PARALLEL = int(os.environ.get("KERNEL_LOOP_KB_PARALLEL", "2"))
BUDGET_S = float(os.environ.get("KERNEL_LOOP_KB_BUDGET_S", "1e9"))


def _lanes() -> list[dict | None]:
    """One environment per GPU the sweep spreads over: None (the caller's own) on one GPU, else
    CUDA_VISIBLE_DEVICES naming one of the visible GPUs."""
    import torch

    n = int(os.environ.get("KERNEL_LOOP_KB_GPUS") or torch.cuda.device_count() or 1)
    if n <= 1:
        return [None]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in visible.split(",")] if visible else [str(i) for i in range(n)]
    return [{"CUDA_VISIBLE_DEVICES": ids[i]} for i in range(min(n, len(ids)))]
PHASES = re.compile(r"judge was ready after ([\d.]+) s; the timing run ended at ([\d.]+) s, the run under ncu at ([\d.]+) s")


def _number(p: Path) -> int:
    return int(re.match(r"(\d+)", p.name).group(1))


def _problems() -> list[Path]:
    """Every problem of the level, or those whose numbers $KERNEL_LOOP_KB_ONLY lists (e.g. "1,2,9")."""
    only = {int(x) for x in os.environ.get("KERNEL_LOOP_KB_ONLY", "").split(",") if x.strip()}
    return sorted((p for p in LEVEL.glob("*.py") if not only or _number(p) in only), key=_number)


# what the sweep does not run: the KBS, the steps after profile and their templates (a chunk run after a change to
# them measures what the others did)
_NOT_SWEPT = re.compile(r"/(kbs|kbs_corpus)/|/steps/(?!init|correctness|profile|env)\w+\.py$|"
                        r"/templates/(?!ncu_|correctness|env_check)[^/]+$")


def _code_hash() -> str:
    """A digest of the helpers' code that init, correctness and profile run (the measuring and profiling code):
    chunks of one sweep (``$KERNEL_LOOP_KB_ONLY``) run in several calls, or sessions, count as one run when their
    logs name the same digest."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in (REPO / "helpers").rglob("*") if p.suffix in (".py", ".j2", ".json", ".md")
                    and "__pycache__" not in p.parts and not _NOT_SWEPT.search(p.as_posix())):
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _log(line: str) -> None:
    target = os.environ.get("KERNEL_LOOP_BENCH_OUT")
    if target:
        with open(Path(target) / "kernelbench-sweep.txt", "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _one(tmp: Path, ref: Path, env: dict | None = None) -> dict:
    out = tmp / ref.stem
    kernel = tmp / f"{ref.stem}_new.py"
    kernel.write_text(ref.read_text() + "\n\nModelNew = Model\n")
    t0 = time.monotonic()
    proc = run("init", out, "--kernel", ref.stem, "--ref", ref, "--impl", "triton", "--baseline", kernel,
               "--skip-env", "--clock-control", "none", "--warmup", "3", "--trials", "10", env=env)
    if proc.returncode != 0:
        r = {"problem": ref.stem, "result": "INIT-FAILED", "seconds": time.monotonic() - t0,
             "why": proc.stderr.strip().splitlines()[-1:]}
        _log(_line(r))
        return r
    t1 = time.monotonic()
    proc = run("correctness", out, env=env)
    seconds = time.monotonic() - t1
    data = json.loads((out / "v0" / "correctness.json").read_text()) if (out / "v0" / "correctness.json").exists() else {}
    mem = (data.get("memory") or {})
    r = {"problem": ref.stem, "result": data.get("result") or f"exit {proc.returncode}", "seconds": round(seconds, 2),
         "peak_gib": round((mem.get("peak_mem_bytes") or 0) / 2**30, 2),
         "inputs_gib": round((mem.get("inputs_bytes") or 0) / 2**30, 2),
         "outputs_gib": round((mem.get("outputs_bytes") or 0) / 2**30, 2),
         "why": None if proc.returncode == 0 else (data.get("error") or proc.stderr.strip()[-400:]),
         "out": str(out), "env": env}
    _log(_line(r))
    target, md = os.environ.get("KERNEL_LOOP_BENCH_OUT"), out / "v0" / "correctness.md"
    if target and proc.returncode != 0 and md.exists():  # a failure's whole correctness.md comes back with the log
        (Path(target) / "md").mkdir(exist_ok=True)
        (Path(target) / "md" / f"{ref.stem}.md").write_text(md.read_text())
    return r


def _line(r: dict) -> str:
    return (f"{r['problem']:45s} {r['result']:5s} {r['seconds']:6.1f} s  peak {r.get('peak_gib', 0):6.2f} GiB "
            f"(inputs {r.get('inputs_gib', 0):.2f}, outputs {r.get('outputs_gib', 0):.2f})"
            + (f"  {r['why']}" if r["why"] else ""))


def _profile(r: dict) -> dict:
    t1 = time.monotonic()
    proc = run("profile", r["out"], env=r.get("env"))
    seconds = round(time.monotonic() - t1, 1)
    m = PHASES.search(proc.stderr)
    what = ((proc.stdout.strip().splitlines() or [""])[0] if proc.returncode == 0
            else proc.stderr.strip().splitlines()[-1:])
    p = {"problem": r["problem"], "rc": proc.returncode, "seconds": seconds, "what": what,
         "phases": [float(x) for x in m.groups()] if m else None}
    census = CENSUS.search(proc.stderr)
    p["census"] = f"census of {census.group(1)} launches, full sections for {census.group(2)}" if census else None
    vdir = Path(r["out"]) / "v0"
    p["folder_mib"] = round(sum(f.stat().st_size for f in vdir.iterdir() if f.is_file()) / 2**20, 1)
    _log(_profile_line(p))
    return p


def _profile_line(p: dict) -> str:
    return (f"profile {p['problem']}: exit {p['rc']} in {p['seconds']} s" + (
        f" (judge ready {p['phases'][0]} s, timed by {p['phases'][1]} s, ncu done by {p['phases'][2]} s)"
        if p.get("phases") else "") + (f"; {p['census']}" if p.get("census") else "")
        + f"; v0 folder {p.get('folder_mib', 0)} MiB: {p['what']}")


def profile_lanes(chosen: list[dict], lanes: list, budget_s: float, profile) -> list[dict | str]:
    """The chosen problems through ``profile``, one at a time on each GPU (its lane), in the order chosen; a problem
    left when ``budget_s`` is spent, or after a profile that was interrupted or terminated (exit 130 or 143: the
    call's limit reached its process group), is named, not profiled.  Seen on the H100: the call's limit interrupted
    one profile and its lane went on to start the next ones, so the call was killed before its logs were packed."""
    t0, stop = time.monotonic(), threading.Event()

    def lane(mine: list[dict]) -> list[dict | str]:
        out: list[dict | str] = []
        for r in mine:
            if stop.is_set() or time.monotonic() - t0 > budget_s:
                out.append(r["problem"])
                continue
            out.append(p := profile(r))
            if p["rc"] in (130, 143):
                stop.set()
        return out

    with ThreadPoolExecutor(max_workers=len(lanes)) as pool:
        return [x for xs in pool.map(lane, [[r for r in chosen if r["env"] == e] for e in lanes]) for x in xs]


def run_again_alone(rows: list[dict], parallel: int) -> list[int]:
    """The problems that run again alone after the chunk, one at a time, as a user runs them: every one that did not
    pass while others shared its GPU (``parallel`` > 1).  The verdict counted is the one alone; the joined log names
    the failure beside others too (join_chunks' "earlier").  Seen on an 80 GB H100: problems that ran out of device
    memory beside others (level 1's 8 GiB ones two at a time, eight of level 2's 1-22 four at a time), and level 2's
    3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU with ``ModelNew = Model`` off by a relative L2 of 3.9e-4 from the
    third call of one shape on while the GPU was full, as if its convolution's algorithm changed (torch picks another
    cuDNN plan where the workspace of its cached one cannot be had).  Not one cut by the call's limit (exit 130), and
    none where most failed (a break of the judge's: the chunk would take twice as long and say nothing more)."""
    again = [i for i, r in enumerate(rows) if parallel > 1 and r["result"] not in ("PASS", "exit 130")]
    return again if len(again) * 2 <= len(rows) else []


@pytest.mark.skipif(not LEVEL.is_dir(), reason="KernelBench is not beside the repository")
@pytest.mark.skipif(shutil.which("ncu") is None and not Path("/usr/local/cuda/bin/ncu").exists(),
                    reason="Nsight Compute (ncu) is not installed")
def test_kernelbench_sweep_at_own_sizes(tmp_path):
    problems = _problems()
    everything = not os.environ.get("KERNEL_LOOP_KB_ONLY")
    assert len(problems) == EXPECTED.get(LEVEL.name, len(problems)) or not everything
    lanes = _lanes()
    _log(f"# {LEVEL.name}: {len(problems)} problems on {len(lanes)} GPU(s), correctness {PARALLEL} at a time on "
         f"each, profile {PROFILED} (one at a time on each); helpers code {_code_hash()}")
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=PARALLEL * len(lanes)) as pool:
        rows = list(pool.map(lambda ip: _one(tmp_path, ip[1], lanes[ip[0] % len(lanes)]), enumerate(problems)))
    again = run_again_alone(rows, PARALLEL)
    for i in again:
        (tmp_path / "alone").mkdir(exist_ok=True)
        rows[i] = _one(tmp_path / "alone", problems[i], lanes[i % len(lanes)])
        rows[i]["problem"] += " (alone)"
    lines = [_line(r) for r in rows]
    passed = [r for r in rows if r["result"] == "PASS"]
    secs = [r["seconds"] for r in rows]
    lines.append(f"total: {len(passed)} of {len(rows)} PASS; correctness seconds median {statistics.median(secs):.1f}, "
                 f"max {max(secs):.1f}; sweep wall {time.monotonic() - t0:.0f} s ({PARALLEL} problems at a time per GPU"
                 + (f"; {len(again)} run again alone after failing beside others)" if again else ")"))
    _log(lines[-1])
    # problems through profile, spread over the list, one at a time, within the budget
    n = len(passed) if PROFILED == "all" else int(PROFILED)
    chosen = passed[:: max(1, len(passed) // n)][:n] if n else []
    done = profile_lanes(chosen, lanes, BUDGET_S, _profile)
    profiled = [x for x in done if isinstance(x, dict)]
    left = [x for x in done if isinstance(x, str)]
    lines += [f"profile {p['problem']}: exit {p['rc']} in {p['seconds']} s: {p['what']}" for p in profiled]
    if profiled:
        both = {r["problem"]: r["seconds"] for r in rows}
        per = [both[p["problem"]] + p["seconds"] for p in profiled]
        lines.append(f"profiled {len(profiled)} of {len(chosen)} chosen: {sum(p['rc'] == 0 for p in profiled)} exit 0; "
                     f"profile seconds median {statistics.median(p['seconds'] for p in profiled):.1f}, max "
                     f"{max(p['seconds'] for p in profiled):.1f}; correctness + profile per problem median "
                     f"{statistics.median(per):.1f} s, max {max(per):.1f} s"
                     + (f"; not profiled (budget): {len(left)}" if left else ""))
        _log(lines[-1])
    if PROFILED == "all" and not left:
        ok = [p for p in profiled if p["rc"] == 0]
        secs = [p["seconds"] for p in profiled] or [0.0]
        which = "" if everything else f" (chunk {os.environ['KERNEL_LOOP_KB_ONLY']})"
        lines.append(f"KernelBench {LEVEL.name.replace('level', 'level ')} sweep{which}: {len(ok)} of {len(rows)} pass "
                     f"(init, correctness, profile); median profile {statistics.median(secs):.1f} s; max profile "
                     f"{max(secs):.1f} s; helpers code {_code_hash()}")
        _log(lines[-1])
    print("\n" + "\n".join(lines))
    need = len(rows) - 1 if everything else len(rows)  # 99 of 100, 24 of 25
    assert len(passed) >= need, [r for r in rows if r["result"] != "PASS"]
    assert all(p["rc"] == 0 for p in profiled), [p for p in profiled if p["rc"] != 0]
    assert not left, f"{len(left)} chosen problems were not profiled within the budget: {left[:5]}"



_SWEPT = re.compile(r"^(\d+_\S+)( \(alone\))?\s+(PASS|FAIL|INIT-FAILED|exit -?\d+)\s+([\d.]+) s\s+peak\s+([\d.]+) GiB"
                    r"(?:\s+\([^)]*\))?\s*(.*)$")
_PROFILED = re.compile(r"^profile (\d+_\S+)(?: \(alone\))?: exit (-?\d+) in ([\d.]+) s")
_HEADER = re.compile(r"^# (level\d+): .*helpers code ([0-9a-f]{16})")


def join_chunks(text: str, digest: str | None = None) -> list[str]:
    """The chunks of one sweep joined problem by problem: ``text`` holds the ``kernelbench-sweep.txt`` logs of several
    calls (or sessions) one after another.  Only lines under a header naming ``digest`` (by default the last
    header's) count.  A problem's last run counts (a run again alone, a chunk run again), and its row names any
    earlier outcome that was not a pass, so a flaky failure stays in sight.  A chunk cut by its call's limit still
    counts the problems it finished; a step cut there (exit 130) is not done.  A problem passes when its correctness
    PASSed and its profile exited 0.  The last line is the sweep's line once every problem of the level has both,
    else what is missing."""
    heads = [m.groups() for m in map(_HEADER.match, text.splitlines()) if m]
    if not heads:
        return ["no sweep header (# levelN: ... helpers code D) in the logs"]
    if digest is None:
        level, digest = heads[-1]
    elif (level := next((lv for lv, d in heads if d == digest), None)) is None:
        return [f"no chunk of helpers code {digest} in the logs (they name {sorted({d for _, d in heads})})"]
    checks: dict[str, tuple] = {}
    profiles: dict[str, tuple] = {}
    earlier: dict[str, list[str]] = {}
    mine, chunks = False, 0
    for ln in text.splitlines():
        if (m := _HEADER.match(ln)):
            mine = m.groups() == (level, digest)
            chunks += mine
        elif mine and (m := _SWEPT.match(ln)) and m.group(3) != "exit 130":  # 130: cut by the call's limit
            if (was := checks.get(m.group(1))) and was[0] != "PASS":
                earlier.setdefault(m.group(1), []).append(f"{was[0]} {was[3]}".strip())
            checks[m.group(1)] = (m.group(3), float(m.group(4)), float(m.group(5)), m.group(6).strip())
        elif mine and (m := _PROFILED.match(ln)) and m.group(2) != "130":
            if (was := profiles.get(m.group(1))) and was[0] != 0:
                earlier.setdefault(m.group(1), []).append(f"profile exit {was[0]}")
            profiles[m.group(1)] = (int(m.group(2)), float(m.group(3)))
    out = [f"{'problem':45s} {'check':5s} {'seconds':>8s} {'peak GiB':>9s} {'profile':>8s}"]
    order = sorted(checks, key=lambda k: int(k.split("_")[0]))
    for k in order:
        result, secs, peak, why = checks[k]
        prof = profiles.get(k)
        cell = "-" if prof is None else (f"{prof[1]:.1f} s" if prof[0] == 0 else f"exit {prof[0]}")
        out.append(f"{k:45s} {result:5s} {secs:6.1f} s {peak:9.2f} {cell:>8s}" + (f"  {why}" if why else "")
                   + (f"  (earlier: {'; '.join(earlier[k])})" if k in earlier else ""))
    done = {k for k, (result, *_) in checks.items() if result != "PASS" or k in profiles}
    passed = [k for k in done if checks[k][0] == "PASS" and profiles[k][0] == 0]
    total = EXPECTED.get(level, len(checks))
    name = f"KernelBench {level.replace('level', 'level ')} sweep"
    if len(done) < total:
        waiting = sorted(set(checks) - done, key=lambda k: int(k.split("_")[0]))
        out.append(f"{name} so far: {len(passed)} of {len(done)} done pass, {total - len(done)} of {total} not done"
                   + (f" ({', '.join(waiting)} not profiled)" if waiting else "") + f"; helpers code {digest}")
        return out
    secs = [profiles[k][1] for k in passed] or [0.0]
    out.append(f"{name}: {len(passed)} of {total} pass (init, correctness, profile); median profile "
               f"{statistics.median(secs):.1f} s; max profile {max(secs):.1f} s; helpers code {digest}, {chunks} chunks")
    return out

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
    """A load_inline solution through init, correctness and profile; profile on an empty build cache loads the library
    correctness kept in v0/lib.  At an eighth of the file's batch size: at its own (6 GiB a tensor) the judge and its
    worker did not fit an H100 80GB together (2026-12-06; the sizes are the sweep's subject, not this test's)."""
    kernel = tmp_path / "relu_new.py"
    kernel.write_text(LOAD_INLINE_RELU)
    out = tmp_path / "run"
    cache = tmp_path / "cache"
    env = {"KERNEL_LOOP_CACHE": str(cache)}
    proc = run("init", out, "--kernel", "relu", "--ref", LEVEL1 / "19_ReLU.py", "--impl", "cuda-cpp",
               "--baseline", kernel, "--skip-env", "--clock-control", "none", "--warmup", "3", "--trials", "10",
               "--dims", "batch_size=512", env=env)
    assert proc.returncode == 0, proc.stderr
    proc = run("correctness", out, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (cache / "torch_extensions").is_dir() and not list(out.rglob("*.so"))  # the build lives in the cache
    [lib] = json.loads((out / "v0" / "correctness.json").read_text())["libraries"]  # and a copy in v0/lib
    assert (out / "v0" / lib["file"]).is_file() and lib["name"] == "kl_relu_ext"
    fresh = tmp_path / "fresh"  # profile on a machine whose build cache is empty: the timing and ncu's workers load
    proc = run("profile", out, env={"KERNEL_LOOP_CACHE": str(fresh)})  # what correctness kept, and build nothing
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(fresh.rglob("*.so")), proc.stderr[-3000:]
    names = [k["name"] for k in json.loads((out / "v0" / "ncu.json").read_text())["kernels"]]
    assert any("relu_kernel" in n for n in names), names


RELU4 = r'''"""A KernelBench-style load_inline ReLU that moves 16 bytes a thread (float4) where it may."""
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
#include <cstdint>
__global__ void relu4(const float4* x, float4* y, long n4) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n4) { float4 v = x[i]; y[i] = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f)); }
}
__global__ void relu1(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
torch::Tensor relu(torch::Tensor x, bool check) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    bool aligned = reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0;
    if (n % 4 == 0 && (aligned || !check))  // check false: the address taken to be aligned, as a cudaMalloc's is
        relu4<<<(n / 4 + 255) / 256, 256>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                            reinterpret_cast<float4*>(y.data_ptr<float>()), n / 4);
    else
        relu1<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_ext = load_inline(name="kl_relu4_ext", cpp_sources="torch::Tensor relu(torch::Tensor x, bool check);",
                   cuda_sources=_SRC, functions=["relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu(x.contiguous(), CHECK)
'''


@pytest.mark.skipif(not (LEVEL1 / "19_ReLU.py").is_file(), reason="KernelBench level 1 is not beside the repository")
def test_a_float4_kernel_that_assumes_aligned_inputs_fails_and_one_that_checks_passes(tmp_path):
    """A user's x[1:] (a batch less its first row) is dense, at an offset of one row: with rows of 1023 floats it is not
    16-byte aligned, and a kernel that loads float4 there faults (misaligned address).  layout:offset hands it, and
    such a fault is a failure, not a refusal; the same kernel that checks the address and falls back passes."""
    cache = {"KERNEL_LOOP_CACHE": str(tmp_path / "cache")}  # one build serves both (the same source)
    for check in ("True", "False"):
        kernel, out = tmp_path / f"relu4_{check}.py", tmp_path / f"run_{check}"
        kernel.write_text(RELU4.replace("CHECK)", f"{check})"))
        proc = run("init", out, "--kernel", "relu", "--ref", LEVEL1 / "19_ReLU.py", "--impl", "cuda-cpp",
                   "--baseline", kernel, "--skip-env", "--dims", "batch_size=64,dim=1023", env=cache)
        assert proc.returncode == 0, proc.stderr
        proc = run("correctness", out, env=cache)
        data = json.loads((out / "v0" / "correctness.json").read_text())
        print(f"float4 ReLU, check {check}: {data['result']} {(data.get('error') or '')[:300]}")
        if check == "True":
            assert proc.returncode == 0, proc.stderr[-3000:]
        else:
            assert proc.returncode == 1 and "misaligned" in (data.get("error") or ""), data.get("error")

if __name__ == "__main__":  # python3 tests/python/test_kernelbench_gpu.py LOG... [--digest D]: the chunks joined
    import argparse

    ap = argparse.ArgumentParser(description="join the chunks' kernelbench-sweep.txt logs of one sweep")
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--digest", help="the helpers code digest to join (default: the last header's)")
    a = ap.parse_args()
    print("\n".join(join_chunks("".join(f.read_text() for f in a.logs), a.digest)))
