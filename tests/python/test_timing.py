"""timing.summarize (pure, CPU): percentiles, spread, bad input."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from kernel_loop import timing


def test_summarize_known_values():
    s = timing.summarize([7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0])  # 1..10, shuffled
    assert s["n"] == 10
    assert s["median"] == pytest.approx(5.5)
    assert s["p25"] == pytest.approx(3.25) and s["p75"] == pytest.approx(7.75)
    assert s["p20"] == pytest.approx(2.8) and s["p80"] == pytest.approx(8.2)
    assert s["mean"] == pytest.approx(5.5)
    assert s["min"] == 1.0 and s["max"] == 10.0
    assert s["std"] == pytest.approx(math.sqrt(sum((x - 5.5) ** 2 for x in range(1, 11)) / 9))


def test_summarize_matches_numpy_on_random_samples():
    rng = random.Random(7)
    xs = [rng.lognormvariate(3.0, 0.4) for _ in range(257)]
    s = timing.summarize(xs)
    for q, key in ((20, "p20"), (25, "p25"), (50, "median"), (75, "p75"), (80, "p80")):
        assert s[key] == pytest.approx(np.percentile(xs, q))
    assert s["std"] == pytest.approx(np.std(xs, ddof=1))


def test_single_sample():
    s = timing.summarize([12.5])
    assert s["median"] == s["p20"] == s["p80"] == s["min"] == s["max"] == 12.5
    assert s["std"] == 0.0 and s["n"] == 1


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summarize_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        timing.summarize(bad)


class _FakeTorch:
    """Just enough of torch for time_callable on a machine without a GPU: counts the flush-buffer
    allocations and writes.  Times are fake; only the buffer handling is under test here."""

    int32 = "int32"

    def __init__(self):
        import contextlib
        import types

        self.allocations, self.fills = [], []
        fake = self

        class Buffer:
            def __init__(self, n):
                self.n = n

            def numel(self):
                return self.n

            def fill_(self, value):
                fake.fills.append((id(self), value))

        class Event:
            def __init__(self, enable_timing):
                self.t = None

            def record(self):
                self.t = len(fake.fills)

            def elapsed_time(self, end):
                return 0.001 * (1 + end.t)

        self.Buffer = Buffer
        self.cuda = types.SimpleNamespace(
            current_device=lambda: 0, device=lambda dev: contextlib.nullcontext(), synchronize=lambda dev=None: None,
            Event=Event, get_device_properties=lambda dev: types.SimpleNamespace(L2_cache_size=50 << 20))

    def device(self, kind, index=None):
        import types

        if index is None and ":" in kind:
            kind, index = kind.split(":")[0], int(kind.split(":")[1])
        return types.SimpleNamespace(type=kind, index=index)

    def empty(self, n, dtype, device):
        self.allocations.append((n, dtype, device.index))
        return self.Buffer(n)


def test_flush_buffer_is_allocated_once_per_device_and_written_every_call(monkeypatch):
    import sys

    fake = _FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(timing, "_FLUSH_BUFFERS", {})
    monkeypatch.setattr(timing, "_P", None)  # bind the fake's primitives
    calls = []
    timer = timing.CallTimer("cuda:0")
    for _ in range(5):  # the worker times one call at a time
        value, us, host, delay = timer.time(lambda: calls.append(1) or "v", "k")
        assert value == "v" and us >= 0 and host >= 0
    assert fake.allocations == [(2 * (50 << 20) // 4, "int32", 0)]
    assert len(fake.fills) == 5 and len({buf for buf, _ in fake.fills}) == 1 and len(calls) == 5
    other = timing.CallTimer("cuda:1")
    for _ in range(3):
        other.time(lambda: None, "k")
    assert [a[2] for a in fake.allocations] == [0, 1]  # a second device gets its own buffer
    assert [v for _, v in fake.fills[5:]] == [1, 2, 3]  # still one write per call


def test_the_delay_follows_each_callables_own_dispatch_time(monkeypatch):
    timer = timing.CallTimer("cpu")
    assert timer.delay_us("a") == timing.FIRST_DELAY_US  # before anything is known (the first call compiles)
    timer.host["a"] = [100.0, 5.0, 5.0, 5.0, 5.0, 5.0]  # the first call's compile is forgotten after five
    assert timer.delay_us("a") == 2 * 5.0 + timing.HOST_MARGIN_US
    timer.host["b"] = [1e6]
    assert timer.delay_us("b") == timing.MAX_DELAY_US


def test_the_timer_keeps_the_clock_it_bound_before_a_kernel_patched_it(monkeypatch):
    import time as time_mod

    monkeypatch.setattr(timing, "_P", None)
    timing.bind()
    frozen = time_mod.perf_counter()
    monkeypatch.setattr(time_mod, "perf_counter", lambda: frozen)  # what a cheating kernel does at import
    timer = timing.CallTimer("cpu")
    assert min(timer.time(lambda: sum(range(20000)))[1] for _ in range(3)) > 0
