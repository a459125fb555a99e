"""Which version is final: run.json's planned ``iterations``, unless ``finish`` stopped the run earlier.

``<out>/finish.json`` (written only by ``kernel-loop finish``) names the version that became final
and the reason.  Every step that needs the final version asks here; the gate reads the same file.
"""

from __future__ import annotations

from typing import Any

from . import sidecars
from .common import UsageError
from .rundir import RunDir, parse_version


def finish_record(rd: RunDir) -> dict[str, Any] | None:
    """finish.json, checked: it must name a version before the planned final one."""
    rec = sidecars.load(rd.root / sidecars.FINISH_JSON)
    if rec is None:
        return None
    try:
        k = parse_version(str(rec.get("version")))
    except UsageError:
        raise UsageError(f"{rd.root / sidecars.FINISH_JSON} names {rec.get('version')!r}, not a version: "
                         "the file is corrupt (only 'kernel-loop finish' writes it)") from None
    if k >= rd.config().iterations:
        raise UsageError(f"{rd.root / sidecars.FINISH_JSON} names v{k}, not before the planned final version: "
                         "the file is corrupt (only 'kernel-loop finish' writes it)")
    return rec


def final_version(rd: RunDir) -> int:
    """The run's final version N: the finished-early version, else run.json iterations."""
    rec = finish_record(rd)
    return parse_version(rec["version"]) if rec else rd.config().iterations
