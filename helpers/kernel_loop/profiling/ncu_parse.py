"""Parse Nsight Compute's CSV output (``ncu --csv``) into per-kernel records.

Two pages are understood:

* ``--page raw``: a header row, a units row (its ``ID`` cell is empty), then one
  row per profiled kernel with every collected metric as a column.
* ``--page details``: one row per (kernel, section, metric) with ``Section Name``,
  ``Metric Name`` (ncu's label), ``Metric Unit``, ``Metric Value``; rule rows
  carry ``Rule Name``, ``Rule Type``, ``Rule Description`` and an estimated speedup
  instead of a metric.

ncu prints numbers with thousands separators ("2,867,101,190,476.19") even with
``--print-units base``, and when it writes to stdout its ``==PROF==`` lines and
the program's own output come before the CSV; both are handled here.
"""

from __future__ import annotations

import csv
import io
import math
import re
import subprocess
from pathlib import Path
from typing import Any

from ..common import MeasuredFailure

# Columns that describe the launch, not a metric (the NVTX columns are matched by prefix).
ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
              "Stream", "Block Size", "Grid Size", "Device", "CC")
_NUMBER_RE = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?$")
_DIM3_RE = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")
_NOISE_PREFIXES = ("==PROF==", "==WARNING==", "==ERROR==", "==WARN==")


def parse_value(text: str) -> Any:
    """A CSV cell -> float/int, NaN, None (empty / "n/a" / "no data"), or the text itself."""
    t = text.strip()
    if t == "" or t.lower() in ("n/a", "no data", "(!) n/a"):
        return None
    if t.lower() in ("nan", "-nan"):
        return math.nan
    if any(ch.isdigit() for ch in t) and _NUMBER_RE.match(t):
        plain = t.replace(",", "")
        if re.fullmatch(r"[-+]?\d+", plain):
            return int(plain)
        return float(plain)
    return t


def parse_dim3(text: str) -> list[int] | None:
    m = _DIM3_RE.match(text.strip())
    return [int(g) for g in m.groups()] if m else None


def _is_id_column(name: str) -> bool:
    return name in ID_COLUMNS or ":" in name  # NVTX columns: "thread Domain:Push/Pop_Range:..."


def csv_rows(text: str) -> list[list[str]]:
    """Rows from the first ``"ID",`` header on, without ncu's ``==PROF==`` noise lines."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        return []
    kept = [ln for ln in lines[start:] if not ln.startswith(_NOISE_PREFIXES)]
    return [row for row in csv.reader(io.StringIO("".join(kept))) if row]


def _kernel_base(cell: dict[str, str]) -> dict[str, Any]:
    return {
        "id": parse_value(cell.get("ID", "")),
        "name": cell.get("Kernel Name", "").strip(),
        "grid": parse_dim3(cell.get("Grid Size", "")),
        "block": parse_dim3(cell.get("Block Size", "")),
        "device": parse_value(cell.get("Device", "")),
        "cc": cell.get("CC", "").strip() or None,
    }


def parse_raw(text: str) -> list[dict[str, Any]]:
    """``--page raw`` -> [{id, name, grid, block, device, cc, raw: {metric: {value, unit}}}]."""
    rows = csv_rows(text)
    if not rows:
        return []
    header, body = rows[0], rows[1:]
    units: list[str] = []
    kernels = []
    for row in body:
        cell = dict(zip(header, row, strict=False))
        if cell.get("ID", "").strip() == "":
            if not units:
                units = row
            continue
        if len(row) != len(header):
            continue  # a stray program line that csv split differently
        k = _kernel_base(cell)
        k["raw"] = {
            name: {"value": parse_value(val), "unit": (units[i] if i < len(units) else "").strip()}
            for i, (name, val) in enumerate(zip(header, row, strict=False))
            if not _is_id_column(name)
        }
        kernels.append(k)
    return kernels


def _speedup(text: str) -> float | None:
    v = parse_value(text or "")
    return float(v) if isinstance(v, (int, float)) and not math.isnan(v) else None


def parse_details(text: str) -> list[dict[str, Any]]:
    """``--page details`` -> [{id, name, grid, block, device, cc, sections, rules}].

    ``sections`` is {section name: [{"name", "unit", "value"}]} in ncu's order;
    ``rules`` is [{"section", "rule", "type", "text", "est_speedup_pct", "speedup_type"}].
    """
    rows = csv_rows(text)
    if not rows:
        return []
    header = rows[0]
    if "Section Name" not in header or "Metric Name" not in header:
        raise MeasuredFailure("ncu details CSV has no 'Section Name'/'Metric Name' columns: "
                              "was it printed with --page details?")
    kernels: dict[Any, dict[str, Any]] = {}
    for row in rows[1:]:
        cell = dict(zip(header, row, strict=False))
        if cell.get("ID", "").strip() == "":
            continue
        key = cell["ID"].strip()
        k = kernels.get(key)
        if k is None:
            k = kernels[key] = {**_kernel_base(cell), "sections": {}, "rules": []}
        section = cell.get("Section Name", "").strip()
        rule = cell.get("Rule Name", "").strip()
        if rule:
            k["rules"].append({
                "section": section,
                "rule": rule,
                "type": cell.get("Rule Type", "").strip(),
                "text": cell.get("Rule Description", "").strip(),
                "est_speedup_pct": _speedup(cell.get("Estimated Speedup", "")),
                "speedup_type": cell.get("Estimated Speedup Type", "").strip() or None,
            })
            continue
        metric = cell.get("Metric Name", "").strip()
        if metric:
            k["sections"].setdefault(section, []).append({
                "name": metric,
                "unit": cell.get("Metric Unit", "").strip(),
                "value": parse_value(cell.get("Metric Value", "")),
            })
    return list(kernels.values())


def merge(raw: list[dict[str, Any]], details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join raw and details records by ncu's kernel ID; either list may be empty."""
    by_id: dict[Any, dict[str, Any]] = {}
    order: list[Any] = []
    for rec in raw + details:
        k = by_id.get(rec["id"])
        if k is None:
            k = by_id[rec["id"]] = {"raw": {}, "sections": {}, "rules": []}
            order.append(rec["id"])
        for f in ("id", "name", "grid", "block", "device", "cc"):
            if k.get(f) is None:
                k[f] = rec.get(f)
        k["raw"].update(rec.get("raw", {}))
        for sec, items in rec.get("sections", {}).items():
            k["sections"].setdefault(sec, []).extend(items)
        k["rules"].extend(rec.get("rules", []))
    return [by_id[i] for i in order]


def parse(raw_text: str | None, details_text: str | None) -> list[dict[str, Any]]:
    """Both pages (either may be None) -> merged per-kernel records, in profiling order."""
    return merge(parse_raw(raw_text) if raw_text else [], parse_details(details_text) if details_text else [])


def import_page(ncu: str, report: Path, page: str, timeout: float) -> str:
    """``ncu --import REPORT --csv --page PAGE --print-units base``: a report's page as CSV text."""
    cmd = [ncu, "--import", str(report), "--csv", "--page", page, "--print-units", "base"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MeasuredFailure(f"'{' '.join(cmd)}' did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr + proc.stdout).rstrip().splitlines()[-25:])
        raise MeasuredFailure(f"'{' '.join(cmd)}' failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout
