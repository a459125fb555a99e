"""CUDA-event timing of callables, one method for ``profile``, ``benchmark`` and its A/B trials.

The method (``time_callables``), per trial of each callable:

1. a short device-side delay is queued (``torch.cuda._sleep``, a spin kernel), long enough to
   cover the host's dispatch of what follows, so the CPU gets ahead of the GPU;
2. a buffer twice the L2 size is overwritten (no trial reads what the previous one left in L2);
3. the start event, the call, the end event.

Because the GPU is still busy with the delay and the flush while Python dispatches the call, the
window between the events holds the call's device work, not the host's launch overhead.  The
host's own cost per call (the time ``fn()`` takes to return, without a synchronize) is measured
during the warmup and reported next to the device time as ``host_overhead_us``.

The primitives (the Event class and its ``record``/``elapsed_time``, ``synchronize``, the sleep
kernel, ``time.perf_counter``) are bound by ``bind()`` before any kernel file is imported, so a
kernel that patches them at import time does not change what is measured.  ``summarize`` is pure
and the parent recomputes the statistics from the raw samples.
"""

from __future__ import annotations

import math
import statistics
import time as _time
from collections.abc import Callable
from typing import Any

FALLBACK_FLUSH_BYTES = 256 * 1024 * 1024
_FLUSH_BUFFERS: dict[int, Any] = {}  # CUDA device index -> int32 buffer of flush_bytes(device), kept for reuse


def percentile(sorted_xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples_us: list[float]) -> dict[str, Any]:
    """{median, p20, p25, p75, p80, mean, min, max, std, n}; std is the sample standard deviation."""
    xs = [float(x) for x in samples_us]
    if not xs:
        raise ValueError("no timing samples")
    if any(math.isnan(x) or math.isinf(x) for x in xs):
        raise ValueError("timing samples contain NaN or infinity")
    s = sorted(xs)
    return {
        "median": percentile(s, 0.5),
        "p20": percentile(s, 0.2),
        "p25": percentile(s, 0.25),
        "p75": percentile(s, 0.75),
        "p80": percentile(s, 0.8),
        "mean": statistics.fmean(s),
        "min": s[0],
        "max": s[-1],
        "std": statistics.stdev(s) if len(s) > 1 else 0.0,
        "n": len(s),
    }


def flush_bytes(device: Any = None) -> int:
    """Twice the L2 size of the device (a buffer that evicts all of L2), or 256 MB if unknown."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    return 2 * int(l2) if l2 > 0 else FALLBACK_FLUSH_BYTES


def flush_buffer(dev: Any) -> Any:
    """The L2-flush buffer of CUDA device ``dev`` (a torch.device with an index), allocated on first
    use and then kept for the life of the process, so that many short timings (benchmark's A/B
    trials time one call each) do not each allocate and free 2x L2."""
    import torch

    buf = _FLUSH_BUFFERS.get(dev.index)
    if buf is None:
        buf = _FLUSH_BUFFERS[dev.index] = torch.empty(flush_bytes(dev) // 4, dtype=torch.int32, device=dev)
    return buf


class _Primitives:
    """The timing primitives as they were when ``bind()`` ran (before the kernel was imported)."""

    def __init__(self) -> None:
        import torch

        self.Event = torch.cuda.Event
        self.record = torch.cuda.Event.record
        self.elapsed = torch.cuda.Event.elapsed_time
        self.synchronize = torch.cuda.synchronize
        self.sleep = getattr(torch.cuda, "_sleep", None)
        self.perf_counter = _time.perf_counter
        self.ns_per_cycle: float | None = None


_P: _Primitives | None = None
HOST_MARGIN_US = 30.0  # the delay covers the measured host dispatch twice, plus this (the flush's own dispatch)
MAX_DELAY_US = 20_000.0


def bind() -> _Primitives:
    """Capture the timing primitives (idempotent).  ``runner`` calls it before any user code runs."""
    global _P
    if _P is None:
        _P = _Primitives()
    return _P


def _ns_per_cycle(p: _Primitives) -> float:
    """How long one cycle of the sleep kernel lasts on this device, measured once per process."""
    if p.ns_per_cycle is None:
        cycles = 200_000
        s, e = p.Event(enable_timing=True), p.Event(enable_timing=True)
        p.sleep(1000)
        p.record(s)
        p.sleep(cycles)
        p.record(e)
        p.synchronize()
        p.ns_per_cycle = max(p.elapsed(s, e) * 1e6 / cycles, 1e-3)
    return p.ns_per_cycle


def host_overhead_us(fn: Callable[[], Any], calls: int) -> float:
    """The median time ``fn()`` takes to return on the host (its dispatch cost; no synchronize)."""
    p = bind()
    xs = []
    for _ in range(max(1, calls)):
        t0 = p.perf_counter()
        fn()
        xs.append((p.perf_counter() - t0) * 1e6)
    return statistics.median(xs)


def _plan(n: int, trials: int, order: str) -> list[tuple[int, int]]:
    """(callable, trial) in the order they run: each callable's trials in a row, or alternating."""
    if order not in ("same", "alternate"):
        raise ValueError(f"unknown order {order!r}")
    if order == "alternate":
        return [(i, t) for t in range(trials) for i in (range(n) if t % 2 == 0 else reversed(range(n)))]
    return [(i, t) for i in range(n) for t in range(trials)]


def time_callables(fns: list[Callable[[], Any]], *, warmup: int, trials: int, order: str = "same",
                   flush_l2: bool = True, device: Any = None) -> list[dict[str, Any]]:
    """Time every callable of ``fns`` ``trials`` times with the method of the module docstring.

    ``order="same"`` runs each callable's trials in a row; ``"alternate"`` interleaves them (A B, B A,
    A B, ...: the A/B order, so drift hits both sides alike).  ``warmup`` untimed calls of each first
    (they also finish JIT compilation and autotuning, and give the host overhead).  One result per
    callable: {"method", "warmup", "trials", "l2_flush", "flush_bytes", "host_overhead_us",
    "device_delay_us", "samples_us", **summarize(samples_us)}.
    """
    import torch

    if trials < 1 or warmup < 0:
        raise ValueError(f"need trials >= 1 and warmup >= 0 (got trials={trials}, warmup={warmup})")
    p = bind()
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.index is None:
        dev = torch.device(dev.type, torch.cuda.current_device())
    with torch.cuda.device(dev):
        buf = flush_buffer(dev) if flush_l2 else None
        nbytes = 4 * buf.numel() if buf is not None else 0
        host = []
        for fn in fns:
            host.append(host_overhead_us(fn, warmup) if warmup else 0.0)
        p.synchronize(dev)
        ns = _ns_per_cycle(p) if p.sleep is not None else None
        delays = [min(2.0 * h + HOST_MARGIN_US, MAX_DELAY_US) for h in host]
        starts = [[p.Event(enable_timing=True) for _ in range(trials)] for _ in fns]
        ends = [[p.Event(enable_timing=True) for _ in range(trials)] for _ in fns]
        for i, t in _plan(len(fns), trials, order):
            if ns is not None:
                p.sleep(int(delays[i] * 1000.0 / ns))
            if buf is not None:
                buf.fill_(t + 1)
            p.record(starts[i][t])
            fns[i]()
            p.record(ends[i][t])
        p.synchronize(dev)
        out = []
        for i in range(len(fns)):
            samples = [p.elapsed(s, e) * 1000.0 for s, e in zip(starts[i], ends[i], strict=True)]
            out.append({"method": "cuda_event", "warmup": warmup, "trials": trials, "l2_flush": bool(flush_l2),
                        "flush_bytes": nbytes, "host_overhead_us": host[i],
                        "device_delay_us": delays[i] if ns is not None else 0.0,
                        "samples_us": samples, **summarize(samples)})
    return out


def time_callable(fn: Callable[[], Any], *, warmup: int, trials: int, flush_l2: bool = True,
                  device: Any = None) -> dict[str, Any]:
    """``time_callables`` of one callable."""
    return time_callables([fn], warmup=warmup, trials=trials, flush_l2=flush_l2, device=device)[0]


def host_time_callables(fns: list[Callable[[], Any]], *, warmup: int, trials: int, order: str = "same",
                        sync: Callable[[], Any] = lambda: None) -> list[dict[str, Any]]:
    """The CPU test mode's timer: wall time of each call through its ``sync``, same plans as above."""
    p = bind()
    host = [host_overhead_us(fn, warmup) if warmup else 0.0 for fn in fns]
    sync()
    samples: list[list[float]] = [[] for _ in fns]
    for i, _ in _plan(len(fns), trials, order):
        t0 = p.perf_counter()
        fns[i]()
        sync()
        samples[i].append((p.perf_counter() - t0) * 1e6)
    return [{"method": "host_time", "warmup": warmup, "trials": trials, "l2_flush": False, "flush_bytes": 0,
             "host_overhead_us": host[i], "device_delay_us": 0.0, "samples_us": samples[i],
             **summarize(samples[i])} for i in range(len(fns))]
