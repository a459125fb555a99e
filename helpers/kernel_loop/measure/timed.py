"""The timed loops of the judge: which calls are verified (``drawn_checks``: each on a draw of its own), the data
before each call (``Feed``: the same work whether the call is verified or not), kernels timed in rounds (``rounds_loop``:
the benchmark's rows and A/B pairs from one stretch of time; ``timed_loop``, one kernel's), the
timing block a step records (``timing_block``) and what a failure of a timed loop says of its cause
(``harness_hint``)."""

from __future__ import annotations

import time
from typing import Any

from ..common import progress
from .calls import Session, changed_state
from .problem import DataSet

MIN_CHECKS = 4                  # verified timed calls per loop, besides the first and the last (at least)
CHECK_P = 0.1                   # the chance of each timed call to be verified, independently of the others
PREPARED_BYTES = 8 << 30        # the verified calls' data drawn before a timed loop, at most
ROUNDS_PROGRESS_S = 20          # a progress line at most this often during the timed calls
PROBE_ROUNDS = 3                # warmup rounds timed to learn what a round costs (budgeted_rounds)
MIN_TRIALS = 20                 # timed rounds kept, whatever the budget
ROUNDS_BUDGET_S = 20.0          # the benchmark's rounds of its versions, in wall seconds, unless counts were asked
BASELINE_BUDGET_S = 8.0         # each baseline's, likewise


def _now() -> float:
    return time.monotonic()


def timed_loop(sess: Session, kid: str, warmup: int, trials: int, *, label: str) -> dict[str, Any]:
    """``warmup`` then ``trials`` calls of one kernel: ``rounds_loop`` with one kernel a round; ``label`` names the
    calls in a failure."""
    return rounds_loop(sess, [kid], warmup, trials, label=label)[kid]


def budgeted_rounds(sess: Session, names: list[str], warmup: int, trials: int, budget_s: float | None, *,
                    label: str = "{}'s timed calls") -> tuple[dict[str, Any], dict[str, int]]:
    """``rounds_loop`` within about ``budget_s`` wall seconds where the counts asked would take longer (None: the
    counts as asked).  PROBE_ROUNDS warmup rounds tell what a round costs; the rest of the warmup and the timed
    rounds are then cut to fit, keeping at least MIN_TRIALS timed rounds (seen on the H100: the l1norm example's
    8 GiB calls took 90 ms each, and 125 rounds of its 5 versions 56 s of a 147 s benchmark).  Returns the loops and
    the counts run, {"warmup", "trials"}."""
    if budget_s is None or warmup < 1:
        return rounds_loop(sess, names, warmup, trials, label=label), {"warmup": warmup, "trials": trials}
    probe = min(warmup, PROBE_ROUNDS)
    start = _now()
    first = rounds_loop(sess, names, probe, 0, label=label)
    per_round = max((_now() - start) / probe, 1e-9)
    afford, rest = int(budget_s / per_round) - probe, warmup - probe  # the rounds left within the budget
    w, t = rest, trials
    if afford < rest + trials:  # a fifth of what is left warms up, the rest is timed (at least MIN_TRIALS)
        w = min(rest, max(0, afford // 5))
        t = min(trials, max(MIN_TRIALS, afford - w))
    if (w, t) != (rest, trials):
        progress(f"a round takes {per_round:.2f} s: {probe + w} warmup and {t} timed round(s) instead of {warmup} and "
                 f"{trials}, to fit about {budget_s:.0f} s (pass --trials or --warmup to run the counts asked)")
    go = [n for n in names if not first[n]["failure"]]
    second = rounds_loop(sess, go, w, t, label=label, before=probe) if go else {}
    out = {}
    for n in names:
        r, f = second.get(n), first[n]
        if r is None:
            out[n] = f
            continue
        r["host_overhead_us"] = r["host_overhead_us"] if w else f["host_overhead_us"]
        r.update(calls=r["calls"] + f["calls"], verified=r["verified"] + f["verified"],
                 verified_moved=r["verified_moved"] + f["verified_moved"],
                 peak_mem_bytes=max(r["peak_mem_bytes"] or 0, f["peak_mem_bytes"] or 0) or None)
        out[n] = r
    return out, {"warmup": probe + w, "trials": t}


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
    drawn in turn (``prepared``): a verified call's draw then leaves its reference (and the fingerprints around it)
    until after the kernel's call (``late``: seen on the H200, the l1norm example's 8 GiB inputs, when every call
    paused as long as a draw with its reference, one round of five calls a second), unless the reference draws
    random numbers (the kernel's call must leave the generators where it did); every draw of plain inputs, verified
    or not, is followed by a pause as long as a verified draw took.  ``moved(i)``: whether verified call ``i`` may
    draw moved inputs."""

    def __init__(self, sess: Any, checked: set[int], moved: Any):
        self.sess, self.checked, self.moved = sess, checked, moved
        self.prepared = not sess.fresh or sum(sess.first.nbytes().values()) * len(checked) <= PREPARED_BYTES
        self.ready = ({i: sess.pick(True, moved=moved(i)) for i in sorted(checked)}
                      if sess.fresh and self.prepared else {})
        self.late = sess.fresh and not self.prepared and not sess.problem.seen.get("draws")
        self.took: list[float] = []  # seconds of the verified calls' draws, drawn in turn

    def data(self, i: int) -> DataSet:
        if i in self.ready:
            self.sess.pick(False)  # the draw an unverified call makes, thrown away
            return self.ready.pop(i)
        start = time.perf_counter()
        ds = self.sess.pick(i in self.checked, moved=self.moved(i), reference=not self.late)
        took = time.perf_counter() - start
        if not self.sess.fresh:
            return ds
        if i in self.checked:
            self.took.append(took)
        # every call on plain inputs, verified or not, pauses alike (a red team: a moved draw takes longer, so plain
        # inputs after a long pause were unverified); capped at twice the median, a first moved draw also deciding its
        # range (conditions.range_ok)
        if self.took and getattr(ds, "vary", None) is None:
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


def rounds_loop(sess: Session, names: list[str], warmup: int, trials: int, *, label: str = "{}'s timed calls",
                before: int = 0) -> dict[str, dict[str, Any]]:
    """``warmup`` then ``trials`` rounds, each calling every kernel of ``names`` once in an order drawn for the round:
    every row's samples come from the same stretch of time (a clock or temperature drift moves them all alike),
    and the A/B of any two kernels is read from the same rounds at no further cost.  Each kernel is verified as in
    ``timed_loop`` (its first and last call and each other on a draw of its own) and gets the same data work before
    every call (``Feed``).  A kernel whose call fails leaves the rounds (its entry says why, ``label`` naming its
    calls); the others go on.  {name: {"failure", "samples_us", "host_overhead_us", "verified", ...}}."""
    rng = sess.judge.rng
    total = warmup + trials
    plan: list[tuple[int, str]] = []  # (round, which is each kernel's own call number; kernel)
    for t in range(total):
        order = list(names)
        rng.shuffle(order)
        plan += [(t, kid) for kid in order]
    checked: set[int] = set()
    for kid in names:
        at = [i for i, (_, k) in enumerate(plan) if k == kid]
        mine = {0, total - 1} | drawn_checks(rng, range(warmup, total - 1))
        checked |= {at[c] for c in mine}
    sess.moved = 0
    feed = Feed(sess, checked, lambda i: 0 < plan[i][0] < total - 1)
    out = {kid: {"failure": None, "samples_us": [], "host": [], "delays": [], "verified": 0, "verified_moved": 0,
                 "peak": 0} for kid in names}
    started = last = time.monotonic()
    for i, (c, kid) in enumerate(plan):
        r = out[kid]
        if r["failure"]:
            continue
        ds = feed.data(i)
        vary = getattr(ds, "vary", None)
        res = sess.call(kid, ds, checked=i in checked)
        del ds  # before the next call's draw: two large sets at once would not fit beside the others
        if res["failure"]:
            phase = "warmup" if c < warmup else "timed"
            r.update(failure=f"{label.format(kid)}: call {before + c + 1} of {before + total} ({phase}) is wrong: {res['failure']}",
                     rows=res["rows"], call=c, raised=res.get("raised"))
            continue
        r["verified"] += i in checked
        r["verified_moved"] += i in checked and vary is not None  # drawn now or before the rounds
        rep = res["reply"]
        if c < warmup:
            r["host"].append(rep["host_us"])
        else:
            r["samples_us"].append(rep["us"])
            r["delays"].append(rep["delay_us"])
        r["peak"] = max(r["peak"], rep.get("peak_mem_bytes") or 0)
        if time.monotonic() - last > ROUNDS_PROGRESS_S and c + 1 < total:
            last = time.monotonic()
            progress(f"timed calls: {c + 1} of {total} round(s) done ({last - started:.0f} s)")
    for r in out.values():
        host, delays = r.pop("host"), r.pop("delays")
        r.update(host_overhead_us=sorted(host)[len(host) // 2] if host else 0.0,
                 device_delay_us=sorted(delays)[len(delays) // 2] if delays else 0.0, calls=total,
                 fresh_inputs=sess.fresh, peak_mem_bytes=r.pop("peak") or None, prepared=feed.prepared)
    return out


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
