"""CUDA-event timing of a callable, with an L2 flush before each trial.

``time_callable`` is shared by ``profile`` (the execution time next to ncu's numbers) and
``benchmark``.  ``summarize`` is pure and works on any list of microsecond samples.
"""

from __future__ import annotations

import math
import statistics
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


def time_callable(fn: Callable[[], Any], *, warmup: int, trials: int, flush_l2: bool = True,
                  device: Any = None) -> dict[str, Any]:
    """Time ``fn()`` with CUDA events, one event pair per trial.

    ``warmup`` untimed calls first (they also finish JIT compilation and autotuning); before each
    trial, when ``flush_l2``, a buffer larger than L2 (``flush_buffer``: one per device, reused
    across calls) is overwritten so that no trial reads data the previous one left in cache.  The
    whole device is synchronized before the first and after the last trial.  Returns {"method", "warmup", "trials", "l2_flush", "flush_bytes",
    "samples_us", **summarize(samples_us)}.
    """
    import torch

    if trials < 1 or warmup < 0:
        raise ValueError(f"need trials >= 1 and warmup >= 0 (got trials={trials}, warmup={warmup})")
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.index is None:
        dev = torch.device(dev.type, torch.cuda.current_device())
    with torch.cuda.device(dev):
        buf = flush_buffer(dev) if flush_l2 else None
        nbytes = 4 * buf.numel() if buf is not None else 0
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(dev)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
        for i in range(trials):
            if buf is not None:
                buf.fill_(i + 1)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize(dev)
        samples = [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends, strict=True)]
    return {"method": "cuda_event", "warmup": warmup, "trials": trials, "l2_flush": bool(flush_l2),
            "flush_bytes": nbytes, "samples_us": samples, **summarize(samples)}
