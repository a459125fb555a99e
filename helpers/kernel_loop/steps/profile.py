"""``profile <out>``: Nsight Compute profile and CUDA-event timing of the current version.

Steps: refuse unless correctness passed for the kernel as it is now; one judge process
(``measure.judge``, mode ``profile``) times the solution with CUDA events in a worker (every call
poisoned, several verified at random, then a call on inputs never seen), and runs it in a second worker
under ``ncu`` with the measured call inside the NVTX range ``kl_measure`` (warmup and autotuning stay
outside; every call verified);
export ``vK/profile.ncu-rep``, print its raw and details pages to ``vK/ncu_raw.csv`` and
``vK/ncu_details.csv``; parse, map to metric KEYs, classify; write ``vK/ncu.json``,
``vK/ncu_summary.md`` and ``vK/ncu_details.md``; record their hashes in measured.sha256.

``build_profile`` (CSV text -> ncu.json content) and ``write_profile_artifacts`` are pure
enough to run without a GPU (tests, the KBS fixtures).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import gpustate, provenance, records, sidecars, static_check
from ..common import (
    MeasuredFailure,
    UsageError,
    atomic_write_text,
    judge_tmpdir,
    progress,
    read_json,
    sha256_file,
    step,
    warn,
    write_json,
)
from ..config import RunConfig
from ..gpustate import slowdowns
from ..measure.session import run_judge
from ..measure.worker import NVTX_RANGE
from ..profiling import classify, metrics, ncu_parse
from ..profiling.kernel_names import defined_kernels, library_kernels, library_note, matrix_work
from ..rundir import RunDir
from ..sidecars import CORRECTNESS_JSON, NCU_DETAILS_CSV, NCU_JSON, NCU_RAW_CSV, NCU_REPORT
from ..templating import render
from ..timecheck import DIFF_WARN, floor_invalid, timing_invalid

NVTX_FILTER = NVTX_RANGE  # a start/end range (process-wide: kernels launched from any thread), so no trailing slash
CLOCK_CHOICES = ("base", "none")
CACHE_CHOICES = ("all", "none")
COVERAGE_WARN = 0.90
PROTOCOL_FIELDS = ("clock_control", "cache_control", "set", "sections", "gpu")
TOOL_FIELDS = ("ncu_version", "command", "set", "sections", "clock_control", "cache_control")


# --- pure part: CSV -> ncu.json -----------------------------------------------------------------
def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _json_safe(raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: {"value": None if isinstance(e["value"], float) and math.isnan(e["value"]) else e["value"],
                "unit": e["unit"]} for k, e in raw.items()}


def _trust(kernel_name: str, vals: dict[str, Any]) -> None:
    """Refuse a profile whose key counters are missing, NaN or zero."""
    for key in ("duration_us", "sm_throughput_pct", "memory_throughput_pct"):
        v = vals.get(key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            what = "NaN" if v is not None else "missing"
            raise MeasuredFailure(
                f"ncu's {key} for kernel '{kernel_name}' is {what}: the profile cannot be trusted "
                f"(was the SpeedOfLight section collected? see vK/ncu_raw.csv)")
    if vals["duration_us"] <= 0:
        raise MeasuredFailure(f"ncu reports zero duration for kernel '{kernel_name}': the profile cannot be trusted")


def protocol(profile: dict[str, Any]) -> dict[str, Any]:
    tool = profile.get("tool") or {}
    return {"clock_control": tool.get("clock_control"), "cache_control": tool.get("cache_control"),
            "set": tool.get("set"), "sections": tool.get("sections"),
            "gpu": (profile.get("gpu") or {}).get("name")}


def protocol_diff(base: dict[str, Any], cur: dict[str, Any]) -> list[str]:
    return [f"{f} {cur.get(f)!r} vs v0 {base.get(f)!r}" for f in PROTOCOL_FIELDS if base.get(f) != cur.get(f)]


def _timing_block(timing: dict[str, Any]) -> dict[str, Any]:
    out = {k: timing.get(k) for k in ("method", "warmup", "trials", "l2_flush")}
    for k in ("median", "p20", "p25", "p75", "p80", "mean", "min", "max", "std"):
        out[f"{k}_us"] = timing.get(k)
    out["n"] = timing.get("n")
    out["host_overhead_us"] = timing.get("host_overhead_us")
    out["device_delay_us"] = timing.get("device_delay_us")
    out["samples_us"] = timing.get("samples_us")
    return out


def build_profile(raw_csv_text: str | None, details_csv_text: str | None, timing: dict[str, Any] | None,
                  context: dict[str, Any]) -> dict[str, Any]:
    """Parse ncu's CSV pages, map metrics, classify, compare with timing -> ncu.json content.

    ``timing`` is time_callable's result (or None).  ``context`` may hold version,
    kernel_sha256, kernel_file, tool, gpu, gpu_state and baseline_protocol (v0's protocol(),
    compared with this one).  Raises MeasuredFailure when the profile caught no kernel or its
    key counters are missing, NaN or zero.
    """
    parsed = ncu_parse.parse(raw_csv_text, details_csv_text)
    if not parsed:
        raise MeasuredFailure("the profile caught no kernel: nothing ran inside the NVTX range "
                              f"'{NVTX_FILTER}' (does the solution launch GPU work?)")
    warnings: list[str] = []
    kernels = []
    for k in parsed:
        vals, sources = metrics.extract(k)
        _trust(k["name"], vals)
        for key, v in vals.items():
            if isinstance(v, float) and math.isnan(v):
                warnings.append(f"{key} of kernel '{k['name']}' is NaN in ncu's output; shown as null")
                vals[key] = None
        source = context.get("kernel_source")
        fired, not_eval = classify.symptoms(vals, rules=k["rules"], cc=k.get("cc"),
                                            matrix=matrix_work(k["name"], source) if source is not None else None)
        kernels.append({"name": k["name"], "id": k["id"], "grid": k["grid"], "block": k["block"], "cc": k.get("cc"),
                        "metrics": vals, "metric_sources": sources, "bottleneck": classify.bottleneck(vals),
                        "rules": k["rules"], "symptoms": fired, "not_evaluated": not_eval,
                        "sections": k["sections"], "raw_metrics": _json_safe(k["raw"])})
    longest = max(kernels, key=lambda kr: kr["metrics"]["duration_us"])
    total_us = sum(kr["metrics"]["duration_us"] for kr in kernels)
    whole = dict(longest["metrics"], duration_us=total_us)

    # Symptoms of the solution: each tag once, from the longest kernel that fired it.
    symptoms: dict[str, dict[str, Any]] = {}
    for kr in sorted(kernels, key=lambda kr: -kr["metrics"]["duration_us"]):
        for s in kr["symptoms"]:
            symptoms.setdefault(s["tag"], {**s, "kernel": kr["name"]})
    order = [c.tag for c in classify.CHECKS]
    sym_list = sorted(symptoms.values(), key=lambda s: order.index(s["tag"]))
    if len(kernels) > 1:
        sym_list.append({"tag": "multi-kernel", "metrics": {"duration_us": total_us},
                         "thresholds": {"kernels profiled": "> 1"}, "source": "metrics", "kernel": None,
                         "why": f"{len(kernels)} kernels ran for one solution call"})

    timing_out = None
    if timing:
        timing_out = _timing_block(timing)
        ev = timing.get("median")
        whole["event_median_us"] = ev
        if _finite(ev) and ev > 0:
            ratio = total_us / ev
            if ratio < COVERAGE_WARN:
                warnings.append(
                    f"the profiled kernels ({total_us:.2f} us) cover only {100 * ratio:.0f}% of the event-timed "
                    f"call ({ev:.2f} us): host overhead, gaps between launches, or work outside the NVTX range")
            elif abs(total_us - ev) / ev > DIFF_WARN:
                warnings.append(
                    f"ncu duration {total_us:.2f} us differs from the CUDA-event median {ev:.2f} us by "
                    f"{100 * (total_us - ev) / ev:+.0f}% (ncu's clock control and cache flushing change "
                    "the duration; compare versions under one protocol)")
    else:
        whole["event_median_us"] = None

    tool = {f: None for f in TOOL_FIELDS} | dict(context.get("tool") or {})
    gpu = {f: v for f, v in (context.get("gpu") or {}).items() if v is not None}
    first = parsed[0]["raw"]
    gpu.setdefault("name", (first.get("device__attribute_display_name") or {}).get("value"))
    gpu.setdefault("cc", parsed[0].get("cc"))
    gpu.setdefault("sm_count", whole.get("sm_count"))
    gpu_state = dict(context.get("gpu_state") or {})
    gpu_state.setdefault("ncu_clock_control", tool.get("clock_control"))
    gpu_state["ncu_sm_clock_hz"] = whole.get("sm_clock_hz")
    slow = slowdowns(gpu_state.get("after"))
    if slow:
        warnings.append(f"the GPU reported clock slowdowns during timing: {', '.join(slow)}")
    invalid = timing_invalid(total_us, whole.get("event_median_us"), tool.get("clock_control"),
                             whole.get("sm_clock_hz"), gpu_state.get("sm_clock_mhz"))
    if invalid:
        raise MeasuredFailure(invalid)

    profile = {
        "schema": 1,
        "version": context.get("version"),
        "kernel_file": context.get("kernel_file"),
        "kernel_sha256": context.get("kernel_sha256"),
        "tool": tool,
        "gpu": gpu,
        "gpu_state": gpu_state,
        "kernels": kernels,
        "metrics": whole,
        "timing": timing_out,
        "bottleneck": classify.bottleneck(whole),
        "bottleneck_why": classify.bottleneck_why(whole, classify.bottleneck(whole)),
        "bottleneck_level": classify.memory_level(whole) if classify.bottleneck(whole) == "memory-bound" else None,
        "symptoms": sym_list,
        "not_evaluated": longest["not_evaluated"],
        "warnings": warnings,
        "library_fallback": library_note([k["name"] for k in kernels], context.get("defined_kernels") or [],
                                         context.get("kernel_file") or "the kernel file"),
    }
    base = context.get("baseline_protocol")
    if base:
        diff = protocol_diff(base, protocol(profile))
        if diff:
            warnings.append("measured under a different protocol than v0: " + "; ".join(diff))
    return profile


def _top_stalls(m: dict[str, Any], n: int = 5) -> list[tuple[str, float]]:
    stalls = [(k, v) for k, v in m.items() if k.startswith("stall_") and _finite(v)]
    return sorted(stalls, key=lambda kv: -kv[1])[:n]


def _raw_groups(raw: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, ent in sorted(raw.items()):
        unit = name.split("__", 1)[0] if "__" in name else "other"
        groups.setdefault(unit, []).append((name, ent))
    return groups


def render_summary(profile: dict[str, Any]) -> str:
    cats = metrics.by_category()
    cats.pop("warp stalls")
    rule_rows = [(k["name"], r) for k in profile["kernels"] for r in k["rules"]]
    rule_rows.sort(key=lambda nr: -(nr[1]["est_speedup_pct"] or 0.0))
    return render("ncu_summary.md.j2", p=profile, cats=cats, keys=metrics.KEYS, rule_rows=rule_rows,
                  stalls=_top_stalls(profile["metrics"]), warp_latency=profile["metrics"].get("warp_latency_cycles"))


def render_details(profile: dict[str, Any]) -> str:
    return render("ncu_details.md.j2", p=profile, raw_groups=_raw_groups)


def write_profile_artifacts(vdir: Path, profile: dict[str, Any]) -> list[Path]:
    """Write vdir/ncu.json, ncu_summary.md and ncu_details.md; returns their paths."""
    vdir = Path(vdir)
    out = [vdir / "ncu_summary.md", vdir / "ncu_details.md", vdir / "ncu.json"]
    atomic_write_text(out[0], render_summary(profile))
    atomic_write_text(out[1], render_details(profile))
    write_json(out[2], profile)
    return out


# --- GPU part: child processes and ncu --------------------------------------------------------
def _tail(text: str, n: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def find_ncu() -> str:
    for cand in (os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    raise UsageError("Nsight Compute (ncu) was not found: install it (CUDA toolkit) or put it on PATH, "
                     "or set NCU=/path/to/ncu")


def ncu_version(ncu: str) -> str | None:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Version\s+(\S+)", out)
    return m.group(1) if m else (out.strip().splitlines() or [None])[-1]


def ncu_command(ncu: str, ncfg: dict[str, Any], report: Path) -> list[str]:
    """The ncu command line that prefixes the child (``-o`` takes the report path without .ncu-rep)."""
    cmd = [ncu, "--nvtx", "--nvtx-include", NVTX_FILTER, "--set", ncfg["set"]]
    for s in ncfg["sections"]:
        cmd += ["--section", s]
    if ncfg.get("clock_control"):
        cmd += ["--clock-control", ncfg["clock_control"]]
    if ncfg.get("cache_control"):
        cmd += ["--cache-control", ncfg["cache_control"]]
    cmd += [str(a) for a in ncfg.get("extra_args") or []]
    return cmd + ["-o", str(report.with_suffix("")), "-f"]


def ncu_import(ncu: str, report: Path, page: str, timeout: float) -> str:
    cmd = [ncu, "--import", str(report), "--csv", "--page", page, "--print-units", "base"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MeasuredFailure(f"'{' '.join(cmd)}' did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        raise MeasuredFailure(f"'{' '.join(cmd)}' failed (exit {proc.returncode}):\n{_tail(proc.stderr + proc.stdout)}")
    return proc.stdout


def check_ncu_output(returncode: int | None, out: str) -> None:
    """Turn ncu's failure modes into clear errors: permission, nothing profiled, ncu's own failure."""
    if "ERR_NVGPUCTRPERM" in out:
        raise UsageError("ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): the driver "
                         "allows it only for administrators. Run as root or set the module option "
                         "NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM)")
    if "No kernels were profiled" in out:
        raise MeasuredFailure("ncu profiled no kernel (\"No kernels were profiled\"): nothing launched inside "
                              f"the NVTX range '{NVTX_FILTER}'. Check that run_kernel/solve launches GPU work.\n"
                              + _tail(out))
    if returncode != 0:
        raise MeasuredFailure(f"ncu failed (exit {returncode}):\n{_tail(out)}")


def ncu_settings(cfg: RunConfig, args: argparse.Namespace) -> dict[str, Any]:
    n = asdict(cfg.ncu)
    for flag in ("clock_control", "cache_control"):
        given = getattr(args, flag, None)
        if given is not None and given != n[flag]:
            raise UsageError(
                f"--{flag.replace('_', '-')} {given} disagrees with run.json ncu.{flag} ({n[flag]!r}): "
                "the protocol is fixed at init so that every version is measured the same way")
    return n


def kernels_of(kernel: Path, kernel_sha: str, vdir: Path) -> list[str]:
    """The kernels a version defines: named in its source, and for a ``.cu`` file also those its built
    library embeds (templates such as CUTLASS's ``cutlass::device_kernel``), the library being the one its
    correctness PASS built from these bytes (correctness.json)."""
    names = defined_kernels(kernel.read_text(encoding="utf-8", errors="replace"))
    if kernel.suffix != ".cu" or not (vdir / CORRECTNESS_JSON).is_file():
        return names
    try:
        corr = read_json(vdir / CORRECTNESS_JSON)
        lib = (corr.get("build") or {}).get("library")
        if not lib or corr.get("kernel_sha256") != kernel_sha:
            return names
        return list(dict.fromkeys(names + library_kernels(Path(lib).read_bytes())))
    except (OSError, ValueError, AttributeError, TypeError, UsageError):  # no library (any more), a damaged sidecar
        return names


def _check_correctness(rd: RunDir, cfg: RunConfig, vdir: Path, kernel: Path) -> None:
    """Profile only a kernel whose correctness PASS is on record: for this kernel, on this run's GPU."""
    if cfg.device == "cpu":
        raise UsageError("this run uses the cpu test mode (run.json device cpu): profile needs a GPU run")
    records.require_correctness(rd.root, vdir.name, kernel, cfg.device, cfg.gpu)


def measure(spec: dict, timeout: float) -> dict[str, Any]:
    """The judge's timing run and run under ncu; the statistics are recomputed here from the raw samples
    (the worker only measured them)."""
    from ..timing import summarize

    with judge_tmpdir() as scratch:
        outcome = run_judge("profile", spec, timeout, env=scratch)
    outcome.raise_usage()
    res = outcome.result or {}
    ncu = res.get("ncu") or {}
    if "ERR_NVGPUCTRPERM" in (outcome.output_tail + (ncu.get("output_tail") or "")):
        check_ncu_output(ncu.get("returncode"), outcome.output_tail)
    timed = outcome.checked("the profile")
    check_ncu_output(ncu.get("returncode"), ncu.get("output_tail") or "")
    timed["timing"].update(summarize(timed["timing"]["samples_us"]))
    return timed


def run(args: argparse.Namespace) -> int:
    rd = RunDir.open(args.out)
    cfg = rd.config()
    k = rd.current_version()
    vdir = rd.vdir(k)
    kernel = rd.kernel_file(k)
    _check_correctness(rd, cfg, vdir, kernel)
    static_check.check_kernel_source(kernel)
    kernel_sha = sha256_file(kernel)
    ncfg = ncu_settings(cfg, args)
    if gpustate.gpu_visible() is False:  # said before a missing ncu, which would not be the real cause
        raise UsageError(f"no NVIDIA GPU is visible on this machine, and profile measures on cuda:{cfg.gpu}: run it "
                         "where the run's GPU is (move the run directory there whole)")
    ncu = find_ncu()
    timeout = float(cfg.timeout_s)
    spec = {"cfg": cfg.to_json(), "run_root": str(rd.root), "kernel": str(kernel), "device": f"cuda:{cfg.gpu}"}
    report = vdir / NCU_REPORT
    # everything is made in a temporary folder and moved into vK only when the whole profile succeeded:
    # a failed or refused profile leaves the version's earlier files as they were
    with tempfile.TemporaryDirectory(prefix="kl-profile-") as tmp:
        new_report = Path(tmp) / NCU_REPORT
        prefix = ncu_command(ncu, ncfg, new_report)
        with step(f"{vdir.name}: timing with CUDA events ({cfg.warmup} warmup, {cfg.trials} trials, L2 flush), "
                  f"then the run under ncu (--set {ncfg['set']})"):
            timed = measure(dict(spec, ncu_prefix=prefix), timeout)
        ph = timed.get("phases_s") or {}
        if {"ready", "timed", "ncu"} <= set(ph):
            more = ", ".join(f"{what} {ph[key]:.1f} s" for key, what in (
                ("timer_ready", "timing worker ready"), ("ncu_ready", "ncu's worker ready"),
                ("ncu_calls", "calls under ncu done")) if key in ph)
            progress(f"{vdir.name}: the judge was ready after {ph['ready']:.1f} s; the timing run ended at "
                     f"{ph['timed']:.1f} s, the run under ncu at {ph['ncu']:.1f} s ({more})")
        if not new_report.is_file():
            raise MeasuredFailure(f"ncu did not write its report:\n{_tail((timed.get('ncu') or {}).get('output_tail') or '')}")
        with step(f"{vdir.name}: ncu --import {report.name} --csv (raw and details pages, in parallel)"):
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {page: pool.submit(ncu_import, ncu, new_report, page, timeout) for page in ("raw", "details")}
                pages = {page: f.result() for page, f in futures.items()}

        base_ncu = sidecars.load(rd.vdir(0) / NCU_JSON) if k != 0 else None
        tool = {"ncu_version": ncu_version(ncu), "command": prefix[:prefix.index("-o")], "set": ncfg["set"],
                "sections": ncfg["sections"], "clock_control": ncfg["clock_control"],
                "cache_control": ncfg["cache_control"]}
        context = {"version": vdir.name, "kernel_file": kernel.name, "kernel_sha256": kernel_sha,
                   "kernel_source": kernel.read_text(encoding="utf-8", errors="replace"),
                   "defined_kernels": kernels_of(kernel, kernel_sha, vdir),
                   "tool": tool, "gpu": timed.get("gpu"),
                   "gpu_state": {**(timed.get("gpu_state") or {}), **(timed.get("gpu_state") or {}).get("after", {})},
                   "baseline_protocol": protocol(base_ncu) if base_ncu else None}
        profile = build_profile(pages["raw"], pages["details"], timed["timing"], context)
        env = read_json(rd.env_json) if rd.env_json.exists() else {}
        floor = floor_invalid(timed.get("output_bytes"), profile["metrics"].get("event_median_us"),
                              ((env or {}).get("peaks") or {}).get("copy_bandwidth_gbps"))
        if floor:
            raise MeasuredFailure(floor)
        profile["judge"] = {"verified_calls": timed["timing"].get("verified_calls"),
                            "verified_on_moved_inputs": timed["timing"].get("verified_on_moved_inputs"),
                            "input_sets": timed["timing"].get("input_sets"), "gpu_check": timed.get("gpu_check"),
                            "ncu_calls_verified": (timed.get("ncu") or {}).get("calls"),
                            "worker_isolated": timed.get("worker_isolated"), "isolation_why": timed.get("isolation_why")}
        for page, dest in (("raw", NCU_RAW_CSV), ("details", NCU_DETAILS_CSV)):
            atomic_write_text(vdir / dest, pages[page])
        shutil.move(str(new_report), str(report))
    if sha256_file(kernel) != kernel_sha:
        raise UsageError(f"{kernel} changed while it was being profiled; run correctness and profile again")
    files = write_profile_artifacts(vdir, profile)
    provenance.record(vdir, [*files, kernel, rd.run_json])
    records.append(rd.root, "profile", vdir.name, result="ok", device=f"cuda:{cfg.gpu}",
                   gpu=(timed.get("gpu") or {}).get("name") or "-", kernel=kernel_sha,
                   **records.run_hashes(rd.root), files=records.files_field(vdir, [f.name for f in files]))
    for w in profile["warnings"]:
        warn(w)
    if profile.get("library_fallback"):
        warn(profile["library_fallback"])
    m = profile["metrics"]
    level = f" at {profile['bottleneck_level']}" if profile.get("bottleneck_level") else ""
    print(f"{vdir.name}: {profile['bottleneck']}{level}; ncu duration {m['duration_us']:.2f} us, event median "
          f"{m['event_median_us']:.2f} us; tags: {', '.join(s['tag'] for s in profile['symptoms']) or 'none'}")
    print(f"wrote {', '.join(str(f.relative_to(rd.root)) for f in files)} and {report.relative_to(rd.root)}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profile", help="profile the current version with Nsight Compute",
        description="Profile the current version vK with Nsight Compute (only the measured call, inside the "
        f"NVTX range '{NVTX_FILTER}') and time it with CUDA events. Needs correctness PASS for the kernel as it "
        "is now. Writes vK/ncu.json, ncu_summary.md, ncu_details.md, profile.ncu-rep, ncu_raw.csv, ncu_details.csv.",
        epilog="Exit codes: 0 written, 1 the run or the profile failed, 2 refused (correctness, flags, environment).")
    p.add_argument("out", help="the run directory")
    p.add_argument("--clock-control", dest="clock_control", choices=CLOCK_CHOICES,
                   help="must equal run.json ncu.clock_control (fixed at init)")
    p.add_argument("--cache-control", dest="cache_control", choices=CACHE_CHOICES,
                   help="must equal run.json ncu.cache_control (fixed at init)")
    p.set_defaults(func=run, needs=("jinja2",))  # checked before it writes anything
