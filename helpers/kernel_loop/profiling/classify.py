"""Bottleneck class and symptom tags from measured metrics (KEYs of metrics.py).

Bottleneck (after ncu's SOLBottleneck rule), with SM = sm_throughput_pct and
Mem = memory_throughput_pct:

1. max(SM, Mem) >= 60 and |SM - Mem| >= 10  -> compute-bound if SM > Mem, else memory-bound;
2. otherwise, SM < 60 and Mem < 60           -> latency-bound;
3. otherwise (one >= 60, within 10 points)   -> balanced.

Symptom tags come only from ``symptoms.SYMPTOMS``; each check below implements that tag's
``fires_when`` text.  A fired tag records the metric values it read, the thresholds, a
one-line why, and its source (our metrics or an ncu rule row).  A tag whose inputs were not
collected does not fire and is listed as not evaluated.

"X% of cycles between issues" for a stall reason is stall_X / warp_latency_cycles (both are
cycles per issued instruction); without warp_latency_cycles the sum of the collected stall_*
values is the denominator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..vocab import BOTTLENECK_CLASSES, SYMPTOMS
from .metrics import STALL_REASONS

SOL_HIGH = 60.0
SOL_GAP = 10.0

# ncu rule rows (OPT or WRN) that fire a tag by themselves.
RULE_TAGS = {
    "UncoalescedGlobalAccess": "uncoalesced-global",
    "SharedMemoryConflicts": "smem-bank-conflicts",
    "UncoalescedSharedAccess": "smem-bank-conflicts",
}
ACTIONABLE_RULE_TYPES = ("OPT", "WRN")

Metrics = dict[str, Any]


def _ok(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def bottleneck(m: Metrics) -> str | None:
    """The bottleneck class, or None when either speed-of-light value is missing."""
    sm, mem = m.get("sm_throughput_pct"), m.get("memory_throughput_pct")
    if not (_ok(sm) and _ok(mem)):
        return None
    if max(sm, mem) >= SOL_HIGH and abs(sm - mem) >= SOL_GAP:
        cls = "compute-bound" if sm > mem else "memory-bound"
    elif sm < SOL_HIGH and mem < SOL_HIGH:
        cls = "latency-bound"
    else:
        cls = "balanced"
    assert cls in BOTTLENECK_CLASSES
    return cls


MEMORY_LEVELS = (("DRAM", "dram_throughput_pct"), ("L2", "l2_throughput_pct"), ("L1/shared", "l1_throughput_pct"))


def memory_level(m: Metrics) -> str | None:
    """The memory level that binds: the busiest of DRAM, L2 and L1/shared memory (None when none was collected).
    memory_throughput_pct is the busiest memory unit, so a memory-bound kernel may be bound on shared memory
    with DRAM nearly idle."""
    levels = [(m[key], name) for name, key in MEMORY_LEVELS if _ok(m.get(key))]
    return max(levels)[1] if levels else None


def bottleneck_why(m: Metrics, cls: str | None) -> str:
    if cls is None:
        return "speed-of-light throughput was not collected"
    sm, mem = m["sm_throughput_pct"], m["memory_throughput_pct"]
    level = memory_level(m) if cls == "memory-bound" else None
    if level is None:
        return f"SM {sm:.1f}% vs memory {mem:.1f}% of peak: {BOTTLENECK_CLASSES[cls]}"
    each = ", ".join(f"{name} {m[key]:.1f}%" for name, key in MEMORY_LEVELS if _ok(m.get(key)))
    return (f"SM {sm:.1f}% vs memory {mem:.1f}% of peak, bound at {level} ({each}"
            f"{'' if level == 'DRAM' else f': the load is on {level}, not DRAM'}): {BOTTLENECK_CLASSES[cls]}")


@dataclass(frozen=True)
class Check:
    tag: str
    needs: tuple[str, ...]          # all required
    fn: Callable[[Metrics, dict[str, Any]], tuple[dict[str, str], str] | None]
    any_of: tuple[str, ...] = ()    # at least one required (for "a or b" rules)


def _stall_share(m: Metrics, reason: str) -> float | None:
    stall = m.get(f"stall_{reason}")
    if not _ok(stall):
        return None
    total = m.get("warp_latency_cycles")
    if not _ok(total):
        total = sum(m[f"stall_{r}"] for r in STALL_REASONS if _ok(m.get(f"stall_{r}")))
    return 100.0 * stall / total if total and total > 0 else None


def _stall_check(reason: str, *, needs_low_issue: bool, must_be_top: bool = False) -> Check:
    key = f"stall_{reason}"

    def fn(m: Metrics, ctx: dict[str, Any]):
        share = _stall_share(m, reason)
        if share is None or share <= 30:
            return None
        if needs_low_issue and m["issue_active"] >= 0.8:
            return None
        if must_be_top:
            top = max((r for r in STALL_REASONS if _ok(m.get(f"stall_{r}"))), key=lambda r: m[f"stall_{r}"])
            if top != reason:
                return None
        th = {key: "> 30% of warp_latency_cycles"}
        why = f"{reason.replace('_', ' ')} stalls take {share:.0f}% of the cycles between issues"
        if needs_low_issue:
            th["issue_active"] = "< 0.8"
            why += f" and schedulers issue only {m['issue_active']:.2f} per cycle"
        if must_be_top:
            why += " (the top stall reason)"
        return th, why

    return Check(f"{reason.replace('_', '-')}-stalls" if reason != "math_pipe_throttle" else "math-pipe-throttle",
                 (key, "issue_active") if needs_low_issue else (key,), fn)


def _uncoalesced(m: Metrics, ctx: dict[str, Any]):
    ex = m.get("global_excess_sectors_pct")
    if _ok(ex) and ex >= 20:
        return ({"global_excess_sectors_pct": ">= 20"},
                f"{ex:.0f}% of global L2 sectors are beyond the ideal for the bytes accessed")
    for key in ("sectors_per_request_ld", "sectors_per_request_st"):
        v = m.get(key)
        if _ok(v) and v > 16.5:
            return ({key: "> 16.5"}, f"{v:.1f} sectors per request, more than even a coalesced 16-byte-per-lane access needs (16)")
    return None


def _bank_conflicts(m: Metrics, ctx: dict[str, Any]):
    v = m["smem_bank_conflicts_pct"]
    if v >= 10:
        return {"smem_bank_conflicts_pct": ">= 10"}, f"{v:.0f}% of shared-memory wavefronts are extra (bank conflicts)"
    return None


_LIMITS = {"registers": ("occupancy_limit_registers",), "shared memory": ("occupancy_limit_shared_mem",),
           "warps or blocks": ("occupancy_limit_warps", "occupancy_limit_blocks")}
_LIMIT_KEYS = ("occupancy_limit_registers", "occupancy_limit_shared_mem", "occupancy_limit_warps", "occupancy_limit_blocks")


def _occupancy(which: str) -> Callable:
    def fn(m: Metrics, ctx: dict[str, Any]):
        theo = m["theoretical_occupancy_pct"]
        smallest = min(m[k] for k in _LIMIT_KEYS)
        mine = [k for k in _LIMITS[which] if m[k] == smallest]
        if theo >= 80 or not mine:
            return None
        return ({"theoretical_occupancy_pct": "< 80", mine[0]: f"= min of block limits ({smallest:g})"},
                f"theoretical occupancy {theo:.1f}% is capped by {which}: {smallest:g} blocks per SM")
    return fn


def _tail(m: Metrics, ctx: dict[str, Any]):
    w = m["waves_per_sm"]
    full = math.floor(w)
    if w >= 1 and w - full > 0 and 1.0 / (1 + full) >= 0.2:
        fill = w - full  # the last wave's share of a full wave's block slots
        grid = m.get("grid_size")
        held = (f" (about {fill * grid / w:.0f} of {grid / w:.0f} block slots)" if _ok(grid) and grid > 0 else "")
        return ({"waves_per_sm": ">= 1 with a fractional part, 1/(1+full waves) >= 0.2"},
                f"{w:.2f} waves: the last of {full + 1} waves is {100 * fill:.0f}% full{held}, so about "
                f"{100 * (1 - fill) / (full + 1):.0f}% of the run's block slots idle in it")
    return None


def _small_grid(m: Metrics, ctx: dict[str, Any]):
    w, g, n = m["waves_per_sm"], m["grid_size"], m["sm_count"]
    if g < n:
        return ({"grid_size": "< sm_count"}, f"{g:g} blocks on {n:g} SMs: some SMs have no work")
    if w < 1:
        return ({"waves_per_sm": "< 1"}, f"{g:g} blocks fill {w:.2f} of one wave on {n:g} SMs: every SM has work, "
                "but not every block slot the occupancy allows")
    return None


def _simple(key: str, op: str, limit: float, why: str) -> Callable:
    cmp = {"<": lambda a, b: a < b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}[op]

    def fn(m: Metrics, ctx: dict[str, Any]):
        v = m[key]
        return ({key: f"{op} {limit:g}"}, why.format(v=v)) if cmp(v, limit) else None
    return fn


def _wgmma(m: Metrics, ctx: dict[str, Any]):
    if str(ctx.get("cc") or "") != "9.0":
        return None
    if m["tensor_pipe_pct"] >= 5 and m["gmma_pct"] == 0:
        return ({"tensor_pipe_pct": ">= 5", "gmma_pct": "== 0"},
                f"tensor pipes {m['tensor_pipe_pct']:.0f}% busy on sm90 without wgmma instructions (mma.sync only)")
    return None


def _tensor_unused(m: Metrics, ctx: dict[str, Any]):
    """Only for a kernel that does matrix products (``ctx["matrix"]``: kernel_names.matrix_work): a
    normalization's FMAs on CUDA cores are no tensor-core opportunity."""
    if not (m["tensor_pipe_pct"] < 5 and m["fma_pipe_pct"] > 30):
        return None
    if ctx.get("matrix") is None:
        ctx["not_evaluated"].append("tensor-cores-unused: not evaluated: the kernel's source was not read, so "
                                    "whether it does matrix products is unknown")
    if not ctx.get("matrix"):
        return None
    return ({"tensor_pipe_pct": "< 5", "fma_pipe_pct": "> 30", "matrix products": "in the kernel's source or name"},
            f"FMA pipe {m['fma_pipe_pct']:.0f}% busy, tensor pipes {m['tensor_pipe_pct']:.1f}%, in a kernel "
            "that does matrix products")


CHECKS: list[Check] = [
    Check("uncoalesced-global", (), _uncoalesced,
          any_of=("global_excess_sectors_pct", "sectors_per_request_ld", "sectors_per_request_st")),
    Check("smem-bank-conflicts", ("smem_bank_conflicts_pct",), _bank_conflicts),
    Check("register-spills", ("local_spill_requests",),
          _simple("local_spill_requests", ">", 0, "{v:g} local-memory requests come from register spills")),
    *[Check(f"occupancy-limited-{t}", ("theoretical_occupancy_pct", *_LIMIT_KEYS), _occupancy(w))
      for t, w in (("registers", "registers"), ("smem", "shared memory"), ("blocksize", "warps or blocks"))],
    Check("achieved-occupancy-gap", ("theoretical_occupancy_pct", "achieved_occupancy_pct"),
          lambda m, c: ({"theoretical_occupancy_pct - achieved_occupancy_pct": "> 10"},
                        f"achieved {m['achieved_occupancy_pct']:.1f}% vs theoretical {m['theoretical_occupancy_pct']:.1f}%")
          if m["theoretical_occupancy_pct"] - m["achieved_occupancy_pct"] > 10 else None),
    _stall_check("long_scoreboard", needs_low_issue=True, must_be_top=True),
    _stall_check("short_scoreboard", needs_low_issue=True),
    _stall_check("barrier", needs_low_issue=True),
    _stall_check("mio_throttle", needs_low_issue=True),
    _stall_check("lg_throttle", needs_low_issue=True),
    _stall_check("math_pipe_throttle", needs_low_issue=False),
    Check("low-issue-efficiency", ("issue_active",),
          _simple("issue_active", "<", 0.6, "schedulers issue only {v:.2f} instructions per cycle")),
    Check("tail-effect", ("waves_per_sm",), _tail),
    Check("small-grid", ("waves_per_sm", "grid_size", "sm_count"), _small_grid),
    Check("block-size-not-multiple-32", ("block_size",),
          lambda m, c: ({"block_size": "% 32 != 0"}, f"{m['block_size']:g} threads per block leave lanes idle")
          if m["block_size"] % 32 != 0 else None),
    Check("tensor-cores-unused", ("tensor_pipe_pct", "fma_pipe_pct"), _tensor_unused),
    Check("wgmma-unused", ("tensor_pipe_pct", "gmma_pct"), _wgmma),
    Check("low-l2-hit-rate", ("l2_hit_rate_pct", "dram_throughput_pct"),
          lambda m, c: ({"l2_hit_rate_pct": "< 50", "dram_throughput_pct": ">= 40"},
                        f"L2 hit rate {m['l2_hit_rate_pct']:.0f}% with DRAM {m['dram_throughput_pct']:.0f}% busy")
          if m["l2_hit_rate_pct"] < 50 and m["dram_throughput_pct"] >= 40 else None),
    Check("warp-divergence", ("thread_inst_per_inst",),
          _simple("thread_inst_per_inst", "<", 28, "only {v:.1f} of 32 threads active per instruction")),
    Check("dram-near-peak", ("dram_throughput_pct",),
          _simple("dram_throughput_pct", ">=", 80, "DRAM at {v:.0f}% of peak bandwidth")),
    Check("compute-near-peak", ("sm_throughput_pct",),
          _simple("sm_throughput_pct", ">=", 80, "the busiest SM unit at {v:.0f}% of peak")),
    Check("launch-overhead", ("duration_us",),
          _simple("duration_us", "<", 10, "the kernel runs {v:.2f} us, short enough for launch cost to matter")),
]
assert {c.tag for c in CHECKS} | {"multi-kernel"} == set(SYMPTOMS), "classify.CHECKS and symptoms.SYMPTOMS differ"


def symptoms(m: Metrics, *, rules: list[dict[str, Any]] | None = None, cc: str | None = None,
             matrix: bool | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Fire tags for one kernel -> (fired, not_evaluated notes).  ``matrix``: whether the kernel does matrix
    products (kernel_names.matrix_work; None when its source was not read)."""
    not_evaluated: list[str] = []
    ctx = {"cc": cc, "matrix": matrix, "not_evaluated": not_evaluated}
    fired: list[dict[str, Any]] = []
    rule_hits: dict[str, dict[str, Any]] = {}
    for r in rules or []:
        tag = RULE_TAGS.get(r.get("rule", ""))
        if tag and r.get("type") in ACTIONABLE_RULE_TYPES and tag not in rule_hits:
            rule_hits[tag] = r
    for check in CHECKS:
        missing = [k for k in check.needs if not _ok(m.get(k))]
        any_missing = bool(check.any_of) and not any(_ok(m.get(k)) for k in check.any_of)
        hit = None
        if not missing and not any_missing:
            hit = check.fn(m, ctx)
        if hit:
            th, why = hit
            used = [*check.needs, *(k for k in check.any_of if _ok(m.get(k)))]
            fired.append({"tag": check.tag, "metrics": {k: m.get(k) for k in used}, "thresholds": th,
                          "why": why, "source": "metrics"})
        elif check.tag in rule_hits:
            r = rule_hits[check.tag]
            sp = f" (ncu estimates {r['est_speedup_pct']:g}% speedup)" if r.get("est_speedup_pct") is not None else ""
            fired.append({"tag": check.tag, "metrics": {}, "thresholds": {"ncu rule": r["rule"]},
                          "why": f"ncu's {r['rule']} rule fired{sp}", "source": f"ncu rule {r['rule']}"})
        elif missing or any_missing:
            names = missing or list(check.any_of)
            joined = " or ".join(names) if any_missing and not missing else ", ".join(names)
            not_evaluated.append(f"{check.tag}: not evaluated: metric {joined} not collected")
    return fired, not_evaluated
