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


def _ends(rd: RunDir) -> list[records.Record]:
    """The finish and extend records, in order (read without verifying: the gate verifies)."""
    return [r for r in records.read(rd.root, verify=False) if r.get("step") in ("finish", "extend")]


def _planned(rd: RunDir, ends: list[records.Record]) -> int:
    extended = [r for r in ends if r.get("step") == "extend"]
    return int(extended[-1]["iterations"]) if extended else rd.config().iterations


def _finish_json(rd: RunDir, ends: list[records.Record]) -> dict[str, Any] | None:
    if ends and ends[-1].get("step") == "extend":  # an extension since voids an earlier finish
        return None
    rec = sidecars.load(rd.root / sidecars.FINISH_JSON)
    if rec is None:
        return None
    try:
        k = parse_version(str(rec.get("version")))
    except UsageError:
        raise UsageError(f"{rd.root / sidecars.FINISH_JSON} names {rec.get('version')!r}, not a version: "
                         "the file is corrupt (only 'kernel-loop finish' writes it)") from None
    if k >= _planned(rd, ends):
        raise UsageError(f"{rd.root / sidecars.FINISH_JSON} names v{k}, not before the planned final version: "
                         "the file is corrupt (only 'kernel-loop finish' writes it)")
    return rec


def finish_record(rd: RunDir) -> dict[str, Any] | None:
    """finish.json when the run's end was last set by ``finish`` (an extension since voids it)."""
    return _finish_json(rd, _ends(rd))


def planned_final(rd: RunDir) -> int:
    """The planned final version: the last extension's, else run.json iterations (ignoring finish)."""
    return _planned(rd, _ends(rd))


def final_version(rd: RunDir) -> int:
    """The run's final version N: the finished-early version, else the planned one (extended or not)."""
    ends = _ends(rd)
    if ends:
        last = ends[-1]
        return int(last["iterations"]) if last.get("step") == "extend" else parse_version(last["version"])
    rec = _finish_json(rd, ends)  # a run made before records
    return parse_version(rec["version"]) if rec else rd.config().iterations


def extensions(rd: RunDir) -> list[dict[str, Any]]:
    """Every extension of the run, in order: {"from": N, "to": M, "time", "line"} (for the report)."""
    return [{"from": int(r.get("from", "0")), "to": int(r["iterations"]), "time": r.get("time"), "line": r.line}
            for r in _ends(rd) if r.get("step") == "extend"]
