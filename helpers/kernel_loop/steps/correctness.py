"""``correctness``: check the current version against ref.py, honestly.

For every shape (run dims, then extra_shapes) and every trial: fresh seeded random inputs, the
reference on clones, the outputs poisoned (NaN / integer sentinel), one kernel call, then per
output max abs / max rel / relative L2 error and the mismatch count with torch.isclose
semantics (|got - exp| > atol + rtol * |exp|).  NaN/Inf where the reference is finite fails.
The data is the judge's (``measure.judge``: a process that never imports the kernel draws the inputs
and the parameters, allocates the outputs and verifies them); the kernel runs in a worker process with
the run's timeout, so a crash or a hang is a FAIL, not a hung helper.  ``--sanitize`` reruns the worker
under compute-sanitizer.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .. import provenance, records, static_check
from ..common import (
    MeasuredFailure,
    UsageError,
    atomic_write_text,
    judge_tmpdir,
    now_iso,
    progress,
    sha256_file,
    write_json,
)
from ..compare import outside
from ..config import add_check_flags, check_flags_against_run, parse_dims
from ..loader import check_runs_on, device_for
from ..measure import libraries
from ..measure.session import run_judge
from ..rundir import RunDir
from ..sidecars import CORRECTNESS_FILES, PROFILE_FILES
from ..templating import render
from ..vocab import IMPL_SUFFIXES


# --- the parent -------------------------------------------------------------------------
def _sanitizer_errors(log: str) -> int | None:
    counts = [int(m) for m in re.findall(r"ERROR SUMMARY:\s*(\d+) error", log)]
    counts += [int(m) for m in re.findall(r"RACECHECK SUMMARY:.*?\((\d+) error", log)]
    return max(counts) if counts else None


def run_sanitizer(tool: str, spec: dict, timeout: float) -> dict[str, Any]:
    from ..build import find_cuda_tool
    exe = find_cuda_tool("compute-sanitizer")
    if exe is None:
        raise UsageError("--sanitize needs compute-sanitizer (part of the CUDA toolkit); it was not found")
    with tempfile.TemporaryDirectory(prefix="kl-san-") as tmp:
        log_path = Path(tmp) / f"{tool}.log"
        prefix = [exe, "--tool", tool, "--log-file", str(log_path), "--print-limit", "20"]
        progress(f"running under compute-sanitizer --tool {tool} at {spec['shapes'][0]} ...")
        with judge_tmpdir() as scratch:
            outcome = run_judge("correctness", dict(spec, prefix=prefix,
                                                    worker_env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
                                timeout, env={"KERNEL_LOOP_HANDOFF": "file", **scratch})
        log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    errors = _sanitizer_errors(log)
    problem = outcome.failure() or outcome.error
    if problem is None:
        bad = [t for s in (outcome.result or {}).get("shapes", []) for t in s["trials"] if not t["passed"]]
        problem = f"{len(bad)} trial(s) failed under the sanitizer" if bad else None
    if errors is None and problem is None:
        problem = "compute-sanitizer printed no error summary"
    tail = "\n".join(log.strip().splitlines()[-40:])
    return {"tool": tool, "dims": spec["shapes"][0], "errors": errors, "error": problem, "log": tail,
            "passed": errors == 0 and problem is None}


def judged(outcome, device: str) -> dict[str, Any]:
    """The judge's result, or a result holding why there is none."""
    res = {"device": device, "shapes": [], "warnings": [], "build": None, "error": None, **(outcome.result or {})}
    res["error"] = outcome.failure() or res.get("error")
    return res


def _overall(res: dict) -> tuple[str, str | None]:
    if res.get("error"):
        return "FAIL", res["error"]
    trials = [t for s in res["shapes"] for t in s["trials"]]
    if not trials:
        return "FAIL", "no trial ran"
    failed = [(s["dims"], t) for s in res["shapes"] for t in s["trials"] if not t["passed"]]
    if failed:  # the first plain call that failed, where one did: the condition a user's call most often meets
        dims, t = min(failed, key=lambda f: (f[1].get("condition") or "plain") != "plain")
        bad = [o for o in t["outputs"] if not o["passed"]]
        o = bad[0]
        what = outside(o)
        shown = ",".join(f"{k}={v}" for k, v in dims.items())
        cond = t.get("condition") or "plain"
        when = "" if cond == "plain" else f" ({(res.get('conditions') or {}).get(cond, cond)}" + (
            f"; this draw {t['moved'].split(': ', 1)[-1]}" if t.get("moved") else "") + ")"
        modes = {x["condition"]: x["passed"] for x in trials if str(x.get("condition")).startswith("mode:")}
        if cond == "plain" and modes:  # a KernelBench model: every plain call is in eval() without autograd
            right = [m.split(":", 1)[1].replace("+", " with ") for m, ok in modes.items() if ok and "train" in m]
            when = " (the model in eval() without autograd, as in every plain call" + (
                f"; it passes in {' and '.join(right)}" if right else "") + ")"
        before = next((s["trials"][i - 1] for s in res["shapes"] for i, x in enumerate(s["trials"]) if x is t and i), {})
        if str(before.get("condition")).startswith("weights:twin"):  # the instances share what the twin left?
            when = (when[:-1] + "; " if when else " (") + "right after a second instance, with other weights, was called)"
        return "FAIL", (f"{len(failed)} of {len(trials)} calls failed; first: dims {shown} seed {t['seed']}{when} "
                        f"output '{o['name']}': {what}{_memory_pressure(t.get('ooms'))}")
    return "PASS", None


def _memory_pressure(caught: int | None) -> str:
    """What a failing call's summary adds where torch raised out-of-memory errors in the kernel's worker by then
    (measure/held.memory): an honest kernel that keeps torch's convolutions can fail on a GPU other processes fill."""
    if not caught:
        return ""
    return (f"; torch ran out of device memory {caught} time(s) in the kernel's worker by this call and went on: where "
            "that was a cuDNN convolution's workspace, torch runs the convolution with another algorithm (other "
            "rounding) and keeps it for that shape; free the GPU of other processes and check again")


# what torch says when a kernel or ref.py asks for CUDA on a machine without it (cpu build, no driver, no GPU)
_NO_CUDA = re.compile(r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available|"
                      r"CUDA driver initialization failed|no CUDA GPU visible")


def refuse_no_cuda_in_cpu_mode(cfg, version: str, error: str | None) -> None:
    """In the cpu test mode, a FAIL because the machine has no CUDA is the machine's, not the kernel's: a usage
    error (exit 2) before any file or record is written."""
    if not error or not _NO_CUDA.search(error):
        return
    why = (f"{version}'s kernel or ref.py needs CUDA ({error.splitlines()[0]}), which the cpu test mode does not "
           "have on this machine; nothing was recorded. ")
    if cfg.device != "cpu":
        raise UsageError(why + "KERNEL_LOOP_DEVICE=cpu is the cpu test mode of runs initialised with --device cpu; "
                         f"this run measures on cuda:{cfg.gpu}: run correctness where the run's GPU is, without "
                         "KERNEL_LOOP_DEVICE")
    raise UsageError(why + "The cpu mode (init --device cpu) runs .py kernels on the CPU: check a kernel that needs "
                     "CUDA in a GPU run (init without --device cpu) on the machine with the GPU")



def _other_shape(dims: dict[str, int], shape: dict[str, int]) -> str:
    """One of config.batch_shapes as the progress line names it: ``batch_size 8``, or the input sizes it changes."""
    moved = ", ".join(f"{n}={v}" for n, v in shape.items() if n != "batch_size" and dims.get(n) != v)
    return (f"batch_size {shape['batch_size']}" if "batch_size" in shape else "") + (
        f"{' with ' if 'batch_size' in shape else ''}{moved}" if moved else "")

def run_correctness(args: argparse.Namespace) -> int:
    rd = RunDir.open(args.out)
    cfg = rd.config()
    check_flags_against_run(cfg, args)
    k = rd.current_version()
    vdir = rd.vdir(k)
    kernel = rd.kernel_file(k)
    if kernel.suffix not in IMPL_SUFFIXES[cfg.impl]:
        raise UsageError(f"{kernel.name} does not match impl {cfg.impl} (needs {' or '.join(IMPL_SUFFIXES[cfg.impl])})")
    static_check.check_kernel_source(kernel)  # a first filter: source that reaches into the harness is refused
    device = device_for(cfg)
    if args.sanitize and device == "cpu":
        raise UsageError("--sanitize needs a CUDA device (compute-sanitizer); this run uses the cpu test mode")
    card = records.check_run_files(rd.root, records.read(rd.root))
    check_runs_on(kernel, device)  # before a judge starts (it refuses the same)
    kernel_sha = sha256_file(kernel)
    shapes = cfg.shapes
    spec = {"cfg": cfg.to_json(), "device": device, "run_root": str(rd.root), "kernel": str(kernel), "card": card,
            "shapes": shapes, "trials": cfg.correctness_trials, "keep_libraries": str(vdir / libraries.LIB_DIR)}
    shutil.rmtree(vdir / libraries.LIB_DIR, ignore_errors=True)  # an earlier kernel's (the judge keeps this one's)
    timeout = float(cfg.timeout_s)
    others = ", ".join(_other_shape(cfg.dims, b) for b in cfg.batch_shapes)  # held.other_batches, conditions.other_plan
    progress(f"v{k}: checking {kernel.name} on {device}: {len(shapes)} shape(s) x {spec['trials']} trial(s), "
             + (f"{others} on the same instance, " if others else "")
             + "and the conditions a user's call can differ in (output pre-states, the module's mode, input ranges); "
             "the data and the verdicts are a judge process's, which never imports the kernel")
    with judge_tmpdir() as scratch:
        outcome = run_judge("correctness", spec, timeout, env=scratch)
    outcome.raise_usage()  # bad input or environment: nothing was measured
    res = judged(outcome, device)
    result, error = _overall(res)
    if device == "cpu" and result == "FAIL":
        refuse_no_cuda_in_cpu_mode(cfg, f"v{k}", error)

    sanitize = None
    if args.sanitize:
        sdims = parse_dims(args.sanitize_dims, "--sanitize-dims") if args.sanitize_dims else dict(cfg.dims)
        if set(sdims) != set(cfg.dims):
            raise UsageError(f"--sanitize-dims must name exactly the dims {', '.join(cfg.dims)}")
        sspec = dict(spec, shapes=[sdims], trials=1, cfg={**spec["cfg"], "batch_shapes": []}, keep_libraries=None)
        tools = ["memcheck"] + (["racecheck"] if kernel.suffix == ".cu" else [])
        runs = [run_sanitizer(t, sspec, timeout) for t in tools]
        total = sum(r["errors"] or 0 for r in runs)
        sanitize = {"tool": "+".join(tools), "errors": total, "log": "\n".join(r["log"] for r in runs), "runs": runs}
        bad = [r for r in runs if not r["passed"]]
        if bad and result == "PASS":
            r = bad[0]
            result, error = "FAIL", (f"compute-sanitizer {r['tool']} found {r['errors']} error(s)"
                                     if r["errors"] else f"compute-sanitizer {r['tool']}: {r['error']}")

    if sha256_file(kernel) != kernel_sha:
        raise UsageError(f"{kernel} changed while it was being checked; run correctness again")
    data = {"schema": 1, "version": f"v{k}", "kernel_file": kernel.name, "kernel_sha256": kernel_sha,
            "result": result, "error": error, "device": res.get("device", device), "impl": cfg.impl,
            "time": now_iso(), "seconds": round(outcome.seconds, 2),
            "tolerance": cfg.tolerance, "build": res.get("build"), "libraries": res.get("libraries") or [],
            "shapes": res["shapes"],
            "warnings": res.get("warnings", []), "sanitize": sanitize, "memory": memory_summary(res["shapes"]),
            "conditions": res.get("conditions"),
            "worker_isolated": res.get("worker_isolated"), "isolation_why": res.get("isolation_why")}
    write_json(vdir / "correctness.json", data, depth=3)
    atomic_write_text(vdir / "correctness.md", render("correctness.md.j2", c=data))
    provenance.record(vdir, [kernel, vdir / "correctness.md", vdir / "correctness.json", rd.run_json],
                      drop=PROFILE_FILES)
    records.append(rd.root, "correctness", f"v{k}", result=result, device=data["device"],
                   gpu=res.get("gpu_name") or "-", kernel=kernel_sha,
                   **records.run_hashes(rd.root), files=records.files_field(vdir, list(CORRECTNESS_FILES)))
    print(summary_line(data))
    if result != "PASS":
        raise MeasuredFailure(f"v{k} correctness FAIL: {error.splitlines()[0] if error else 'see correctness.md'} "
                              f"(details in {vdir / 'correctness.md'})")
    return 0


def memory_summary(shapes: list[dict]) -> dict | None:
    """The trial with the highest peak device memory: its peak, inputs and reference outputs (bytes)."""
    trials = [t for s in shapes for t in s["trials"] if t.get("peak_mem_bytes") is not None]
    if not trials:
        return None
    top = max(trials, key=lambda t: t["peak_mem_bytes"])
    return {k: top.get(k) for k in ("peak_mem_bytes", "inputs_bytes", "outputs_bytes")}


def summary_line(data: dict) -> str:
    n = sum(len(s["trials"]) for s in data["shapes"])
    worst = max((o["max_abs_err"] for s in data["shapes"] for t in s["trials"] for o in t["outputs"]
                 if isinstance(o.get("max_abs_err"), float)), default=None)
    w = f", worst max abs err {worst:.3g}" if worst is not None else ""
    san = f", sanitizer errors {data['sanitize']['errors']}" if data.get("sanitize") else ""
    return f"{data['version']} correctness: {data['result']} ({len(data['shapes'])} shape(s), {n} call(s){w}{san})"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "correctness", help="check the current version against ref.py",
        description="Check the current version's kernel against ref.py with fresh random inputs, poisoned outputs "
                    "and dtype-aware tolerances over every shape and trial, in a child process with the run's "
                    "timeout. Writes vK/correctness.md and vK/correctness.json and records them in "
                    "vK/measured.sha256 (dropping an older profile's entries).",
        epilog="Exit codes: 0 PASS, 1 FAIL (wrong values, crash, hang, build error, sanitizer errors), 2 bad usage "
               "(a kernel source line the static check refuses, among others). A run made with init --device cpu is "
               "a test/dev mode that runs .py kernels on the CPU (Triton under TRITON_INTERPRET=1); a CPU result "
               "never counts for a GPU run.")
    p.add_argument("out", help="run directory")
    p.add_argument("--sanitize", action="store_true",
                   help="also run under compute-sanitizer memcheck (and racecheck for .cu); errors -> FAIL")
    p.add_argument("--sanitize-dims", default=None, help="smaller K=V,... for the sanitizer runs (default: run dims)")
    add_check_flags(p)
    p.set_defaults(func=run_correctness, needs=("jinja2",))  # checked before it writes anything
