"""Build complete synthetic run directories (v0..vN) for the CPU tests of hypothesis, next, status,
benchmark and report.

Where the numbers come from:
- v0's ncu.json metrics are the real Nsight Compute values of the Triton softmax in
  tests/fixtures/ncu/ (8192 x 4096 fp32, H100 80GB HBM3, ``--set detailed``):
  softmax_triton_detailed_details.csv (Duration 86,016 ns, Memory/DRAM Throughput 85.57 %,
  Compute (SM) Throughput 22.46 %, L1/TEX 27.57 %, L2 81.12 %, L2 Hit Rate 52.02 %,
  Registers Per Thread 55, Theoretical / Achieved Occupancy 56.25 / 53.03 %, Block Limit
  Registers 9, Shared Mem 28, Warps 16, SM 32, Waves Per SM 6.90, Executed Ipc Active 0.95) and
  softmax_triton_detailed_raw.csv (dram__bytes_read.sum 134,232,320, dram__bytes_write.sum
  112,384,256, dram__bytes.sum.per_second 2.867e12, launch__shared_mem_per_block 1,040,
  thread_inst_executed / inst_executed = 32.0, tensor pipe 0 %, fma pipe 13.18 %).
  The CUDA-event median of v0 uses softmax_triton_metrics_raw.csv's gpu__time_duration
  (84,896 ns, a run without replay) as its stand-in.  Stall metrics are null: the recording
  has only PC-sampling counts, not cycles per instruction, so they model "not collected".
- v1..v3 are invented successors of that kernel (more warps per row, then two further
  single changes); their durations are chosen, and throughput percentages are rescaled from
  v0 by the duration ratio (same bytes in less time), so they stay physically consistent.
- correctness max abs error 3.7e-9 is what softmax_triton.py printed against torch.softmax.
- env.json peaks: H100 SXM figures from the shared research notes (3.35 TB/s HBM3, 989 / 67
  TFLOP/s dense bf16 / fp32); the copy bandwidth 3,300 GB/s is a plausible measured rate (98.5 %
  of 3.35 TB/s): the recorded v0 already moves its 268 MB at 3.16 TB/s (84.9 us).
- v1..v3 stay below that bandwidth (v3: 268 MB in 82.4 us = 3.26 TB/s), so they are possible.
- The benchmark child result is SYNTHETIC (no GPU here to record one): samples are drawn
  around the versions' event medians with a fixed seed.  It is labelled as such in the file.
"""

from __future__ import annotations

import json
import random
import statistics
from argparse import Namespace
from pathlib import Path

from kernel_loop import provenance, records
from kernel_loop.common import sha256_file, write_json
from kernel_loop.steps import hypothesis

# Kernels and reference follow references/kernel_abi.md (run_kernel / setup / reference).
KERNEL_TEMPLATE = '''"""Row softmax in Triton ({note})."""
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"){load_hint})
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


def run_kernel(x, y, M, N):
    softmax_kernel[(M,)](x, y, N, BLOCK=triton.next_power_of_2(N), num_warps={num_warps})
'''

REF_PY = '''"""Reference: row softmax of an (M, N) fp32 matrix, written into y."""
import torch


def setup(M, N):
    x = torch.randn(M, N, dtype=torch.float32)
    y = torch.empty(M, N, dtype=torch.float32)
    return {"inputs": {"x": x, "y": y}, "outputs": ["y"]}


def reference(x, y):
    y.copy_(torch.softmax(x, dim=-1))


def flops(M, N):
    return 5.0 * M * N


def bytes_moved(M, N):
    return 2.0 * 4 * M * N
'''

# v0 metrics: real values, see the module docstring.
V0_METRICS = {
    "duration_us": 86.016, "sm_clock_hz": 1598300025.58, "sm_throughput_pct": 22.46,
    "memory_throughput_pct": 85.57, "dram_throughput_pct": 85.57, "l1_throughput_pct": 27.57,
    "l2_throughput_pct": 81.12, "l1_hit_rate_pct": 0.0, "l2_hit_rate_pct": 52.02,
    "dram_bytes_read": 134232320.0, "dram_bytes_write": 112384256.0, "dram_bytes_per_s": 2.86710119047619e12,
    "achieved_occupancy_pct": 53.03, "theoretical_occupancy_pct": 56.25, "occupancy_limit_registers": 9,
    "occupancy_limit_shared_mem": 28, "occupancy_limit_warps": 16, "occupancy_limit_blocks": 32,
    "registers_per_thread": 55, "shared_mem_per_block": 1040, "grid_size": 8192, "block_size": 128,
    "waves_per_sm": 6.90, "sm_count": 132, "issue_active": 0.2246, "eligible_warps": None, "ipc": 0.95,
    "sectors_per_request_ld": 16.0, "sectors_per_request_st": 16.0, "local_spill_requests": 0,
    "smem_bank_conflicts_pct": 0.0, "stall_long_scoreboard": None, "stall_short_scoreboard": None,
    "stall_barrier": None, "stall_mio_throttle": None, "warp_latency_cycles": None,
    "tensor_pipe_pct": 0.0, "gmma_pct": 0.0, "fma_pipe_pct": 13.18, "thread_inst_per_inst": 32.0,
    "event_median_us": 84.896,
}

# Per version: ncu duration, event median, and the metrics the single change moved.
VERSIONS = [
    {"note": "v0: baseline, 4 warps per row", "num_warps": 4, "load_hint": "",
     "duration_us": 86.016, "event_median_us": 84.896, "changes": {}},
    {"note": "v1: 8 warps per row", "num_warps": 8, "load_hint": "",
     "duration_us": 84.30, "event_median_us": 83.05,
     "changes": {"registers_per_thread": 40, "theoretical_occupancy_pct": 100.0,
                 "achieved_occupancy_pct": 86.4, "occupancy_limit_registers": 6, "block_size": 256,
                 "waves_per_sm": 3.88}},
    {"note": "v2: 16 warps per row", "num_warps": 16, "load_hint": "",
     "duration_us": 84.85, "event_median_us": 83.60,
     "changes": {"registers_per_thread": 32, "theoretical_occupancy_pct": 100.0,
                 "achieved_occupancy_pct": 90.1, "occupancy_limit_registers": 4, "block_size": 512,
                 "waves_per_sm": 3.88}},
    {"note": "v3: 8 warps, streaming load hint", "num_warps": 8, "load_hint": ', eviction_policy="evict_first"',
     "duration_us": 83.55, "event_median_us": 82.40,
     "changes": {"registers_per_thread": 40, "theoretical_occupancy_pct": 100.0,
                 "achieved_occupancy_pct": 87.2, "occupancy_limit_registers": 6, "block_size": 256,
                 "waves_per_sm": 3.88, "l2_hit_rate_pct": 50.3}},
]

# What the agent wrote on each version (v0..v2) and the KBS pages it used.
HYPOTHESES = [
    {"change": "Launch the row kernel with num_warps=8 instead of 4.",
     "rationale": "Theoretical occupancy is 56 % and registers are the limiting factor.",
     "risk": "More warps per row add reduction steps; registers may not fall.",
     "decision_rule": "Keep if the event median drops by at least 1.5 %; else revert.",
     "predict": ["duration: -2%", "achieved_occupancy_pct: >= 70", "registers_per_thread: <= 48"],
     "pages": ["occupancy-register-pressure", "softmax-row-per-program"]},
    {"change": "Raise num_warps from 8 to 16.",
     "rationale": "Occupancy rose with warps; more may hide the remaining DRAM latency.",
     "risk": "Per-row reductions get longer; could be slower.",
     "decision_rule": "Keep only if the event median drops by 2 % or more.",
     "predict": ["duration: -2%", "achieved_occupancy_pct: +2", "dram_throughput_pct: >= 95"],
     "pages": ["occupancy-register-pressure"]},
    {"change": "Go back to 8 warps and load x with eviction_policy='evict_first'.",
     "rationale": "DRAM is near peak; streaming loads should stop polluting L2.",
     "risk": "L2 hit rate may fall further; gain may be within noise.",
     "decision_rule": "Keep if the event median drops by at least 1 %.",
     "predict": ["duration: -1%", "l2_hit_rate_pct: < 52"],
     "pages": ["l2-eviction-hints", "dram-bound-streaming"]},
]

KBS_TITLES = {
    "occupancy-register-pressure": "Registers limit occupancy",
    "softmax-row-per-program": "Softmax: one row per program",
    "l2-eviction-hints": "L2 eviction-priority hints",
    "dram-bound-streaming": "DRAM-bound streaming kernels",
    "vectorized-global-access": "Vectorized global loads",
}


def version_metrics(k: int) -> dict:
    spec = VERSIONS[k]
    m = dict(V0_METRICS)
    ratio = V0_METRICS["duration_us"] / spec["duration_us"]
    for key in ("memory_throughput_pct", "dram_throughput_pct", "l2_throughput_pct", "sm_throughput_pct",
                "l1_throughput_pct"):
        m[key] = round(V0_METRICS[key] * ratio, 2)
    m["dram_bytes_per_s"] = V0_METRICS["dram_bytes_per_s"] * ratio
    m.update(spec["changes"], duration_us=spec["duration_us"], event_median_us=spec["event_median_us"])
    return m


def symptoms_for(m: dict) -> list[dict]:
    """The symptom tags symptoms.py's rules fire on these metrics."""
    out = []
    if m["dram_throughput_pct"] >= 80:
        out.append({"tag": "dram-near-peak", "metrics": {"dram_throughput_pct": m["dram_throughput_pct"]},
                    "thresholds": {"dram_throughput_pct": ">= 80"}, "why": "DRAM bandwidth is close to its peak"})
    if m["theoretical_occupancy_pct"] < 80:
        out.append({"tag": "occupancy-limited-registers",
                    "metrics": {"theoretical_occupancy_pct": m["theoretical_occupancy_pct"],
                                "registers_per_thread": m["registers_per_thread"]},
                    "thresholds": {"theoretical_occupancy_pct": "< 80"},
                    "why": "registers are the smallest block limit"})
    if m["issue_active"] < 0.6:
        out.append({"tag": "low-issue-efficiency", "metrics": {"issue_active": m["issue_active"]},
                    "thresholds": {"issue_active": "< 0.6"}, "why": "few eligible warps per cycle"})
    return out


def write_run(root: Path, iterations: int = 3, dims: dict | None = None) -> Path:
    """run.json, env.json, ref.py and v0/kernel.py: what init leaves."""
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / "run.json", {
        "schema": 1, "kernel": "row softmax", "kernel_type": "softmax", "impl": "triton",
        "dims": dims or {"M": 8192, "N": 4096}, "extra_shapes": [{"M": 128, "N": 1000}], "seed": 42,
        "tolerance": {"atol": 1e-5, "rtol": 1e-5, "source": "cli"}, "gpu": 0, "iterations": iterations,
        "warmup": 10, "trials": 50, "correctness_trials": 3, "ptr_size": None, "timeout_s": 600,
        "ncu": {"set": "detailed", "sections": [], "clock_control": None, "cache_control": None, "extra_args": []},
        "build": {"include_dirs": [], "nvcc_flags": []}, "baseline": "/home/user/softmax.py",
        "created": "2026-11-29T10:00:00+0000",
    })
    write_json(root / "env.json", {
        "schema": 1, "gpu": {"name": "NVIDIA H100 80GB HBM3", "cc": "9.0", "sm_count": 132},
        "versions": {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0", "driver": "580.159.04",
                     "ncu": "2025.3.1"},
        "peaks": {"copy_bandwidth_gbps": 3300.0, "bf16_matmul_tflops": 989.0, "fp32_matmul_tflops": 67.0},
    })
    (root / "ref.py").write_text(REF_PY, encoding="utf-8")
    write_kernel(root, 0)
    records.append(root, "init", iterations=str(iterations), device="cuda:0", gpu="NVIDIA H100 80GB HBM3",
                   **records.run_hashes(root), files=records.files_field(root, ["v0/kernel.py"]))
    return root


def write_kernel(root: Path, k: int) -> Path:
    spec = VERSIONS[k]
    path = root / f"v{k}" / "kernel.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KERNEL_TEMPLATE.format(**spec), encoding="utf-8")
    return path


def write_measurements(root: Path, k: int) -> None:
    """correctness.{json,md}, ncu.json, ncu_summary.md, ncu_details.md and measured.sha256."""
    vdir = root / f"v{k}"
    kernel = vdir / "kernel.py"
    ksha = sha256_file(kernel)
    outputs = [{"name": "y", "dtype": "float32", "shape": [8192, 4096], "max_abs_err": 3.725e-9 * (1 + k / 10),
                "max_rel_err": 2.1e-6, "rel_l2_err": 1.4e-7, "mismatches": 0, "numel": 8192 * 4096,
                "first_bad": None, "nonfinite_unexpected": 0, "passed": True}]
    write_json(vdir / "correctness.json", {
        "schema": 1, "version": f"v{k}", "kernel_file": "kernel.py", "kernel_sha256": ksha, "result": "PASS",
        "error": None, "tolerance": {"atol": 1e-5, "rtol": 1e-5, "source": "cli"}, "build": None,
        "shapes": [{"dims": {"M": 8192, "N": 4096},
                    "trials": [{"seed": 42 + t, "outputs": outputs} for t in range(3)]}],
        "sanitize": None,
    })
    (vdir / "correctness.md").write_text(f"# Correctness v{k}\n\n| Check | Value |\n|---|---|\n| Result | PASS |\n",
                                         encoding="utf-8")
    m = version_metrics(k)
    timing = {"method": "cuda_event", "warmup": 10, "trials": 50, "l2_flush": True,
              "median_us": m["event_median_us"], "p25_us": m["event_median_us"] * 0.995,
              "p75_us": m["event_median_us"] * 1.006, "mean_us": m["event_median_us"] * 1.002,
              "min_us": m["event_median_us"] * 0.987, "max_us": m["event_median_us"] * 1.04}
    m_dram = m["dram_throughput_pct"]
    write_json(vdir / "ncu.json", {
        "schema": 1, "version": f"v{k}", "kernel_sha256": ksha,
        "tool": {"ncu_version": "2025.3.1", "command": ["ncu", "--set", "detailed"], "set": "detailed",
                 "sections": [], "clock_control": None, "cache_control": None},
        "gpu": {"name": "NVIDIA H100 80GB HBM3", "cc": "9.0", "sm_count": 132},
        "gpu_state": {"sm_clock_mhz": 1598, "mem_clock_mhz": 2619, "temperature_c": 41, "throttle_reasons": []},
        "kernels": [{"name": "softmax_kernel", "grid": [8192, 1, 1], "block": [m["block_size"], 1, 1], "metrics": m,
                     "rules": [{"section": "SpeedOfLight", "rule": "SOLBottleneck", "type": "INF",
                                "text": "utilizing greater than 80.0% of the available memory performance",
                                "est_speedup_pct": None}]}],
        "metrics": m, "timing": timing,
        "bottleneck": "memory-bound" if m_dram >= 60 else "latency-bound",
        "symptoms": symptoms_for(m), "warnings": [],
    })
    (vdir / "ncu_summary.md").write_text(f"# NCU summary v{k}\n\nduration {m['duration_us']} us\n", encoding="utf-8")
    (vdir / "ncu_details.md").write_text(f"# NCU details v{k}\n\n(all metrics)\n", encoding="utf-8")
    provenance.record(vdir, ["kernel.py", "correctness.md", "correctness.json", "../run.json",
                             "ncu_summary.md", "ncu_details.md", "ncu.json"])
    common = {"device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3", "kernel": ksha, **records.run_hashes(root)}
    records.append(root, "correctness", f"v{k}", result="PASS", **common,
                   files=records.files_field(vdir, ["correctness.md", "correctness.json"]))
    records.append(root, "profile", f"v{k}", result="ok", **common,
                   files=records.files_field(vdir, ["ncu.json", "ncu_summary.md", "ncu_details.md"]))


def write_kbs(root: Path, k: int, *, filled: bool = True) -> None:
    vdir = root / f"v{k}"
    pages = HYPOTHESES[k]["pages"] if k < len(HYPOTHESES) else ["dram-bound-streaming"]
    extra = ["vectorized-global-access"]
    lines = [
        {"purpose": "kernel", "query": "row softmax triton", "filters": {"kernel_type": "softmax"},
         "hits": pages[:1] + extra, "time": "2026-11-29T10:05:00+0000"},
        {"purpose": "bottleneck", "query": "memory-bound dram-near-peak", "filters": {},
         "hits": pages[1:] + ["dram-bound-streaming"], "time": "2026-11-29T10:05:01+0000"},
    ]
    (vdir / "kbs_queries.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in lines), encoding="utf-8")
    records.append(root, "kbs", f"v{k}", files=records.files_field(vdir, ["kbs_queries.jsonl"]),
                   hits=",".join(dict.fromkeys(h for rec in lines for h in rec["hits"])))
    selected = "\n".join(f"- kbs:{p}: {KBS_TITLES[p]}" for p in pages) if filled else "TODO(kernel-loop)"
    if not filled:
        link = "TODO(kernel-loop): tie the facts to one change"
    elif k < len(HYPOTHESES):
        link = f"The profile says {HYPOTHESES[k]['rationale'].lower().rstrip('.')}, so: {HYPOTHESES[k]['change']}"
    else:
        link = "Final version: DRAM is near its peak, so fewer bytes are the only remaining lever."
    (vdir / "kbs_evidence.md").write_text(
        f"# KBS Evidence\n\n## NCU Facts\n- memory-bound, dram_throughput_pct {version_metrics(k)['dram_throughput_pct']}\n\n"
        f"## Queries\n- kernel: row softmax triton\n- bottleneck: memory-bound dram-near-peak\n\n"
        f"## Selected Evidence\n{selected}\n\n## Rejected / Limits\n- `vectorized-global-access`: loads are "
        f"already 16-byte\n\n## Decision Link\n{link}\n", encoding="utf-8")


def set_state(root: Path, k: int) -> None:
    (root / "current_iteration.txt").write_text(f"v{k}\n", encoding="utf-8")


def write_hypothesis(root: Path, k: int) -> None:
    """Run the real hypothesis command on vK (the state must name vK)."""
    h = HYPOTHESES[k]
    args = Namespace(out=str(root), change=h["change"], rationale=h["rationale"], risk=h["risk"],
                     decision_rule=h["decision_rule"], predict=h["predict"], evidence=None, force=False)
    assert hypothesis.run(args) == 0


def build_complete(root: Path, iterations: int = 3, dims: dict | None = None) -> Path:
    """v0..vN measured, KBS filled, hypotheses on v0..v(N-1), state at vN (the gate passed each)."""
    write_run(root, iterations, dims)
    for k in range(iterations + 1):
        write_kernel(root, k)
        write_measurements(root, k)
        write_kbs(root, k)
        if k < iterations:
            set_state(root, k)
            write_hypothesis(root, k)
            sign_gate(root, k)
    set_state(root, iterations)
    return root


def sign_gate(root: Path, k: int) -> None:
    """The gate record the transition gate of vK appends (its files: hypothesis, evidence, kernel)."""
    records.append(root, "gate", f"v{k}", result="passed",
                   files=records.files_field(root / f"v{k}", ["hypothesis.txt", "kbs_evidence.md", "kernel.py"]))


def _stats(samples: list[float]) -> dict:
    s = sorted(samples)

    def q(p: float) -> float:
        idx = p * (len(s) - 1)
        lo = int(idx)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (idx - lo)

    return {"mean": statistics.fmean(s), "median": statistics.median(s), "p20": q(0.2), "p25": q(0.25),
            "p75": q(0.75), "p80": q(0.8), "min": s[0], "max": s[-1], "std": statistics.pstdev(s), "n": len(s)}


def synthetic_child_result(n: int = 40, versions: int = 4, seed: int = 7) -> dict:
    """A benchmark child result in the child's format.  SYNTHETIC, not recorded on a GPU."""
    rng = random.Random(seed)

    def draw(center: float) -> list[float]:
        return [round(center * (1 + rng.gauss(0, 0.004)), 3) for _ in range(n)]

    best = min(range(versions), key=lambda k: VERSIONS[k]["event_median_us"])
    items = []
    for name, center, extra in [
        ("solution", VERSIONS[best]["event_median_us"], {}),
        ("pytorch-eager", 118.4, {}),
        ("torch-compile", 90.7, {}),
        ("flashinfer", None, {"why": "ref.py's reference() takes no 'baseline' argument"}),
    ]:
        if center is None:
            items.append({"name": name, "available": False, "correct": None, "correct_after": None,
                          "error": None, "samples_us": [], "stats_us": None, **extra})
        else:
            samples = draw(center)
            items.append({"name": name, "available": True, "why": None, "correct": True, "correct_after": True,
                          "error": None, "samples_us": samples, "stats_us": _stats(samples)})
    for k in range(versions):
        samples = draw(VERSIONS[k]["event_median_us"])
        items.append({"name": f"v{k}", "available": True, "why": None, "correct": True, "correct_after": True,
                      "error": None, "samples_us": samples, "stats_us": _stats(samples)})
    ab = [{"from": f"v{k}", "to": f"v{k + 1}", "samples_a": draw(VERSIONS[k]["event_median_us"]),
           "samples_b": draw(VERSIONS[k + 1]["event_median_us"])} for k in range(versions - 1)]
    return {"ok": True, "synthetic": "generated by tests/python/runfixture.py, not recorded on a GPU",
            "device": {"name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}, "torch": "2.11.0+cu130",
            "output_dtype": "float32", "flops": 5.0 * 8192 * 4096, "bytes_moved": 8.0 * 8192 * 4096,
            "roofline_why": None, "items": items, "ab": ab}


def outcome(result: dict):
    """A finished judge's outcome carrying ``result`` (what measure.session.run_judge returns)."""
    from kernel_loop.measure.session import Outcome

    return Outcome(result, 0, False, 1.0, "")


def cli(module, argv: list[str]) -> int:
    """Run a step's subcommand through the real front door (``module`` names the step, for the reader)."""
    import klcli

    return klcli.main(*argv)


def gate(vdir: Path, *flags: str):
    """Run the real scripts/check_iteration_gate.sh (callers skip when it is absent)."""
    import subprocess

    from kernel_loop import rundir

    return subprocess.run(["bash", str(rundir.gate_script()), str(vdir), *flags], capture_output=True, text=True)


_BUILT: dict[tuple, Path] = {}  # build_with_gate's runs, built once per test process


def build_with_gate(root: Path, iterations: int = 3, dims: dict | None = None) -> Path:
    """The same run as build_complete, but driven the loop's way: the real gate advances the state
    after each version and ``next`` starts each new version from the previous kernel.

    The run is built once per test process for each (iterations, dims, record key, device) and copied
    into ``root`` after (nothing in it names its folder: only the records' and hypothesis.json's times
    would differ); a ``root`` that already holds files gets a build of its own."""
    import os
    import shutil

    from conftest import INPUTS

    key = (iterations, json.dumps(dims, sort_keys=True), os.environ.get("KERNEL_LOOP_RECORD_KEY"),
           os.environ.get("KERNEL_LOOP_DEVICE"), os.environ.get("KERNEL_LOOP_CACHE"))
    if root.exists() and any(root.iterdir()):
        return _build_with_gate(root, iterations, dims)
    kept = _BUILT.get(key)
    if kept is None or not kept.is_dir():
        kept = INPUTS / "built" / str(len(_BUILT)) / "run"
        shutil.rmtree(kept.parent, ignore_errors=True)
        _build_with_gate(kept, iterations, dims)
        _BUILT[key] = kept
    shutil.copytree(kept, root, symlinks=True, dirs_exist_ok=True)
    return root


def _build_with_gate(root: Path, iterations: int, dims: dict | None) -> Path:
    from kernel_loop.steps import next_version

    write_run(root, iterations, dims)
    for k in range(iterations + 1):
        if k > 0:
            assert cli(next_version, ["next", str(root)]) == 0
            write_kernel(root, k)  # the single change
        write_measurements(root, k)
        write_kbs(root, k)
        if k < iterations:
            write_hypothesis(root, k)
            proc = gate(root / f"v{k}")
            assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def fake_benchmark_children(monkeypatch, module, result, seen: dict | None = None) -> None:
    """Stand in for the benchmark's judge: ``result`` (the judge's result, or an Outcome) is what it returns.
    SYNTHETIC: nothing here ran a kernel."""
    from kernel_loop.measure.session import Outcome

    def run_judge(mode, spec, timeout, **_):
        if seen is not None:
            seen.update(mode=mode, spec=spec, timeout=timeout)
        return result if isinstance(result, Outcome) else outcome(result)

    monkeypatch.setattr(module, "run_judge", run_judge)


# --- a program of many kernels (ncu.json schema 2) -----------------------------------------------------------------
# INVENTED figures in the shape the profile writes for a call of several kernels (kernels with owner, launches, time
# and share; the inventory of every kernel launched; the call's sums; the focus kernel): a transformer block whose
# own Triton attention runs beside cuBLAS, layer norm and two PyTorch element-wise kernels (an add, then a GELU).
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_kernel__5x_cublas"
LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, "
              "const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)")
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char *, 3>>(int, T2, T3)"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl, std::array<char *, 2>>(int, T2, T3)"


def kernel_spec(name: str, owner: str, launches: int, time_us: float, metrics: dict | None = None,
                symptoms: list[str] = (), bottleneck: str | None = None, dram: tuple[float, float] = (0.0, 0.0)) -> dict:
    """One kernel of a schema-2 profile; ``metrics`` None: in the inventory only (not profiled)."""
    return {"name": name, "owner": owner, "launches": launches, "time_us": time_us, "bottleneck": bottleneck,
            "symptoms": [{"tag": t, "metrics": {}, "thresholds": {}, "why": f"{t} fired"} for t in symptoms],
            "metrics": None if metrics is None else {"duration_us": time_us / launches, "dram_bytes_read": dram[0],
                                                     "dram_bytes_write": dram[1], **metrics}, "dram": dram}


def schema2_ncu(base: dict, kernels: list[dict], event_median_us: float) -> dict:
    """``base`` (a schema-1 ncu.json: tool, gpu, kernel hash, timing) as schema 2 over ``kernels`` (kernel_spec,
    in launch order)."""
    from kernel_loop.profiling.inventory import labels

    total = sum(k["time_us"] for k in kernels)
    rows, profiled = [], []
    for k, label in zip(kernels, labels([k["name"] for k in kernels]), strict=True):
        fig = {"label": label, "name": k["name"], "owner": k["owner"], "launches": k["launches"],
               "time_us": k["time_us"], "share": k["time_us"] / total}
        rows.append(dict(fig, profiled=k["metrics"] is not None))
        if k["metrics"] is not None:
            profiled.append(dict(fig, metrics=k["metrics"], bottleneck=k["bottleneck"], symptoms=k["symptoms"],
                                 rules=[]))
    rows.sort(key=lambda r: -r["time_us"])
    own = [r for r in rows if r["owner"] == "own"]
    focus = (own or rows)[0]
    sums = {"duration_us": total, "dram_bytes_read": sum(k["dram"][0] * k["launches"] for k in kernels),
            "dram_bytes_write": sum(k["dram"][1] * k["launches"] for k in kernels), "covered_share": 1.0}
    fmetrics = next(k["metrics"] for k in profiled if k["label"] == focus["label"])
    timing = dict(base.get("timing") or {}, median_us=event_median_us)
    return dict(base, schema=2, kernels=profiled, timing=timing,
                inventory={"source": "census", "launches": sum(r["launches"] for r in rows), "kernel_time_us": total,
                           "rows": rows},
                sums=sums, focus={"label": focus["label"], "name": focus["name"], "owner": focus["owner"],
                                  "why": "the version's own kernel with the most time"},
                metrics=dict(fmetrics, **{k: sums[k] for k in ("duration_us", "dram_bytes_read", "dram_bytes_write")},
                             event_median_us=event_median_us),
                bottleneck=next(k["bottleneck"] for k in profiled if k["label"] == focus["label"]),
                symptoms=[dict(s, kernel=k["name"]) for k in profiled for s in k["symptoms"]]
                + [{"tag": "multi-kernel", "metrics": {}, "thresholds": {}, "kernel": None, "why": "several kernels"}])


ATTN_V0 = {"registers_per_thread": 168, "dram_throughput_pct": 55.0, "memory_throughput_pct": 60.0,
           "sm_throughput_pct": 40.0, "achieved_occupancy_pct": 12.5, "local_spill_requests": 1200}
BLOCK_V0 = [  # the call of v0, in launch order
    kernel_spec(LAYER_NORM, "library", 1, 100.0, {"registers_per_thread": 32, "dram_throughput_pct": 80.0},
                ["dram-near-peak"], "memory-bound", (4.0e6, 4.0e6)),
    kernel_spec("attn_fwd", "own", 1, 400.0, ATTN_V0, ["register-spills", "occupancy-limited-registers"],
                "latency-bound", (8.0e6, 2.0e6)),
    kernel_spec(GEMM, "library", 2, 300.0, {"registers_per_thread": 230, "sm_throughput_pct": 71.0},
                ["wgmma-unused"], "compute-bound", (3.0e6, 1.0e6)),
    kernel_spec(ADD, "library", 1, 60.0, {"registers_per_thread": 16, "dram_throughput_pct": 88.0},
                ["dram-near-peak"], "memory-bound", (4.0e6, 2.0e6)),
    kernel_spec(GELU, "library", 1, 40.0),  # beyond the budget: in the inventory only
]
BLOCK_V1 = [  # v1: the add fused into attn_fwd's epilogue; attn_fwd spills no more
    BLOCK_V0[0],
    kernel_spec("attn_fwd", "own", 1, 380.0, dict(ATTN_V0, registers_per_thread=128, achieved_occupancy_pct=25.0,
                                                 local_spill_requests=0, dram_throughput_pct=58.0),
                [], "memory-bound", (8.0e6, 2.0e6)),
    BLOCK_V0[2],
    BLOCK_V0[4],
]


def write_schema2(root: Path, k: int, kernels: list[dict], event_median_us: float) -> dict:
    """vK's ncu.json rewritten as the schema-2 profile of ``kernels`` (provenance recorded again)."""
    from kernel_loop.common import read_json

    ncu = schema2_ncu(read_json(root / f"v{k}" / "ncu.json"), kernels, event_median_us)
    write_json(root / f"v{k}" / "ncu.json", ncu)
    provenance.record(root / f"v{k}", ["ncu.json"])
    return ncu
