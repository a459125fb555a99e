"""``correctness``: check the current version against ref.py, honestly.

For every shape (run dims, then extra_shapes) and every trial: fresh seeded random inputs, the
reference on clones, the outputs poisoned (NaN / integer sentinel), one kernel call, then per
output max abs / max rel / relative L2 error and the mismatch count with torch.isclose
semantics (|got - exp| > atol + rtol * |exp|).  NaN/Inf where the reference is finite fails.
The kernel runs in a child process (``kernel_loop.worker``) with the run's timeout, so a crash
or a hang is a FAIL, not a hung helper.  ``--sanitize`` reruns it under compute-sanitizer.
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
from pathlib import Path
from typing import Any

from . import provenance
from .common import MeasuredFailure, UsageError, atomic_write_text, now_iso, progress, sha256_file, write_json
from .init import add_check_flags, check_flags_against_run, parse_dims
from .rundir import IMPL_SUFFIX, RunDir
from .templating import UNKNOWN, fmt, render

# torch dtype name -> (atol, rtol)
DTYPE_TOLERANCE = {
    "float64": (1e-8, 1e-6), "float32": (1e-4, 1e-3), "tf32": (1e-2, 1e-2),
    "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2),
    "float8_e4m3fn": (1e-1, 1e-1), "float8_e5m2": (2e-1, 2e-1),
}
PROFILE_FILES = ["ncu_summary.md", "ncu_details.md", "ncu.json"]


# --- pure parts ------------------------------------------------------------------------
def dtype_default(dtype: str, tf32: bool = False) -> tuple[float, float]:
    """Default (atol, rtol) for an output dtype; integers and bool are exact."""
    if tf32 and dtype == "float32":
        return DTYPE_TOLERANCE["tf32"]
    return DTYPE_TOLERANCE.get(dtype, (0.0, 0.0))


def resolve_tolerance(run_tol: dict | None, ref_atol: Any, ref_rtol: Any, dtype: str,
                      tf32: bool = False) -> dict[str, Any]:
    """Per field: run.json (CLI, or ref.py literals read at init) > ref.py module value > dtype default."""
    run_tol = run_tol or {}
    by = run_tol.get("by") or {}
    default = dtype_default(dtype, tf32)
    out: dict[str, Any] = {}
    for i, (field, ref_val) in enumerate((("atol", ref_atol), ("rtol", ref_rtol))):
        if run_tol.get(field) is not None:
            out[field], src = float(run_tol[field]), by.get(field) or run_tol.get("source") or "cli"
        elif ref_val is not None:
            out[field], src = float(ref_val), "ref.py"
        else:
            out[field], src = default[i], f"dtype-default ({'tf32' if tf32 and dtype == 'float32' else dtype})"
        out[f"{field}_source"] = src
    a, r = out["atol_source"], out["rtol_source"]
    out["source"] = a if a == r else f"atol: {a}; rtol: {r}"
    return out


def _short(x: float) -> str:
    if x == 0:
        return "0"
    mantissa, exp = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exp)}"


def _source_text(source: str) -> str:
    m = re.fullmatch(r"dtype-default \((.+)\)", source)
    return f"dtype default for {m[1]}" if m else f"from {source}"


def describe_tolerances(run_tol: dict[str, Any] | None, applied: dict[str, dict[str, Any]] | None) -> str:
    """The tolerance in words, e.g. 'atol 1e-4, rtol 1e-3 (dtype default for float32)': from the
    resolve_tolerance result of each output (``applied``; outputs that differ are named), else
    run.json's tolerance as written."""
    if not applied:
        if not isinstance(run_tol, dict):
            return UNKNOWN
        return (f"atol {fmt(run_tol.get('atol'), 1)}, rtol {fmt(run_tol.get('rtol'), 1)} "
                f"(source {fmt(run_tol.get('source'))})")

    def one(t: dict[str, Any]) -> str:
        a, r = t["atol_source"], t["rtol_source"]
        src = _source_text(a) if a == r else f"atol {_source_text(a)}, rtol {_source_text(r)}"
        return f"atol {_short(t['atol'])}, rtol {_short(t['rtol'])} ({src})"

    texts = {name: one(t) for name, t in applied.items()}
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return "; ".join(f"{name}: {text}" for name, text in texts.items())


def derive_seed(run_seed: int, shape_index: int, trial: int) -> int:
    return run_seed * 1000 + trial + 100_003 * shape_index


def json_number(x: float) -> float | str | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else str(x)


def compare(got, exp, atol: float, rtol: float) -> dict[str, Any]:
    """Error numbers of one output (torch tensors); ``passed`` follows torch.isclose(equal_nan=True)."""
    import torch

    info: dict[str, Any] = {"dtype": str(exp.dtype).replace("torch.", ""), "shape": list(exp.shape),
                            "numel": exp.numel(), "got_dtype": str(got.dtype).replace("torch.", "")}
    if tuple(got.shape) != tuple(exp.shape):
        info.update(max_abs_err=None, max_rel_err=None, rel_l2_err=None, mismatches=exp.numel(),
                    first_bad=None, nonfinite_unexpected=0, passed=False,
                    note=f"shape {list(got.shape)} != expected {list(exp.shape)}")
        return info
    g = got.detach().to(device=exp.device, dtype=torch.float64)
    e = exp.detach().to(torch.float64)
    close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    bad = ~close
    mismatches = int(bad.sum())
    nonfinite = int((~torch.isfinite(g) & torch.isfinite(e)).sum())
    both = torch.isfinite(g) & torch.isfinite(e)
    diff = (g - e).abs()[both]
    ref_abs = e.abs()[both]
    if diff.numel():
        max_abs = float(diff.max())
        max_rel = float((diff / ref_abs.clamp_min(torch.finfo(torch.float64).tiny)).max())
        norm = float(torch.linalg.vector_norm(e[both]))
        rel_l2 = float(torch.linalg.vector_norm(diff)) / norm if norm > 0 else (0.0 if max_abs == 0 else math.inf)
    else:
        max_abs = max_rel = rel_l2 = None
    first_bad = None
    if mismatches:
        flat = int(torch.nonzero(bad.reshape(-1))[0])
        idx = list(torch.unravel_index(torch.tensor(flat), tuple(exp.shape))) if exp.dim() else []
        first_bad = {"index": [int(i) for i in idx], "got": json_number(g.reshape(-1)[flat]),
                     "expected": json_number(e.reshape(-1)[flat])}
    info.update(max_abs_err=json_number(max_abs), max_rel_err=json_number(max_rel), rel_l2_err=json_number(rel_l2),
                mismatches=mismatches, first_bad=first_bad, nonfinite_unexpected=nonfinite,
                passed=mismatches == 0 and nonfinite == 0)
    return info


def _all_poison(exp) -> bool:
    """True when a reference output is nothing but poison (no finite float; every integer the sentinel)."""
    import torch

    from .loader import poison_tensor

    if exp.numel() == 0 or exp.dtype == torch.bool:
        return False
    if exp.dtype.is_complex:
        return not bool(torch.isfinite(exp).any())
    if exp.dtype.is_floating_point:  # through float64: isfinite does not take every fp8 type
        return not bool(torch.isfinite(exp.to(torch.float64)).any())
    poisoned = exp.clone()
    poison_tensor(poisoned)
    return torch.equal(poisoned, exp)


def compare_outputs(got: dict, expected: dict, run_tol: dict | None, ref_atol, ref_rtol,
                    tf32: bool = False) -> tuple[list[dict], list[str]]:
    """Compare every expected output; returns (rows, warnings)."""
    from .loader import is_tensor

    rows, warnings = [], []
    for name, exp in expected.items():
        if not is_tensor(exp):
            raise UsageError(f"the reference output '{name}' is a {type(exp).__name__}, not a tensor")
        tol = resolve_tolerance(run_tol, ref_atol, ref_rtol, str(exp.dtype).replace("torch.", ""), tf32)
        g = got.get(name)
        if not is_tensor(g):
            why = "missing from the kernel's outputs" if g is None else f"a {type(g).__name__}, not a tensor"
            rows.append({"name": name, "passed": False, "note": f"output '{name}' is {why}",
                         "mismatches": exp.numel(), "numel": exp.numel(), "tolerance": tol,
                         "dtype": str(exp.dtype).replace("torch.", ""), "shape": list(exp.shape),
                         "max_abs_err": None, "max_rel_err": None, "rel_l2_err": None, "first_bad": None,
                         "nonfinite_unexpected": 0})
            continue
        row = {"name": name, **compare(g, exp, tol["atol"], tol["rtol"]), "tolerance": tol}
        if _all_poison(exp):
            row.update(passed=False, note=f"the reference output '{name}' holds only NaN/Inf or the poison sentinel "
                       "(did reference() write it?): comparing against it cannot fail")
        rows.append(row)
        if exp.numel() > 1 and bool((exp == exp.reshape(-1)[0]).all()):
            warnings.append(f"reference output '{name}' is constant ({json_number(exp.reshape(-1)[0])}): "
                            "this check cannot tell a constant kernel from a correct one")
    return rows, warnings


# --- the child --------------------------------------------------------------------------
def child_main(spec: dict) -> dict:
    """Run in the worker: every shape and trial; stops at the first exception (reported as error)."""
    import torch

    from .loader import import_file, last_build, load_case

    cfg, device = spec["cfg"], spec["device"]
    run_root, kernel = Path(spec["run_root"]), Path(spec["kernel"])
    ref = import_file(run_root / "ref.py", "ref")
    ref_atol, ref_rtol, tf32 = getattr(ref, "atol", None), getattr(ref, "rtol", None), bool(getattr(ref, "tf32", False))
    shapes: list[dict] = []
    result: dict[str, Any] = {"device": device, "shapes": shapes, "warnings": [], "error": None, "build": None}

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    try:
        for si, dims in enumerate(spec["shapes"]):
            trials: list[dict] = []
            shapes.append({"dims": dims, "trials": trials})
            for t in range(int(spec["trials"])):
                seed = derive_seed(int(cfg["seed"]), si, t)
                case = load_case(cfg, run_root, kernel, dims, seed, device)
                expected = case.reference()
                sync()
                case.poison()
                got = case.launch()
                sync()
                rows, warns = compare_outputs(got, expected, cfg.get("tolerance"), ref_atol, ref_rtol, tf32)
                trials.append({"seed": seed, "outputs": rows, "passed": all(r["passed"] for r in rows)})
                result["warnings"] += [w for w in warns if w not in result["warnings"]]
                del case, expected, got
    except Exception as exc:
        from .worker import error_text

        result["error"] = error_text(exc)
    result["build"] = last_build()
    return result


# --- the parent -------------------------------------------------------------------------
def _sanitizer_errors(log: str) -> int | None:
    counts = [int(m) for m in re.findall(r"ERROR SUMMARY:\s*(\d+) error", log)]
    counts += [int(m) for m in re.findall(r"RACECHECK SUMMARY:.*?\((\d+) error", log)]
    return max(counts) if counts else None


def run_sanitizer(tool: str, spec: dict, timeout: float) -> dict[str, Any]:
    from .build import find_cuda_tool
    from .worker import run_child

    exe = find_cuda_tool("compute-sanitizer")
    if exe is None:
        raise UsageError("--sanitize needs compute-sanitizer (part of the CUDA toolkit); it was not found")
    with tempfile.TemporaryDirectory(prefix="kl-san-") as tmp:
        log_path = Path(tmp) / f"{tool}.log"
        prefix = [exe, "--tool", tool, "--log-file", str(log_path), "--print-limit", "20"]
        progress(f"running under compute-sanitizer --tool {tool} at {spec['shapes'][0]} ...")
        outcome = run_child("correctness", spec, timeout, prefix=prefix,
                            env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
        log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    errors = _sanitizer_errors(log)
    problem = outcome.failure() or (outcome.result or {}).get("error")
    if errors is None and problem is None:
        problem = "compute-sanitizer printed no error summary"
    tail = "\n".join(log.strip().splitlines()[-40:])
    return {"tool": tool, "dims": spec["shapes"][0], "errors": errors, "error": problem, "log": tail,
            "passed": errors == 0 and problem is None}


def _overall(res: dict) -> tuple[str, str | None]:
    if res.get("error"):
        return "FAIL", res["error"]
    trials = [t for s in res["shapes"] for t in s["trials"]]
    if not trials:
        return "FAIL", "no trial ran"
    failed = [(s["dims"], t) for s in res["shapes"] for t in s["trials"] if not t["passed"]]
    if failed:
        dims, t = failed[0]
        bad = [o for o in t["outputs"] if not o["passed"]]
        o = bad[0]
        what = o.get("note") or f"{o['mismatches']} of {o['numel']} elements outside tolerance"
        shown = ",".join(f"{k}={v}" for k, v in dims.items())
        return "FAIL", (f"{len(failed)} of {len(trials)} trials failed; first: dims {shown} seed {t['seed']} "
                        f"output '{o['name']}': {what}")
    return "PASS", None


def require_device(device: str, kernel: Path) -> None:
    """UsageError (exit 2) when the run's device cannot run this kernel here."""
    if device == "cpu":
        if kernel.suffix == ".cu":
            raise UsageError(f"{kernel.name} is CUDA C++: the cpu test mode (KERNEL_LOOP_DEVICE=cpu) runs .py kernels only")
        return
    try:
        import torch
    except ImportError:
        raise UsageError("torch is not installed: pip install torch (a CUDA build)") from None
    if not torch.cuda.is_available():
        raise UsageError(f"no CUDA GPU visible: torch.cuda.is_available() is False (torch {torch.__version__}, "
                         f"CUDA build {torch.version.cuda}); correctness needs a GPU "
                         "(KERNEL_LOOP_DEVICE=cpu is a test mode for .py kernels)")
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise UsageError(f"run.json gpu {index} does not exist: {torch.cuda.device_count()} GPU(s) visible")


def run_correctness(args: argparse.Namespace) -> int:
    from .loader import device_for
    from .worker import run_child

    rd = RunDir.open(args.out)
    cfg = rd.config()
    check_flags_against_run(cfg, args)
    k = rd.current_version()
    vdir = rd.vdir(k)
    kernel = rd.kernel_file(k)
    if kernel.suffix != IMPL_SUFFIX.get(cfg.get("impl"), kernel.suffix):
        raise UsageError(f"{kernel.name} does not match impl {cfg['impl']} (needs {IMPL_SUFFIX[cfg['impl']]})")
    device = device_for(cfg)
    require_device(device, kernel)
    if args.sanitize and device == "cpu":
        raise UsageError("--sanitize needs a CUDA device (compute-sanitizer); this run uses the cpu test mode")
    kernel_sha = sha256_file(kernel)
    shapes = [cfg["dims"]] + list(cfg.get("extra_shapes") or [])
    spec = {"cfg": cfg, "device": device, "run_root": str(rd.root), "kernel": str(kernel),
            "shapes": shapes, "trials": int(cfg.get("correctness_trials", 3))}
    timeout = float(cfg.get("timeout_s", 300))
    progress(f"v{k}: checking {kernel.name} on {device}: {len(shapes)} shape(s) x {spec['trials']} trial(s)")
    outcome = run_child("correctness", spec, timeout)
    res = outcome.result or {"device": device, "shapes": [], "warnings": [], "build": None, "error": None}
    if outcome.failure():
        res["error"] = outcome.failure()
    result, error = _overall(res)

    sanitize = None
    if args.sanitize:
        sdims = parse_dims(args.sanitize_dims, "--sanitize-dims") if args.sanitize_dims else dict(cfg["dims"])
        if set(sdims) != set(cfg["dims"]):
            raise UsageError(f"--sanitize-dims must name exactly the dims {', '.join(cfg['dims'])}")
        sspec = dict(spec, shapes=[sdims], trials=1)
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
            "result": result, "error": error, "device": res.get("device", device), "impl": cfg.get("impl"),
            "time": now_iso(), "seconds": round(outcome.seconds, 2),
            "tolerance": cfg.get("tolerance"), "build": res.get("build"), "shapes": res["shapes"],
            "warnings": res.get("warnings", []), "sanitize": sanitize}
    write_json(vdir / "correctness.json", data)
    atomic_write_text(vdir / "correctness.md", render("correctness.md.j2", c=data))
    provenance.record(vdir, [kernel, vdir / "correctness.md", vdir / "correctness.json", rd.run_json],
                      drop=PROFILE_FILES)
    print(summary_line(data))
    if result != "PASS":
        raise MeasuredFailure(f"v{k} correctness FAIL: {error.splitlines()[0] if error else 'see correctness.md'} "
                              f"(details in {vdir / 'correctness.md'})")
    return 0


def summary_line(data: dict) -> str:
    n = sum(len(s["trials"]) for s in data["shapes"])
    worst = max((o["max_abs_err"] for s in data["shapes"] for t in s["trials"] for o in t["outputs"]
                 if isinstance(o.get("max_abs_err"), float)), default=None)
    w = f", worst max abs err {worst:.3g}" if worst is not None else ""
    san = f", sanitizer errors {data['sanitize']['errors']}" if data.get("sanitize") else ""
    return f"{data['version']} correctness: {data['result']} ({len(data['shapes'])} shape(s), {n} trial(s){w}{san})"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "correctness", help="check the current version against ref.py",
        description="Check the current version's kernel against ref.py with fresh random inputs, poisoned outputs "
                    "and dtype-aware tolerances over every shape and trial, in a child process with the run's "
                    "timeout. Writes vK/correctness.md and vK/correctness.json and records them in "
                    "vK/measured.sha256 (dropping an older profile's entries).",
        epilog="Exit codes: 0 PASS, 1 FAIL (wrong values, crash, hang, build error, sanitizer errors), 2 bad usage. "
               "KERNEL_LOOP_DEVICE=cpu (or run.json \"device\": \"cpu\") is a test/dev mode that runs .py kernels on "
               "the CPU (Triton under TRITON_INTERPRET=1).")
    p.add_argument("out", help="run directory")
    p.add_argument("--sanitize", action="store_true",
                   help="also run under compute-sanitizer memcheck (and racecheck for .cu); errors -> FAIL")
    p.add_argument("--sanitize-dims", default=None, help="smaller K=V,... for the sanitizer runs (default: run dims)")
    add_check_flags(p)
    p.set_defaults(func=run_correctness)
