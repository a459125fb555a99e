"""`kernel-loop demo`: replay a bundled example run in a temporary directory.

Without a GPU: copy an example run, audit it with the final gate, run `status`, re-render the final
report from its sidecars, and say where everything is.  With a GPU, also re-time every version live
(`benchmark --all-versions`, correctness first) and print the live speedup of the best version over
v0 next to the recorded one.  Nothing is written outside the temporary directory (the KBS index cache
is pointed inside it too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..common import UsageError, progress, skill_root
from ..rundir import gate_script

FILE_GUIDE = [
    ("final_report.md", "the report: versions, predictions scored, A/B verdicts, speedups"),
    ("final_report.png", "chart of time per version, baselines as lines"),
    ("benchmark.md", "best version against PyTorch eager and torch.compile"),
    ("run.json", "the fixed run configuration"),
    ("env_check.md", "GPU, toolchain and measured peaks"),
    ("v0/", "one folder per version: kernel, correctness.md, ncu_summary.md, ncu_details.md,"
            " kbs_evidence.md, hypothesis.txt, JSON sidecars, measured.sha256"),
]


def examples_dir() -> Path:
    return skill_root() / "examples"


def list_examples() -> list[str]:
    root = examples_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "run" / "run.json").is_file())


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(skill_root() / "helpers" / "kloop.py"), *args]
    return subprocess.run(cmd, env=env, text=True, capture_output=True)


def _show(title: str, proc: subprocess.CompletedProcess) -> None:
    print(f"\n== {title} (exit {proc.returncode})")
    out = (proc.stdout + proc.stderr).strip()
    lines = out.splitlines()
    if len(lines) > 25:
        lines = lines[:10] + [f"... ({len(lines) - 20} lines)"] + lines[-10:]
    print("\n".join(lines))


def _recorded_speedup(bench: dict) -> tuple[str | None, float | None]:
    """Best version and its recorded speedup over v0 from benchmark.json's rows."""
    rows = {r.get("name"): r for r in bench.get("rows", [])}
    v0 = rows.get("v0", {}).get("stats_us", {}).get("median")
    best = bench.get("version")
    b = rows.get(best, rows.get("solution", {})).get("stats_us", {}).get("median")
    if v0 and b:
        return best, v0 / b
    return best, None


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def run(example: str | None, keep_dir: str | None, live: bool | None) -> int:
    names = list_examples()
    if not names:
        raise UsageError(f"no example runs found under {examples_dir()}")
    name = example or names[0]
    if name not in names:
        raise UsageError(f"unknown example '{name}'; choose from: {', '.join(names)}")
    base = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="kernel-loop-demo-"))
    out = base / name
    if out.exists():
        raise UsageError(f"{out} already exists; choose another --dir")
    shutil.copytree(examples_dir() / name / "run", out)
    # every cache the run may fill (KBS index, nvcc builds, Triton, TorchInductor, matplotlib) stays here
    cache = base / ".cache"
    env = dict(os.environ, KERNEL_LOOP_CACHE=str(cache), TRITON_CACHE_DIR=str(cache / "triton"),
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), MPLCONFIGDIR=str(cache / "matplotlib"))
    cfg = json.loads((out / "run.json").read_text())
    last = f"v{cfg['iterations']}"
    progress(f"example '{name}' copied to {out}")

    gate = subprocess.run(["bash", str(gate_script()), str(out / last), "--final"],
                          text=True, capture_output=True, env=env)
    _show(f"final gate audit of {last}", gate)
    status = _cli("status", str(out), env=env)
    _show("status", status)
    report = _cli("report", str(out), env=env)
    _show("report re-rendered from the sidecars", report)

    recorded = json.loads((out / "benchmark.json").read_text())
    best, rec_speedup = _recorded_speedup(recorded)
    use_gpu = _gpu_available() if live is None else live
    if use_gpu:
        progress("GPU found: re-timing every version live (correctness first)")
        live_dir = base / f"{name}-live"
        shutil.copytree(out, live_dir)
        (live_dir / "benchmark.json").unlink()
        bench = _cli("benchmark", str(live_dir), "--all-versions", "--baselines",
                     "pytorch-eager,torch-compile", env=env)
        _show("live benchmark", bench)
        if bench.returncode == 0:
            live_best, live_speedup = _recorded_speedup(json.loads((live_dir / "benchmark.json").read_text()))
            print(f"\nspeedup of {best} over v0: recorded {rec_speedup:.2f}x, live {live_speedup:.2f}x"
                  if rec_speedup and live_speedup else "\nspeedup: not comparable (missing rows)")
    else:
        print("\nno CUDA GPU here: nothing re-measured (recorded numbers only)")
        if rec_speedup:
            print(f"recorded speedup of {best} over v0: {rec_speedup:.2f}x")

    print(f"\nrun directory: {out}")
    for fname, what in FILE_GUIDE:
        if (out / fname.rstrip("/")).exists():
            print(f"  {out / fname}  - {what}")
    ok = gate.returncode == 0 and status.returncode == 0 and report.returncode == 0
    return 0 if ok else 1


def register(sub) -> None:
    p = sub.add_parser("demo", help="replay a bundled example run (no GPU needed)",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("--example", help="example name under examples/ (default: the first)")
    p.add_argument("--dir", dest="keep_dir", help="parent folder for the copy (default: a new temp dir)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--live", dest="live", action="store_true", default=None,
                   help="force live re-measurement (needs a GPU)")
    g.add_argument("--no-live", dest="live", action="store_false", help="never touch the GPU")
    p.add_argument("--list", action="store_true", help="list the bundled examples and exit")
    p.set_defaults(func=_main)


def _main(args) -> int:
    if args.list:
        for n in list_examples():
            print(n)
        return 0
    return run(args.example, args.keep_dir, args.live)
