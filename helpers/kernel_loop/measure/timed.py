"""The timed loops of the judge: which calls are verified (``drawn_checks``: each on a draw of its own), the data
before each call (``Feed``: the same work whether the call is verified or not), one kernel's loop (``timed_loop``), the
A/B loop of two versions (``ab_loop``), the timing block a step records (``timing_block``) and what a failure of a
timed loop says of its cause (``harness_hint``)."""

from __future__ import annotations

import time
from typing import Any

from .calls import Session, changed_state
from .problem import DataSet

MIN_CHECKS = 4                  # verified timed calls per loop, besides the first and the last (at least)
CHECK_P = 0.1                   # the chance of each timed call to be verified, independently of the others
PREPARED_BYTES = 8 << 30        # the verified calls' data drawn before a timed loop, at most


def timed_loop(sess: Session, kid: str, warmup: int, trials: int, *, label: str) -> dict[str, Any]:
    """``warmup`` then ``trials`` calls, verified: the first, the last and each other timed call on a draw of its
    own (``drawn_checks``); the same work before every call (``Feed``).  The samples, host dispatch, failure."""
    rng = sess.judge.rng
    total = warmup + trials
    checked = {0, total - 1} | drawn_checks(rng, range(warmup, total - 1))
    sess.moved = 0
    feed = Feed(sess, checked, lambda i: 0 < i < total - 1)
    samples, host, delays, peak = [], [], [], 0
    verified = 0
    for i in range(total):
        r = sess.call(kid, feed.data(i), checked=i in checked)
        if r["failure"]:
            phase = "warmup" if i < warmup else "timed"
            return {"failure": f"{label}: call {i + 1} of {total} ({phase}) is wrong: {r['failure']}",
                    "rows": r["rows"], "call": i, "raised": r.get("raised")}
        verified += i in checked
        rep = r["reply"]
        (host if i < warmup else samples).append(rep["us"] if i >= warmup else rep["host_us"])
        if i >= warmup:
            delays.append(rep["delay_us"])
        peak = max(peak, rep.get("peak_mem_bytes") or 0)
    host_us = sorted(host)[len(host) // 2] if host else 0.0
    return {"failure": None, "samples_us": samples, "host_overhead_us": host_us,
            "device_delay_us": sorted(delays)[len(delays) // 2] if delays else 0.0, "verified": verified,
            "verified_moved": sess.moved, "calls": total, "fresh_inputs": sess.fresh, "peak_mem_bytes": peak or None,
            "prepared": feed.prepared}


def drawn_checks(rng: Any, calls: range, minimum: int | None = None) -> set[int]:
    """The calls of ``calls`` to verify: each with probability CHECK_P on its own, more at random up to ``minimum``.
    The checks a kernel has seen (it can time the longer waits after them) never lower the next call's chance; with
    their number drawn first, a kernel that had seen the largest knew no call but the last was (a red team's find)."""
    minimum = MIN_CHECKS if minimum is None else minimum
    chosen = {i for i in calls if rng.random() < CHECK_P}
    if len(chosen) < minimum:
        rest = [i for i in calls if i not in chosen]
        chosen |= set(rng.sample(rest, min(len(rest), minimum - len(chosen))))
    return chosen


class Feed:
    """The data of a timed loop's calls.  With fresh inputs per call, the verified calls' data (with reference) is
    drawn before the loop and each of those calls still makes an unverified call's draw, so the wait before a call
    is the same (a red team's kernel timed it and cut corners on the short waits).  Data over PREPARED_BYTES is
    drawn in turn (``prepared``), an unverified draw then followed by a pause as long as a verified draw took.
    ``moved(i)``: whether verified call ``i`` may draw moved inputs (Session.pick)."""

    def __init__(self, sess: Any, checked: set[int], moved: Any):
        self.sess, self.checked, self.moved = sess, checked, moved
        self.prepared = not sess.fresh or sum(sess.first.nbytes().values()) * len(checked) <= PREPARED_BYTES
        self.ready = ({i: sess.pick(True, moved=moved(i)) for i in sorted(checked)}
                      if sess.fresh and self.prepared else {})
        self.took: list[float] = []  # seconds of the verified calls' draws with their references, drawn in turn

    def data(self, i: int) -> DataSet:
        if i in self.ready:
            self.sess.pick(False)  # the draw an unverified call makes, thrown away
            return self.ready.pop(i)
        start = time.perf_counter()
        ds = self.sess.pick(i in self.checked, moved=self.moved(i))
        took = time.perf_counter() - start
        if not self.sess.fresh:
            return ds
        if i in self.checked:
            self.took.append(took)
        elif self.took:  # capped at twice the median: a first moved draw also decides its range (conditions.range_ok)
            cap = 2 * sorted(self.took)[len(self.took) // 2]
            time.sleep(max(0.0, min(self.sess.judge.rng.choice(self.took), cap) - took))
        return ds


def timing_block(loop: dict[str, Any], warmup: int, trials: int, device: str) -> dict[str, Any]:
    from ..timing import flush_bytes_for, summarize

    cuda = device.startswith("cuda")
    return {"method": "cuda_event" if cuda else "host_time", "warmup": warmup, "trials": trials, "l2_flush": cuda,
            "flush_bytes": flush_bytes_for(device) if cuda else 0, "host_overhead_us": loop["host_overhead_us"],
            "device_delay_us": loop["device_delay_us"], "samples_us": loop["samples_us"],
            "verified_calls": loop["verified"], "verified_on_moved_inputs": loop.get("verified_moved", 0),
            "verified_data_drawn_before": loop.get("prepared"),
            "input_sets": "fresh per call" if loop["fresh_inputs"] else
            "two, chosen at random per call", **summarize(loop["samples_us"])}


def ab_loop(sess: Session, a: str, b: str, warmup: int, trials: int) -> dict[str, Any]:
    """A and B alternating (A B, B A, A B, ...) on the same data, with calls verified at random."""
    order = [(a, b) if t % 2 == 0 else (b, a) for t in range(warmup + trials)]
    plan = [(t, kid) for t, pair in enumerate(order) for kid in pair]
    checked = drawn_checks(sess.judge.rng, range(len(plan) - 1), 2 * MIN_CHECKS) | {len(plan) - 1}
    samples: dict[str, list[float]] = {a: [], b: []}
    host: dict[str, list[float]] = {a: [], b: []}
    feed = Feed(sess, checked, lambda i: i < len(plan) - 1)
    for i, (t, kid) in enumerate(plan):
        r = sess.call(kid, feed.data(i), checked=i in checked)
        if r["failure"]:
            return {"failure": f"A/B {a} -> {b}: {kid} is wrong on call {i + 1}: {r['failure']}"}
        (samples if t >= warmup else host)[kid].append(r["reply"]["us"] if t >= warmup else r["reply"]["host_us"])
    med = [sorted(host[k])[len(host[k]) // 2] if host[k] else 0.0 for k in (a, b)]
    return {"a": samples[a], "b": samples[b], "host": med}


def harness_hint(sess: Session, loop: dict[str, Any]) -> str:
    """The failure of a check after correctness passed, with the fingerprints both sides hold, so that a
    fault of the harness (other weights, other inputs) is told apart from a kernel that changes."""
    text = loop["failure"]
    state = changed_state(sess)
    if state is None:
        return text + " (the worker could not report its state)"
    differ, n = state
    if not n:
        return text
    if differ:
        return (f"{text}. The worker's parameters differ from the judge's ({len(differ)} of {n}, first "
                f"'{differ[0]}'): the kernel changes its own weights during the calls, or kernel-loop loaded "
                "others (see references/troubleshooting.md, 'wrong after the timed calls')")
    return (f"{text}. The worker's parameters equal the judge's ({n} tensors, same fingerprints), so "
            "the weights are not the cause: the kernel's result depends on earlier calls or on state it keeps")
