"""Every kernel a call launches, the few that get ncu's full sections, and the whole call's sums.

A program of many kernels (a KernelBench level-3 network: thousands of launches of a few kernels) cannot
have every launch replayed for ncu's full sections.  So the profile works in two passes when the call
launches more kernels than the run's budget:

1. the **census**: ncu over the whole measured call with a few cheap metrics (one pass per launch:
   ``CENSUS_METRICS``), which lists every launch with its duration and DRAM bytes.  It is ncu's own count,
   taken outside the kernel's process, so the whole call's time it sums is what the CUDA-event time is
   checked against;
2. the **detailed pass**: ncu's full sections for the kernels chosen from the census (``choose``): the
   version's own kernels first, then the largest shares of the call's time, up to the budget's number of
   kernels and share of the time; one launch per distinct launch configuration of each
   (``detail_filter``).

A call within the budget gets the detailed pass alone, over every launch: it is its own census.

Kernels are named in three ways: ncu's demangled ``name``; ``function_base`` (what ncu's
``--kernel-name-base function`` matches: no return type, namespaces, template arguments or parameters);
and a ``label`` (the function base, ``#2``, ``#3`` for a second and third kernel of that base), unique in
one profile, which predictions use to name a kernel (``attn_fwd:dram_throughput_pct: +10%``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from . import ncu_parse
from .kernel_names import own_kernels
from .metrics import unit_factor

# The whole call's figures (KEY -> ncu's metric): sums over its launches, read per launch by the census.
SUM_KEYS = {"duration_us": "gpu__time_duration.sum", "dram_bytes_read": "dram__bytes_read.sum",
            "dram_bytes_write": "dram__bytes_write.sum"}
CENSUS_METRICS = tuple(SUM_KEYS.values())
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Budget:
    """How much of a call gets ncu's full sections (run.json ``ncu.budget``).

    ``kernels``: at most this many kernels (by function name) get the detailed pass; ``share``: once the
    version's own kernels are in, library kernels are added, largest first, until the chosen kernels hold
    this share of the call's kernel time; ``configs``: at most this many launches in the detailed pass (a
    kernel launched with many configurations is profiled in its largest few); ``census``: at most this many
    launches in the census (ncu takes some 90 ms a launch even for its few metrics: an LSTM's thousands of
    launches took minutes), the first ones of the call, where the worker counts more."""

    kernels: int = 8
    share: float = 0.9
    configs: int = 16
    census: int = 400

    def to_json(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "share": self.share, "configs": self.configs, "census": self.census}

    RANGES = ("kernels=N from 1 to 64, share=F above 0 and at most 1, configs=N from the value of kernels to 256, "
              "census=N from 16 to 100000")

    @classmethod
    def parse(cls, text: str | None) -> Budget:
        """``kernels=8,share=0.9,configs=16,census=400`` (any of the four, each once; the rest keep their defaults).  None
        is the defaults; an empty text or entry is refused.  Messages carry no prefix: the caller names the flag."""
        if text is None:
            return cls()
        if not text.strip():
            raise ValueError(f"the value is empty: give one or more of {cls.RANGES} (e.g. kernels=4,share=0.8), or leave "
                             "the flag out for the defaults (kernels=8,share=0.9,configs=16,census=400)")
        d: dict[str, Any] = {}
        for part in text.split(","):
            key, eq, val = (x.strip() for x in part.strip().partition("="))
            if not part.strip():
                raise ValueError(f"'{text}' has an empty entry: give KEY=NUMBER entries separated by single commas "
                                 f"({cls.RANGES})")
            if not eq or not key:
                raise ValueError(f"'{part.strip()}' is not KEY=NUMBER ({cls.RANGES})")
            if key in d:
                raise ValueError(f"{key} is given twice ('{text}'): give each key once")
            try:
                d[key] = float(val) if key == "share" else int(val)
            except ValueError:
                kind = "a number" if key == "share" else "a whole number"
                raise ValueError(f"'{part.strip()}': {key} must be {kind} ({cls.RANGES})") from None
        return cls._checked(d)

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Budget:
        """run.json ``ncu.budget``; a ValueError says ``ncu.budget: ...``."""
        try:
            return cls._checked(dict(d or {}))
        except ValueError as exc:
            raise ValueError(f"ncu.budget: {exc}") from None

    @classmethod
    def _checked(cls, d: dict[str, Any]) -> Budget:
        unknown = sorted(set(d) - {"kernels", "share", "configs", "census"})
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)} (known: {cls.RANGES})")
        b = cls(**{k: d[k] for k in ("kernels", "share", "configs", "census") if k in d})
        problems = []
        if not (isinstance(b.kernels, int) and not isinstance(b.kernels, bool) and 1 <= b.kernels <= 64):
            problems.append(f"kernels must be a whole number from 1 to 64 (got {b.kernels!r})")
        if not (isinstance(b.share, (int, float)) and not isinstance(b.share, bool) and 0 < b.share <= 1):
            problems.append(f"share must be a number above 0 and at most 1 (got {b.share!r})")
        if not (isinstance(b.configs, int) and not isinstance(b.configs, bool) and b.kernels <= b.configs <= 256):
            problems.append(f"configs must be from the value of kernels ({b.kernels!r}) to 256 (got {b.configs!r})")
        if not (isinstance(b.census, int) and not isinstance(b.census, bool) and 16 <= b.census <= 100000):
            problems.append(f"census must be a whole number from 16 to 100000 (got {b.census!r})")
        if problems:
            raise ValueError("; ".join(problems))
        return b


def function_base(name: str) -> str:
    """ncu's "function" base of a demangled kernel name: ``void at::native::(anonymous
    namespace)::vectorized_elementwise_kernel<4, ...>(int, T2, T3)`` -> ``vectorized_elementwise_kernel``;
    a Triton or ``extern "C"`` name is itself.  ncu prints an anonymous namespace as ``(anonymous namespace)``,
    ``<unnamed>`` or, in its raw CSV, ``unnamed>`` (its ``<`` lost: ``void unnamed>::cunn_SoftMaxForwardReg<float,
    float, float, unnamed>::SoftMaxForwardEpilogue, long, 8>(...)`` on the H100), whose lone ``>`` closed the
    template early and left ``8`` as the base: each is dropped first (a template's own ``<`` before ``unnamed>::``
    stays: ``CatArrayBatchedCopy<unnamed>::OpaqueType<4>, ...>``)."""
    n = re.sub(r"\(anonymous namespace\)::|(?:(?<=[<\s,:])|^)<unnamed>::|(?<!\w)unnamed>::", "", name.strip())
    depth, cut = 0, len(n)
    for i, ch in enumerate(n):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            cut = i
            break
    n = n[:cut]
    out, depth = [], 0
    for ch in n:  # drop template arguments, nested ones included
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    n = "".join(out).strip().rsplit("::", 1)[-1].strip()
    n = n.split()[-1] if n.split() else n  # the return type before the name
    return n or name.strip()


def labels(names: list[str]) -> list[str]:
    """A unique label per kernel, in order: its function base (reduced to a word), then ``#2``, ``#3`` for
    the second and third distinct name of that base."""
    out, seen, count = [], {}, {}
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_]", "_", function_base(name)) or "kernel"
        if not base[0].isalpha() and base[0] != "_":
            base = "_" + base
        key = (base, name)
        if key not in seen:
            count[base] = count.get(base, 0) + 1
            seen[key] = base if count[base] == 1 else f"{base}#{count[base]}"
        out.append(seen[key])
    return out


def owner(name: str, defined: list[str]) -> str:
    """``own`` when the kernel is one the version's source defines, else ``library``."""
    return "own" if own_kernels([name], defined) else "library"


# --- the census ---------------------------------------------------------------------------------
def _value(text: str) -> float | None:
    v = ncu_parse.parse_value(text)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def launches(raw_csv: str | None) -> list[dict[str, Any]]:
    """ncu's raw page of a pass over the whole call -> one record per launch, in launch order: {name, grid,
    block} and the SUM_KEYS (duration_us, dram_bytes_read, dram_bytes_write).  Reads only those columns (a
    census of thousands of launches has some 200 columns, mostly the device's attributes)."""
    rows = ncu_parse.csv_rows(raw_csv or "")
    if not rows:
        return []
    col = {name: i for i, name in enumerate(rows[0])}
    units = next((r for r in rows[1:] if r and r[0].strip() == ""), [])

    def cell(row: list[str], name: str) -> str:
        i = col.get(name)
        return row[i] if i is not None and i < len(row) else ""

    scale = unit_factor("us", cell(units, SUM_KEYS["duration_us"]) or "ns") or 1e-3
    out = []
    for row in rows[1:]:
        if not row or row[0].strip() == "" or len(row) != len(rows[0]):
            continue
        rec = {"name": cell(row, "Kernel Name").strip(), "grid": ncu_parse.parse_dim3(cell(row, "Grid Size")),
               "block": ncu_parse.parse_dim3(cell(row, "Block Size"))}
        rec.update({key: _value(cell(row, metric)) for key, metric in SUM_KEYS.items()})
        if rec["duration_us"] is not None:
            rec["duration_us"] *= scale
        out.append(rec)
    return out


def table(recs: list[dict[str, Any]], defined: list[str]) -> dict[str, Any]:
    """Launch records -> the inventory: one row per kernel name, largest time first, with its launches,
    total time, share of the call's kernel time, owner and distinct launch configurations; and the sums."""
    total = sum(r["duration_us"] or 0.0 for r in recs)
    rows: dict[str, dict[str, Any]] = {}
    for r in recs:
        row = rows.setdefault(r["name"], {"name": r["name"], "launches": 0, "time_us": 0.0, "configs": {}})
        row["launches"] += 1
        row["time_us"] += r["duration_us"] or 0.0
        cfg = row["configs"].setdefault((tuple(r.get("grid") or ()), tuple(r.get("block") or ())),
                                        {"launches": 0, "time_us": 0.0})
        cfg["launches"] += 1
        cfg["time_us"] += r["duration_us"] or 0.0
    names = list(rows)
    for name, label in zip(names, labels(names), strict=True):
        row = rows[name]
        row["label"] = label
        row["base"] = function_base(name)
        row["owner"] = owner(name, defined)
        row["share"] = row["time_us"] / total if total > 0 else 0.0
        row["configs"] = [{"grid": list(g), "block": list(b), **c} for (g, b), c in row["configs"].items()]
    ordered = sorted(rows.values(), key=lambda r: -r["time_us"])
    sums = {key: (sum(r[key] for r in recs) if all(r[key] is not None for r in recs) else None)
            for key in SUM_KEYS}
    return {"launches": len(recs), "kernel_time_us": total, "rows": ordered, "sums": sums}


def choose(inv: dict[str, Any], budget: Budget) -> list[dict[str, Any]]:
    """The rows that get the detailed pass: own kernels (largest first), then library kernels (largest
    first) until the chosen hold ``budget.share`` of the time; at most ``budget.kernels`` function names and
    ``budget.configs`` distinct configurations in all.  ncu matches by function name, so choosing a row
    chooses every row of its function base (template instances of one kernel): they count together.  A row
    whose function base ncu cannot match by name (not a plain identifier) is left out."""
    by_base: dict[str, list[dict[str, Any]]] = {}
    for r in inv["rows"]:
        by_base.setdefault(r["base"], []).append(r)
    order = [r for r in inv["rows"] if r["owner"] == "own"] + [r for r in inv["rows"] if r["owner"] != "own"]
    bases: list[str] = []
    share, configs = 0.0, 0
    for r in order:
        if r["base"] in bases or len(bases) >= budget.kernels or not _IDENT.match(r["base"]):
            continue
        if r["owner"] != "own" and share >= budget.share:
            break
        group = by_base[r["base"]]
        n = sum(len(g["configs"]) for g in group)
        if bases and configs + n > budget.configs:
            continue
        bases.append(r["base"])
        share += sum(g["share"] for g in group)
        configs += n
    return [r for r in inv["rows"] if r["base"] in bases]


def unseen_own(inv: dict[str, Any], defined: list[str]) -> list[str]:
    """The kernels the version's source defines (plain identifiers) that a census sample did not reach: a call's
    own kernel may run after its first launches (a network's last layer)."""
    seen = {r["base"] for r in inv["rows"]} | {r["name"] for r in inv["rows"]}
    return [d for d in dict.fromkeys(defined) if _IDENT.match(d) and d not in seen]


def detail_filter(chosen: list[dict[str, Any]], also: list[str] = ()) -> list[str]:
    """ncu's filter for the detailed pass: the chosen kernels by function base (and the function names
    ``also``), one launch of each distinct launch configuration (ncu's ``--filter-mode per-launch-config`` with
    ``--launch-count 1``)."""
    bases = sorted({re.escape(r["base"]) for r in chosen} | {re.escape(a) for a in also})
    # anchored, with any namespaces ncu may keep in a function's name (at::native::...)
    return ["--kernel-name-base", "function", "--kernel-name", "regex:^(?:\\w+::)*(?:" + "|".join(bases) + ")$",
            "--filter-mode", "per-launch-config", "--launch-count", "1"]


def representatives(inv: dict[str, Any], records: list[dict[str, Any]], defined: list[str]
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """One profiled record per kernel of the inventory, largest time first: the launch of the kernel's
    configuration that holds most of its time, with the kernel's ``label``, ``owner``, ``launches``,
    ``time_us`` and ``share`` in the whole call.  Also the names of detailed records the inventory does not
    list (then kept as kernels of one launch each)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_name.setdefault(rec["name"], []).append(rec)
    out, total = [], inv["kernel_time_us"]
    for row in inv["rows"]:
        recs = by_name.pop(row["name"], [])
        if not recs:
            continue
        weight = {(tuple(c["grid"]), tuple(c["block"])): c["time_us"] for c in row["configs"]}
        rep = max(recs, key=lambda r: weight.get((tuple(r.get("grid") or ()), tuple(r.get("block") or ())), 0.0))
        out.append({**rep, "label": row["label"], "owner": row["owner"], "launches": row["launches"],
                    "time_us": row["time_us"], "share": row["share"], "configs": len(row["configs"])})
    stray = list(by_name)
    taken = {k["label"] for k in out}
    for name, recs in by_name.items():
        rep = max(recs, key=lambda r: r["metrics"].get("duration_us") or 0.0)
        label = base = labels([name])[0]
        n = 2
        while label in taken:
            label, n = f"{base}#{n}", n + 1
        taken.add(label)
        us = sum(r["metrics"].get("duration_us") or 0.0 for r in recs)
        out.append({**rep, "label": label, "owner": owner(name, defined),
                    "launches": len(recs), "time_us": us, "share": us / total if total > 0 else 0.0, "configs": 1})
    return out, stray


MINOR_SHARE = 0.05  # a kernel with less time than this fraction of the call's largest kernel's is minor


def minor_labels(kernels: Any) -> set[str]:
    """The labels of the minor kernels among ``kernels`` (each with "label" and "share"): less than MINOR_SHARE of the
    largest one's time.  Their symptom tags rank after every other kernel's and the call's own, and the drafts of
    hypothesis.txt and the KBS evidence leave them out (an agent's trial: a 0.3% torch reduce_kernel finishing a 99.6%
    Triton loss filled the tag table and the draft with its occupancy gap, small grid and launch overhead)."""
    shares = [(k["label"], k["share"]) for k in kernels
              if isinstance(k.get("share"), (int, float)) and not isinstance(k.get("share"), bool)]
    largest = max((v for _, v in shares), default=0.0)
    return {label for label, v in shares if v < MINOR_SHARE * largest}


def focus(kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """The kernel whose metrics stand for the version: its own kernel with the most time in the call, or,
    when it has none, the kernel with the most time; with ``why``."""
    own = [k for k in kernels if k["owner"] == "own"]
    pick = max(own or kernels, key=lambda k: k["time_us"])
    share = f"{100 * pick['share']:.0f}% of the call's kernel time"
    if own:
        why = (f"the version's own kernel with the most time ({share})" if len(own) > 1
               else f"the version's own kernel ({share})")
    else:
        why = f"the kernel with the most time ({share}); the version has no kernel of its own in the call"
    return {**pick, "why": why}
