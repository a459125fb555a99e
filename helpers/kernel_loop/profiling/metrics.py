"""Short metric KEYs (the names ncu.json, the classifier and predictions use) and how each is
read from ncu's metrics.

Each KEY lists candidate ncu metric names (raw page, first one present wins), optionally
``(section, label)`` pairs of the details page as a fallback, and optionally a derivation
from other raw metrics.  Values are normalized to the KEY's unit (duration in microseconds,
clocks in Hz, bytes in bytes, percentages 0..100).  A KEY whose metrics were not collected is
None: nothing is guessed.  Metric names are ncu 2025.3 names on GH100 (checked against the
H100 recordings in tests/fixtures/ncu/).

Which sections feed what: ``--set detailed`` gives speed of light, memory, occupancy, launch
and source counters; the warp-stall KEYs need ``WarpStateStats`` and issue/eligible warps
need ``SchedulerStats`` (both in profile's default sections); the sectors-per-request KEYs
need ``MemoryWorkloadAnalysis_Tables`` or explicit ``--metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STALL_REASONS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "lg_throttle",
                 "math_pipe_throttle", "wait", "not_selected", "no_instruction", "branch_resolving",
                 "membar", "dispatch_stall", "drain", "sleeping", "tex_throttle", "gmma")

# Categories, in the order the summary shows them.
CATEGORIES = ("timing", "speed of light", "memory", "compute", "occupancy", "launch", "scheduler",
              "warp stalls", "branch")

Raw = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Key:
    key: str
    category: str
    unit: str  # "us", "%", "Hz", "byte", "byte/s", "count", "ratio", "cycles", "inst/cycle", "warps"
    doc: str
    names: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    derive: Callable[[Raw], float | None] | None = field(default=None, compare=False)


def _num(raw: Raw, name: str) -> float | None:
    ent = raw.get(name)
    if not ent:
        return None
    v = ent.get("value")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _ratio(num: tuple[str, ...], den: tuple[str, ...], scale: float = 1.0) -> Callable[[Raw], float | None]:
    """sum(num) / sum(den) * scale when every metric is present and the denominator is > 0."""

    def f(raw: Raw) -> float | None:
        ns = [_num(raw, n) for n in num]
        ds = [_num(raw, d) for d in den]
        if any(v is None for v in ns + ds) or sum(ds) <= 0:
            return None
        return sum(ns) / sum(ds) * scale

    return f


def _excess_pct(actual: str, ideal: str) -> Callable[[Raw], float | None]:
    """Share of ``actual`` beyond ``ideal``, in percent (SourceCounters' ideal-vs-actual counters)."""

    def f(raw: Raw) -> float | None:
        a, i = _num(raw, actual), _num(raw, ideal)
        if a is None or i is None or a <= 0:
            return None
        return max(a - i, 0.0) / a * 100.0

    return f


_SOL = "GPU Speed Of Light Throughput"
_OCC = "Occupancy"
_LAUNCH = "Launch Statistics"
_MEM = "Memory Workload Analysis"

_KEYS: list[Key] = [
    Key("duration_us", "timing", "us", "GPU time of the kernel as ncu measured it (under ncu's clock and cache control).",
        ("gpu__time_duration.sum",), ((_SOL, "Duration"),)),
    Key("event_median_us", "timing", "us", "Median CUDA-event time of one solution call, timed outside ncu with an L2 flush per trial."),
    Key("sm_clock_hz", "timing", "Hz", "SM clock during the profiled launch (at base with ncu's default clock control; as the GPU ran it with --clock-control none).",
        ("gpc__cycles_elapsed.avg.per_second",), ((_SOL, "SM Frequency"),)),
    Key("sm_throughput_pct", "speed of light", "%", "Compute (SM) throughput: the busiest SM unit, % of its peak (SOL SM%).",
        ("sm__throughput.avg.pct_of_peak_sustained_elapsed",), ((_SOL, "Compute (SM) Throughput"),)),
    Key("memory_throughput_pct", "speed of light", "%", "Memory throughput: the busiest memory unit (DRAM, L2, L1), % of its peak (SOL Mem%).",
        ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",), ((_SOL, "Memory Throughput"),)),
    Key("dram_throughput_pct", "speed of light", "%", "DRAM bandwidth used, % of peak.",
        ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        ((_SOL, "DRAM Throughput"),)),
    Key("l1_throughput_pct", "speed of light", "%", "L1/TEX cache throughput, % of peak (over active cycles).",
        ("l1tex__throughput.avg.pct_of_peak_sustained_active",), ((_SOL, "L1/TEX Cache Throughput"),)),
    Key("l2_throughput_pct", "speed of light", "%", "L2 cache throughput, % of peak.",
        ("lts__throughput.avg.pct_of_peak_sustained_elapsed",), ((_SOL, "L2 Cache Throughput"),)),
    Key("l1_hit_rate_pct", "memory", "%", "L1/TEX sector hit rate.",
        ("l1tex__t_sector_hit_rate.pct",), ((_MEM, "L1/TEX Hit Rate"),)),
    Key("l2_hit_rate_pct", "memory", "%", "L2 sector hit rate.",
        ("lts__t_sector_hit_rate.pct",), ((_MEM, "L2 Hit Rate"),)),
    Key("dram_bytes_read", "memory", "byte", "Bytes read from DRAM.", ("dram__bytes_read.sum",)),
    Key("dram_bytes_write", "memory", "byte", "Bytes written to DRAM.", ("dram__bytes_write.sum",)),
    Key("dram_bytes_per_s", "memory", "byte/s", "DRAM bandwidth achieved (bytes per second).",
        ("dram__bytes.sum.per_second",), ((_MEM, "Memory Throughput"),)),
    Key("sectors_per_request_ld", "memory", "ratio", "32-byte sectors per global load request (4 = coalesced 4-byte lanes, 16 = coalesced 16-byte lanes).",
        ("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",),
        derive=_ratio(("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",), ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",))),
    Key("sectors_per_request_st", "memory", "ratio", "32-byte sectors per global store request.",
        ("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio",),
        derive=_ratio(("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",), ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",))),
    Key("global_excess_sectors_pct", "memory", "%", "Share of global L2 sectors beyond the ideal for the bytes accessed (uncoalesced or misaligned accesses); from SourceCounters.",
        derive=_excess_pct("memory_l2_theoretical_sectors_global", "memory_l2_theoretical_sectors_global_ideal")),
    Key("local_spill_requests", "memory", "count", "Local-memory requests caused by register spilling.",
        ("derived__local_spilling_requests", "sass__inst_executed_register_spilling"),
        ((_MEM, "Local Memory Spilling Requests"),)),
    Key("smem_bank_conflicts_pct", "memory", "%", "Shared-memory wavefronts beyond the ideal (bank conflicts), % of all shared wavefronts.",
        derive=lambda raw: _excess_pct("memory_l1_wavefronts_shared", "memory_l1_wavefronts_shared_ideal")(raw)
        if _num(raw, "memory_l1_wavefronts_shared") is not None else _ratio(
            ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
            ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"), 100.0)(raw)),
    Key("ipc", "compute", "inst/cycle", "Warp instructions executed per active SM cycle.",
        ("sm__inst_executed.avg.per_cycle_active",), (("Compute Workload Analysis", "Executed Ipc Active"),)),
    Key("tensor_pipe_pct", "compute", "%", "Tensor pipes busy, % of peak (all tensor instructions).",
        ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",)),
    Key("gmma_pct", "compute", "%", "Hopper wgmma (GMMA) instructions executed, % of the peak issue rate: nonzero means "
        "wgmma runs; it is not how busy the tensor pipe is (one wgmma is a 64xNx16 product, so a kernel at 90% of the "
        "bf16 peak read 2.5 on the H200): for that, tensor_pipe_pct.",
        ("sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed",)),
    Key("fma_pipe_pct", "compute", "%", "FMA pipe busy, % of peak (FP32 multiply-add on CUDA cores).",
        ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",)),
    Key("achieved_occupancy_pct", "occupancy", "%", "Active warps per SM over the run, % of the hardware maximum.",
        ("sm__warps_active.avg.pct_of_peak_sustained_active",), ((_OCC, "Achieved Occupancy"),)),
    Key("theoretical_occupancy_pct", "occupancy", "%", "Most warps per SM this launch configuration allows, % of the hardware maximum.",
        ("sm__maximum_warps_per_active_cycle_pct",), ((_OCC, "Theoretical Occupancy"),)),
    Key("occupancy_limit_registers", "occupancy", "count", "Blocks per SM allowed by register use.",
        ("launch__occupancy_limit_registers",), ((_OCC, "Block Limit Registers"),)),
    Key("occupancy_limit_shared_mem", "occupancy", "count", "Blocks per SM allowed by shared-memory use.",
        ("launch__occupancy_limit_shared_mem",), ((_OCC, "Block Limit Shared Mem"),)),
    Key("occupancy_limit_warps", "occupancy", "count", "Blocks per SM allowed by warps per block.",
        ("launch__occupancy_limit_warps",), ((_OCC, "Block Limit Warps"),)),
    Key("occupancy_limit_blocks", "occupancy", "count", "Blocks per SM allowed by the hardware block limit.",
        ("launch__occupancy_limit_blocks",), ((_OCC, "Block Limit SM"),)),
    Key("registers_per_thread", "launch", "count", "Registers per thread.",
        ("launch__registers_per_thread",), ((_LAUNCH, "Registers Per Thread"),)),
    Key("shared_mem_per_block", "launch", "byte", "Shared memory per block (static + dynamic + driver-reserved).",
        ("launch__shared_mem_per_block",)),
    Key("grid_size", "launch", "count", "Blocks in the grid.", ("launch__grid_size",), ((_LAUNCH, "Grid Size"),)),
    Key("block_size", "launch", "count", "Threads per block.", ("launch__block_size",), ((_LAUNCH, "Block Size"),)),
    Key("waves_per_sm", "launch", "ratio", "Waves of blocks per SM at the theoretical occupancy.",
        ("launch__waves_per_multiprocessor",), ((_LAUNCH, "Waves Per SM"),)),
    Key("sm_count", "launch", "count", "Streaming multiprocessors on the GPU.",
        ("launch__sm_count", "device__attribute_multiprocessor_count"), ((_LAUNCH, "# SMs"),)),
    Key("issue_active", "scheduler", "inst/cycle", "Instructions issued per scheduler per active cycle (1.0 = every cycle).",
        ("smsp__issue_active.avg.per_cycle_active",)),
    Key("eligible_warps", "scheduler", "warps", "Warps eligible to issue per scheduler per active cycle.",
        ("smsp__warps_eligible.avg.per_cycle_active",)),
    Key("warp_latency_cycles", "warp stalls", "cycles", "Cycles between two instructions issued by one warp (sum of all stall reasons).",
        ("smsp__average_warp_latency_per_inst_issued.ratio",)),
    *[Key(f"stall_{r}", "warp stalls", "cycles", f"Cycles per issued instruction a warp spends stalled on {r.replace('_', ' ')}.",
          (f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio",)) for r in STALL_REASONS],
    Key("thread_inst_per_inst", "branch", "ratio", "Active threads per executed warp instruction (32 = no divergence).",
        ("smsp__thread_inst_executed_per_inst_executed.ratio",),
        derive=_ratio(("thread_inst_executed",), ("inst_executed",))),
]

KEYS: dict[str, Key] = {k.key: k for k in _KEYS}

# Unit scale factors to the KEY units (ncu's base units, plus the scaled ones --print-units auto uses).
_TIME = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def unit_factor(key_unit: str, ncu_unit: str) -> float | None:
    """Factor from ``ncu_unit`` to ``key_unit``; None when they are not convertible."""
    u = ncu_unit.strip()
    if key_unit == "us":
        return _TIME.get(u)
    for base, names in (("Hz", ("hz", "Hz")), ("byte", ("byte", "byte/block")), ("byte/s", ("byte/s", "byte/second"))):
        if key_unit == base:
            for p, f in _PREFIX.items():
                if any(u == p + n or u == p.lower() + n for n in names):
                    return f
            return None
    return 1.0  # percentages, counts and ratios are unit-less or already in the KEY unit


def _clean(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return None if math.isnan(v) or math.isinf(v) else float(v)


def _from_labels(spec: Key, sections: dict[str, list[dict[str, Any]]]) -> float | None:
    for section, label in spec.labels:
        for item in sections.get(section, []):
            if item["name"] == label:
                f = unit_factor(spec.unit, item.get("unit", ""))
                v = _clean(item["value"])
                if f is not None and v is not None:
                    return item["value"] if isinstance(item["value"], int) and f == 1.0 else v * f
    return None


def extract(kernel: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    """One parsed kernel -> ({KEY: value or None}, {KEY: source}); ``source`` says which ncu
    metric (or details label, or derivation) gave the value.  NaN is reported as NaN so that the
    trust checks can catch it; everything else missing is None."""
    raw: Raw = kernel.get("raw", {})
    sections = kernel.get("sections", {})
    values: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    for spec in _KEYS:
        val: float | None = None
        for name in spec.names:
            ent = raw.get(name)
            if ent is None or ent.get("value") is None:
                continue
            v = ent["value"]
            if isinstance(v, float) and math.isnan(v):
                val, sources[spec.key] = math.nan, name
                break
            f = unit_factor(spec.unit, ent.get("unit", ""))
            if f is not None and _clean(v) is not None:
                val, sources[spec.key] = (v if isinstance(v, int) and f == 1.0 else float(v) * f), name
                break
        if val is None and spec.derive is not None:
            val = spec.derive(raw)
            if val is not None:
                sources[spec.key] = "derived"
        if val is None and spec.labels:
            val = _from_labels(spec, sections)
            if val is not None:
                sources[spec.key] = "details page"
        values[spec.key] = val
    return values, sources


def doc(key: str) -> str:
    """One line: what the KEY means and its unit (stall_* and unknown keys included)."""
    spec = KEYS.get(key)
    if spec is None:
        return f"{key}: unknown metric key"
    return f"{spec.doc} [{spec.unit}]"


def by_category() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for spec in _KEYS:
        out[spec.category].append(spec.key)
    return out
