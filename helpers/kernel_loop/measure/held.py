"""What a shape's calls carry from one to the next, as a user's calls do: the results a caller holds, torch's random
generators (``continue_plan``), the large data sets kept between calls (``between_calls``).  What a caller that holds
a kernel's results finds.  The calls that keep theirs (``calls_to_keep``: as many as fit a
share of the device's memory; the others' are followed without being held) are read back after the later calls of
the shape (``read_kept``, after calls drawn at random too).  Once the caller lets go, a result the kernel still holds (a compile cache keeps the
tensors it compiled with, as CuTe DSL's cute.compile does; a pool or ring keeps what it returns in turn) must never
change, and a kernel that holds the results of more than ``POOL_CALLS`` calls is a pool (``after_the_calls``).  A
kernel seen holding results before a shape's last call but one gets RING_CALLS calls more after it whose results
nobody holds, so a ring of buffers returned in turn comes back to that call's, which the caller holds (``holding``,
``cycle_rings``); the last call's results
the caller goes on holding through the later shapes, and what the kernel holds is read after their calls too."""

from __future__ import annotations

from typing import Any

from ..tensors import fingerprint, is_tensor
from .calls import PARK_SHARE, Session, Shared, bad_row, changed_state, device_memory
from .conditions import Condition, forget, free_cached, step
from .problem import DataSet, Problem

KEEP_SHARE = 4  # the results a shape's calls hold in the kernel's worker stay within 1/KEEP_SHARE of the device's memory
RING_CALLS = 64  # once the kernel is seen holding results: so many calls more (or the shape's, if more), not held
POOL_CALLS = 8   # more calls' results than this (and than half the shape's) still held by the kernel: a pool
WATCH_SHARE = 8  # the results read again after the later shapes' calls stay within 1/WATCH_SHARE of the memory
MIDWAY = 2       # calls of a shape, drawn at random, after which the results kept so far are read back
EVERY_CALL = 1 << 30  # results of a shape's calls within so many bytes together: two kept ones read after every call
LET_GO = 4       # where every result would fit, one call in LET_GO (drawn at random) lets go of its results at once


def out_of_memory(raised: str, ds: DataSet, kept: int, device: str) -> str:
    """A call's exception, with what held the device's memory where the kernel's call ran out of it: a kernel that
    fits alone may not fit beside the judge's copies and the results a caller holds (seen on the H100)."""
    if "OutOfMemoryError" not in raised.split(":", 1)[0] or not device.startswith("cuda"):
        return raised
    import torch

    gib, sizes = 1 << 30, ds.nbytes()
    return (f"the kernel's call ran out of device memory beside the judge's {torch.cuda.memory_reserved() / gib:.1f} "
            f"GiB (inputs {sizes['inputs_bytes'] / gib:.2f} GiB and reference outputs "
            f"{sizes['outputs_bytes'] / gib:.2f} GiB a call, with their copies) and {kept} earlier call(s)' results "
            "its worker held as a caller would: free the GPU of other processes, or check a smaller shape with --dims "
            f"({raised})")


def memory(ds: DataSet, r: dict) -> dict[str, Any]:
    """A correctness call's memory figures: its data set's bytes, the worker's peak (``r``: the call's result), and,
    where torch raised out-of-memory errors in the kernel's worker by then, how many (``ooms``, guards.ooms: one
    caught for a cuDNN convolution's workspace may change its algorithm, and its rounding, for good; a failure's
    summary names them).  Seen on a full H100: ModelNew = Model off by a relative L2 of 3.9e-4 from one call on.  The
    judge's own are not counted: it catches some on purpose (a float64 re-check that does not fit).  The count comes
    from the kernel's process: a plain non-negative int, or none (it feeds a message alone)."""
    reply = r.get("reply") or {}
    n = reply.get("ooms")
    n = n if type(n) is int and n > 0 else 0
    return {**ds.nbytes(), "peak_mem_bytes": reply.get("peak_mem_bytes"), **({"ooms": n} if n else {})}


def continue_plan(rng, plan: list[str], prob: Problem, notes: list[str]) -> set[int]:
    """Where Model draws from torch's generators (RNNs, dropout): the calls that start where the previous call left
    them, no seed of the judge's, as a user's next call does (their reference starts where the previous one ended,
    and the previous call was checked to end there).  Each call that may (not the first nor the last, nor after a
    call in another mode or with other weights) does one time in two, at least one a shape: a kernel that told the
    judge's calls by a seed that changed at every call (torch.initial_seed()) was right only there."""
    can = [i for i in range(1, len(plan) - 1) if plan[i].split(":")[0] in ("plain", "pre", "range", "layout")
           and not plan[i - 1].startswith(("mode", "weights"))] if not prob.seen.get("draws_other") else []
    cont = ({i for i in can if rng.random() < 0.5} or {rng.choice(can)}) if can and prob.seen.get("draws") else set()
    notes += [f"Model draws random numbers: {len(cont)} call(s) started where the previous call left torch's "
              "generators, the others from a seed of the judge's"] if cont else []
    return cont


def between_calls(first: DataSet, ds: DataSet, device: str, notes: list[str]) -> DataSet | None:
    """What a shape's correctness calls keep of call ``ds`` for the next one: ``ds`` itself, whose right answer is the
    next call's stale pre-state; or, where a data set takes more than 1/PARK_SHARE of the device's memory, nothing:
    the stale pre-state is then the first call's right answer, and the first call's inputs wait on the host
    (conditions.range_ok moves them back when a range condition needs them).  Seen on the H100 80GB: with the
    8 GiB input and output of KernelBench's L1 norm, three data sets beside the judge's buffers and the kernel's worker
    did not fit."""
    size = sum(first.nbytes().values())
    if size * PARK_SHARE <= device_memory(device):  # a CPU run's data past an eighth of the host's: the same rule
        return ds
    if not first.parked:  # its outputs too (seen on the H100: the inputs alone left the judge 8 GiB short)
        first.args = {n: v.to("cpu") if is_tensor(v) else v for n, v in first.args.items()}
        first.expected = {n: v.to("cpu") if is_tensor(v) else v for n, v in first.expected.items()}
        first.parked = True
        notes.append(f"large data ({size / (1 << 30):.1f} GiB a call): the first call's data waited on the host "
                     "between calls, and a stale pre-state was the first call's right answer, not the previous call's")
    return None


def lean_draw(first: DataSet | None, plan: list[str] | None, t: int, prob: Problem) -> bool:
    """Whether call ``t``'s plain draw leaves its reference out: large data (the first call's waiting on the host,
    ``between_calls``) meeting a layout or range condition, which computes the reference on the data it makes itself (seen
    on the H100 80GB: the l1norm example's 8 GiB sets, a plain draw's reference beside a condition's ran the judge out of
    memory).  A condition that falls back to a plain call has its reference computed after the call (Session.call), unless
    the reference draws random numbers (then never left out: the kernel's call must leave the generators where it did)."""
    return bool(first is not None and first.parked and plan and plan[t].startswith(("layout", "range"))
                and not prob.seen.get("draws"))


def kept_fingerprints(shared: Shared, ds: DataSet, report: dict[str, Any], moved: bool = False) -> dict[str, tuple]:
    """Fingerprints of the tensors a call returned, as the judge's buffers hold them right after it: what a
    caller that keeps them must still find after later calls (and what a kernel that keeps them must not change).
    After a ``moved`` call, the outputs it was handed too: a user keeps each call's, and a red team's kernel wrote an
    earlier call's while it lived, seen once (every call but the moved one is handed the same buffer)."""
    return {n: fingerprint(shared.bufs[shared.names[n]]) for n, meta in (report or {}).items()
            if meta.get("stored") and not meta.get("views") and n in ds.expected and n not in ds.in_place
            and f"kept:{n}" in shared.names} | ({n: fingerprint(shared.bufs[shared.names[n]]) for n in ds.write_only()
                                                 if f"kept:{n}" in shared.names} if moved else {})


def calls_to_keep(rng: Any, n: int, first: DataSet, device: str, notes: list[str]) -> tuple[set[int], set[int]]:
    """Which of a shape's ``n`` correctness calls hold their results, as a caller would, until all are made: the last
    and each other but one in LET_GO, drawn at random (a red team's kernel was right only while every result it
    returned was kept), unless they would take more than 1/KEEP_SHARE of the device's memory beside the kernel's (seen
    on the H100: ConvTranspose2d at KernelBench's size, 2 GiB a result); then as many as fit (at least 2), drawn at
    random.  Also the MIDWAY calls, drawn at random, after which every result kept so far is read back
    (``read_kept``; after_a_call reads two after each other call where results are small)."""
    size = first.nbytes()["outputs_bytes"]
    fit = n if size == 0 else max(2, device_memory(device) // KEEP_SHARE // size)
    checks = set(rng.sample(range(1, n - 1), min(MIDWAY, max(0, n - 2))))
    if fit >= n:  # all but one in LET_GO, drawn at random: a user also drops results, and a kernel that tells a caller
        # who keeps every result (the judge) from one who drops some (the timed loops drop all) would be right here only
        return {i for i in range(n) if i == n - 1 or rng.random() >= 1 / LET_GO}, checks
    notes.append(f"held results: {fit} of the {n} calls (drawn at random, and the last two) kept their results until "
                 "all were made, as many as fit in a quarter of the device's memory; the others' were followed, not held")
    return {n - 1, n - 2, *rng.sample(range(n - 2), fit - 2)}, checks  # (the last but one: ``holding`` may keep it)


def read_kept(sess: Session, first: DataSet, trials: list[dict], held: list[dict], kept: set[int],
              only: set[int] | None = None) -> None:
    """Every result the caller kept (``kept``: the calls; ``held``: per call, the fingerprints of what it returned)
    read back after the calls that followed it; a call whose result changed, or could not be read, fails once.  Run
    after MIDWAY calls drawn at random too: one written and put back before the shape's end (at a call count a kernel
    can predict) is caught while it is changed."""
    again = sess.problem.seen.get("overwrites") or ()  # the outputs Model itself writes again: no caller keeps those
    for i in sorted(kept if only is None else kept & only):  # ``only``: these calls' results alone
        for name, want in held[i].items() if i < len(held) - 1 and trials[i]["passed"] else ():
            if name in again:
                continue
            why = read_back(sess, name, want, i=i)
            if why in ("changed", "unread"):
                said = ("changed when the kernel was called again (it returns storage that it writes again later)"
                        if why == "changed" else "could not be read back after the calls that followed")
                _fail(trials, i, f"result kept after {len(held) - 1 - i} later call(s)", next(iter(first.expected.values())),
                      f"the result '{name}' returned by call {i + 1} {said}: a caller that keeps a result must find "
                      "it as it was")
                break


def after_a_call(sess: Session, first: DataSet, trials: list[dict], held: list[dict], kept: set[int], checks: set[int],
                 watched: list[dict]) -> None:
    """After each correctness call of a shape: every result kept so far, where the call is one of the ``checks``
    (calls_to_keep), else two of them where results are small; the earlier shapes' (``watched``) after every call."""
    last = len(held) - 1
    if last in checks:
        read_kept(sess, first, trials, held, kept)
    elif (before := sorted(i for i in kept if i < last)) and first.nbytes()["outputs_bytes"] * len(held) <= EVERY_CALL:
        # the previous kept result and one drawn at random: one borrowed as scratch until the next call, and put back
        # then, is seen (a red team's kernel, which the MIDWAY reads seldom caught in its window)
        read_kept(sess, first, trials, held, kept, {before[-1], sess.judge.rng.choice(before)})
    read_watched(sess, watched, next(iter(first.expected.values())))


def read_watched(sess: Session, watched: list[dict], like: Any) -> None:
    """The earlier shapes' results (the last call's, carried; those the kernel kept) read back after each call of this
    shape: never written since, not even borrowed and put back before the shape's end (a red team's find: a scratch
    buffer taken from the caller's result and restored at a call count it could predict)."""
    for j, w in enumerate(watched):  # the session's buffer watch:{j} is w's: the list changes between shapes only
        if w.get("said"):
            continue
        if read_back(sess, w["name"], w["prints"], watch=w["w"], buf=sess.shared.names[f"watch:{j}"]) == "changed":
            _fail(w["trials"], w["i"], f"result '{w['name']}' of call {w['i'] + 1}", like,
                  f"the result '{w['name']}' returned by call {w['i'] + 1} of an earlier shape, which the kernel keeps, "
                  "changed during the calls of a later shape: a result a caller may hold must never be written again")
            w["said"] = True  # said once; dropped at the shape's end


def holding(sess: Session, n: int, t: int) -> bool:
    """Before call ``t`` of a shape's ``n``, the last but one: whether the kernel was seen holding results its caller
    kept or followed (protocol.held_elsewhere) before any call of the shape so far, not only now (a ring given back
    when a collection frees a sentinel of its may hold none at one moment).  If so, that call is quiet (what lived
    before it frozen out of garbage collection, guards.before_call) and keeps its results, and ``cycle_rings`` follows
    it: a collection between the calls whose results the caller held and the probe emptied such a ring in 3 CPU runs in
    40, and the probe then cycled a ring that held none of them."""
    return t == n - 2 > 0 and bool(sess.worker.request({"op": "release", "k": "k", "probe": True}).get("holding"))


def cycle_rings(sess: Session, n: int, notes: list[str]) -> None:
    """Before a shape's last call (``n`` calls), after a quiet one (``holding``): RING_CALLS calls more (or ``n``)
    whose results nobody holds, quiet too, on inputs of their own (on an earlier call's, a ring would write a held
    result's own values again), so a ring of buffers returned in turn comes back to the ones the caller holds."""
    for _ in range(max(RING_CALLS, n)):  # inputs of its own each (a red team's ring stood still while they repeated)
        ds = sess.problem.draw(sess.judge.rng.randrange(1 << 30), reference=False)
        sess.call("k", ds, checked=False, cond=Condition(), quiet=True)
    notes.append("results of earlier calls were held by something besides their caller (the kernel, or only a reference "
                 "cycle no garbage collection had freed yet, as autograd and Triton's interpreter make, which is "
                 f"harmless): {max(RING_CALLS, n)} calls more before the last one, their results not held, so a ring of "
                 "buffers returned in turn would come back to the held result of the call before them; what the kernel "
                 "holds is read after the calls")


def read_back(sess: Session, name: str, want: tuple, *, i: int = -1, watch: int = -1, buf: str | None = None
              ) -> str | None:
    """Whether a result holds what it held right after its call: result ``name`` of call ``i`` (held by the caller,
    or followed), or one the kernel kept (``watch``, its index in the worker), through a judge buffer of its shape
    (``buf``, by default the shape's ``kept:`` buffer).  "changed", "gone" (a followed result since freed: nothing
    to read), "unread", or None when it holds it."""
    buf = buf or sess.shared.names.get(f"kept:{name}", "")
    msg = {"op": "kept", "k": "k", "i": i, **({"watch": {buf: watch}} if watch >= 0 else {})}
    got = (sess.worker.request(msg).get("kept") or {}).get(buf if watch >= 0 else name) or {}
    if got.get("gone"):
        return "gone"
    if not got.get("stored"):
        return "unread"
    return "changed" if fingerprint(sess.shared.bufs[buf]) != want else None


def _fail(trials: list[dict], i: int, name: str, like: Any, note: str) -> None:
    trials[i]["passed"] = False
    trials[i]["outputs"].append(bad_row(name, like, note))


def _watch(watched: list[dict], trials: list[dict], i: int, name: str, w: int, prints: tuple, e: Any,
           notes: list[str]) -> None:
    """A result read again after every later shape's calls (each later shape's judge holds a buffer for it), while
    they fit WATCH_SHARE of the device's memory."""
    size = e.numel() * e.element_size()
    if sum(x["bytes"] for x in watched) + size > device_memory(e.device) // WATCH_SHARE:
        notes.append(f"the result '{name}' of call {i + 1} is not read again after the later shapes' calls: the "
                     "results so read would pass their share of the device's memory")
        return
    watched.append({"trials": trials, "i": i, "name": name, "w": w, "prints": prints, "bytes": size,
                    "like": (tuple(e.shape), tuple(e.stride()), e.dtype, e.device)})


OTHER_FIT = 0.35  # the share of the device's memory the run shape's peak, scaled to a larger batch, may take


def other_batches(cfg: Any, done: list[dict], device: str):
    """The shapes correctness adds after the run's (config.batch_shapes: its dims at a smaller and a larger batch
    size), called on the instance the run's shapes called, each followed by the run's dims again (conditions.other_plan):
    a red team's kernel sized by its first call's batch passed every run of one shape.  The larger only where the peak
    memory of the run's calls (``done``), scaled to it, stays under OTHER_FIT of the device's.  A generator: read
    once the run's shapes are done."""
    b = cfg.dims.get("batch_size") or 1
    peak = max((t.get("peak_mem_bytes") or 0 for s in done for t in s["trials"]), default=0)
    shapes = [s for s in cfg.batch_shapes if s.get("batch_size", b) < b  # (the input sizes' shape: none, or one)
              or peak * s.get("batch_size", b) / b <= OTHER_FIT * device_memory(device)]
    for i, s in enumerate(shapes):  # each followed by the run's batch size again (conditions.other_plan): a red team's
        yield s  # cache of the two sizes last called, one stamp for both, had let the run's go by the time it came back
        if s.get("batch_size", b) > 1 or i == len(shapes) - 1:  # (after one row, the next size; the run's if none fits)
            yield dict(cfg.dims)


def problem_at(judge: Any, dims: dict, kernel: Any, notes: list[str], unfit: tuple, before: Problem | None
               ) -> Problem | None:
    """The judge's Problem at ``dims``, or None where building it raised one of ``unfit`` (noted: Model cannot run
    at the judge's own batch size, e.g. a layer sized from the file's batch_size).  Its Model with the training steps
    of the shape ``before`` it and of those before that (conditions.step), as the instance the worker carries over."""
    free_cached()  # the last shape's buffers, which its worker let go of (after_the_calls)
    try:
        prob = judge.problem(dims, kernel)
    except unfit as exc:
        cannot_run(notes, exc)
        return None
    if before is not None and before is not prob:  # (the run's own Problem, met again, has taken the first steps)
        for spec in (before.seen.get("steps") or [])[len(prob.seen.get("steps") or []):]:
            step(prob, dict(spec))
        for key in ("alone", "upstreams", "grad_scale", "backward_ran", "backward_raised", "grads_seen"):  # alone's
            # turn, upstream's layouts', a scale, whether backward() ran or raised, what it reached (modes)
            if key in before.seen:
                prob.seen[key] = before.seen[key]
    return prob


def judge_failed_at(exc: BaseException, shapes: list[dict], device: str) -> str:
    """The correctness step's error where the judge itself raised (guards.judge_failed), with the shape and call it
    stood at and the judge's device memory."""
    from .guards import judge_failed

    where = [f"shape {len(shapes)} ({', '.join(f'{k}={v}' for k, v in shapes[-1]['dims'].items())}), after "
             f"{len(shapes[-1]['trials'])} call(s)"] if shapes else []
    if device.startswith("cuda"):
        import torch

        where.append(f"the judge holding {torch.cuda.memory_allocated(device) / (1 << 30):.1f} GiB (its peak "
                     f"{torch.cuda.max_memory_allocated(device) / (1 << 30):.1f} GiB)")
    return f"at {', '.join(where)}: {judge_failed(exc)}" if where else judge_failed(exc)


def cannot_run(notes: list[str], exc: BaseException) -> None:
    notes.append(f"this shape of the judge's own: not checked: the reference cannot run there ({exc})"[:300])


def shape_notes(sess: Session, prob: Problem) -> list[str]:
    """A shape's notes once its session is bound: the constants its Model reads, and the second instance's arguments
    (where ModelNew refused the scaled ones, building it raised: the judge's second Model takes the first's too)."""
    refused = next((i["twin_refused"] for i in (sess.reply.get("kernels") or {}).values() if i.get("twin_refused")), None)
    if refused and prob.twin_init != prob.init:
        prob.refuse_twin(refused)
    return prob.constants_note()


def refused(notes: list[str], words: str, own: bool, raised: str, plan: list[str], t: int, seen: dict) -> list[str]:
    """Note a call that raised on a strided view or at the judge's own batch size (once per condition); the calls to
    add to the shape's plan: at another batch size, the refused call once more at its end, as a user retries (a
    twelfth red team's kernel raised on its first two training calls there, then was wrong)."""
    what = ("these input sizes" if plan[:1] == ["sizes:other"] else "its batch size") if own else "inputs so laid out"
    said = f"{words}: the kernel refused {what} (it raised: {raised.splitlines()[0][:200]})"
    notes += [said] if said not in notes else []
    seen.pop("left", None)  # a training step that raised left no statistics: the eval() calls after it start from the loaded
    return [plan[t]] if own and plan[t] not in plan[t + 1:] and plan.count(plan[t]) < 3 else []


_FAULTS = ("illegal memory access", "illegal address", "device-side assert", "misaligned address", "illegal instruction",
           "unspecified launch failure", "ILLEGAL_ADDRESS", "MISALIGNED_ADDRESS", "ILLEGAL_INSTRUCTION", "LAUNCH_FAILED",
           "CUDA_ERROR_ASSERT")


def refusal(raised: str) -> bool:
    """Whether what a call at the judge's own sizes raised is a refusal (noted), not a crash: a CUDA error that breaks
    the context (an illegal address or instruction, a device-side assert), as CUDA, torch or Triton name it in the
    error's first line, is the kernel's failure there; anything else (its own ValueError, a TORCH_CHECK, a launch
    refused for its configuration) a refusal, whatever its words (a red team's ValueError said 'misaligned address')."""
    head = raised.split("\n", 1)[0]
    return not (any(s in head for s in _FAULTS) and (any(c in head for c in ("CUDA error", "[CUDA]", "CUDA_ERROR")) or
                head.split(":", 1)[0].strip() not in ("ValueError", "NotImplementedError", "AssertionError", "TypeError")))


def after_the_calls(sess: Session | None, prob: Problem, first: DataSet, trials: list[dict], held: list[dict],
                    notes: list[str], watched: list[dict], kept: set[int]) -> None:
    """What a shape's correctness calls are checked for once they are all made: the model's parameters and buffers as
    loaded (a user's model keeps its weights); every result a caller kept still holding its bytes (``held``: per
    call, the fingerprints of what it returned; ``kept``: the calls whose results the caller held); then, the caller
    letting go, the results the kernel still holds (module docstring), and the earlier shapes' (``watched``, to which
    this shape's are added).  A failure marks the call it belongs to.  No session: no call was made."""
    if sess is None:
        return
    like = next(iter(first.expected.values()))
    forget(prob)
    if prob.seen.get("overwrites"):
        notes.append(f"ref.py's Model writes again the output(s) {', '.join(prob.seen['overwrites'])} it returned (state it "
                     "keeps and updates in place on its next call): those of earlier calls are not read back, since no "
                     "caller of Model could keep them")
    state = changed_state(sess) if prob.model is not None else None
    if state and state[0]:  # a user's model is left with other weights than it was built with
        _fail(trials, -1, f"parameter '{state[0][0]}'", like,
              f"the kernel changed {len(state[0])} of its model's {state[1]} parameters and buffers during the calls "
              f"(first '{state[0][0]}'): a user's model would be left with other weights; keep them as loaded and put "
              "derived copies in attributes of your own")
    read_watched(sess, watched, like)
    watched[:] = [w for w in watched if not w.get("said")]
    read_kept(sess, first, trials, held, kept)  # every result a caller kept, after all the calls that followed it
    # the caller lets go, but of the last call's results (carried through the later shapes): what the kernel still
    # holds must never change, and a pool holds the results of many calls.  Carried where the caller held them and
    # they passed, unless the data is large (between_calls: seen on the H100 80GB, the l1norm example's 8 GiB result
    # carried beside the judge's buffer reading it left the call at the run's size again out of memory)
    last = len(trials) - 1
    carry = last in kept and bool(held[last])
    if carry and first.parked:
        carry = False
        notes.append("large data: the last call's results were let go of at the shape's end, not carried through the "
                     "later shapes' calls")
    reply = sess.worker.request({"op": "release", "k": "k", "carry": last if carry else -1})
    mine = [(i, name, w) for i, name, w in reply.get("held") or [] if 0 <= i < len(trials) and name in held[i]]
    calls = sorted({i for i, _, _ in mine})
    for i, name, w in mine:
        why = read_back(sess, name, held[i][name], watch=w) == "changed"
        if why or len(calls) > max(POOL_CALLS, len(trials) // 2):
            _fail(trials, i, f"result '{name}' of call {i + 1}", like,
                  f"the result '{name}' returned by call {i + 1} is still held by the kernel after its caller let go of "
                  + ("it, and changed when the kernel was called again: a later call wrote it (a pool or ring of "
                     "buffers returned in turn, or scratch memory)" if why else
                     f"it, as the results of {len(calls)} of the {len(trials)} calls are (a pool of buffers returned "
                     "in turn)") + "; return a new tensor each call and keep no reference to it")
            continue
        _watch(watched, trials, i, name, w, held[i][name], sess.shared.bufs[sess.shared.names[name]], notes)
    for name, w in reply.get("carried") or []:
        if name in held[-1]:  # like the judge's buffer of the result, on the device (the first's data may be parked)
            _watch(watched, trials, last, name, w, held[-1][name], sess.shared.bufs[sess.shared.names[name]], notes)
    noted = sorted({w["i"] for w in watched if w["trials"] is trials and w["i"] in calls})
    if noted:
        notes.append(f"the kernel still holds the results of call(s) {', '.join(str(i + 1) for i in noted)} after its "
                     "caller let go of them (as a compile cache keeps the tensors it compiled with); they never "
                     "changed, through the calls after them and the later shapes' calls")
    sess.worker.request({"op": "unbind"})  # the judge frees this shape's buffers before the next one's (problem_at)
