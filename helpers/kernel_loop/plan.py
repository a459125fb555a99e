"""Which version is final: run.json's planned ``iterations``, unless ``finish`` stopped the run earlier
or ``extend`` moved the end further out.

The signed records decide (the last finish or extend record in records.log, as the gate reads them);
a run made before records falls back to ``<out>/finish.json``.  Every step that needs the final
version asks here.  ``finish.json`` is kept for people and the report: the version, the reason.
"""

from __future__ import annotations

from typing import Any

from . import records, sidecars
from .common import UsageError
from .rundir import RunDir, parse_version


def _last_end(rd: RunDir) -> records.Record | None:
    """The last finish or extend record (read without verifying: the gate verifies)."""
    for r in reversed(records.read(rd.root, verify=False)):
        if r.get("step") in ("finish", "extend"):
            return r
    return None


def finish_record(rd: RunDir) -> dict[str, Any] | None:
    """finish.json when the run's end was last set by ``finish`` (an extension since voids it)."""
    last = _last_end(rd)
    if last is not None and last.get("step") == "extend":
        return None
    rec = sidecars.load(rd.root / sidecars.FINISH_JSON)
    if rec is None:
        return None
    try:
        k = parse_version(str(rec.get("version")))
    except UsageError:
        raise UsageError(f"{rd.root / sidecars.FINISH_JSON} names {rec.get('version')!r}, not a version: "
                         "the file is corrupt (only 'kernel-loop finish' writes it)") from None
    if k >= planned_final(rd):
        raise UsageError(f"{rd.root / sidecars.FINISH_JSON} names v{k}, not before the planned final version: "
                         "the file is corrupt (only 'kernel-loop finish' writes it)")
    return rec


def planned_final(rd: RunDir) -> int:
    """The planned final version: the last extension's, else run.json iterations (ignoring finish)."""
    for r in reversed(records.read(rd.root, verify=False)):
        if r.get("step") == "extend":
            return int(r["iterations"])
    return rd.config().iterations


def final_version(rd: RunDir) -> int:
    """The run's final version N: the finished-early version, else the planned one (extended or not)."""
    last = _last_end(rd)
    if last is not None:
        return int(last["iterations"]) if last.get("step") == "extend" else parse_version(last["version"])
    rec = finish_record(rd)
    return parse_version(rec["version"]) if rec else rd.config().iterations


def extensions(rd: RunDir) -> list[dict[str, Any]]:
    """Every extension of the run, in order: {"from": N, "to": M, "time", "line"} (for the report)."""
    return [{"from": int(r.get("from", "0")), "to": int(r["iterations"]), "time": r.get("time"), "line": r.line}
            for r in records.read(rd.root, verify=False) if r.get("step") == "extend"]
