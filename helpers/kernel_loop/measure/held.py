"""What a caller that holds a kernel's results finds: the calls that keep theirs (``calls_to_keep``: as many as fit a
share of the device's memory), each result read back after the later calls of its shape (``verify_kept``) and, once
the caller lets go, the results the kernel still holds (``after_the_calls``): a pool or ring of buffers fails, a
compile cache's (the first call of each layout and module mode, ``compile_key``) is read again after every later
shape's calls."""

from __future__ import annotations

import os
from typing import Any

from ..tensors import fingerprint
from .calls import Session, Shared, bad_row, changed_state
from .conditions import forget
from .problem import DataSet, Problem

KEEP_SHARE = 4  # the results a shape's calls hold in the kernel's worker stay within 1/KEEP_SHARE of the device's memory


def kept_fingerprints(shared: Shared, ds: DataSet, report: dict[str, Any]) -> dict[str, tuple]:
    """Fingerprints of the tensors a call returned, as the judge's buffers hold them right after it: what a
    caller that keeps them must still find after later calls."""
    return {n: fingerprint(shared.bufs[shared.names[n]]) for n, meta in (report or {}).items()
            if meta.get("stored") and n in ds.expected and n not in ds.in_place and f"kept:{n}" in shared.names}


def calls_to_keep(rng: Any, plan: list[str], first: DataSet, device: str, notes: list[str]) -> set[int]:
    """Which of a shape's ``n`` correctness calls hold their results, as a caller would, until all are made: all,
    unless they would take more than 1/KEEP_SHARE of the device's memory beside the kernel's (seen on the H100:
    ConvTranspose2d at KernelBench's size, 2 GiB a result); then as many as fit (at least 2), drawn at random."""
    import torch

    n, size = len(plan), first.nbytes()["outputs_bytes"]
    total = (torch.cuda.get_device_properties(torch.device(device)).total_memory if device.startswith("cuda")
             else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    fit = n if size == 0 else max(2, total // KEEP_SHARE // size)
    if fit >= n:
        return set(range(n))
    notes.append(f"held results: {fit} of the {n} calls (drawn at random, one not the first of its layout and mode) "
                 "kept their results until all were made, as many as fit in a quarter of the device's memory")
    later = [i for i in range(n - 1) if i not in firsts(plan)] or list(range(n))  # a ring cannot pass for a cache
    one = rng.choice(later)
    return {one, *rng.sample([i for i in range(n) if i != one], fit - 1)}


def compile_key(condition: str) -> str:
    """What a compile cache keys a call on, of its condition (CONDITION_WORDS): the layout and the module's mode; a
    change of values (pre-states, ranges, weights) compiles nothing new."""
    return condition if condition.split(":", 1)[0] in ("layout", "mode") else "plain"


def firsts(conditions: list[str]) -> set[int]:
    """The calls that are the first of their compile_key."""
    seen: dict[str, int] = {}
    for i, c in enumerate(conditions):
        seen.setdefault(compile_key(c), i)
    return set(seen.values())


def verify_kept(sess: Session, kid: str, i: int, prints: dict[str, tuple]) -> str | None:
    """Why the results call ``i`` returned no longer hold what they held right after it (None when they do)."""
    reply = sess.worker.request({"op": "kept", "k": kid, "i": i})
    for name, want in prints.items():
        if not (reply.get("kept") or {}).get(name, {}).get("stored"):
            return f"the result '{name}' returned by call {i + 1} could not be read back after the calls that followed"
        if fingerprint(sess.shared.bufs[sess.shared.names[f"kept:{name}"]]) != want:
            return (f"the result '{name}' returned by call {i + 1} changed when the kernel was called again (it returns "
                    "storage that it writes again later): a caller that keeps a result must find it as it was")
    return None


def after_the_calls(sess: Session, prob: Problem, first: DataSet, trials: list[dict], held: list[dict],
                    notes: list[str] | None = None, watched: list[dict] | None = None) -> None:
    """What a shape's correctness calls are checked for once they are all made: the model's parameters and
    buffers as loaded (a user's model keeps its weights), and every result a call returned still holding its
    bytes after all the calls that followed (``held``: per call, the fingerprints of what it returned).  A failure
    marks the call it belongs to."""
    forget(prob)
    state = changed_state(sess) if prob.model is not None else None
    if state and state[0]:  # a user's model is left with other weights than it was built with
        trials[-1]["passed"] = False
        trials[-1]["outputs"].append(bad_row(f"parameter '{state[0][0]}'", next(iter(first.expected.values())),
                                             f"the kernel changed {len(state[0])} of its model's {state[1]} "
                                             f"parameters and buffers during the calls (first '{state[0][0]}'): "
                                             "a user's model would be left with other weights; keep them as "
                                             "loaded and put derived copies in attributes of your own"))
    for j, w in enumerate(watched or []):  # an earlier shape's results a compile cache kept: never written since
        buf = sess.shared.names[f"watch:{j}"]
        stored = (sess.worker.request({"op": "kept", "k": "k", "watch": {buf: w["w"]}}).get("kept") or {}).get(buf)
        if not (stored or {}).get("stored") or fingerprint(sess.shared.bufs[buf]) != w["prints"]:
            w["trials"][w["i"]]["passed"] = False
            w["trials"][w["i"]]["outputs"].append(bad_row(
                f"result '{w['name']}' of call {w['i'] + 1}", next(iter(first.expected.values())),
                f"the result '{w['name']}' returned by call {w['i'] + 1}, which the kernel kept after its caller let go "
                "of it (as a compile cache would), changed during the calls of a later shape: a compile cache never "
                "writes what it keeps, a kernel that reuses it as scratch overwrites a result a caller may hold"))
    for i, prints in enumerate(held[:-1]):  # every result, after all the calls that followed it
        why = verify_kept(sess, "k", i, prints) if prints else None
        if why:
            trials[i]["passed"] = False
            trials[i]["outputs"].append(bad_row(f"result kept after {len(held) - 1 - i} later call(s)",
                                                next(iter(first.expected.values())), why))
    # then the caller lets go of every result: one the kernel still holds it may write again (a pool or ring larger
    # than the calls made).  A compile cache keeps the tensors of the call that compiled (CuTe DSL's cute.compile):
    # the first call of each layout and module mode (compile_key), noted; a launch cache its last call's, not judged
    cached = firsts([t["condition"] for t in trials])
    held_now = [(i, name, w) for i, name, w in sess.worker.request({"op": "release", "k": "k"}).get("held") or []
                if 0 <= i < len(trials) - 1]
    for i, name, _w in held_now:
        if i not in cached:
            trials[i]["passed"] = False
            trials[i]["outputs"].append(bad_row(
                f"result '{name}' of call {i + 1}", next(iter(first.expected.values())),
                f"the result '{name}' returned by call {i + 1} is still held by the kernel after its caller let go of "
                "it, and no compile cache keeps it (an earlier call had that layout and mode): a pool or ring of "
                "buffers returned in turn, a later call may write it again; return a new tensor each call and keep "
                "no reference to it"))
    for i, name, w in held_now if watched is not None else ():  # watched through the later shapes' calls
        if i in cached and held[i] and name in held[i]:
            e = first.expected[name]
            watched.append({"trials": trials, "i": i, "name": name, "w": w, "prints": held[i][name],
                            "like": (tuple(e.shape), tuple(e.stride()), e.dtype, e.device)})
    tolerated = sorted({i for i, _, _ in held_now if i in cached})
    if tolerated and notes is not None:
        notes.append(f"the kernel still holds the results of call(s) {', '.join(str(i + 1) for i in tolerated)} after "
                     "its caller let go of them, each the first of its layout and mode, as a compile cache keeps the "
                     "tensors it compiled with")
