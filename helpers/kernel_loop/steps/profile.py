"""``profile <out>``: Nsight Compute profile and CUDA-event timing of the current version.

Steps: refuse unless correctness passed for the kernel as it is now; one judge process
(``measure.judge``, mode ``profile``) times the solution with CUDA events in a worker (every call
poisoned, several verified at random, then a call on inputs never seen), and runs it under ``ncu`` with
the measured call inside the NVTX range ``kl_measure`` (warmup and autotuning stay outside; every call
verified): once, with full sections for every launch, or, for a call of more kernels than the run's
budget, twice: ncu's census of every launch, then full sections for the kernels chosen from it
(``profiling/inventory.py``);
keep ncu's report as ``vK/profile.ncu-rep.gz``, print its raw and details pages to ``vK/ncu_raw.csv`` and
``vK/ncu_details.csv`` (the census to ``vK/ncu_census.csv.gz``); build ``vK/ncu.json``,
``vK/ncu_summary.md`` and ``vK/ncu_details.md`` (``profiling/ncu_json.py``, pure); record their hashes
in measured.sha256.
"""

from __future__ import annotations

import argparse
import gzip
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
    atomic_write_bytes,
    atomic_write_text,
    atomic_write_with,
    judge_tmpdir,
    progress,
    read_json,
    sha256_file,
    step,
    warn,
)
from ..config import RunConfig
from ..measure import libraries
from ..measure.session import run_judge
from ..measure.worker import NVTX_RANGE
from ..profiling import inventory, ncu_parse
from ..profiling.kernel_names import defined_kernels, library_kernels
from ..profiling.ncu_json import build_profile, protocol, write_profile_artifacts
from ..rundir import RunDir
from ..sidecars import (
    CORRECTNESS_JSON,
    NCU_CENSUS_CSV,
    NCU_DETAILS_CSV,
    NCU_JSON,
    NCU_RAW_CSV,
    NCU_REPORT,
    NCU_REPORT_PLAIN,
)
from ..timecheck import floor_invalid

NVTX_FILTER = NVTX_RANGE  # a start/end range (process-wide: kernels launched from any thread), so no trailing slash
CLOCK_CHOICES = ("base", "none")
CACHE_CHOICES = ("all", "none")


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


def _compress(src: Path, dest: Path) -> None:
    """gzip ``src`` into ``dest``, written whole or not at all (a report of tens of MB packs about 8x; ``gunzip
    -k`` gives the file Nsight Compute opens)."""
    def write(raw) -> None:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz, open(src, "rb") as fh:
            shutil.copyfileobj(fh, gz, 1 << 20)

    atomic_write_with(dest, write)


def census_command(ncu: str, ncfg: dict[str, Any], report: Path) -> list[str]:
    """ncu's census of the measured call: every launch, with the few metrics of profiling.inventory (one
    pass each), under the run's clock control, each launch finding the L2 as the launches before it left it
    (``--cache-control none``), as in the timed call: its sum bounds the event time (timecheck), and flushed
    before each of a network's hundreds of small launches it did not (ModelNew = Model: GoogleNet 11% and
    ResNet18 13% over their event medians on the H100, their activations read from DRAM at every launch)."""
    cmd = [ncu, "--nvtx", "--nvtx-include", NVTX_FILTER, "--metrics", ",".join(inventory.CENSUS_METRICS)]
    if ncfg.get("clock_control"):
        cmd += ["--clock-control", ncfg["clock_control"]]
    return cmd + ["--cache-control", "none", "-o", str(report.with_suffix("")), "-f"]


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
    census = timed.get("census")
    if census and "No kernels were profiled" in (ncu.get("output_tail") or ""):
        raise MeasuredFailure(f"ncu's census saw {census['launches']} launches, but its detailed pass matched none of "
                              f"the kernels chosen from it ({', '.join(census['chosen'])}) with the filter "
                              f"{' '.join(census['filter'])}: a kernel name ncu matches differently than it prints")
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
    spec = {"cfg": cfg.to_json(), "run_root": str(rd.root), "kernel": str(kernel), "device": f"cuda:{cfg.gpu}",
            "card": records.check_run_files(rd.root, records.read(rd.root)),
            "libraries": {str(kernel): libraries.stored(rd.root, vdir.name, kernel, cfg.device, cfg.gpu)}}  # kept
    report = vdir / NCU_REPORT
    # everything is made in a temporary folder and moved into vK only when the whole profile succeeded:
    # a failed or refused profile leaves the version's earlier files as they were
    defined = kernels_of(kernel, kernel_sha, vdir)
    with tempfile.TemporaryDirectory(prefix="kl-profile-") as tmp:
        new_report = Path(tmp) / NCU_REPORT_PLAIN
        prefix = ncu_command(ncu, ncfg, new_report)
        census_report = Path(tmp) / "census.ncu-rep"
        spec.update(census_prefix=census_command(ncu, ncfg, census_report), census_report=str(census_report),
                    census_csv=str(Path(tmp) / "census.csv"), defined_kernels=defined)
        with step(f"{vdir.name}: timing with CUDA events ({cfg.warmup} warmup, {cfg.trials} trials, L2 flush), "
                  f"then the run under ncu (--set {ncfg['set']})"):
            timed = measure(dict(spec, ncu_prefix=prefix), timeout)
        ph = timed.get("phases_s") or {}
        census = timed.get("census")
        if {"ready", "timed", "ncu"} <= set(ph):
            more = ", ".join(f"{what} {ph[key]:.1f} s" for key, what in (
                ("timer_ready", "timing worker ready"), ("census", "ncu's census done"),
                ("ncu_ready", "ncu's worker ready"), ("ncu_calls", "calls under ncu done")) if key in ph)
            progress(f"{vdir.name}: the judge was ready after {ph['ready']:.1f} s; the timing run ended at "
                     f"{ph['timed']:.1f} s, the run under ncu at {ph['ncu']:.1f} s ({more})")
        if census:
            said = (f"{census['hint_launches']} kernels (the worker's count; ncu's census read the first "
                    f"{census['launches']})" if census.get("sampled") else f"{census['launches']} kernels (ncu's census)")
            progress(f"{vdir.name}: the call launched {said}; full sections for {len(census['chosen'])} of them: "
                     f"{', '.join(census['chosen'])}")
        if not new_report.is_file():
            raise MeasuredFailure(f"ncu did not write its report:\n{_tail((timed.get('ncu') or {}).get('output_tail') or '')}")
        with step(f"{vdir.name}: ncu --import {report.name} --csv (raw and details pages, in parallel)"):
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {page: pool.submit(ncu_parse.import_page, ncu, new_report, page, timeout) for page in ("raw", "details")}
                pages = {page: f.result() for page, f in futures.items()}

        base_ncu = sidecars.load(rd.vdir(0) / NCU_JSON) if k != 0 else None
        tool = {"ncu_version": ncu_version(ncu), "command": prefix[:prefix.index("-o")], "set": ncfg["set"],
                "sections": ncfg["sections"], "clock_control": ncfg["clock_control"],
                "cache_control": ncfg["cache_control"]}
        context = {"version": vdir.name, "kernel_file": kernel.name, "kernel_sha256": kernel_sha,
                   "kernel_source": kernel.read_text(encoding="utf-8", errors="replace"),
                   "defined_kernels": defined, "budget": ncfg["budget"],
                   "census_sample": ({"launches": census["launches"], "counted": census["hint_launches"]}
                                     if census and census.get("sampled") else None),
                   "tool": tool, "gpu": timed.get("gpu"),
                   "gpu_state": {**(timed.get("gpu_state") or {}), **(timed.get("gpu_state") or {}).get("after", {})},
                   "baseline_protocol": protocol(base_ncu) if base_ncu else None}
        census_text = Path(spec["census_csv"]).read_text(encoding="utf-8") if census else None
        profile = build_profile(pages["raw"], pages["details"], timed["timing"], context, census_text)
        env = read_json(rd.env_json) if rd.env_json.exists() else {}
        floor = floor_invalid(timed.get("output_bytes"), profile["metrics"].get("event_median_us"),
                              ((env or {}).get("peaks") or {}).get("copy_bandwidth_gbps"))
        if floor:
            raise MeasuredFailure(floor)
        profile["inventory"]["census_calls_verified"] = (census or {}).get("calls")
        profile["judge"] = {"verified_calls": timed["timing"].get("verified_calls"),
                            "verified_on_moved_inputs": timed["timing"].get("verified_on_moved_inputs"),
                            "input_sets": timed["timing"].get("input_sets"), "gpu_check": timed.get("gpu_check"),
                            "ncu_calls_verified": (timed.get("ncu") or {}).get("calls"),
                            "worker_isolated": timed.get("worker_isolated"), "isolation_why": timed.get("isolation_why")}
        for page, dest in (("raw", NCU_RAW_CSV), ("details", NCU_DETAILS_CSV)):
            atomic_write_text(vdir / dest, pages[page])
        if census_text is not None:  # every launch of the call: kept compressed (thousands of rows for an RNN)
            atomic_write_bytes(vdir / NCU_CENSUS_CSV, gzip.compress(census_text.encode("utf-8"), mtime=0))
        else:
            (vdir / NCU_CENSUS_CSV).unlink(missing_ok=True)
        _compress(new_report, report)
        (vdir / NCU_REPORT_PLAIN).unlink(missing_ok=True)  # an earlier profile's, uncompressed
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
    dur = "unknown (ncu's census read part of the call)" if m["duration_us"] is None else f"{m['duration_us']:.2f} us"
    print(f"{vdir.name}: {profile['bottleneck']}{level}; ncu duration {dur}, event median "
          f"{m['event_median_us']:.2f} us; tags: {', '.join(s['tag'] for s in profile['symptoms']) or 'none'}")
    print(f"wrote {', '.join(str(f.relative_to(rd.root)) for f in files)} and {report.relative_to(rd.root)}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profile", help="profile the current version with Nsight Compute",
        description="Profile the current version vK with Nsight Compute (only the measured call, inside the "
        f"NVTX range '{NVTX_FILTER}') and time it with CUDA events. Needs correctness PASS for the kernel as it "
        "is now. Writes vK/ncu.json, ncu_summary.md, ncu_details.md, profile.ncu-rep.gz (gunzip -k it to open "
        "it in Nsight Compute), ncu_raw.csv, ncu_details.csv.",
        epilog="Budget (run.json ncu.budget, set by init --ncu-budget; default kernels=8,share=0.9,configs=16,"
        "census=400): a call that launches at most 'kernels' kernels gets ncu's full sections for every launch. A "
        "larger one (a network, an RNN of thousands of launches) gets two runs under ncu: a census of every launch "
        "(duration and DRAM bytes, each launch finding the L2 as the launches before it left it, as in the timed call: "
        "the call's sums, and ncu_census.csv.gz; ncu takes about 90 ms a launch, so a call "
        "of more than 'census' launches gets a census of its first 'census' only: the shares are of those, and the "
        "call's sums are left unknown), then full sections for the version's own kernels and "
        "the largest shares of the call's time until 'share', at most 'kernels' kernels and 'configs' launch "
        "configurations, one launch of each. ncu_summary.md lists every kernel with its launches, time, share and "
        "owner; the metrics are the focus kernel's (the version's own kernel with the most time). "
        "Exit codes: 0 written, 1 the run or the profile failed, 2 refused (correctness, flags, environment).")
    p.add_argument("out", help="the run directory")
    p.add_argument("--clock-control", dest="clock_control", choices=CLOCK_CHOICES,
                   help="must equal run.json ncu.clock_control (fixed at init)")
    p.add_argument("--cache-control", dest="cache_control", choices=CACHE_CHOICES,
                   help="must equal run.json ncu.cache_control (fixed at init)")
    p.set_defaults(func=run, needs=("jinja2",))  # checked before it writes anything
