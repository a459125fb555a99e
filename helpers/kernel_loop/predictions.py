"""Falsifiable predictions: parse ``[<kernel>:]<metric>: <op><number>[%]`` lines and score them.

A prediction names an ncu.json ``metrics`` KEY (or ``duration``: the CUDA-event
median when it was measured, else ncu's ``duration_us``) and one of:

    -N% / +N%       relative change from this version to the next (at least N % down / up)
    -N  / +N        absolute change (at least N down / up)
    <= N, >= N, < N, > N, = N    bound on the next version's value (a trailing % is
                                 read as the metric's unit, e.g. ``sm_throughput_pct: >= 60%``)

Without a kernel, ``duration``, ``event_median_us``, ``duration_us`` and ``dram_bytes_read`` /
``dram_bytes_write`` are the whole call's (``SOLUTION_METRICS``: ncu.json ``sums``, or for a
schema-1 file the sum over its kernels), and any other KEY is the focus kernel's (``metrics``:
the version's own kernel with the most time; schema 1: the longest kernel).

A kernel label before the metric names one kernel of a program of many
(``attn_fwd:dram_throughput_pct: +10%``, ``gemm#2:registers_per_thread: <= 128``): its KEYs
(``kernels[].metrics``, one profiled launch), or ``time_us`` / ``duration`` (its total GPU time in
the call), ``launches`` and ``share`` (of the call's kernel time) from the inventory.  At
``hypothesis`` time the name may be a unique prefix or substring of a label; it is resolved to the
label and stored with the kernel's demangled name.

Scoring (``score_versions``) compares the version the prediction was made on ("before")
with the next version ("after"): ``held``, ``missed``, or ``unknown`` when a needed value
is null / missing (or the relative base is zero).  A named kernel is found again in the
next version by its demangled name, else by its label (unless another kernel of the
earlier version holds that name now); a kernel no longer launched scores ``unknown``, except
its time, launches, share and DRAM bytes, which are 0 (a kernel removed by fusion).  An
unprefixed per-kernel KEY is scored on the earlier version's focus kernel: where the next
version's focus is another kernel, on that same kernel in the next version (``note`` says
so); where it is no longer launched, on the next version's focus when both belong to the
same owner (a rewritten kernel replaced it), else ``unknown`` (name the kernel).
"""

from __future__ import annotations

import math
import re
from typing import Any

from .common import UsageError

DURATION_ALIAS = "duration"
BOUND_OPS = ("<=", ">=", "<", ">", "=")
# unprefixed, these are the whole call's: the sums over its kernels (and the CUDA-event time)
SOLUTION_METRICS = ("duration", "event_median_us", "duration_us", "dram_bytes_read", "dram_bytes_write")
# a named kernel's figures from the inventory: known for every kernel the call launched, profiled or not
KERNEL_FIGURES = ("time_us", "duration", "launches", "share")
# what a kernel no longer launched has none of: 0, not unknown
GONE_IS_ZERO = ("time_us", "duration", "launches", "share", "duration_us", "dram_bytes_read", "dram_bytes_write")
LABELS_SHOWN = 12  # a refusal lists this many labels, largest first

FORMS_HELP = (
    "allowed forms (one per line): '<metric>: -N%' or '+N%' (relative change), "
    "'<metric>: -N' or '+N' (absolute change), '<metric>: <= N', '>= N', '< N', '> N', '= N' "
    "(bound on the next version); <metric> is an ncu.json metrics key or 'duration'; "
    "'<kernel>:<metric>: ...' names one kernel by its label in ncu.json (or a unique part of it), "
    "e.g. 'attn_fwd:dram_throughput_pct: +10%'"
)

_NUM = r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?"
_LINE_RE = re.compile(
    rf"^\s*(?:(?P<kernel>[A-Za-z_][A-Za-z0-9_]*(?:#[0-9]+)?)\s*:\s*)?(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*:\s*"
    rf"(?:(?P<sign>[-+])\s*(?P<delta>{_NUM})\s*(?P<pct>%)?"
    rf"|(?P<bound><=|>=|==|<|>|=)\s*(?P<bval>-?(?:{_NUM}))\s*(?P<bpct>%)?)\s*$"
)


def _labels_line(kernels: dict[str, dict[str, Any]]) -> str:
    shown = list(kernels)[:LABELS_SHOWN]
    more = len(kernels) - len(shown)
    return ", ".join(shown) + (f" ... ({more} more in ncu_summary.md's inventory)" if more > 0 else "")


def resolve_kernel(name: str, kernels: dict[str, dict[str, Any]], line: str = "") -> str:
    """The label ``name`` stands for: the label itself, else the one label it begins, else the one label
    holding it (case-insensitive); UsageError when it names none or several."""
    where = f" in prediction '{line.strip()}'" if line else ""
    if name in kernels:
        return name
    if not kernels:
        raise UsageError(f"kernel '{name}'{where}: this ncu.json lists no kernel labels; predict without a kernel "
                         "(e.g. 'registers_per_thread: <= 64' is the focus kernel's)")
    found = [lab for lab in kernels if lab.startswith(name)]
    if not found:
        found = [lab for lab in kernels if name.lower() in lab.lower()]
    if len(found) == 1:
        return found[0]
    if found:
        raise UsageError(f"kernel '{name}'{where} matches {len(found)} labels ({', '.join(found[:LABELS_SHOWN])}): "
                         "write the whole label")
    raise UsageError(f"kernel '{name}'{where} matches no kernel label of this version: use one of "
                     f"{_labels_line(kernels)}")


def kernel_keys(rec: dict[str, Any]) -> set[str]:
    """The metrics a prediction may name on this kernel: the inventory's figures, and its KEYs when profiled."""
    keys = set(KERNEL_FIGURES)
    if rec.get("metrics"):
        keys |= set(rec["metrics"]) - {"event_median_us"}
    return keys


def parse_line(line: str, allowed: set[str] | None = None,
               kernels: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One prediction line -> ``{"metric", "op", "value", "text", "kernel"}``.

    ``op`` is ``rel`` (value in percent, signed), ``abs`` (signed change) or a
    bound operator.  ``kernel`` is the label written before the metric, or None.
    ``allowed`` (metric keys) rejects unknown names of unprefixed predictions;
    ``duration`` is always accepted.  ``kernels`` (``kernel_records`` of the version)
    resolves a kernel name to its label, adds ``kernel_name`` (its demangled name) and
    checks the metric against that kernel's keys.
    """
    m = _LINE_RE.match(line)
    if not m:
        raise UsageError(f"malformed prediction '{line.strip()}': {FORMS_HELP}")
    metric, kernel = m.group("metric"), m.group("kernel")
    extra: dict[str, Any] = {}
    if kernel is not None and kernels is not None:
        kernel = resolve_kernel(kernel, kernels, line)
        rec = kernels[kernel]
        if metric == "event_median_us":
            raise UsageError(f"prediction '{line.strip()}': event_median_us is the whole call's time, not a "
                             f"kernel's; write 'event_median_us: ...' without a kernel, or '{kernel}:time_us: ...'")
        keys = kernel_keys(rec)
        if metric not in keys:
            if not rec.get("metrics"):
                raise UsageError(f"prediction '{line.strip()}': {kernel} was not profiled (outside the ncu budget), "
                                 f"so only its {', '.join(KERNEL_FIGURES)} are known: predict one of those")
            raise UsageError(f"unknown metric '{metric}' in prediction '{line.strip()}': {kernel} has "
                             f"{', '.join(sorted(keys))}")
        extra["kernel_name"] = rec.get("name")
    elif kernel is None and allowed is not None and metric != DURATION_ALIAS and metric not in allowed:
        raise UsageError(
            f"unknown metric '{metric}' in prediction '{line.strip()}': use 'duration' or one of "
            f"{', '.join(sorted(allowed))}"
        )
    if m.group("bound"):
        op, value = m.group("bound").replace("==", "="), float(m.group("bval"))
    else:
        op = "rel" if m.group("pct") else "abs"
        value = float(m.group("delta")) * (-1.0 if m.group("sign") == "-" else 1.0)
        if op == "rel" and value <= -100:
            shown = f"{kernel}:{metric}" if kernel else metric
            raise UsageError(f"prediction '{line.strip()}': a measured value cannot fall by 100% or more; predict "
                             f"a smaller fall (e.g. '{shown}: -30%') or a bound ('{shown}: <= N')")
    return {"metric": metric, "op": op, "value": value, "text": describe(metric, op, value, kernel),
            "kernel": kernel, **extra}


# Every ncu.json metric KEY is non-negative (a time, bytes, a count, a percentage); a ``_pct`` KEY is at most 100.
PCT_MAX = 100.0
TIME_SPAN = 10.0  # a bound on duration more than this factor above or below the measured value is refused


def _domain(metric: str) -> str:
    """What a value of ``metric`` can be, in words."""
    if metric.endswith("_pct"):
        return f"{metric} is a percentage, from 0 to 100"
    return f"{metric} is never negative (no time, byte or count is)"


def senseless(pred: dict[str, Any], measured: float | None = None) -> str | None:
    """Why a prediction cannot fail or cannot hold whatever the next version measures, or None.

    A bound every non-negative value satisfies (``>= x`` with x <= 0, ``> x`` with x < 0) or none does (``<= x``,
    ``= x`` with x < 0, ``< x`` with x <= 0); on a ``_pct`` metric also a bound every value from 0 to 100 satisfies
    or none does, and an absolute change beyond 100 points.  On the whole call's ``duration`` /
    ``event_median_us``, with ``measured`` (this version's value), a bound or absolute change landing more than
    ``TIME_SPAN`` times above or below it.  ``-0%`` / ``+0%`` / ``-0`` / ``+0`` ("not up" / "not down") can fail."""
    op, x, metric = pred["op"], float(pred["value"]), pred["metric"]
    pct = metric.endswith("_pct")
    what = _domain(metric)
    if op in ("rel", "abs"):
        if op == "abs" and pct and abs(x) > PCT_MAX:
            return (f"cannot hold: {what}, so it cannot move by more than 100 points (for a relative change "
                    f"write '{'+' if x > 0 else '-'}N%')")
    else:
        lo, hi = 0.0, (PCT_MAX if pct else math.inf)
        # the values in [lo, hi] that satisfy the bound: all of them (cannot fail) or none (cannot hold)
        always = {">=": x <= lo, ">": x < lo, "<=": x >= hi, "<": x > hi, "=": False}[op]
        never = {">=": x > hi, ">": x >= hi, "<=": x < lo, "<": x <= lo, "=": x < lo or x > hi}[op]
        if always:
            return f"cannot fail: {what}, so every value is {op} {x:g}; predict a bound the next version could miss"
        if never:
            return f"cannot hold: {what}, so no value is {op} {x:g}"
    if measured is None or not _number(measured) or measured <= 0 or pred.get("kernel") \
            or metric not in (DURATION_ALIAS, "event_median_us") or op == "rel":
        return None
    target = measured + x if op == "abs" else x
    if target > measured * TIME_SPAN or target < measured / TIME_SPAN:
        where = "above" if target > measured else "below"
        return (f"is more than {TIME_SPAN:g}x {where} this version's measured {metric} of {measured:g} us "
                f"(ncu.json): a unit slip? predict near it, e.g. '{metric}: <= {measured * 0.9:.3g}' or "
                f"'{metric}: -10%'")
    return None


def parse_lines(lines: list[str], allowed: set[str] | None = None,
                kernels: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every non-blank line parsed; the first bad one raises UsageError."""
    return [parse_line(ln, allowed, kernels) for ln in lines if ln.strip()]


def _negative(value: float) -> bool:
    return math.copysign(1.0, value) < 0


def describe(metric: str, op: str, value: float, kernel: str | None = None) -> str:
    """The canonical text form of a prediction (round-trips through parse_line)."""
    num = f"{value:g}"
    sign = "" if _negative(value) else "+"  # -0 keeps its sign: "-0%" predicts "not up"
    name = f"{kernel}:{metric}" if kernel else metric
    if op == "rel":
        return f"{name}: {sign}{num}%"
    if op == "abs":
        return f"{name}: {sign}{num}"
    return f"{name}: {op} {num}"


def on_solution(pred: dict[str, Any]) -> bool:
    """Whether the prediction is on the whole call (an unprefixed duration or DRAM-bytes sum)."""
    return not pred.get("kernel") and pred["metric"] in SOLUTION_METRICS


# Metrics a version has only while its kernel does that kind of work: gone with it, they score unknown.
MAY_VANISH = {"smem_bank_conflicts_pct": "no shared memory", "sectors_per_request_ld": "no global loads",
              "sectors_per_request_st": "no global stores", "global_excess_sectors_pct": "no global accesses",
              "l1_hit_rate_pct": "no L1 accesses"}


def caveat(pred: dict[str, Any]) -> str | None:
    """Why a prediction may not be comparable between two versions, or None."""
    metric = pred["metric"]
    if metric.startswith("stall_") or metric == "warp_latency_cycles":
        return (f"{metric} is per issued instruction: when the change alters how many instructions run, before "
                "and after are not comparable; pair it with a prediction on duration or a throughput")
    if metric in MAY_VANISH:
        return (f"a note that matters only if the change leaves v(K+1) with {MAY_VANISH[metric]}: {metric} is then "
                "absent and the prediction scores unknown, so predict what replaces it (a change that keeps it: ignore this)")
    return None


def signed_drop(pred: dict[str, Any]) -> str | None:
    """A signed change that predicts a throughput or occupancy falls by at least that much: meant so at times (fewer
    bytes moved), but an agent's trial wrote 'dram_throughput_pct: -2' for "falls by at most 2" on its bottleneck."""
    metric, x = pred["metric"], float(pred["value"])
    if pred["op"] not in ("rel", "abs") or x >= 0 or not (metric.endswith("_throughput_pct") or "occupancy" in metric):
        return None
    name = f"{pred['kernel']}:{metric}" if pred.get("kernel") else metric
    unit = "%" if pred["op"] == "rel" else " points"
    return (f"predicts that {metric} falls by at least {-x:g}{unit} (a signed change is a lower bound on the move); "
            f"for \"falls by at most {-x:g}{unit}\" write a bound, '{name}: >= N', N the lowest value you expect")


def metric_value(metrics: dict[str, Any] | None, metric: str) -> float | None:
    """The value of ``metric`` in an ncu.json ``metrics`` dict (None if null or absent)."""
    if not metrics:
        return None
    if metric == DURATION_ALIAS:
        ev = metrics.get("event_median_us")
        return ev if ev is not None else metrics.get("duration_us")
    return metrics.get(metric)


# --- an ncu.json seen kernel by kernel ---------------------------------------------------------
def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _fired(kernel: dict[str, Any]) -> list[dict[str, Any]]:
    return [x for x in kernel.get("symptoms") or [] if isinstance(x, dict) and x.get("tag")]


def kernel_records(ncu: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{label: {"label", "name", "owner", "launches", "time_us", "share", "profiled", "metrics", "bottleneck",
    "symptoms"}}, largest time first: every kernel of ``inventory.rows`` (schema 2) with the full sections of
    ``kernels`` where it has them.  A schema-1 file (every launch profiled, no labels) is grouped as the profile
    groups a call's launches (``inventory.table``): one record per kernel name, its launches counted, their
    durations summed, with the longest launch's metrics."""
    if not isinstance(ncu, dict):
        return {}
    kernels = [k for k in ncu.get("kernels") or [] if isinstance(k, dict)]
    if any(not k.get("label") for k in kernels):
        return _schema1_records(kernels)
    out: dict[str, dict[str, Any]] = {}
    inv = ncu.get("inventory") if isinstance(ncu.get("inventory"), dict) else {}
    for r in inv.get("rows") or []:
        if isinstance(r, dict) and r.get("label"):
            out[r["label"]] = {"label": r["label"], "name": r.get("name"), "owner": r.get("owner"),
                               "launches": r.get("launches"), "time_us": r.get("time_us"), "share": r.get("share"),
                               "profiled": False, "metrics": None, "bottleneck": None, "symptoms": []}
    for k in kernels:
        rec = out.setdefault(k["label"], {"label": k["label"], "name": k.get("name"), "owner": None,
                                          "launches": None, "time_us": None, "share": None})
        rec.update({f: k.get(f) for f in ("launches", "time_us", "share") if f in k})
        rec.update(owner=k.get("owner", rec["owner"]), profiled=True, bottleneck=k.get("bottleneck"),
                   metrics=k.get("metrics") if isinstance(k.get("metrics"), dict) else {}, symptoms=_fired(k))
    return dict(sorted(out.items(), key=lambda kv: -(kv[1]["time_us"] if _number(kv[1]["time_us"]) else 0.0)))


def _schema1_records(kernels: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    from .profiling.inventory import table

    def duration(k: dict[str, Any]) -> float:
        d = (k.get("metrics") or {}).get("duration_us")
        return float(d) if _number(d) else 0.0

    named = [(str(k.get("name") or ""), k) for k in kernels]
    inv = table([{"name": n, "grid": k.get("grid"), "block": k.get("block"), "duration_us": duration(k),
                  "dram_bytes_read": None, "dram_bytes_write": None} for n, k in named], [])
    out: dict[str, dict[str, Any]] = {}
    for row in inv["rows"]:
        best = max((k for n, k in named if n == row["name"]), key=duration)
        out[row["label"]] = {"label": row["label"], "name": row["name"], "owner": best.get("owner"),
                             "launches": row["launches"], "time_us": row["time_us"], "share": row["share"],
                             "profiled": True, "metrics": best.get("metrics") if isinstance(best.get("metrics"), dict)
                             else {}, "bottleneck": best.get("bottleneck"), "symptoms": _fired(best)}
    return out


def focus_record(ncu: dict[str, Any] | None, recs: dict[str, dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The kernel whose KEYs ``metrics`` carries: ncu.json ``focus`` (schema 2), else the longest profiled
    launch's kernel (schema 1)."""
    recs = kernel_records(ncu) if recs is None else recs
    focus = ncu.get("focus") if isinstance(ncu, dict) and isinstance(ncu.get("focus"), dict) else None
    if focus:
        if focus.get("label") in recs:
            return recs[focus["label"]]
        same = [r for r in recs.values() if focus.get("name") and r["name"] == focus.get("name")]
        return same[0] if same else None
    timed = [r for r in recs.values() if r["profiled"] and _number((r["metrics"] or {}).get("duration_us"))]
    return max(timed, key=lambda r: r["metrics"]["duration_us"]) if timed else None


def solution_sums(ncu: dict[str, Any] | None) -> dict[str, Any]:
    """The whole call's figures: ``duration_us``, ``dram_bytes_read``, ``dram_bytes_write`` (ncu.json ``sums``;
    schema 1: ``metrics.duration_us``, already summed, and the kernels' DRAM bytes summed) and
    ``event_median_us``; ``covered_share`` where schema 2 gives it."""
    if not isinstance(ncu, dict):
        return {}
    metrics = ncu.get("metrics") if isinstance(ncu.get("metrics"), dict) else {}
    out: dict[str, Any] = {"event_median_us": metrics.get("event_median_us")}
    if isinstance(ncu.get("sums"), dict):
        s = ncu["sums"]
        out.update({k: s.get(k) for k in ("duration_us", "dram_bytes_read", "dram_bytes_write", "covered_share")})
        return out
    out["duration_us"] = metrics.get("duration_us")
    kernels = [k.get("metrics") or {} for k in ncu.get("kernels") or [] if isinstance(k, dict)]
    for key in ("dram_bytes_read", "dram_bytes_write"):
        vals = [m.get(key) for m in kernels]
        out[key] = sum(vals) if vals and all(_number(v) for v in vals) else (None if kernels else metrics.get(key))
    return out


def solution_value(ncu: dict[str, Any] | None, metric: str) -> float | None:
    """An unprefixed solution-level metric of a version (``duration``: the event median, else ncu's sum)."""
    sums = solution_sums(ncu)
    if metric == DURATION_ALIAS:
        ev = sums.get("event_median_us")
        return ev if ev is not None else sums.get("duration_us")
    return sums.get(metric)


def kernel_value(rec: dict[str, Any], metric: str) -> tuple[float | None, str | None]:
    """A named kernel's ``metric`` -> (value, why it is None)."""
    if metric in ("time_us", DURATION_ALIAS):
        return rec.get("time_us"), None
    if metric in ("launches", "share"):
        return rec.get(metric), None
    if not rec.get("metrics"):
        return None, f"{rec['label']} was not profiled (outside the ncu budget)"
    return rec["metrics"].get(metric), None


def find_kernel(recs: dict[str, dict[str, Any]], label: str, name: str | None,
                earlier_names: set[str] = frozenset()) -> dict[str, Any] | None:
    """The record of a kernel of an earlier version in a later one: the same demangled name, else the same
    label unless the kernel under it now is one the earlier version ran under another label (labels are
    numbered in launch order, so ``gemm#2`` becomes ``gemm`` once ``gemm`` is gone)."""
    if name:
        for r in recs.values():
            if r["name"] == name:
                return r
    r = recs.get(label)
    if r is None or (name and r["name"] != name and r["name"] in earlier_names):
        return None
    return r


def _judge(out: dict[str, Any], b: float | None, a: float | None, *, why_b: str | None = None,
           why_a: str | None = None) -> dict[str, Any]:
    """Fill ``before``, ``after``, ``change``, ``status`` and ``why`` of a scored prediction."""
    op, v = out["op"], out["value"]
    out.update(before=b, after=a, change=None, status="unknown")
    if a is None:
        out["why"] = why_a or "no measured value for the next version"
        return out
    if op in ("rel", "abs"):
        if b is None:
            out["why"] = why_b or "no measured value for this version"
            return out
        if op == "rel":
            if b == 0:
                out["why"] = "relative change from zero is undefined"
                return out
            change = (a - b) / abs(b) * 100.0
        else:
            change = a - b
        out["change"] = change
        held = change <= v if _negative(v) else change >= v
    elif op == "<=":
        held = a <= v
    elif op == ">=":
        held = a >= v
    elif op == "<":
        held = a < v
    elif op == ">":
        held = a > v
    else:
        held = math.isclose(a, v, rel_tol=1e-6, abs_tol=1e-9)
    out["status"] = "held" if held else "missed"
    return out


def score(pred: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """Score one prediction against the ``metrics`` dicts of its version and the next one."""
    out: dict[str, Any] = {**pred, "why": None}
    return _judge(out, metric_value(before, pred["metric"]), metric_value(after, pred["metric"]))


def score_versions(pred: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any] | None,
                   names: tuple[str, str] = ("this version", "the next version")) -> dict[str, Any]:
    """Score one prediction against the ncu.json of its version and of the next one (see the module's
    docstring).  Adds ``on``: ``{"before": label, "after": label}`` of the kernel scored (None for the whole
    call's figures) and ``note``: how the kernel was found, where it needed saying, and that the two versions ran
    on different GPUs (an agent's trial was offered an H200 for v1 after v0's H100: times and percentages of peak
    then compare two cards, not two kernels)."""
    out = _score_versions(pred, before, after, names)
    cards = [((v.get("gpu") or {}).get("name") if isinstance(v, dict) else None) for v in (before, after)]
    if all(cards) and cards[0] != cards[1]:
        card = f"measured on different GPUs ({cards[0]} in {names[0]}, {cards[1]} in {names[1]})"
        out["note"] = f"{out['note']}; {card}" if out.get("note") else card
    return out


def _score_versions(pred: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any] | None,
                    names: tuple[str, str]) -> dict[str, Any]:
    bname, aname = names
    out: dict[str, Any] = {**pred, "why": None, "note": None, "on": None}
    metric, kernel = pred["metric"], pred.get("kernel")
    if on_solution(pred):
        return _judge(out, solution_value(before, metric), solution_value(after, metric))
    brecs, arecs = kernel_records(before), kernel_records(after)
    earlier = {r["name"] for r in brecs.values() if r["name"]}
    if kernel:
        label, b, why_b, name = kernel, None, None, pred.get("kernel_name")
        if isinstance(before, dict):
            try:
                label = resolve_kernel(kernel, brecs)
            except UsageError as exc:
                return _judge(out, None, None, why_a=f"{bname}: {exc}")
            b, why_b = kernel_value(brecs[label], metric)
            name = name or brecs[label]["name"]
        if not isinstance(after, dict):
            return _judge(out, b, None, why_b=why_b)
        arec = find_kernel(arecs, label, name, earlier)
        if arec is None:
            out["on"] = {"before": label, "after": None}
            if metric in GONE_IS_ZERO:
                out["note"] = f"{label} is not launched in {aname} (removed or fused): its {metric} is 0"
                return _judge(out, b, 0.0, why_b=why_b)
            return _judge(out, b, None, why_b=why_b,
                          why_a=f"{label} is not launched in {aname} (removed or fused): it has no {metric}")
        out["on"] = {"before": label, "after": arec["label"]}
        a, why_a = kernel_value(arec, metric)
        if why_a:
            why_a = f"{why_a} in {aname}"
        if arec["label"] != label:
            out["note"] = f"{label} of {bname} is {arec['label']} in {aname} (same kernel name)"
        return _judge(out, b, a, why_b=why_b, why_a=why_a)
    if not isinstance(before, dict) or not isinstance(after, dict):  # a version without ncu.json
        bm, am = ((v.get("metrics") if isinstance(v, dict) else None) for v in (before, after))
        return _judge(out, metric_value(bm, metric), metric_value(am, metric))
    # an unprefixed per-kernel KEY: the focus kernel's
    bm = before.get("metrics") if isinstance(before.get("metrics"), dict) else {}
    am = after.get("metrics") if isinstance(after.get("metrics"), dict) else {}
    bf, af = focus_record(before, brecs), focus_record(after, arecs)
    if bf is None or af is None:
        return _judge(out, bm.get(metric), am.get(metric))
    several = len(brecs) > 1 or len(arecs) > 1
    same = find_kernel(arecs, bf["label"], bf["name"], earlier)
    out["on"] = {"before": bf["label"], "after": af["label"]}
    if same is not None and same["label"] == af["label"]:
        return _judge(out, bm.get(metric), am.get(metric))
    if same is not None:  # still launched, no longer the focus: the prediction stays on it
        out["on"]["after"] = same["label"]
        out["note"] = (f"scored on {bf['label']}, the focus kernel of {bname}; the focus of {aname} is "
                       f"{af['label']}")
        a, why_a = kernel_value(same, metric)
        return _judge(out, bm.get(metric), a, why_a=f"{why_a} in {aname}; its focus is {af['label']}" if why_a else None)
    if bf.get("owner") == af.get("owner"):  # gone, and a kernel of the same owner is the focus now: its rewrite
        if several:
            out["note"] = (f"{bf['label']} is not launched in {aname}: scored on {af['label']}, the focus kernel "
                           "that replaced it")
        return _judge(out, bm.get(metric), am.get(metric))
    return _judge(out, bm.get(metric), None,
                  why_a=(f"the focus kernel changed from {bf['label']} ({bf.get('owner') or 'unknown owner'}) to "
                         f"{af['label']} ({af.get('owner') or 'unknown owner'}) and {bf['label']} is not launched in "
                         f"{aname}: name the kernel ('<label>:{metric}: ...')"))
