"""Falsifiable predictions: parse ``<metric>: <op><number>[%]`` lines and score them.

A prediction names an ncu.json ``metrics`` KEY (or ``duration``: the CUDA-event
median when it was measured, else ncu's ``duration_us``) and one of:

    -N% / +N%       relative change from this version to the next (at least N % down / up)
    -N  / +N        absolute change (at least N down / up)
    <= N, >= N, < N, > N, = N    bound on the next version's value (a trailing % is
                                 read as the metric's unit, e.g. ``sm_throughput_pct: >= 60%``)

Scoring compares the version the prediction was made on ("before") with the
next version ("after"): ``held``, ``missed``, or ``unknown`` when a needed value
is null / missing (or the relative base is zero).
"""

from __future__ import annotations

import math
import re
from typing import Any

from .common import UsageError

DURATION_ALIAS = "duration"
BOUND_OPS = ("<=", ">=", "<", ">", "=")

FORMS_HELP = (
    "allowed forms (one per line): '<metric>: -N%' or '+N%' (relative change), "
    "'<metric>: -N' or '+N' (absolute change), '<metric>: <= N', '>= N', '< N', '> N', '= N' "
    "(bound on the next version); <metric> is an ncu.json metrics key or 'duration'"
)

_NUM = r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?"
_LINE_RE = re.compile(
    rf"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*:\s*"
    rf"(?:(?P<sign>[-+])\s*(?P<delta>{_NUM})\s*(?P<pct>%)?"
    rf"|(?P<bound><=|>=|==|<|>|=)\s*(?P<bval>-?(?:{_NUM}))\s*(?P<bpct>%)?)\s*$"
)


def parse_line(line: str, allowed: set[str] | None = None) -> dict[str, Any]:
    """One prediction line -> ``{"metric", "op", "value", "text"}``.

    ``op`` is ``rel`` (value in percent, signed), ``abs`` (signed change) or a
    bound operator.  ``allowed`` (metric keys) rejects unknown names;
    ``duration`` is always accepted.
    """
    m = _LINE_RE.match(line)
    if not m:
        raise UsageError(f"malformed prediction '{line.strip()}': {FORMS_HELP}")
    metric = m.group("metric")
    if allowed is not None and metric != DURATION_ALIAS and metric not in allowed:
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
            raise UsageError(f"prediction '{line.strip()}': a measured value cannot fall by 100% or more; predict "
                             f"a smaller fall (e.g. '{metric}: -30%') or a bound ('{metric}: <= N')")
    return {"metric": metric, "op": op, "value": value, "text": describe(metric, op, value)}


def parse_lines(lines: list[str], allowed: set[str] | None = None) -> list[dict[str, Any]]:
    """Every non-blank line parsed; the first bad one raises UsageError."""
    return [parse_line(ln, allowed) for ln in lines if ln.strip()]


def _negative(value: float) -> bool:
    return math.copysign(1.0, value) < 0


def describe(metric: str, op: str, value: float) -> str:
    """The canonical text form of a prediction (round-trips through parse_line)."""
    num = f"{value:g}"
    sign = "" if _negative(value) else "+"  # -0 keeps its sign: "-0%" predicts "not up"
    if op == "rel":
        return f"{metric}: {sign}{num}%"
    if op == "abs":
        return f"{metric}: {sign}{num}"
    return f"{metric}: {op} {num}"


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
        return (f"{metric} has no value on a version with {MAY_VANISH[metric]} (scored unknown): if the change "
                "removes that, predict what replaces it")
    return None


def metric_value(metrics: dict[str, Any] | None, metric: str) -> float | None:
    """The value of ``metric`` in an ncu.json ``metrics`` dict (None if null or absent)."""
    if not metrics:
        return None
    if metric == DURATION_ALIAS:
        ev = metrics.get("event_median_us")
        return ev if ev is not None else metrics.get("duration_us")
    return metrics.get(metric)


def score(pred: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """Score one prediction against the metrics of its version and the next one."""
    b = metric_value(before, pred["metric"])
    a = metric_value(after, pred["metric"])
    op, v = pred["op"], pred["value"]
    out: dict[str, Any] = {**pred, "before": b, "after": a, "change": None, "status": "unknown", "why": None}
    if a is None:
        out["why"] = "no measured value for the next version"
        return out
    if op in ("rel", "abs"):
        if b is None:
            out["why"] = "no measured value for this version"
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
