"""``report <out>``: render final_report.md (and final_report.png) from the sidecars.

Reads run.json, env.json, every vK's correctness.json / ncu.json / hypothesis
(``hypothesis.load``: the sidecar, or the text's prediction lines) / kbs_queries.jsonl,
and benchmark.json; the section order is documented in references/report_template.md.
``N/A`` marks a null metric, ``unknown`` a value the artifacts do not hold.  A filled
``## Discussion`` section of an existing final_report.md is kept on re-render.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from .. import plan, predictions, provenance, records, templating
from .. import vocab as symptoms
from ..common import (
    UsageError,
    atomic_write_text,
    command,
    progress,
    read_json,
    sha256_file,
    warn,
)
from ..compare import describe_tolerances
from ..profiling.kernel_names import short_name
from ..prose import TODO, load_hypothesis, markdown_section
from ..rundir import RunDir
from ..sidecars import query_hits
from ..templating import MISSING, Missing, dig, fmt, render


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="render final_report.md from the measured sidecars",
        description="Render <out>/final_report.md and final_report.png from run.json, env.json, the versions' "
        "sidecars and benchmark.json (run benchmark first). See references/report_template.md.",
        epilog="Exit codes: 0 written (warnings on stderr when measured files changed afterwards), 2 refused "
               "(no benchmark.json, or a corrupt one).",
    )
    p.add_argument("out", help="run directory")
    p.set_defaults(func=run, needs=("jinja2",))  # checked before it writes anything


def _opt_json(path: Path) -> Any:
    return read_json(path) if path.exists() else MISSING


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _ratio(a: Any, b: Any) -> Any:
    if _num(a) and _num(b) and b:
        return a / b
    if isinstance(a, Missing) or isinstance(b, Missing):
        return MISSING
    return None


def _median(ncu: Any) -> Any:
    if isinstance(ncu, Missing):
        return MISSING
    med = dig(ncu, "timing", "median_us")
    return med if _num(med) else dig(ncu, "metrics", "event_median_us")


def _with_level(ncu: Any) -> Any:
    """The bottleneck class with the memory level that binds, when the profile named one (memory-bound at DRAM)."""
    cls, level = dig(ncu, "bottleneck"), dig(ncu, "bottleneck_level")
    return f"{cls} at {level}" if isinstance(cls, str) and isinstance(level, str) else cls


def kbs_titles(ids: list[str]) -> dict[str, str]:
    """{id: title} through the knowledge base's ``search.get`` when it can be used; the id otherwise."""
    get = None
    try:
        from ..kbs import search

        get = getattr(search, "get", None)
    except Exception:  # the knowledge base is optional for the report
        get = None
    out = {}
    for pid in ids:
        title = None
        if callable(get):
            try:
                page = get(pid)
                title = page.get("title") if isinstance(page, dict) else getattr(page, "title", None)
            except Exception:
                title = None
        out[pid] = title or pid
    return out


def _dims(d: Any) -> Any:
    if isinstance(d, dict):
        return ", ".join(f"{k}={v}" for k, v in d.items())
    return d


def applied_from_correctness(corr: Any) -> dict[str, dict[str, Any]] | None:
    """{output: tolerance} as the best version's correctness check applied it (its first trial's rows)."""
    for shape in dig(corr, "shapes") if isinstance(dig(corr, "shapes"), list) else []:
        for trial in shape.get("trials") or []:
            tols = {o["name"]: o["tolerance"] for o in trial.get("outputs") or []
                    if isinstance(o, dict) and isinstance(o.get("tolerance"), dict) and "atol" in o["tolerance"]}
            if tols:
                return tols
    return None


def config_rows(cfg: dict[str, Any], env: Any, bench: Any = None, applied: Any = None) -> list[tuple[str, Any]]:
    """(label, value) rows of the environment and fixed-configuration table; the tolerance is the one that
    applied to each output (benchmark.json's record, else the best version's correctness.json), never
    run.json's nulls for a dtype default."""
    rows: list[tuple[str, Any]] = [("GPU", dig(env, "gpu", "name"))]
    tools = dig(env, "versions")
    rows += [(str(tool), ver) for tool, ver in (tools.items() if isinstance(tools, dict) else [])]
    tol = dig(cfg, "tolerance")
    extra = dig(cfg, "extra_shapes")
    rows += [
        ("Kernel", dig(cfg, "kernel")), ("Kernel type", dig(cfg, "kernel_type")),
        ("Implementation", dig(cfg, "impl")), ("Dims", _dims(dig(cfg, "dims"))),
        ("Extra shapes checked", "; ".join(_dims(d) for d in extra) or "none" if isinstance(extra, list) else extra),
        ("Seed", dig(cfg, "seed")),
        ("Tolerance", describe_tolerances(tol if isinstance(tol, dict) else None,
                                          (bench.get("tolerance_applied") if isinstance(bench, dict) else None)
                                          or applied)),
        ("Planned iterations", dig(cfg, "iterations")),
        ("Loop timing", f"{fmt(dig(cfg, 'warmup'))} warmup, {fmt(dig(cfg, 'trials'))} trials"),
        ("Nsight Compute set", dig(cfg, "ncu", "set")),
        ("Nsight Compute clock control", dig(cfg, "ncu", "clock_control") or "ncu default"),
    ]
    return rows


BENCH_KEYS = {"version": str, "selection": str, "timing": dict, "rows": list, "speedups": dict, "flags": list}


def _check_bench(bench: dict[str, Any], path: Path) -> None:
    """Refuse a benchmark.json that lacks what the report cites (a corrupt or foreign file)."""
    bad = [k for k, t in BENCH_KEYS.items() if not isinstance(bench.get(k), t)]
    bad += [f"rows[{i}]" for i, r in enumerate(bench.get("rows") or [])
            if not (isinstance(r, dict) and isinstance(r.get("name"), str))]
    if bad:
        raise UsageError(f"{path} is incomplete or corrupt (bad or missing: {', '.join(bad)}): run benchmark again")


DIFF_LINES = 40  # a transition's kernel diff in the report is cut to this many lines


def kernel_diff(rd: RunDir, k: int) -> dict[str, Any] | None:
    """The unified diff of v(k+1)'s kernel against vk's (3 lines of context), cut to DIFF_LINES."""
    try:
        a, b = rd.kernel_file(k), rd.kernel_file(k + 1)
    except UsageError:
        return None
    lines = list(difflib.unified_diff(a.read_text(encoding="utf-8", errors="replace").splitlines(),
                                      b.read_text(encoding="utf-8", errors="replace").splitlines(),
                                      f"v{k}/{a.name}", f"v{k + 1}/{b.name}", lineterm="", n=3))
    changed = sum(1 for ln in lines if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    return {"lines": lines[:DIFF_LINES], "cut": max(0, len(lines) - DIFF_LINES), "changed": changed}


def record_status(rd: RunDir) -> str:
    """One line on the signed records: how many verify, or why they do not."""
    try:
        recs = records.read(rd.root)
    except UsageError as exc:
        return f"do not verify: {exc}"
    if not recs:
        return "none (the run was made before signed records)"
    return f"{len(recs)} signed records verify with key {records.key_id(records.load_key(create=False))}"


def _check_signed_benchmark(rd: RunDir) -> None:
    """benchmark.json/.md must be what the last signed benchmark record names (when the run has records)."""
    try:
        recs = records.read(rd.root, verify=False)  # the gate verifies signatures; this catches hand edits
    except UsageError:
        return
    if not recs:
        return
    last = records.latest(recs, "benchmark")
    if last is None:
        raise UsageError("records.log has no benchmark record: run 'kernel-loop benchmark' before the report")
    for name, digest in last.files().items():
        if not (rd.root / name).is_file() or sha256_file(rd.root / name) != digest:
            raise UsageError(f"{name} changed after kernel-loop benchmark wrote it (records.log line {last.line}): "
                             "the report cites only measured numbers; run benchmark again")


def collect(rd: RunDir) -> dict[str, Any]:
    config = rd.config()
    n = plan.final_version(rd)
    finished = plan.finish_record(rd)
    cfg = config.to_json()  # the template and the configuration table read the JSON view
    bench = read_json(rd.root / "benchmark.json")
    _check_bench(bench, rd.root / "benchmark.json")
    _check_signed_benchmark(rd)
    env = _opt_json(rd.root / "env.json")
    versions = []
    for k in range(n + 1):
        vdir = rd.vdir(k)
        corr, ncu = _opt_json(vdir / "correctness.json"), _opt_json(vdir / "ncu.json")
        hyp = load_hypothesis(vdir) if vdir.is_dir() and k < n else None
        metrics = dig(ncu, "metrics")
        versions.append({
            "name": f"v{k}", "exists": vdir.is_dir(), "correctness": dig(corr, "result"),
            "median_us": _median(ncu), "metrics": metrics if isinstance(metrics, dict) else {},
            "mem_sol": dig(ncu, "metrics", "memory_throughput_pct"), "sm_sol": dig(ncu, "metrics", "sm_throughput_pct"),
            "occupancy": dig(ncu, "metrics", "achieved_occupancy_pct"),
            "registers": dig(ncu, "metrics", "registers_per_thread"), "bottleneck": _with_level(ncu),
            "hypothesis": hyp, "hits": query_hits(vdir) if vdir.is_dir() else [],
            "library_fallback": (ncu or {}).get("library_fallback") if isinstance(ncu, dict) else None,
            "ncu": ncu, "corr": corr,
        })
    for v in versions:
        v["speedup_v0"] = _ratio(versions[0]["median_us"], v["median_us"])
    many = many_kernels(versions)
    if many:
        targeted_kernels(versions)

    ab = {(e["from"], e["to"]): e for e in bench.get("ab") or []}
    transitions, cited = [], []
    for k in range(n):
        before, after = versions[k], versions[k + 1]
        hyp = before["hypothesis"] or {}
        scored = [predictions.score_versions(p, _ncu(before), _ncu(after), (before["name"], after["name"]))
                  for p in hyp.get("predictions") or []]
        for sc in scored:
            sc["kernel_cell"] = scored_kernel(sc)
        transitions.append({
            "from": before["name"], "to": after["name"], "has_hypothesis": bool(before["hypothesis"]),
            "single_change": hyp.get("single_change"), "decision_rule": hyp.get("decision_rule"),
            "scorecard": scored, "held": sum(s["status"] == "held" for s in scored),
            "ab": ab.get((before["name"], after["name"])),
            "diff": kernel_diff(rd, k),
        })
        cited += [pid for pid in hyp.get("evidence") or [] if pid not in cited]
    titles = kbs_titles(cited)
    evidence = [{"version": v["name"], "pages": [{"id": pid, "title": titles[pid],
                                                    "returned": pid in v["hits"]}
                                                   for pid in (v["hypothesis"] or {}).get("evidence") or []]}
                for v in versions[:n]]

    # the version benchmark.json names (the best): its profile's symptoms and rules, not the final version's
    named = next((v for v in versions if v["name"] == bench.get("version")), versions[-1])
    last = named["ncu"]
    label_of = {r["name"]: r["label"] for r in predictions.kernel_records(_ncu(named)).values()}
    opportunities = [{"tag": s.get("tag"), "summary": symptoms.SYMPTOMS.get(s.get("tag"), {}).get("summary")
                      or symptoms.BOTTLENECK_CLASSES.get(s.get("tag"), ""), "metrics": s.get("metrics") or {},
                      "why": s.get("why"),
                      "kernel": (s.get("label") or label_of.get(s.get("kernel")) or short_name(str(s["kernel"])))
                      if many and s.get("kernel") else None}
                     for s in (dig(last, "symptoms") if isinstance(dig(last, "symptoms"), list) else [])]
    # ncu's estimate is of its kernel; weighed by the kernel's share of the call's kernel time (an agent's trial: "100 %"
    # on a 2.66 us kernel, 0.8 % of the call, topped the list), and under 1 % of the call counted, not listed
    share_of = {r["name"]: r.get("share") for r in predictions.kernel_records(_ncu(named)).values()}
    rules, minor = [], 0
    for kern in dig(last, "kernels") if isinstance(dig(last, "kernels"), list) else []:
        share = share_of.get(kern.get("name"))
        for r in kern.get("rules") or []:
            if _num(r.get("est_speedup_pct")):
                call = r["est_speedup_pct"] * share if _num(share) and share < 1 else None
                if call is not None and call < 1:
                    minor += 1
                    continue
                rules.append({"kernel": short_name(str(kern.get("name") or "")), **r, "call_pct": call,
                              "share_pct": share * 100 if call is not None else None})
    rules.sort(key=lambda r: -(r["est_speedup_pct"] if r["call_pct"] is None else r["call_pct"]))

    rows = {r["name"]: r for r in bench.get("rows") or []}
    applied = applied_from_correctness(named["corr"]) if named["name"] == bench.get("version") else None
    return {"cfg": cfg, "env": env, "config_rows": config_rows(cfg, env, bench, applied), "bench": bench, "n": n,
            "versions": versions, "many": many, "transitions": transitions, "finished": finished,
            "extensions": plan.extensions(rd), "records": record_status(rd),
            "speedups": ordered_speedups(bench.get("speedups") or {}),
            "evidence": evidence, "opportunities": opportunities, "rules": rules, "minor_rules": minor,
            "solution": rows.get("solution"),
            "baselines": [r for r in bench.get("rows") or [] if not r["name"].startswith("v") and r["name"] != "solution"]}


def _ncu(v: dict[str, Any]) -> dict[str, Any] | None:
    return v["ncu"] if isinstance(v["ncu"], dict) else None


def many_kernels(versions: list[dict[str, Any]]) -> bool:
    """Whether the run's versions table speaks of kernels by name: a version's ncu.json is schema 2 (an
    inventory of the call's kernels) or holds more than one kernel.  A run of one kernel per version keeps
    the one-table layout (schema 1)."""
    for v in versions:
        ncu = _ncu(v)
        if ncu and (isinstance(ncu.get("sums"), dict) or len(predictions.kernel_records(ncu)) > 1):
            return True
    return False


def _kernel_row(rec: dict[str, Any] | None, label: str, chosen: str, bottleneck: Any = None) -> dict[str, Any]:
    metrics = (rec or {}).get("metrics") or {}
    if rec is None:  # named by the previous version's predictions and not launched in this one
        return {"label": label, "chosen": chosen, "owner": "not launched", "share_pct": 0.0, "time_us": 0.0,
                "mem_sol": None, "sm_sol": None, "occupancy": None, "registers": None, "bottleneck": None}
    share = rec.get("share")
    return {"label": rec["label"], "chosen": chosen, "owner": rec.get("owner") or "not recorded",
            "share_pct": share * 100 if _num(share) else None, "time_us": rec.get("time_us"),
            "mem_sol": metrics.get("memory_throughput_pct") if rec["profiled"] else "not profiled",
            "sm_sol": metrics.get("sm_throughput_pct") if rec["profiled"] else "not profiled",
            "occupancy": metrics.get("achieved_occupancy_pct") if rec["profiled"] else "not profiled",
            "registers": metrics.get("registers_per_thread") if rec["profiled"] else "not profiled",
            "bottleneck": (rec.get("bottleneck") or bottleneck) if rec["profiled"] else "not profiled"}


def targeted_kernels(versions: list[dict[str, Any]]) -> None:
    """Per version, the solution's sums (``sums``) and the kernel rows of the versions table (``targets``):
    the kernels the previous version's predictions named, found again in this version, else its focus kernel."""
    for k, v in enumerate(versions):
        ncu = _ncu(v)
        v["sums"] = predictions.solution_sums(ncu) if ncu else MISSING
        if ncu is None:
            v["launched"], v["targets"] = MISSING, []
            continue
        recs = predictions.kernel_records(ncu)
        v["launched"] = sum(r["launches"] or 0 for r in recs.values())
        prev = versions[k - 1] if k else None
        named: dict[str, str | None] = {}  # label in the previous version -> its demangled name
        prev_recs: dict[str, dict[str, Any]] = {}
        if prev is not None:
            prev_recs = predictions.kernel_records(_ncu(prev))
            for p in (prev["hypothesis"] or {}).get("predictions") or []:
                lab = p.get("kernel")
                if lab and lab not in prev_recs:  # a hand-written line may name a kernel by part of its label
                    try:
                        lab = predictions.resolve_kernel(lab, prev_recs)
                    except UsageError:
                        pass
                if lab in prev_recs and lab not in named:  # one that names no kernel of prev is not a target
                    named[lab] = p.get("kernel_name") or prev_recs[lab]["name"]
        if named:
            earlier = {r["name"] for r in prev_recs.values() if r["name"]}
            why = f"named by {prev['name']}'s predictions"
            v["targets"] = []
            for lab, name in named.items():
                rec = predictions.find_kernel(recs, lab, name, earlier)
                v["targets"].append(_kernel_row(rec, lab, why if rec is None or rec["label"] == lab
                                                else f"{why} as {lab}"))
        else:
            focus = predictions.focus_record(ncu, recs)
            # a schema-1 kernel has no class of its own: the profile's, which is its focus kernel's
            v["targets"] = [_kernel_row(focus, focus["label"], "focus", _with_level(ncu))] if focus else []


def scored_kernel(s: dict[str, Any]) -> str:
    """The scorecard's kernel cell: the whole call, or the kernel scored (before -> after when they differ)."""
    if predictions.on_solution(s):
        return "whole call (sums)"
    on = s.get("on") or {}
    if not on.get("before"):
        return s.get("kernel") or "focus kernel"
    if on.get("after") is None:
        return f"{on['before']} -> not launched"
    return on["before"] if on["after"] == on["before"] else f"{on['before']} -> {on['after']}"


BASELINE_ORDER = ("pytorch-eager", "torch-compile", "flashinfer")

def ordered_speedups(speedups: dict[str, float]) -> list[tuple[str, float]]:
    """The speedups over the baselines first, in a fixed order (eager, torch.compile, FlashInfer)."""
    order = {name: i for i, name in enumerate(BASELINE_ORDER)}
    return sorted(speedups.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))


CHART_TAG = templating.CHART_TAG
png_description = templating.png_description


def chart(path: Path, data: dict[str, Any]) -> str | None:
    """The report's chart (``templating.draw_chart``) from benchmark.json and the versions' loop medians;
    returns why it was skipped, or None."""
    loop = [(v["name"], v["median_us"]) for v in data["versions"]]
    return templating.draw_chart(path, data["bench"], loop, data["cfg"].get("kernel"))


def run(args) -> int:
    rd = RunDir.open(args.out)
    if not (rd.root / "benchmark.json").exists() and rd.config().device == "cpu":
        raise UsageError("this run uses the cpu test mode (run.json device cpu): report needs a GPU run's profiles "
                         "and benchmark, which profile and benchmark make only on a GPU run (init a new run without "
                         "--device cpu where a CUDA GPU is)")
    if not (rd.root / "benchmark.json").exists():
        raise UsageError(f"{rd.root / 'benchmark.json'} does not exist: run `{command('benchmark', rd.root)}` first "
                         "(after the final gate)")
    # files changed or removed after measuring: the report still renders (missing values read
    # "unknown"), but says so at the top instead of presenting those numbers as current
    stale = [f"{rd.vdir(k).name}/{rel} ({why})" for k in rd.versions() for rel, why in provenance.stale(rd.vdir(k)).items()]
    for item in stale:
        warn(f"{item}: the report's numbers for it may not belong to the files as they are now")
    data = collect(rd)
    out_md, out_png = rd.root / "final_report.md", rd.root / "final_report.png"
    discussion = None
    if out_md.exists():
        body = markdown_section(out_md.read_text(encoding="utf-8"), "8. Discussion")
        if body and TODO not in body:
            discussion = body
            progress("keeping the filled Discussion section of the existing final_report.md")
    chart_note = chart(out_png, data)
    if chart_note:
        if out_png.is_file():  # an earlier report's chart: it no longer belongs to this report
            out_png.unlink()
            warn(f"{chart_note}; removed the earlier {out_png.name}, which showed the earlier report's numbers")
        else:
            warn(chart_note)
    text = render("final_report.md.j2", **data, stale=stale, discussion=discussion, chart_note=chart_note,
                  chart_file=out_png.name, todo=TODO)
    atomic_write_text(out_md, text)
    print(out_md)
    return 0
