"""A version's profile as the loop keeps it: ncu's CSV pages -> ``ncu.json`` (schema 2), ``ncu_summary.md`` and
``ncu_details.md``.

``build_profile`` parses the detailed pages (and the census, for a call of many kernels: ``inventory``), maps
every kernel's metrics to KEYs, classifies each, names the focus kernel, sums the whole call, and checks the
CUDA-event time against ncu's sum; ``write_profile_artifacts`` writes the three files.  Pure: no GPU, no ncu
(tests and the KBS fixtures run it on recorded pages).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..common import MeasuredFailure, atomic_write_text, write_json
from ..gpustate import slowdowns
from ..measure.worker import NVTX_RANGE as NVTX_FILTER
from ..templating import render
from ..timecheck import DIFF_WARN, timing_invalid
from . import classify, inventory, metrics, ncu_parse
from .kernel_names import library_note, matrix_work

COVERAGE_WARN = 0.90
SUMMARY_ROWS = 10   # kernels listed by name in ncu_summary.md (the rest in one row)
SUMMARY_RULES = 5   # ncu rule findings in ncu_summary.md, largest estimated speedup first (all in ncu_details.md)
SUMMARY_SYMPTOMS = 5  # symptom tags in ncu_summary.md, in the order classify ranks them (all in ncu_details.md)
RULE_CHARS = 200    # a finding's text in ncu_summary.md (whole in ncu_details.md)
PROTOCOL_FIELDS = ("clock_control", "cache_control", "set", "sections", "gpu")
TOOL_FIELDS = ("ncu_version", "command", "set", "sections", "clock_control", "cache_control")


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
                  context: dict[str, Any], census_csv_text: str | None = None) -> dict[str, Any]:
    """Parse ncu's CSV pages, map metrics, classify, compare with timing -> ncu.json content (schema 2).

    ``timing`` is time_callable's result (or None).  ``context`` may hold version,
    kernel_sha256, kernel_file, kernel_source, defined_kernels, tool, gpu, gpu_state, budget and
    baseline_protocol (v0's protocol(), compared with this one).  ``census_csv_text``: the raw page of
    ncu's census of every launch, when the call had more kernels than the budget (profiling/inventory.py);
    without it the detailed pages hold every launch.  Raises MeasuredFailure when the profile caught no
    kernel or its key counters are missing, NaN or zero.
    """
    parsed = ncu_parse.parse(raw_csv_text, details_csv_text)
    if not parsed:
        raise MeasuredFailure("the profile caught no kernel: nothing ran inside the NVTX range "
                              f"'{NVTX_FILTER}' (does the solution launch GPU work?)")
    warnings: list[str] = []
    records_ = []
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
        records_.append({"name": k["name"], "id": k["id"], "grid": k["grid"], "block": k["block"], "cc": k.get("cc"),
                         "metrics": vals, "metric_sources": sources, "bottleneck": classify.bottleneck(vals),
                         "rules": k["rules"], "symptoms": fired, "not_evaluated": not_eval,
                         "sections": k["sections"], "raw_metrics": _json_safe(k["raw"])})
    defined = list(context.get("defined_kernels") or [])
    if census_csv_text is not None:
        inv = inventory.table(inventory.launches(census_csv_text), defined)
        source_of_inventory = "census"
        if not inv["rows"]:
            raise MeasuredFailure("ncu's census caught no kernel in the measured call")
    else:
        inv = inventory.table([{"name": r["name"], "grid": r["grid"], "block": r["block"],
                                "duration_us": r["metrics"]["duration_us"],
                                "dram_bytes_read": r["metrics"].get("dram_bytes_read"),
                                "dram_bytes_write": r["metrics"].get("dram_bytes_write")} for r in records_], defined)
        source_of_inventory = "profile"
    kernels, stray = inventory.representatives(inv, records_, defined)
    if stray:
        warnings.append(f"ncu's detailed pass profiled {', '.join(inventory.labels(stray))}, which its census did not "
                        + ("reach (the version's own, after the census's first launches): counted as one launch each"
                           if context.get("census_sample") else "list: counted as one launch each, outside the call's sums"))
    total_us = inv["kernel_time_us"]
    sums = dict(inv["sums"], covered_share=min(1.0, sum(k["share"] for k in kernels)))  # a sample's strays add
    sample = context.get("census_sample")  # {"launches": the cap, "counted": the worker's count}: the first launches
    if sample:  # the call's sums are unknown; the sample's time is a lower bound, what the time checks need
        sums.update({key: None for key in inventory.SUM_KEYS}, duration_at_least_us=total_us)
        warnings.append(f"ncu's census read the first {inv['launches']} of the call's {sample['counted']} launches (the "
                        "worker's count; ncu takes about 90 ms a launch, and the run's budget caps the census at "
                        f"{sample['launches']}): the shares are of those launches, and the call's summed duration and "
                        "DRAM bytes are unknown (the event median stands for its time)")
    focus = inventory.focus(kernels)
    whole = {**focus["metrics"], **{key: sums[key] for key in inventory.SUM_KEYS}}

    # Symptoms: per kernel, the version's own kernels first, then by share, the minor kernels' last (after the
    # call's own, multi-kernel); each tag once, from the first.
    symptoms: dict[str, dict[str, Any]] = {}
    small = inventory.minor_labels(kernels)
    for kr in sorted(kernels, key=lambda k: (k["label"] in small, k["owner"] != "own", -k["share"])):
        for s in kr["symptoms"]:
            symptoms.setdefault(s["tag"], {**s, "kernel": kr["name"], "label": kr["label"], "owner": kr["owner"],
                                           "share": kr["share"]} | ({"minor": True} if kr["label"] in small else {}))
    sym_list = [s for s in symptoms.values() if not s.get("minor")]
    minor_tags = [s for s in symptoms.values() if s.get("minor")]
    if inv["launches"] > 1:
        sym_list.append({"tag": "multi-kernel", "metrics": {"duration_us": total_us},
                         "thresholds": {"kernel launches in one call": "> 1"}, "source": "metrics", "kernel": None,
                         "why": (f"{sample['counted']} kernel launches (the worker's count; {len(inv['rows'])} "
                                 f"kernels in ncu's census of the first {inv['launches']})" if sample else
                                 f"{inv['launches']} kernel launches ({len(inv['rows'])} kernels)")
                                + " ran for one solution call"})
    sym_list += minor_tags

    timing_out = None
    if timing:
        timing_out = _timing_block(timing)
        ev = timing.get("median")
        whole["event_median_us"] = ev
        if _finite(ev) and ev > 0 and not sample:
            ratio = total_us / ev
            if ratio < COVERAGE_WARN:
                warnings.append(
                    f"the call's kernels ({total_us:.2f} us by ncu) cover only {100 * ratio:.0f}% of the event-timed "
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
        "schema": 2,
        "version": context.get("version"),
        "kernel_file": context.get("kernel_file"),
        "kernel_sha256": context.get("kernel_sha256"),
        "tool": tool,
        "gpu": gpu,
        "gpu_state": gpu_state,
        "kernels": kernels,
        "inventory": {"source": source_of_inventory, "launches": inv["launches"], "kernel_time_us": total_us,
                      "sampled_of": sample["counted"] if sample else None,
                      "budget": context.get("budget"),
                      "rows": [{f: r[f] for f in ("label", "name", "owner", "launches", "time_us", "share")}
                               | {"configs": len(r["configs"]), "profiled": r["label"] in {k["label"] for k in kernels}}
                               for r in inv["rows"]]},
        "sums": sums,
        "focus": {f: focus[f] for f in ("label", "name", "owner", "share")} | {"why": focus["why"]},
        "metrics": whole,
        "timing": timing_out,
        "bottleneck": focus["bottleneck"],
        "bottleneck_why": classify.bottleneck_why(focus["metrics"], focus["bottleneck"]),
        "bottleneck_level": (classify.memory_level(focus["metrics"]) if focus["bottleneck"] == "memory-bound"
                             else None),
        "symptoms": sym_list,
        "not_evaluated": focus["not_evaluated"],
        "warnings": warnings,
        "library_fallback": library_note([r["name"] for r in inv["rows"]], defined,
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


SUMMARY_BYTES = 7_500  # ncu_summary.md's most: past it, fewer rows and shorter texts (every one whole in ncu_details.md)
# (kernel rows, symptom tags, rule findings, a finding's characters, a warning's characters, warnings) from the first
# rung on; seen on the H100: 35_LSTM's summary at the first rung was 9,482 bytes (stalls, GPU state, cuDNN's findings)
SUMMARY_RUNGS = ((SUMMARY_ROWS, SUMMARY_SYMPTOMS, SUMMARY_RULES, RULE_CHARS, 0, 99), (8, 4, 4, 160, 400, 8),
                 (6, 3, 3, 120, 240, 5), (4, 2, 2, 80, 160, 3), (3, 1, 1, 60, 120, 2))


def _cut(text: str, chars: int) -> str:
    return text if not chars or len(text) <= chars else text[:chars].rsplit(" ", 1)[0] + " ... (whole in ncu_details.md)"


def render_summary(profile: dict[str, Any]) -> str:
    """ncu_summary.md: at the first rung of SUMMARY_RUNGS whose text fits SUMMARY_BYTES (the last rung's text
    otherwise), whatever the number of kernels, symptoms, findings and warnings."""
    cats = metrics.by_category()
    cats.pop("warp stalls")
    found = sorted(((k["label"], r) for k in profile["kernels"] for r in k["rules"]),
                   key=lambda nr: -(nr[1]["est_speedup_pct"] or 0.0))
    text = ""
    every = profile.get("warnings") or []
    for rows, symptoms, rules, rule_chars, warn_chars, warns in SUMMARY_RUNGS:
        text = render("ncu_summary.md.j2", p=profile, cats=cats, keys=metrics.KEYS,
                      rule_rows=[(n, {**r, "text": _cut(r["text"], rule_chars)}) for n, r in found[:rules]],
                      rows_shown=rows, symptoms_shown=symptoms, major=[s for s in profile["symptoms"] if not s.get("minor")],
                      minor=[s for s in profile["symptoms"] if s.get("minor")], minor_pct=round(100 * inventory.MINOR_SHARE),
                      warnings=[_cut(w, warn_chars) for w in every[:warns]] + (
                          [f"{len(every) - warns} more warnings: in ncu_details.md"] if len(every) > warns else []),
                      unevaluated=[n.split(":", 1)[0] for n in profile.get("not_evaluated") or []],
                      stalls=_top_stalls(profile["metrics"]), warp_latency=profile["metrics"].get("warp_latency_cycles"))
        if len(text.encode()) <= SUMMARY_BYTES:
            break
    return text


def render_details(profile: dict[str, Any]) -> str:
    return render("ncu_details.md.j2", p=profile, raw_groups=_raw_groups, keys=metrics.KEYS)


def write_profile_artifacts(vdir: Path, profile: dict[str, Any]) -> list[Path]:
    """Write vdir/ncu.json, ncu_summary.md and ncu_details.md; returns their paths."""
    vdir = Path(vdir)
    out = [vdir / "ncu_summary.md", vdir / "ncu_details.md", vdir / "ncu.json"]
    atomic_write_text(out[0], render_summary(profile))
    atomic_write_text(out[1], render_details(profile))
    write_json(out[2], profile)
    return out
