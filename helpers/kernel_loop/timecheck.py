"""Checks that a measured time can be true, from what the kernel's process cannot change.

The event times come from the worker, the kernel's own process; these checks hold them against what
the judge and ncu know: ncu's durations for the profiled (and verified) call, and the bytes the judge
knows the outputs hold, over the copy peak ``env`` measured.  Shared by ``profile`` and ``benchmark``.
"""

from __future__ import annotations

import math
from typing import Any

DIFF_WARN = 0.10
BANDWIDTH_SLACK = 1.15


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def timing_invalid(ncu_us: float, event_us: Any, clock_control: str | None, ncu_sm_clock_hz: Any,
                   event_sm_clock_mhz: Any) -> str | None:
    """Why the event timing cannot be right, or None.

    ncu's summed duration covers every kernel the measured call ran, on every stream; the CUDA-event
    window covers the caller's stream.  Honest timing gives an event median at or above ncu's sum
    (launch gaps only add), so a sum more than DIFF_WARN above the median means device work escaped
    the timed window (a side stream never joined back, for example).  When ncu locked the SM clock
    (any --clock-control but none) its durations run long for compute-bound kernels: the sum is then
    scaled by the locked clock over the timing run's clock, a bound no honest kernel exceeds; without
    both clocks the check cannot decide and stays silent.  That scaling is the check's slack: a
    memory-bound call whose work partly runs outside the events can pass under a locked clock (seen on
    the H200 on 2026-12-04 at x0.75: a softmax computed in the hand-over after the end event passed profile,
    most likely through this slack; its numbers were not kept and it was not re-run under none), where under
    --clock-control none only DIFF_WARN is left to it.
    """
    if not (_finite(event_us) and event_us > 0 and _finite(ncu_us)):
        return None
    bound = ncu_bound(ncu_us, clock_control, ncu_sm_clock_hz, event_sm_clock_mhz)
    if bound is None:
        return None
    how = "" if bound == ncu_us else (f" (ncu's {ncu_us:.2f} us scaled by its locked SM clock over the timing "
                                      f"run's, x{bound / ncu_us:.3f})")
    if bound > event_us * (1 + DIFF_WARN):
        return (f"the timing is invalid: ncu's summed kernel duration {bound:.2f} us{how} exceeds the CUDA-event "
                f"median {event_us:.2f} us by {100 * (bound - event_us) / event_us:.0f}%. Honest timing cannot "
                "give that: the call returns with device work still pending outside the caller's stream (work "
                "not joined to the caller's stream), so the events miss it. Join every stream the kernel uses "
                "back to the current stream before returning")
    return None


def ncu_bound(ncu_us: Any, clock_control: str | None, ncu_sm_clock_hz: Any, event_sm_clock_mhz: Any
              ) -> float | None:
    """ncu's summed duration as a bound on an honest event time: as measured under --clock-control none,
    else scaled by ncu's locked SM clock over the timing run's clock; None when a clock is unknown."""
    if not _finite(ncu_us):
        return None
    if clock_control == "none":
        return float(ncu_us)
    if not (_finite(ncu_sm_clock_hz) and _finite(event_sm_clock_mhz) and event_sm_clock_mhz > 0):
        return None
    return ncu_us * min(1.0, ncu_sm_clock_hz / (event_sm_clock_mhz * 1e6))


def floor_invalid(output_bytes: Any, median_us: Any, peak_gbps: Any) -> str | None:
    """Why a median is below what writing the outputs alone takes (their bytes over the copy peak, with
    BANDWIDTH_SLACK), or None.  No honest kernel writes its outputs faster than the GPU copies memory."""
    if not (_finite(output_bytes) and output_bytes > 0 and _finite(median_us) and median_us > 0
            and _finite(peak_gbps) and peak_gbps > 0):
        return None
    floor_us = output_bytes / (peak_gbps * 1e9 * BANDWIDTH_SLACK) * 1e6
    if median_us < floor_us:
        return (f"the timing is invalid: the outputs hold {output_bytes:.3g} bytes, which take at least "
                f"{floor_us:.2f} us to write at the measured copy peak ({peak_gbps:.0f} GB/s, x{BANDWIDTH_SLACK:g} "
                f"allowed), but the median is {median_us:.2f} us: part of the work escaped the timing")
    return None


def below_ncu(median_us: Any, ncu_us: Any, what: str) -> str | None:
    """Why a benchmark median is impossible next to the same kernel's ncu duration (the sum of its kernels
    in its profile), or None: honest timing is never more than DIFF_WARN below that sum."""
    if not (_finite(median_us) and median_us > 0 and _finite(ncu_us) and ncu_us > 0):
        return None
    if ncu_us > median_us * (1 + DIFF_WARN):
        return (f"{what}: its median {median_us:.2f} us is {100 * (ncu_us - median_us) / ncu_us:.0f}% below the "
                f"{ncu_us:.2f} us that ncu measured for the same kernel in its profile: the timed calls did less "
                "work than the profiled one")
    return None
