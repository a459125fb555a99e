"""``benchmark <out>``: time the chosen version against PyTorch baselines, after the final gate.

Steps: the final gate must pass on vN (its output is quoted when it does not); the
version is ``best`` or a named vK.  ``best`` is chosen from this benchmark's own rows, every version timed
in the same rounds of one worker (``choose_best``: the fastest correct median, then the earliest version within
noise of it);
the loop's CUDA-event medians (ncu.json) only pick the kernel timed as the solution before that, and name
the best when no version row was timed.  A best that is v0, or byte-identical to an earlier version, is
flagged.  One judge process (``measure.judge``, mode ``benchmark``) draws the data from secret seeds, builds
every version's library at once, and in one worker checks every version (and the solution, where no version has
its bytes) against the reference (with the per-output tolerance correctness resolves: run.json, else ref.py's
atol/rtol, else the dtype default), times them in rounds (``timed.rounds_loop``: each round calls every one once, in
an order drawn per round; every call poisoned, several verified at random) and checks each on fresh inputs
afterwards; the
baselines are timed the same way in a worker that imports ref.py and no kernel, with the same weights.
A median below the version's own ncu duration, or below the time its outputs take to write at the
copy peak, is invalid.
Each transition vK -> vK+1 is read from the same rounds (the versions are timed unless a version is named in
a run of more than 8 and --all-versions is not given): the speedup median(A) / median(B) gets a bootstrap 95 %
interval (``bootstrap_ci``, fixed seed) and a verdict: faster (interval above 1), slower (below 1) or within
noise.

benchmark.json (extends references/artifacts.md):
``{"schema": 1, "version": "vK", "selection": "best"|"explicit", "device": {"name", "capability"},
"torch": str, "timing": {"method", "warmup", "trials", "discard_first", "l2_flush"},
"tolerance": {...} (run.json's), "tolerance_applied": {output: compare.resolve_tolerance(...)}
(what each output was checked with), "rows": [{"name": "solution"|"pytorch-eager"|"torch-compile"|
"flashinfer"|"vK", "available", "why", "correct", "correct_after_timing", "error", "stats_us": {"mean", "median", "p20",
"p80", "min", "max", "std", "n"}|null, "samples_us": [...]}], "speedups": {baseline: x},
"roofline": {"flops", "bytes_moved", "median_us", "dtype", "achieved_tflops", "achieved_gbs",
"peak_tflops", "peak_gbs", "tflops_fraction", "bandwidth_fraction", "notes"}|null,
"ab": [{"from", "to", "median_a_us", "median_b_us", "speedup", "ci95": [lo, hi], "verdict", "n": [na, nb]}],
"best": {"basis": "benchmark"|"loop timings"|"named", "version", "fastest", "within_noise": [...], "same_as"},
"flags": [...], "gate": "passed", "created"}``.
"""

from __future__ import annotations

import math
import random
import statistics
import subprocess
from pathlib import Path
from typing import Any

from .. import plan, records, sidecars, static_check, timecheck
from ..common import (
    KernelLoopError,
    MeasuredFailure,
    UsageError,
    atomic_write_text,
    judge_tmpdir,
    now_iso,
    progress,
    read_json,
    sha256_file,
    warn,
    write_json,
)
from ..compare import describe_tolerances
from ..loader import device_for
from ..measure import libraries
from ..measure.session import run_judge
from ..measure.timed import BASELINE_BUDGET_S, MIN_TRIALS, ROUNDS_BUDGET_S
from ..rundir import RunDir, gate_script, parse_version
from ..sidecars import CORRECTNESS_JSON, FINAL_REPORT_PNG, NCU_JSON, event_median
from ..templating import draw_chart, render
from ..timecheck import BANDWIDTH_SLACK, below_ncu, floor_invalid
from ..timing import resampled_median_ratios, summarize
from ..vocab import BASELINES, NO_GRADIENT_NOTE

STAT_KEYS = ("mean", "median", "p20", "p80", "min", "max", "std", "n")
SPEEDUP_FLAG = 10.0
SLOW_V0 = 2.0
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
        "transition vK -> vK+1. Writes <out>/benchmark.json and benchmark.md, replacing an earlier pair only "
        "when the new benchmark has been measured.",
        epilog="Exit codes: 0 measured and the solution correct, 1 the benchmark ran and the solution failed (or it "
               "crashed or timed out), 2 refused (the final gate does not pass, no GPU, bad options).",
    )
    p.add_argument("out", help="run directory")
    p.add_argument("--version", default="best", help="'best' (default) or a version name such as v2")
    p.add_argument("--baselines", default="pytorch-eager,torch-compile",
                   help="comma list of pytorch-eager,torch-compile,flashinfer, or 'all' or 'none' "
                   "(default pytorch-eager,torch-compile)")
    p.add_argument("--timing", choices=("cuda_event", "host_time"), default=None,
                   help="follows the run's device and may only confirm it: cuda_event (CUDA events with an L2 "
                   "flush before every call) on a GPU run, host_time (the host clock) in the cpu test mode")
    p.add_argument("--warmup", type=int, help="warmup calls per item (default: run.json warmup, cut to fit the "
                   "time budget like --trials)")
    p.add_argument("--trials", type=int, help="timed calls per item (default: run.json trials, cut where slow calls "
                   f"would take longer than about {ROUNDS_BUDGET_S:.0f} s for the versions' rounds and "
                   f"{BASELINE_BUDGET_S:.0f} s for each baseline, keeping at least {MIN_TRIALS}; --trials, --warmup or "
                   "--discard-first run the counts asked in full)")
    p.add_argument("--discard-first", type=int, default=0, dest="discard_first",
                   help="drop this many timed samples at the start of each item (default 0)")
    p.add_argument("--all-versions", action="store_true", dest="all_versions",
                   help=f"with a named --version, time every version (and A/B each transition) even with more than "
                   f"{AB_ALWAYS_MAX_VERSIONS} versions ('best' always times them all)")
    p.set_defaults(func=run, needs=("jinja2",))  # checked before it writes anything


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
    ratios = sorted(resampled_median_ratios(a, b, rng, n_boot))
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
            "ci95": [ci[0], ci[1]], "verdict": verdict(ci), "n": [len(a), len(b)],
            "host_overhead_us": rec.get("host_overhead_us")}


COPY_NEAR = 0.9  # past this fraction of the copy bandwidth the roofline says what that bandwidth is


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
    elif gbs is not None and gbs > COPY_NEAR * peak_gb:  # an agent's trial: 98.9 % for a read-only reduction
        notes.append("the copy bandwidth is a device-to-device copy, half reads and half writes: a kernel that mostly "
                     "reads can pass 100 % of it, so it is a yardstick, not a ceiling; ncu's dram_throughput_pct "
                     "(ncu.json) is the fraction of the DRAM peak")
    return {"flops": flops, "bytes_moved": nbytes, "median_us": median_us, "dtype": key,
            "achieved_tflops": tflops, "achieved_gbs": gbs, "peak_tflops": peak_tf, "peak_gbs": peak_gb,
            "tflops_fraction": tflops / peak_tf if tflops is not None and peak_tf else None,
            "bandwidth_fraction": gbs / peak_gb if gbs is not None and peak_gb else None, "notes": notes}


def impossible(flops: float | None, nbytes: float | None, median_us: float | None, dtype: str | None,
               env: dict[str, Any] | None) -> str | None:
    """Why a measured time cannot be real, or None: the bytes ref.py says must move, or its FLOPs, at a rate
    above what env measured this GPU can do.  Bandwidth may exceed the copy peak by BANDWIDTH_SLACK (a
    read-mostly kernel streams a little faster than a copy); a FLOP rate may not exceed the matmul peak
    of the output's dtype at all."""
    if not (median_us and median_us > 0):
        return None
    roof = roofline(flops, nbytes, median_us, dtype, env) or {}
    gbs, peak_gb = roof.get("achieved_gbs"), roof.get("peak_gbs")
    if gbs and peak_gb and gbs > peak_gb * BANDWIDTH_SLACK:
        return (f"{nbytes:.3g} bytes in {median_us:.2f} us is {gbs:.0f} GB/s, above the measured copy peak "
                f"{peak_gb:.0f} GB/s (x{BANDWIDTH_SLACK:g} allowed): part of the work escaped the timing")
    tf, peak_tf = roof.get("achieved_tflops"), roof.get("peak_tflops")
    if tf and peak_tf and tf > peak_tf:
        return (f"{flops:.3g} FLOP in {median_us:.2f} us is {tf:.1f} TFLOP/s, above the measured {roof.get('dtype')} "
                f"matmul peak {peak_tf:.1f} TFLOP/s: part of the work escaped the timing")
    return None


def choose_best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best version by this benchmark's side-by-side rows, or None when no version row was timed: among
    the correct, valid version rows, the fastest by median, then the earliest version whose time is within
    noise of it (the bootstrap interval of median(vJ) / median(fastest) reaches 1).  A later version wins
    only by being faster beyond the run's spread."""
    timed = [r for r in rows if r["name"][:1] == "v" and r["name"][1:].isdigit() and r["correct"]
             and r["correct_after_timing"] and r["stats_us"] and len(r["samples_us"]) > 1
             and not r.get("invalid")]
    if not timed:
        return None
    timed.sort(key=lambda r: int(r["name"][1:]))
    fastest = min(timed, key=lambda r: r["stats_us"]["median"])
    near = [r["name"] for r in timed
            if r is fastest or bootstrap_ci(r["samples_us"], fastest["samples_us"])[0] <= 1.0]
    return {"basis": "benchmark", "fastest": fastest["name"], "within_noise": near, "version": near[0]}


def same_bytes_note(version: str, same_as: dict[str, str] | None) -> str | None:
    """What to say when the chosen version is v0, or its kernel is byte-identical to an earlier version's."""
    earlier = (same_as or {}).get(version)
    if version == "v0" or earlier == "v0":
        what = "the best version is v0" if version == "v0" else f"{version}'s kernel is byte-identical to v0's"
        return f"{what}: the loop did not improve on v0"
    if earlier:
        return f"{version}'s kernel is byte-identical to {earlier}'s: {version} adds nothing over {earlier}"
    return None


def slow_v0(rows: dict[str, Any]) -> str | None:
    """A v0 much slower than PyTorch eager inflates every 'vs v0' number."""
    v0 = ((rows.get("v0") or {}).get("stats_us") or {}).get("median")
    eager = ((rows.get("pytorch-eager") or {}).get("stats_us") or {}).get("median")
    if v0 and eager and v0 > SLOW_V0 * eager:
        return (f"v0 is {v0 / eager:.1f}x slower than PyTorch eager ({v0:.1f} vs {eager:.1f} us): the speedups "
                "over v0 overstate the gain; cite the speedups over the baselines")
    return None


def finish(result: dict[str, Any], *, version: str, selection: str, timing: dict[str, Any],
           tolerance: dict[str, Any] | None, env: dict[str, Any] | None,
           ncu_us: dict[str, float] | None = None, same_as: dict[str, str] | None = None,
           limits: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """benchmark.json from the judge's result (no GPU work here).  ``ncu_us``: each kernel row's summed
    ncu duration from its version's profile, a bound its median may not fall far below.  With
    ``selection`` best, the version is chosen here from the timed version rows (``choose_best``) and the
    solution row becomes that version's row; ``version`` (the loop's timings' choice) stays only when no
    version row was timed.  ``same_as``: {vJ: the earliest earlier version with the same kernel bytes}.
    ``limits``: {vJ: its correctness notes that say what a user cannot do with it}, flagged for the chosen version."""
    rows = []
    for it in result["items"]:
        stats = summarize(it["samples_us"]) if it.get("samples_us") else None  # recomputed here, from the raw samples
        rows.append({
            "name": it["name"], "available": bool(it.get("available")), "why": it.get("why"),
            "correct": it.get("correct"), "correct_after_timing": it.get("correct_after"),
            "error": it.get("error"),
            "stats_us": {k: stats.get(k) for k in STAT_KEYS} if stats else None,
            "samples_us": it.get("samples_us") or [],
            "host_overhead_us": (it.get("timing") or {}).get("host_overhead_us"),
        })
    flags: list[str] = []
    for r in rows:
        if r["name"] == "solution" or r["name"].startswith("v"):
            med = (r["stats_us"] or {}).get("median")
            why = (impossible(result.get("flops"), result.get("bytes_moved"), med, result.get("output_dtype"), env)
                   or floor_invalid(result.get("output_bytes"), med, ((env or {}).get("peaks") or {}).get(
                       "copy_bandwidth_gbps"))
                   or below_ncu(med, (ncu_us or {}).get(r["name"]), r["name"]))
            if why:
                r["invalid"] = why
    best = choose_best(rows) if selection == "best" else None
    if best is None:
        best = {"basis": "loop timings" if selection == "best" else "named", "version": version}
    elif best["version"] != version:  # the solution is the chosen version: its row from the same run
        chosen = next(r for r in rows if r["name"] == best["version"])
        rows = [{**chosen, "name": "solution", "samples_us": list(chosen["samples_us"])}
                if r["name"] == "solution" else r for r in rows]
    version = best["version"]
    best["same_as"] = (same_as or {}).get(version)
    flags += [f"{r['name']} is invalid: {r['invalid']}" for r in rows if r.get("invalid")]
    by_name = {r["name"]: r for r in rows}
    sol = by_name.get("solution")
    sol_ok = bool(sol and sol["correct"] and sol["correct_after_timing"] and sol["stats_us"]
                  and not sol.get("invalid"))
    if sol and not (sol["correct"] and sol["correct_after_timing"]):
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
    v0 = (by_name.get("v0") or {}).get("stats_us") or {}
    if sol_ok and v0.get("median") and v0["median"] / sol["stats_us"]["median"] > SPEEDUP_FLAG:
        flags.append(f"speedup {v0['median'] / sol['stats_us']['median']:.1f}x over v0 is above {SPEEDUP_FLAG:g}x: "
                     "review that the solution computes the whole result and that v0 was a fair start")
    flags += [f for f in (slow_v0(by_name), same_bytes_note(version, same_as), other_card_flag(result, env)) if f]
    flags += [f"{version}: {note}" for note in (limits or {}).get(version, [])]
    ab = [ab_entry(rec) for rec in result.get("ab") or []]
    nbytes, lower = result.get("bytes_moved"), False
    if nbytes is None and not result.get("flops") and result.get("io_bytes"):
        nbytes, lower = result["io_bytes"], True  # the inputs read once and the outputs written once, at least
    roof = roofline(result.get("flops"), nbytes, sol["stats_us"]["median"] if sol_ok else None,
                    result.get("output_dtype"), env)
    if roof is not None and lower:
        roof["bytes_lower_bound"] = True
        what = "inputs', parameters' and outputs'" if result.get("param_bytes") else "inputs' and outputs'"
        roof["notes"].append(f"bytes moved is the {what} size (each read or written once): a lower "
                             "bound, since ref.py declares no bytes_moved(**dims)")
    if roof is None and result.get("roofline_why") and not lower:
        flags.append(f"no roofline: {result['roofline_why']}")
    return {"schema": 1, "version": version, "selection": selection, "best": best, "device": result.get("device"),
            "torch": result.get("torch"), "timing": timing, "tolerance": tolerance,
            "tolerance_applied": result.get("tolerances"), "rows": rows,
            "speedups": speedups, "roofline": roof, "ab": ab, "flags": flags, "gate": "passed",
            "input_sets": result.get("input_sets"), "worker_isolated": result.get("worker_isolated"),
            "isolation_why": result.get("isolation_why"), "created": now_iso()}


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
        corr = sidecars.load(vdir / CORRECTNESS_JSON) or {}
        ncu = sidecars.load(vdir / NCU_JSON) or {}
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
    if cfg.device == "cpu":
        raise UsageError("this run uses the cpu test mode (run.json device cpu): benchmark, like profile and the "
                         "gate, needs a GPU run (init a new one without --device cpu where a CUDA GPU is)")
    n = plan.final_version(rd)
    baselines = parse_baselines(args.baselines)
    warmup = cfg.warmup if args.warmup is None else args.warmup
    asked = args.warmup is not None or args.trials is not None or args.discard_first != 0
    trials = cfg.trials if args.trials is None else args.trials
    if warmup < 0 or trials < 1 or args.discard_first < 0 or args.discard_first >= trials:
        raise UsageError("need --warmup >= 0, --trials >= 1 and 0 <= --discard-first < --trials")
    method = "host_time" if device_for(cfg) == "cpu" else "cuda_event"
    if args.timing and args.timing != method:
        raise UsageError(f"--timing {args.timing} does not apply: benchmark times with {method} on this run "
                         f"({'the cpu test mode' if method == 'host_time' else 'a GPU run'})")
    check_final_gate(rd, n)
    k = select_version(rd, n, args.version)
    vdir = rd.vdir(k)
    corr = read_json(vdir / CORRECTNESS_JSON)
    tolerance = corr.get("tolerance") or cfg.tolerance
    versions = [j for j in range(n + 1) if rd.vdir(j).is_dir()]
    for j in sorted({k, *versions}):
        static_check.check_kernel_source(rd.kernel_file(j))
    # the best is chosen from every version's row of this run; the A/B pairs come from the same rounds, free
    timed = args.all_versions or len(versions) <= AB_ALWAYS_MAX_VERSIONS or args.version == "best"
    spec = {
        "run_root": str(rd.root), "cfg": cfg.to_json(), "device": device_for(cfg), "tolerance": tolerance,
        "solution": {"version": f"v{k}", "kernel": str(rd.kernel_file(k))},
        "versions": [{"version": f"v{j}", "kernel": str(rd.kernel_file(j))} for j in versions] if timed else [],
        "ab": [[f"v{j}", f"v{j + 1}"] for j in versions[:-1] if j + 1 in versions] if timed else [],
        "baselines": baselines, "warmup": warmup, "trials": trials,
        "libraries": {str(rd.kernel_file(j)): libraries.stored(rd.root, f"v{j}", rd.kernel_file(j), device_for(cfg),
                                                               cfg.gpu)
                      for j in sorted({k, *versions})},  # what each version's correctness built: not built again
        "discard_first": args.discard_first,
        # slow calls (8 GiB each) make the run's counts take minutes: cut to a budget unless counts were asked
        **({"budget_s": None, "baseline_budget_s": None} if asked else
           {"budget_s": ROUNDS_BUDGET_S, "baseline_budget_s": BASELINE_BUDGET_S}),
    }
    progress(f"benchmarking {f'v0..v{versions[-1]} (the best is chosen from their times here)' if args.version == 'best' else f'v{k} (as named)'} "
             f"against {', '.join(baselines) or 'no baselines'}; {len(spec['ab'])} A/B transition(s)")
    # benchmark.json and benchmark.md are replaced only when a new benchmark has been measured: a refusal,
    # a crash or a timeout leaves the earlier pair as it was (it keeps its own "created" time)
    earlier = "; benchmark.json and benchmark.md are left as they were" if rd.benchmark_json.exists() else ""
    try:
        result = measure_all(spec, cfg, float(cfg.timeout_s))
    except KernelLoopError as exc:
        exc.args = (str(exc) + earlier,)
        raise
    want = {"warmup": warmup, "trials": trials}
    ran = result.get("rounds") or want  # the versions' rounds; a baseline's own in its item (each row's n says it)
    cut = [r for r in (ran, *(it.get("rounds") for it in result["items"])) if r and r != want]
    timing = {"method": method, "warmup": ran["warmup"], "trials": ran["trials"], "discard_first": args.discard_first,
              "l2_flush": method == "cuda_event", "order": "rounds",
              "asked": {**want, "budget_s": ROUNDS_BUDGET_S, "baseline_budget_s": BASELINE_BUDGET_S} if cut else None}
    env = read_json(rd.env_json) if rd.env_json.exists() else None
    ncu_us = {f"v{j}": ncu_bound(sidecars.load(rd.vdir(j) / NCU_JSON)) for j in versions}
    ncu_us["solution"] = ncu_us.get(f"v{k}")
    bench = finish(result, version=f"v{k}", selection="best" if args.version == "best" else "explicit",
                   timing=timing, tolerance=tolerance, env=env, ncu_us=ncu_us, same_as=same_bytes(rd, versions),
                   limits={f"v{j}": limit_notes(rd.vdir(j)) for j in versions})
    write_outputs(rd.root, bench)
    # the report's chart, drawn here where matplotlib is (the GPU machine): a report rendered where it is missing
    # keeps it, since it shows these very numbers
    loop = [(f"v{j}", event_median(sidecars.load(rd.vdir(j) / NCU_JSON))) for j in range(n + 1)]
    skipped = draw_chart(rd.root / FINAL_REPORT_PNG, bench, loop, cfg.to_json().get("kernel"))
    if skipped is None:
        progress(f"drew {FINAL_REPORT_PNG} (the report keeps it where matplotlib is missing)")
    print(rd.benchmark_json)
    for f in bench["flags"]:
        warn(f)
    sol, name = next(r for r in bench["rows"] if r["name"] == "solution"), bench["version"]
    if not (sol["correct"] and sol["correct_after_timing"]):
        raise MeasuredFailure(f"{name} failed in the benchmark: {sol.get('error') or sol.get('why')}")
    if sol.get("invalid"):
        raise MeasuredFailure(f"{name}'s benchmark time is invalid: {sol['invalid']}")
    return 0


def other_card_flag(result: dict[str, Any], env: dict[str, Any] | None) -> str | None:
    """A benchmark on another card than init's (the demo re-times an H200's example on a user's GPU), flagged."""
    card, here = ((env or {}).get("gpu") or {}).get("name"), (result.get("device") or {}).get("name") or "cpu"
    return None if not card or here in (card, "cpu") or here.startswith("cuda") else (
        f"timed on an {here}, not on the run's {card} (init measured its peaks there, and profile the versions' ncu "
        f"figures): the roofline's percentages use the {card}'s peaks")


def limit_notes(vdir: Path) -> list[str]:
    """The version's correctness notes that name a limit of the solution itself (its output carries no gradient
    where Model's does: an agent's trial saw it in correctness.md and nowhere in the report)."""
    corr = sidecars.load(vdir / CORRECTNESS_JSON) or {}
    notes = [n for s in corr.get("shapes") or [] for n in s.get("notes") or []]
    return [NO_GRADIENT_NOTE] if NO_GRADIENT_NOTE in notes else []


def same_bytes(rd: RunDir, versions: list[int]) -> dict[str, str]:
    """{vJ: the earliest earlier version whose kernel file has the same bytes} (a revert, for example)."""
    first: dict[str, str] = {}
    out = {}
    for j in versions:
        digest = sha256_file(rd.kernel_file(j))
        if digest in first:
            out[f"v{j}"] = first[digest]
        else:
            first[digest] = f"v{j}"
    return out


def ncu_bound(ncu: dict[str, Any] | None) -> float | None:
    """A version's summed ncu duration from its ncu.json, as a bound on its event time (timecheck.ncu_bound); of a
    census that read the call's first launches only, their sum (a lower bound of the call's)."""
    if not ncu:
        return None
    state = ncu.get("gpu_state") or {}
    summed = (ncu.get("metrics") or {}).get("duration_us")
    if summed is None:
        summed = (ncu.get("sums") or {}).get("duration_at_least_us")
    return timecheck.ncu_bound(summed,
                               state.get("ncu_clock_control", (ncu.get("tool") or {}).get("clock_control")),
                               state.get("ncu_sm_clock_hz"), state.get("sm_clock_mhz"))


def measure_all(spec: dict[str, Any], cfg, timeout: float) -> dict[str, Any]:
    """The judge's benchmark: the kernels' worker, then the baselines' worker (which imports no kernel file)."""
    with judge_tmpdir() as scratch:
        outcome = run_judge("benchmark", spec, timeout, env=scratch)
    outcome.raise_usage()
    if outcome.timed_out:
        raise MeasuredFailure(f"the benchmark ran past run.json timeout_s ({cfg.timeout_s} s) and was "
                              "stopped; lower --trials or raise timeout_s")
    res = outcome.checked("the benchmark")
    items = [i for i in res["items"]]
    kernels = [i for i in items if i["name"] == "solution" or i["name"].startswith("v")]
    base = [i for i in items if i not in kernels]
    return {**res, "items": kernels[:1] + base + kernels[1:]}


def write_outputs(root: Path, bench: dict[str, Any]) -> None:
    write_json(root / "benchmark.json", bench)
    tolerance = describe_tolerances(bench.get("tolerance"), bench.get("tolerance_applied"))
    atomic_write_text(root / "benchmark.md", render("benchmark.md.j2", b=bench, tolerance=tolerance))
    records.append(root, "benchmark", str(bench.get("version") or "-"),
                   **records.run_hashes(root), files=records.files_field(root, ["benchmark.json", "benchmark.md"]))
