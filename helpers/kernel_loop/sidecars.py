"""Every file of a run directory by name, and the loaders that read them back.

Steps name run files only through these constants (``references/artifacts.md`` describes
each one); a step that needs another step's result reads it here, never by importing that step.

Run level: run.json, env.json, env_check.md, ref.py, current_iteration.txt, benchmark.{json,md},
final_report.{md,png}.  Version level (``<out>/vK/``): the kernel, correctness.{json,md},
ncu.json, ncu_summary.md, ncu_details.md, ncu_raw.csv, ncu_details.csv, profile.ncu-rep.gz,
kbs_queries.jsonl, kbs_evidence.md, hypothesis.{txt,json}, measured.sha256; finish.json when the
run was finished before its planned final version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import UsageError, command, read_json

# run level
RUN_JSON = "run.json"
ENV_JSON = "env.json"
ENV_CHECK_MD = "env_check.md"
REF_PY = "ref.py"
STATE = "current_iteration.txt"
BENCHMARK_JSON = "benchmark.json"
BENCHMARK_MD = "benchmark.md"
FINAL_REPORT_MD = "final_report.md"
FINAL_REPORT_PNG = "final_report.png"
FINISH_JSON = "finish.json"  # an early finish: the version that became final, and why
# version level
KERNEL_FILES = ("kernel.py", "kernel.cu")
CORRECTNESS_JSON = "correctness.json"
CORRECTNESS_MD = "correctness.md"
NCU_JSON = "ncu.json"
NCU_SUMMARY_MD = "ncu_summary.md"
NCU_DETAILS_MD = "ncu_details.md"
NCU_RAW_CSV = "ncu_raw.csv"
NCU_DETAILS_CSV = "ncu_details.csv"
NCU_REPORT = "profile.ncu-rep.gz"  # the Nsight Compute report, gzip-compressed (gunzip -k to open it)
NCU_REPORT_PLAIN = "profile.ncu-rep"  # as runs before the compression kept it
NCU_CENSUS_CSV = "ncu_census.csv.gz"  # ncu's census of every launch, when the call had more kernels than the budget
KBS_QUERIES = "kbs_queries.jsonl"
KBS_EVIDENCE = "kbs_evidence.md"
HYPOTHESIS_TXT = "hypothesis.txt"
HYPOTHESIS_JSON = "hypothesis.json"
MEASURED = "measured.sha256"

CORRECTNESS_FILES = (CORRECTNESS_MD, CORRECTNESS_JSON)
PROFILE_FILES = (NCU_SUMMARY_MD, NCU_DETAILS_MD, NCU_JSON)
KBS_FILES = (KBS_QUERIES, KBS_EVIDENCE)


def load(path: Path) -> dict[str, Any] | None:
    """A JSON sidecar as a dict, or None when the file does not exist (corrupt files raise)."""
    path = Path(path)
    return read_json(path) if path.is_file() else None


def require(path: Path, step: str) -> dict[str, Any]:
    """A JSON sidecar that a step needs; a clear UsageError naming the step that writes it."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path} does not exist: run `{command(step, path.parent.parent)}` first (on "
                         f"{path.parent.name})")
    return read_json(path)


def event_median(ncu: dict[str, Any] | None) -> float | None:
    """The loop's CUDA-event median of a version (ncu.json timing), or None."""
    if not ncu:
        return None
    timing = ncu.get("timing") or {}
    if timing.get("median_us") is not None:
        return timing["median_us"]
    return (ncu.get("metrics") or {}).get("event_median_us")


def query_lines(vdir: Path) -> list[dict[str, Any]]:
    """Every record of vK/kbs_queries.jsonl, in order."""
    path = Path(vdir) / KBS_QUERIES
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{n} is not valid JSON: {exc}") from None
        if not isinstance(rec, dict):
            raise UsageError(f"{path}:{n} is not a JSON object")
        out.append(rec)
    return out


def query_hits(vdir: Path) -> list[str]:
    """Every page id that kbs_queries.jsonl's queries returned, in order, without repeats."""
    hits: list[str] = []
    for rec in query_lines(vdir):
        for h in rec.get("hits") or []:
            hid = h.get("id") if isinstance(h, dict) else h
            if isinstance(hid, str) and hid not in hits:
                hits.append(hid)
    return hits
