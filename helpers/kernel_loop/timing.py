"""CUDA-event timing, one call at a time: the one method for ``profile``, ``benchmark`` and its A/B trials.

The method (``CallTimer.time``), for every call the worker makes:

1. a short device-side delay is queued (``torch.cuda._sleep``, a spin kernel), long enough to cover the
   host's dispatch of what follows (twice the dispatch time measured on this callable's earlier calls,
   plus a margin), so the CPU gets ahead of the GPU;
2. a buffer twice the L2 size is overwritten (no call reads what the previous one left in L2);
3. the start event, the call, the end event, then a synchronize.

Because the GPU is still busy with the delay and the flush while Python dispatches the call, the window
between the events holds the call's device work, not the host's launch overhead.  The host's own cost
of each call (the time the callable takes to return, without a synchronize) is returned next to it.

The primitives (the Event class and its ``record``/``elapsed_time``, ``synchronize``, the sleep kernel,
``time.perf_counter``) are bound by ``bind()`` before any kernel file is imported, so a kernel that patches
them at import time does not change what is measured; the judge cross-checks the times against ncu and
the bytes the outputs hold, since a kernel that reaches this module's own objects could still forge them.
``summarize`` is pure and the judge and the CLI recompute the statistics from the raw samples.
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


def resampled_median_ratios(a: list[float], b: list[float], rng: Any, n_boot: int) -> list[float]:
    """median(rng.choices(a, k=len(a))) / median(rng.choices(b, k=len(b))), ``n_boot`` times in turn (``rng``: a
    random.Random, left where it was).  With NumPy the same numbers, all at once: its legacy generator is Python's
    Mersenne Twister, its doubles are random()'s, and an index is floor(u * n) as in choices (2 ms against 30 for two
    samples of 50); without it, or for values that are not all finite (sorted's order of a NaN) or a ``b`` holding a
    zero (a median of 0 raises there, where NumPy would divide), choices itself."""
    try:
        import numpy as np
    except ImportError:
        np = None
    xa, xb = (np.asarray(x, dtype=np.float64) if np is not None else None for x in (a, b))
    if xa is None or not (np.isfinite(xa).all() and np.isfinite(xb).all()) or not xb.all():
        return [statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
                for _ in range(n_boot)]
    state = rng.getstate()[1]
    gen = np.random.RandomState()
    gen.set_state(("MT19937", np.array(state[:-1], dtype=np.uint32), state[-1]))

    def medians(x: Any, u: Any) -> Any:  # statistics.median of each row's draw: the middle value, or the two's mean
        s = np.sort(x[np.floor(u * float(len(x))).astype(np.intp)], axis=1)
        m = s.shape[1] // 2
        return s[:, m] if s.shape[1] % 2 else (s[:, m - 1] + s[:, m]) / 2

    out: list[float] = []
    for start in range(0, n_boot, 256):  # 256 resamples a block: bounded memory for long samples
        u = gen.random_sample((min(256, n_boot - start), len(a) + len(b)))
        out += (medians(xa, u[:, :len(a)]) / medians(xb, u[:, len(a):])).tolist()
    return out


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
    """Capture the timing primitives (idempotent).  The worker calls it before any user code runs."""
    global _P
    if _P is None:
        _P = _Primitives()
    return _P


def ns_per_cycle(p: _Primitives) -> float:
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


def flush_bytes_for(device: str) -> int:
    import torch

    return flush_bytes(torch.device(device))


FIRST_DELAY_US = 1000.0  # before a callable's dispatch time is known (its first call also compiles)


class CallTimer:
    """Times one call at a time on ``device`` ('cuda:N', or 'cpu' for the test mode's wall clock)."""

    def __init__(self, device: str):
        self.device = device
        self.cuda = device.startswith("cuda")
        self.p = bind()
        self.flush = None
        self.ns: float | None = None
        self.host: dict[Any, list[float]] = {}
        self.count = 0

    def delay_us(self, key: Any) -> float:
        h = self.host.get(key)
        if not h:
            return FIRST_DELAY_US
        return min(2.0 * statistics.median(h[-5:]) + HOST_MARGIN_US, MAX_DELAY_US)

    def time(self, fn: Callable[[], Any], key: Any = None, *, nvtx: Callable[[bool], None] | None = None
             ) -> tuple[Any, float, float, float]:
        """(fn's value, device microseconds, host dispatch microseconds, delay microseconds) of one call;
        ``nvtx(True)``/``nvtx(False)`` bracket the call when given (the range ncu measures)."""
        p = self.p
        self.count += 1
        delay = 0.0
        if self.cuda:
            import torch

            if self.flush is None:
                self.flush = flush_buffer(torch.device(self.device))
                self.ns = ns_per_cycle(p) if p.sleep is not None else None
            start, end = p.Event(enable_timing=True), p.Event(enable_timing=True)
            delay = self.delay_us(key)
            if self.ns is not None:
                p.sleep(int(delay * 1000.0 / self.ns))
            self.flush.fill_(self.count)
            p.record(start)
        if nvtx:
            nvtx(True)
        t0 = p.perf_counter()
        value = fn()
        t1 = p.perf_counter()
        if nvtx:
            nvtx(False)
        if self.cuda:
            p.record(end)
            p.synchronize()
            us = p.elapsed(start, end) * 1000.0
        else:
            us = (p.perf_counter() - t0) * 1e6
        host = (t1 - t0) * 1e6
        self.host.setdefault(key, []).append(host)
        return value, us, host, delay if self.cuda else 0.0


class LaunchCount:
    """The kernels one call launches, as torch's profiler sees them in the worker's own process: a hint the
    judge uses only to decide whether ncu's census is needed, never a measurement (``result`` is None where
    the profiler cannot start or recorded nothing usable)."""

    def __init__(self, device: str):
        import warnings

        self.device, self.prof = device, None  # torch warns once that a profiler "clears events at the end of each
        # cycle" where one is started (seen in profile's output on the device; an agent asked what it meant): ours
        # records one call a cycle, which is all it reads
        warnings.filterwarnings("ignore", message=r"(Warning: )?Profiler clears events at the end of each cycle")
        try:
            self.prof = self._new()
        except Exception:  # noqa: BLE001 - no CUPTI here: the judge takes the census
            self.prof = None

    @staticmethod
    def _new() -> Any:
        from torch.profiler import ProfilerActivity, profile

        return profile(activities=[ProfilerActivity.CUDA])

    def around(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        if self.prof is None:
            return fn

        def call():
            import torch

            self.prof = self._new()  # a fresh one each call: one entered again warns that it clears its events
            with self.prof:  # (an agent read that warning, printed in profile's output, as an error)
                got = fn()
                torch.cuda.synchronize(self.device)
            return got
        return call

    def result(self) -> dict[str, Any] | None:
        if self.prof is None:
            return None
        import warnings

        try:
            kernels: dict[str, list] = {}
            with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle is all it
                warnings.simplefilter("ignore")  # records
                events = list(self.prof.events())
            for ev in events:
                if str(getattr(ev, "device_type", "")).endswith("CUDA") and not ev.name.startswith(("Memcpy", "Memset")):
                    row = kernels.setdefault(ev.name, [ev.name, 0, 0.0])
                    row[1] += 1
                    row[2] += float(getattr(ev, "device_time", 0.0) or 0.0)
        except Exception:  # noqa: BLE001 - a profiler that recorded nothing usable: the count is unknown
            return None
        rows = sorted(kernels.values(), key=lambda r: -r[2])
        return {"launches": sum(r[1] for r in rows), "kernels": rows[:64]}
