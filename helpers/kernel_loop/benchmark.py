"""``benchmark <out>``: time the chosen version against PyTorch baselines, after the final gate.

Steps: the final gate must pass on vN (its output is quoted when it does not); the
version is ``best`` (fastest vK whose correctness.json is PASS, by the loop's own
CUDA-event median in ncu.json) or a named vK.  One child process
(``python -m kernel_loop.benchmark --child SPEC RESULT``) loads the case with the
run's fixed seed, checks the solution, every baseline and every version against
the eager reference (with the per-output tolerance correctness resolves: run.json, else
ref.py's atol/rtol, else the dtype default),
times each one, and checks the outputs of the timed calls again afterwards
(outputs are poisoned before timing, so a kernel that stops writing is caught).
For each transition vK -> vK+1 (always with <= 8 versions, or with --all-versions)
the two kernels are timed interleaved in the same process (A, B, B, A, ...); the
speedup median(A) / median(B) gets a bootstrap 95 % interval (``bootstrap_ci``,
fixed seed) and a verdict: faster (interval above 1), slower (below 1) or within noise.

benchmark.json (extends references/artifacts.md):
``{"schema": 1, "version": "vK", "selection": "best"|"explicit", "device": {"name", "capability"},
"torch": str, "timing": {"method", "warmup", "trials", "discard_first", "l2_flush"},
"tolerance": {...} (run.json's), "tolerance_applied": {output: correctness.resolve_tolerance(...)}
(what each output was checked with), "rows": [{"name": "solution"|"pytorch-eager"|"torch-compile"|
"flashinfer"|"vK", "available", "why", "correct", "correct_after_timing", "error", "stats_us": {"mean", "median", "p20",
"p80", "min", "max", "std", "n"}|null, "samples_us": [...]}], "speedups": {baseline: x},
"roofline": {"flops", "bytes_moved", "median_us", "dtype", "achieved_tflops", "achieved_gbs",
"peak_tflops", "peak_gbs", "tflops_fraction", "bandwidth_fraction", "notes"}|null,
"ab": [{"from", "to", "median_a_us", "median_b_us", "speedup", "ci95": [lo, hi], "verdict", "n": [na, nb]}],
"flags": [...], "gate": "passed", "created"}``.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import (
    MeasuredFailure,
    UsageError,
    atomic_write_text,
    now_iso,
    package_dir,
    progress,
    read_json,
    warn,
    write_json,
)
from .correctness import describe_tolerances
from .hypothesis import event_median
from .rundir import RunDir, gate_script, parse_version
from .templating import render

BASELINES = ("pytorch-eager", "torch-compile", "flashinfer")
STAT_KEYS = ("mean", "median", "p20", "p80", "min", "max", "std", "n")
SPEEDUP_FLAG = 10.0
AB_ALWAYS_MAX_VERSIONS = 8
DTYPE_PEAK_KEY = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
                  "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "int8": "int8"}


def register(sub) -> None:
    p = sub.add_parser(
        "benchmark",
        help="time the best version against PyTorch baselines",
        description="After the final gate passes, time the best (or a named) version against PyTorch eager, "
        "torch.compile and FlashInfer baselines in one child process, with correctness checked before and "
        "after timing, a roofline from ref.py's flops()/bytes_moved(), and same-run A/B intervals for each "
        "transition vK -> vK+1. Writes <out>/benchmark.json and benchmark.md.",
    )
    p.add_argument("out", help="run directory")
    p.add_argument("--version", default="best", help="'best' (default) or a version name such as v2")
    p.add_argument("--baselines", default="pytorch-eager,torch-compile",
                   help="comma list of pytorch-eager,torch-compile,flashinfer, or 'all' or 'none' "
                   "(default pytorch-eager,torch-compile)")
    p.add_argument("--timing", choices=("cuda_event", "host_time"), default="cuda_event",
                   help="cuda_event: CUDA events with an L2 flush before every trial (default); "
                   "host_time: perf_counter around the call plus a device synchronize")
    p.add_argument("--warmup", type=int, help="warmup calls per item (default: run.json warmup)")
    p.add_argument("--trials", type=int, help="timed calls per item (default: run.json trials)")
    p.add_argument("--discard-first", type=int, default=0, dest="discard_first",
                   help="drop this many timed samples at the start of each item (default 0)")
    p.add_argument("--all-versions", action="store_true", dest="all_versions",
                   help=f"A/B every transition even with more than {AB_ALWAYS_MAX_VERSIONS} versions")
    p.set_defaults(func=run)


# --- pure parts (CPU-tested) ----------------------------------------------------------------
def parse_baselines(text: str) -> list[str]:
    if text == "all":
        return list(BASELINES)
    if text == "none":
        return []
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in BASELINES]
    if bad or not names:
        raise UsageError(f"unknown baseline(s) {', '.join(bad) or repr(text)}: use a comma list of "
                         f"{', '.join(BASELINES)}, or 'all' or 'none'")
    return list(dict.fromkeys(names))


def bootstrap_ci(a: list[float], b: list[float], *, n_boot: int = 2000, level: float = 0.95,
                 seed: int = 20261129) -> tuple[float, float]:
    """Percentile bootstrap interval of median(a) / median(b); deterministic for a given seed."""
    if not a or not b:
        raise ValueError("bootstrap_ci needs two non-empty samples")
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(n_boot)
    )
    lo = ratios[max(0, math.floor((1 - level) / 2 * n_boot))]
    hi = ratios[min(n_boot - 1, math.ceil((1 + level) / 2 * n_boot) - 1)]
    return lo, hi


def verdict(ci: tuple[float, float]) -> str:
    """faster / slower / within noise for a speedup interval of B over A."""
    lo, hi = ci
    if lo > 1.0:
        return "faster"
    if hi < 1.0:
        return "slower"
    return "within noise"


def ab_entry(rec: dict[str, Any]) -> dict[str, Any]:
    a, b = rec["samples_a"], rec["samples_b"]
    ma, mb = statistics.median(a), statistics.median(b)
    ci = bootstrap_ci(a, b)
    return {"from": rec["from"], "to": rec["to"], "median_a_us": ma, "median_b_us": mb, "speedup": ma / mb,
            "ci95": [ci[0], ci[1]], "verdict": verdict(ci), "n": [len(a), len(b)]}


def roofline(flops: float | None, nbytes: float | None, median_us: float | None, dtype: str | None,
             env: dict[str, Any] | None) -> dict[str, Any] | None:
    """Achieved TFLOP/s and GB/s at ``median_us`` and their fractions of env.json's peaks."""
    if (flops is None and nbytes is None) or not median_us:
        return None
    peaks = (env or {}).get("peaks") or {}
    key = DTYPE_PEAK_KEY.get(dtype or "", dtype)
    secs = median_us * 1e-6
    tflops = flops / secs / 1e12 if flops is not None else None
    gbs = nbytes / secs / 1e9 if nbytes is not None else None
    peak_tf = peaks.get(f"{key}_matmul_tflops") if key else None
    peak_gb = peaks.get("copy_bandwidth_gbps")
    notes = []
    if tflops is not None and peak_tf is None:
        notes.append(f"env.json has no {key or 'this dtype'} matmul peak")
    if gbs is not None and peak_gb is None:
        notes.append("env.json has no copy_bandwidth_gbps peak")
    return {"flops": flops, "bytes_moved": nbytes, "median_us": median_us, "dtype": key,
            "achieved_tflops": tflops, "achieved_gbs": gbs, "peak_tflops": peak_tf, "peak_gbs": peak_gb,
            "tflops_fraction": tflops / peak_tf if tflops is not None and peak_tf else None,
            "bandwidth_fraction": gbs / peak_gb if gbs is not None and peak_gb else None, "notes": notes}


def finish(result: dict[str, Any], *, version: str, selection: str, timing: dict[str, Any],
           tolerance: dict[str, Any] | None, env: dict[str, Any] | None) -> dict[str, Any]:
    """benchmark.json from the child's result (no GPU work here)."""
    rows = []
    for it in result["items"]:
        stats = it.get("stats_us")
        rows.append({
            "name": it["name"], "available": bool(it.get("available")), "why": it.get("why"),
            "correct": it.get("correct"), "correct_after_timing": it.get("correct_after"),
            "error": it.get("error"),
            "stats_us": {k: stats.get(k) for k in STAT_KEYS} if stats else None,
            "samples_us": it.get("samples_us") or [],
        })
    by_name = {r["name"]: r for r in rows}
    sol = by_name.get("solution")
    flags: list[str] = []
    sol_ok = bool(sol and sol["correct"] and sol["correct_after_timing"] and sol["stats_us"])
    if sol and not sol_ok:
        flags.append(f"the solution ({version}) failed the correctness check: {sol.get('error') or 'see rows'}")
    speedups: dict[str, float] = {}
    for r in rows:
        if r["name"] not in BASELINES or not r["available"]:
            continue
        if not (r["correct"] and r["correct_after_timing"]):
            flags.append(f"baseline {r['name']} disagrees with the eager reference: {r.get('error')}")
            continue
        if sol_ok and r["stats_us"]:
            x = r["stats_us"]["median"] / sol["stats_us"]["median"]
            speedups[r["name"]] = x
            if x > SPEEDUP_FLAG:
                flags.append(f"speedup {x:.1f}x over {r['name']} is above {SPEEDUP_FLAG:g}x: review that the "
                             "solution computes the whole result and the baseline is a fair one")
    for r in rows:
        if r["name"].startswith("v") and r["available"] and r["correct"] is False:
            flags.append(f"{r['name']} failed the correctness check in the benchmark: {r.get('error')}")
    ab = [ab_entry(rec) for rec in result.get("ab") or []]
    roof = roofline(result.get("flops"), result.get("bytes_moved"),
                    sol["stats_us"]["median"] if sol_ok else None, result.get("output_dtype"), env)
    if roof is None and result.get("roofline_why"):
        flags.append(f"no roofline: {result['roofline_why']}")
    return {"schema": 1, "version": version, "selection": selection, "device": result.get("device"),
            "torch": result.get("torch"), "timing": timing, "tolerance": tolerance,
            "tolerance_applied": result.get("tolerances"), "rows": rows,
            "speedups": speedups, "roofline": roof, "ab": ab, "flags": flags, "gate": "passed",
            "created": now_iso()}


# --- the command --------------------------------------------------------------------------------
def check_final_gate(rd: RunDir, n: int) -> None:
    script = gate_script()
    proc = subprocess.run(["bash", str(script), str(rd.vdir(n)), "--final"], capture_output=True, text=True)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise UsageError(f"benchmark runs only after the final gate passes; it does not on v{n} "
                         f"(exit {proc.returncode}):\n{output}")


def loop_timings(rd: RunDir, n: int) -> dict[int, tuple[str | None, float | None]]:
    """{k: (correctness result, loop CUDA-event median)} for every version folder up to vN."""
    out = {}
    for k in rd.versions():
        if k > n:
            continue
        vdir = rd.vdir(k)
        corr = read_json(vdir / "correctness.json") if (vdir / "correctness.json").exists() else {}
        ncu = read_json(vdir / "ncu.json") if (vdir / "ncu.json").exists() else {}
        out[k] = (corr.get("result"), event_median(ncu))
    return out


def select_version(rd: RunDir, n: int, choice: str) -> int:
    timings = loop_timings(rd, n)
    if choice == "best":
        cands = [(med, k) for k, (res, med) in timings.items() if res == "PASS" and med is not None]
        if not cands:
            raise UsageError("no version has both a PASS correctness result and a CUDA-event median in ncu.json")
        return min(cands)[1]
    k = parse_version(choice)
    if k not in timings:
        raise UsageError(f"{choice} does not exist in {rd.root} (versions v0..v{n})")
    if timings[k][0] != "PASS":
        raise UsageError(f"{choice} did not pass correctness; benchmark a correct version")
    return k


def run(args) -> int:
    rd = RunDir.open(args.out)
    cfg = rd.config()
    n = int(cfg.get("iterations", 0))
    baselines = parse_baselines(args.baselines)
    warmup = cfg.get("warmup", 10) if args.warmup is None else args.warmup
    trials = cfg.get("trials", 100) if args.trials is None else args.trials
    if warmup < 0 or trials < 1 or args.discard_first < 0 or args.discard_first >= trials:
        raise UsageError("need --warmup >= 0, --trials >= 1 and 0 <= --discard-first < --trials")
    check_final_gate(rd, n)
    k = select_version(rd, n, args.version)
    vdir = rd.vdir(k)
    corr = read_json(vdir / "correctness.json")
    tolerance = corr.get("tolerance") or cfg.get("tolerance")
    versions = [j for j in range(n + 1) if rd.vdir(j).is_dir()]
    do_ab = args.all_versions or len(versions) <= AB_ALWAYS_MAX_VERSIONS
    spec = {
        "run_root": str(rd.root), "cfg": cfg, "dims": cfg["dims"], "seed": cfg.get("seed", 42),
        "tolerance": tolerance, "ref_py": str(rd.ref_py),
        "solution": {"version": f"v{k}", "kernel": str(rd.kernel_file(k))},
        "versions": [{"version": f"v{j}", "kernel": str(rd.kernel_file(j))} for j in versions] if do_ab else [],
        "ab": [[f"v{j}", f"v{j + 1}"] for j in versions[:-1] if j + 1 in versions] if do_ab else [],
        "baselines": baselines, "method": args.timing, "warmup": warmup, "trials": trials,
        "discard_first": args.discard_first,
    }
    progress(f"benchmarking v{k} ({'best by the loop timings' if args.version == 'best' else 'as named'}) "
             f"against {', '.join(baselines) or 'no baselines'}; {len(spec['ab'])} A/B transition(s)")
    for name in ("benchmark.json", "benchmark.md"):  # our own output: a failed run must not leave an old one current
        (rd.root / name).unlink(missing_ok=True)
    result = run_child(spec, float(cfg.get("timeout_s") or 600))
    timing = {"method": args.timing, "warmup": warmup, "trials": trials, "discard_first": args.discard_first,
              "l2_flush": args.timing == "cuda_event"}
    env = read_json(rd.root / "env.json") if (rd.root / "env.json").exists() else None
    bench = finish(result, version=f"v{k}", selection="best" if args.version == "best" else "explicit",
                   timing=timing, tolerance=tolerance, env=env)
    write_outputs(rd.root, bench)
    print(rd.root / "benchmark.json")
    for f in bench["flags"]:
        warn(f)
    sol = next(r for r in bench["rows"] if r["name"] == "solution")
    if not (sol["correct"] and sol["correct_after_timing"]):
        raise MeasuredFailure(f"v{k} failed in the benchmark: {sol.get('error') or sol.get('why')}")
    return 0


def write_outputs(root: Path, bench: dict[str, Any]) -> None:
    write_json(root / "benchmark.json", bench)
    tolerance = describe_tolerances(bench.get("tolerance"), bench.get("tolerance_applied"))
    atomic_write_text(root / "benchmark.md", render("benchmark.md.j2", b=bench, tolerance=tolerance))


def run_child(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kl-bench-") as td:
        spec_path, result_path = Path(td) / "spec.json", Path(td) / "result.json"
        write_json(spec_path, spec)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(package_dir().parent) + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "kernel_loop.benchmark", "--child", str(spec_path), str(result_path)]
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout_s, stdout=subprocess.PIPE, text=True)
        except subprocess.TimeoutExpired:
            raise MeasuredFailure(f"the benchmark child ran past run.json timeout_s ({timeout_s:g} s) and was "
                                  "stopped; lower --trials or raise timeout_s") from None
        if proc.stdout:
            sys.stderr.write(proc.stdout)
        if not result_path.exists():
            raise MeasuredFailure(f"the benchmark child crashed (exit {proc.returncode}) without a result; "
                                  "its output is above")
        result = read_json(result_path)
    if not result.get("ok"):
        cls = UsageError if result.get("usage") else MeasuredFailure
        raise cls(f"benchmark child: {result.get('error')}")
    return result


# --- the child process (GPU) ---------------------------------------------------------------------
def applied_tolerances(expected: dict[str, Any], run_tol: dict[str, Any] | None, ref) -> dict[str, dict[str, Any]]:
    """Per output, the tolerance correctness applies (run.json > ref.py atol/rtol > dtype default)."""
    from .correctness import resolve_tolerance

    return {name: resolve_tolerance(run_tol, getattr(ref, "atol", None), getattr(ref, "rtol", None),
                                    str(getattr(exp, "dtype", "")).replace("torch.", ""),
                                    bool(getattr(ref, "tf32", False)))
            for name, exp in expected.items()}


def _compare(got: dict[str, Any], expected: dict[str, Any],
             tols: dict[str, dict[str, Any]]) -> tuple[bool, str | None]:
    import torch

    for name, exp in expected.items():
        if name not in got:
            return False, f"output '{name}' missing (got {', '.join(got) or 'nothing'})"
        try:
            torch.testing.assert_close(got[name], exp, atol=tols[name]["atol"], rtol=tols[name]["rtol"],
                                       equal_nan=False, check_dtype=False)
        except (AssertionError, TypeError, RuntimeError) as exc:
            return False, f"{name}: " + " ".join(str(exc).split())[:300]
    return True, None


def _timer(method: str, device: str):
    """(fn, warmup, trials) -> samples in microseconds."""
    from . import timing

    if method == "cuda_event":
        if not device.startswith("cuda"):
            raise UsageError("cuda_event timing needs a GPU; in the CPU dev mode use --timing host_time")
        return lambda fn, warmup, trials: list(timing.time_callable(fn, warmup=warmup, trials=trials,
                                                                     flush_l2=True)["samples_us"])

    def sync():
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()

    def host(fn, warmup, trials):
        for _ in range(warmup):
            fn()
        sync()
        out = []
        for _ in range(trials):
            t0 = time.perf_counter()
            fn()
            sync()
            out.append((time.perf_counter() - t0) * 1e6)
        return out

    return host


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from . import loader, timing

    cfg = spec["cfg"]
    dev = loader.device_for(cfg)
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            return {"ok": False, "usage": True,
                    "error": "no CUDA device (torch.cuda.is_available() is False): benchmark needs a GPU"}
        torch.cuda.set_device(torch.device(dev))
    try:
        timer = _timer(spec["method"], dev)
    except UsageError as exc:
        return {"ok": False, "usage": True, "error": str(exc)}
    warmup, trials, drop = spec["warmup"], spec["trials"], spec["discard_first"]
    root = Path(spec["run_root"])
    ref = loader.import_file(Path(spec["ref_py"]), "ref")

    def load(kernel: str):
        return loader.load_case(cfg, root, Path(kernel), spec["dims"], spec["seed"], dev)

    def measure(name: str, call, outputs_of, poison, expected) -> dict[str, Any]:
        """Check ``call`` against ``expected``, time it, then check the outputs of the timed calls."""
        item: dict[str, Any] = {"name": name, "available": True, "why": None, "correct": False,
                                "correct_after": None, "error": None, "samples_us": [], "stats_us": None}
        tols = applied_tolerances(expected, spec["tolerance"], ref)
        try:
            poison()
            item["correct"], item["error"] = _compare(outputs_of(call()), expected, tols)
            last: dict[str, Any] = {}

            def timed():
                last["value"] = call()

            poison()
            progress(f"timing {name}: {warmup} warmup + {trials} trials ({spec['method']})")
            samples = timer(timed, warmup, trials)[drop:]
            ok_after, err_after = _compare(outputs_of(last["value"]), expected, tols)
            item["correct_after"] = ok_after
            item["error"] = item["error"] or err_after
            item["samples_us"], item["stats_us"] = samples, timing.summarize(samples)
            progress(f"{name}: median {item['stats_us']['median']:.2f} us, correct {item['correct'] and ok_after}")
        except Exception as exc:  # a baseline that cannot run is reported, not fatal
            item.update(available=False, why=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            progress(f"{name}: not available ({item['why']})")
        return item

    def kernel_item(name: str, case, expected) -> dict[str, Any]:
        return measure(name, case.launch, lambda v: v, case.poison, expected)

    def reference_item(name: str, case, expected, wrap=None, **extra) -> dict[str, Any]:
        fn, kw = case.reference_callable_and_args()
        fn = wrap(fn) if wrap else fn

        def outputs_of(value):
            if value is None:  # the reference wrote its outputs in place
                return {n: kw[n] for n in case.outputs}
            return loader.normalize_outputs(value, case.out_names)

        def poison():
            for n in case.outputs:
                if n in kw:
                    loader.poison_tensor(kw[n])

        return measure(name, lambda: fn(**kw, **extra), outputs_of, poison, expected)

    res: dict[str, Any] = {"ok": True, "device": {"name": dev}, "torch": torch.__version__, "items": [], "ab": []}
    if dev.startswith("cuda"):
        res["device"] = {"name": torch.cuda.get_device_name(),
                         "capability": ".".join(map(str, torch.cuda.get_device_capability()))}
    sol = load(spec["solution"]["kernel"])
    expected = sol.reference()
    first = next(iter(expected.values()))
    res["output_dtype"] = str(getattr(first, "dtype", "")).replace("torch.", "") or None
    res["tolerances"] = applied_tolerances(expected, spec["tolerance"], ref)
    res["items"].append(kernel_item("solution", sol, expected))

    for b in spec["baselines"]:
        if b == "pytorch-eager":
            res["items"].append(reference_item(b, sol, expected))
        elif b == "torch-compile":
            res["items"].append(reference_item(b, sol, expected, wrap=torch.compile))
        elif b == "flashinfer":
            why = None
            if not loader._accepts_baseline(ref.reference):
                why = "ref.py's reference() takes no 'baseline' argument"
            else:
                try:
                    import flashinfer  # noqa: F401
                except Exception as exc:
                    why = f"import flashinfer failed: {exc}"
            if why:
                res["items"].append({"name": b, "available": False, "why": why, "correct": None,
                                     "correct_after": None, "error": None, "samples_us": [], "stats_us": None})
                progress(f"{b}: not available ({why})")
            else:
                res["items"].append(reference_item(b, sol, expected, baseline="flashinfer"))

    flops_fn, bytes_fn = getattr(ref, "flops", None), getattr(ref, "bytes_moved", None)
    res["flops"] = float(loader.call_with(flops_fn, spec["dims"])) if callable(flops_fn) else None
    res["bytes_moved"] = float(loader.call_with(bytes_fn, spec["dims"])) if callable(bytes_fn) else None
    res["roofline_why"] = None if (res["flops"] or res["bytes_moved"]) else \
        "ref.py declares neither flops(**dims) nor bytes_moved(**dims)"

    cases = {}
    for v in spec["versions"]:
        case = load(v["kernel"])
        cases[v["version"]] = case
        res["items"].append(kernel_item(v["version"], case, case.reference()))
    for a, b in spec["ab"]:
        ca, cb = cases[a], cases[b]
        for c in (ca, cb):
            for _ in range(warmup):
                c.launch()
        progress(f"A/B {a} -> {b}: {trials} interleaved trials each")
        sa, sb = [], []
        for i in range(trials):
            order = ((ca, sa), (cb, sb)) if i % 2 == 0 else ((cb, sb), (ca, sa))
            for c, dst in order:
                dst.extend(timer(c.launch, 0, 1))
        res["ab"].append({"from": a, "to": b, "samples_a": sa[drop:], "samples_b": sb[drop:]})
    return res


def _child_main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "--child":
        print("usage: python -m kernel_loop.benchmark --child SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    try:
        result = _child(spec)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    write_json(Path(argv[2]), result)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
