"""One worker bound to one shape's shared buffers, and the calls the judge makes on it.  ``Shared`` holds the judge's
buffers (one per tensor argument, returned output and model parameter, and for correctness one more per returned
output, where the worker hands back a result an earlier call returned); ``Session`` puts a data set in them before
every call, poisons every output, asks for the call, screens every call for poison left behind and verifies the calls
the judge chose (``timed``), its outputs as they were when it returned.  A correctness call can also vary what a user's
call varies (``Condition``): what the outputs it is handed hold before the call (zeros, random values, the right answer
of other inputs), the module's mode and autograd, strided inputs, running statistics and gradients; every result is
held, and ``after_the_calls`` checks that it kept its bytes, that the kernel lets go of it with its caller, and that
the model kept its weights."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from .. import compare as comparing
from ..common import MeasuredFailure, UsageError
from ..compare import applied_tolerances, changed_input_row, compare, compare_outputs, first_failure
from ..tensors import FLOAT_SENTINEL, fingerprint, is_tensor, poison_tensor, random_like
from ..vocab import DATA_LOST, FROZEN_LOST, GRAD_GONE, NO_GRADIENT_NOTE
from . import modes, protocol
from .conditions import VARIANTS, Condition, free_cached, range_ok
from .exact import as_exact_as_the_reference
from .guards import start_state
from .launch import KernelFailed, WorkerProc
from .modes import backward_raised, draws_into, grad_as_exact, grad_normwise, grads_gone, grads_seen, owed
from .problem import DataSet, Problem

FRESH_DRAW_BUDGET_S = 20.0      # a fresh data set for every call while drawing them all costs no more
PARK_SHARE = 8                  # a data set past 1/PARK_SHARE of the device's memory is large (held.between_calls)


# --- the buffers a worker sees -------------------------------------------------------------------
def device_memory(device: Any) -> int:
    """The memory the results a caller holds share: the GPU's, or the host's for a CPU run."""
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else \
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def large(ds: DataSet, device: str) -> bool:
    """Whether a data set (inputs and reference outputs) takes more than 1/PARK_SHARE of the device's memory."""
    return sum(ds.nbytes().values()) * PARK_SHARE > device_memory(device)


class Shared:
    """The judge's buffers for one shape: one per tensor argument, one per returned output, one per model
    parameter.  The worker maps them; the judge fills, poisons and reads them."""

    def __init__(self, problem: Problem, ds: DataSet, folder: Path, tag: str, use_file: bool, keep: bool = False,
                 watch: tuple = ()):
        self.bufs, self.names, self.problem = {}, {}, problem  # judge buffer -> tensor; output/input name -> buffer
        for n, t in ds.tensors().items():
            self._add(f"a{len(self.bufs)}-{tag}", n, t, folder, use_file)
        for n, e in ds.expected.items():
            if n not in ds.in_place:
                self._add(f"r{len(self.bufs)}-{tag}", n, e, folder, use_file)
            if keep:  # where the worker hands back a result an earlier call returned (a handed output: its own
                self._add(f"k{len(self.bufs)}-{tag}", f"kept:{n}", e, folder, use_file)  # buffer, in a moved call)
        for j, (shape, stride, dtype, device) in enumerate(watch):  # an earlier shape's results its kernel kept
            import torch

            self._add(f"w{len(self.bufs)}-{tag}", f"watch:{j}",
                      torch.empty_strided(shape, stride, dtype=dtype, device=device), folder, use_file)
        for n, t in problem.state().items():
            buf = self._add(f"p{len(self.bufs)}-{tag}", f"param:{n}", t, folder, use_file)
            buf.copy_(t)
        self.descriptors = [protocol.share(t, folder, b) for b, t in self.bufs.items()]
        self.current: int | None = None

    def _add(self, buf: str, name: str, like, folder: Path, use_file: bool):
        t = protocol.alloc_shared(like, folder, buf, use_file)
        self.bufs[buf], self.names[name] = t, buf
        return t

    def load(self, ds: DataSet) -> None:
        for n, t in ds.tensors().items():
            dst = self.bufs[self.names[n]]
            if tuple(dst.shape) != tuple(t.shape) or dst.dtype != t.dtype:
                raise UsageError(f"setup() gave input '{n}' shape {list(t.shape)} {t.dtype} for seed {ds.seed}, "
                                 f"but {list(dst.shape)} {dst.dtype} for the first seed: inputs must keep their "
                                 "shapes across seeds")
            dst.copy_(t)

    def outputs(self, ds: DataSet) -> list[Any]:
        return [self.bufs[self.names[n]] for n in ds.expected]

    def poison(self, ds: DataSet, variant: int, pre: str = "poison", stale: DataSet | None = None) -> list[str]:
        """Poison every output the kernel writes whole; the outputs it is handed (in place) get ``pre`` instead
        when it is not "poison": zeros, random values, or ``stale``'s expected values (the right answer of other
        inputs).  Returns the names that hold poison, the ones the screen can read."""
        poisoned = []
        for n in ds.expected:
            if n in ds.accumulates:
                continue  # its starting values are setup()'s, loaded with the inputs
            t = self.bufs[self.names[n]]
            if n not in ds.in_place or pre == "poison":
                poison_tensor(t, variant)
                poisoned.append(n)
            elif pre == "zeros":
                t.zero_()
            elif pre == "stale" and stale is not None and n in stale.expected:
                t.copy_(stale.expected[n])
            else:
                t.copy_(random_like(t))
        return poisoned

    def got(self, ds: DataSet, report: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
        """What the kernel produced, read from the judge's own buffers, and rows for what it could not."""
        got: dict[str, Any] = {}
        rows = []
        for name, exp in ds.expected.items():
            meta = report.get(name) or {}
            if name in ds.in_place and meta.get("elsewhere"):
                rows.append(bad_row(name, exp, f"output '{name}' is handed to the kernel to write, but the call "
                                    "returned another tensor under that name: a caller reads the buffer it passed; "
                                    "write the result there (returning that same buffer is fine)"))
            elif meta.get("returned") and "value" in meta:
                got[name] = meta["value"]
            elif meta.get("returned") and not meta.get("stored"):
                rows.append(bad_row(name, exp, f"output '{name}' is a tensor of shape {meta.get('shape')} "
                                     f"{meta.get('dtype')}; the reference's is {list(exp.shape)} "
                                     f"{str(exp.dtype).replace('torch.', '')}"))
            elif meta.get("returned") or name in ds.in_place:
                got[name] = self.bufs[self.names[name]]
        return got, rows


def scalars_of(ds: DataSet) -> dict[str, Any]:
    return {n: v for n, v in ds.args.items() if not is_tensor(v)}


def bad_row(name: str, exp, note: str) -> dict[str, Any]:
    return {"name": name, "passed": False, "note": note, "mismatches": exp.numel(), "numel": exp.numel(),
            "dtype": str(exp.dtype).replace("torch.", ""), "shape": list(exp.shape), "max_abs_err": None,
            "max_rel_err": None, "rel_l2_err": None, "first_bad": None, "nonfinite_unexpected": 0,
            "tolerance": {"atol": None, "rtol": None, "rel_l2": None, "source": "-"}}


def count_poison(torch, t, variant: int) -> int:
    """How many elements of a float output still hold the poison of ``variant`` (NaN, or the finite sentinel)."""
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        return 0
    sentinel = max(FLOAT_SENTINEL, -torch.finfo(t.dtype).max if t.dtype.is_floating_point else FLOAT_SENTINEL)
    # one read: amin is NaN where any element is, so a minimum above the sentinel proves no element holds either poison
    one_pass = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # the dtypes amin reduces
    if flat.dtype in one_pass and bool(torch.amin(flat) > sentinel):
        return 0
    n = torch.zeros((), dtype=torch.int64, device=flat.device)  # read once, after every chunk
    for s in range(0, flat.numel(), 1 << 25):
        c = flat[s:s + (1 << 25)]
        n += torch.isnan(c).sum() if variant % 2 == 0 else (c == sentinel).sum()
    return int(n)


def verify(shared: Shared, ds: DataSet, report: dict[str, Any], tolerance: Any, ref: Any, prob: Problem | None = None,
           held: dict[str, tuple] | None = None, cond: Condition | None = None) -> tuple[list[dict], list[str]]:
    """Rows for every output and input: the outputs against the reference in the judge's buffers (and in float64 where
    ``prob`` is given: ``cond``'s Model copy, exact.py); the inputs as drawn; no output expanded or an input's view unless Model's is."""
    got, rows = shared.got(ds, report)
    bad = {r["name"] for r in rows}
    expected = {n: e for n, e in ds.expected.items() if n not in bad}
    more, warns = compare_outputs(got, expected, tolerance, ref) if expected else ([], [])
    # ``held``: the fingerprints as the call returned, again once read (a red team's thread wrote right values later)
    more += [bad_row(f"output '{n}'", t, f"output '{n}' changed after the call returned (a thread or a stream of the "
                     "kernel's wrote it later, out of the timed window): a call's work is done when it returns")
             for n, t in got.items() if n in (held or {}) and is_tensor(t) and fingerprint(t) != held[n]]
    as_exact_as_the_reference(prob, ds, more, got, held, cond) if prob is not None else None
    rows += more
    for row in rows:
        meta, props = report.get(row["name"]) or {}, ds.ref_props.get(row["name"]) or {}
        if not row["passed"]:
            continue
        if meta.get("expanded") and not props.get("expanded"):
            row.update(passed=False, note=f"output '{row['name']}' is an expanded tensor (a stride of 0): the "
                       "reference's is not, so the kernel did not write every element")
        elif meta.get("views") and not props.get("views"):
            arg = next((a for a, b in shared.names.items() if b == meta["views"]), meta["views"])
            row.update(passed=False, note=f"output '{row['name']}' shares memory with the input '{arg}' (a "
                       "view of it): the kernel must write its own result")
        elif meta.get("aliases") and not props.get("aliases"):
            row.update(passed=False, note=f"output '{row['name']}' shares memory with the output '{meta['aliases']}' "
                       "of the same call, where the reference's outputs are separate tensors: a caller that changes one "
                       "changes the other")
        elif meta.get("reuses") and not props.get("reuses"):
            row.update(passed=False, note=f"output '{row['name']}' is stored where the result '{meta['reuses']}' "
                       "is: the kernel returns a buffer it reuses, so a caller that keeps a result finds it "
                       "overwritten by a later call; return a new tensor each call")
        elif meta.get("foreign") and not props.get("foreign"):
            row.update(passed=False, note=f"output '{row['name']}' lives in memory torch did not allocate for it "
                       "(torch.from_dlpack, from_numpy, frombuffer, a CUDA graph's replay or a raw pointer): the judge "
                       "cannot see whether the kernel keeps that memory and writes it again under a result its caller "
                       "holds; return a tensor torch allocated (torch.empty, or .clone() it)")
    for n in ds.input_names():
        t = shared.bufs[shared.names[n]]
        if fingerprint(t) != ds.fingerprints[n]:
            rows.append(changed_input_row(n, t))
    return rows, warns


def buffer_rows(sess: Session, buffers: dict[str, Any]) -> list[dict]:
    """Rows for ModelNew's buffers after a training-mode call, as the worker put them in the parameters' buffers,
    against Model's after the same call (``buffers``) with the run's tolerance: the running statistics a user's
    model is left with."""
    sh = sess.shared  # equal bytes (a constant -inf fill) compared without their non-finite values: no all-poison rule
    got = {n: sh.bufs[sh.names[f"param:{n}"]] for n in buffers}
    same = {n for n, t in got.items() if fingerprint(t) == fingerprint(buffers[n])}
    rows, _ = compare_outputs({n: t.nan_to_num() if n in same else t for n, t in got.items()},
                              {n: t.nan_to_num() if n in same else t for n, t in buffers.items()}, sess.judge.tolerance, sess.judge.ref)
    for row in rows:
        row["name"] = f"buffer '{row['name']}'"
        if not row["passed"]:
            row["note"] = (f"ModelNew's {row['name']} after the call in training mode differs from Model's ("
                           + comparing.outside(row)
                           + "): update it in training mode as Model does (running statistics)")
    return rows


def gradient_rows(sess: Any, kid: str, ds: DataSet, cond: Condition, call: dict[str, Any], notes: list[str]
                  ) -> list[dict]:
    """Rows for the gradients a user's backward() gets after this call (``call``, its reply: the backward's count of
    out-of-memory errors replaces its own, held.memory), against Model's (``cond.backward``), with a note where none
    is compared: Model's output carries none, the kernel's does not, or its backward raised; with parameters frozen
    or the inputs plain data (``cond.owed``), one reached while all trained missing fails: in eval(), in an eval()
    call (an eval()-only path without autograd is noted); in training mode, in either (a red team's backward gave
    the weights none in training mode alone)."""
    back, returned, mode = cond.backward, call.get("returned") or {}, "training mode" if cond.train else "eval()"
    if not back.carries:
        return []
    reached, trained = (grads_seen(sess.problem.seen, train)[0] for train in (False, True))  # (grads_gone adds)
    due = reached | trained if cond.train else reached
    why = DATA_LOST if cond.data else FROZEN_LOST
    if not any(m.get("grad") for m in returned.values()):
        lost = [n for n in back.grads if n in due and owed(back, n)] if cond.owed else \
            grads_gone(sess.problem.seen, cond.train, set(), {n for n in back.grads if owed(back, n)})
        notes += [] if lost else [NO_GRADIENT_NOTE]
        return [bad_row(f"gradient of {n}", back.grads[n], why if cond.owed else GRAD_GONE) for n in lost]
    names, sh = list(back.grads), sess.shared  # an input's gradient comes back in its own buffer (reloaded per call)
    parts = [(n, *n.partition(" ")[::2]) for n in names]  # (name, "parameter" or "input", "'its key'")
    targets = [[n, kind, sh.names[key[1:-1]] if kind == "input" else key[1:-1]] for n, kind, key in parts]
    try:
        reply = sess.worker.request({"op": "backward", "k": kid, "seed": back.seed, "targets": targets})
        call["ooms"] = reply.get("ooms", call.get("ooms"))  # the worker's count after the backward too
    except KernelFailed as exc:  # a note, unless it ran in another call (modes.backward_raised)
        ok, first = modes.raise_excused(sess.problem, cond.train, ds, (str(exc).splitlines() or ["an error"])[0][:200])
        notes += [] if (why := backward_raised(sess.problem.seen, first, ok)) else [f"gradients: not compared: backward() raised ({first})"]
        return [bad_row("backward()", next(iter(back.grads.values())), why)] if why else []
    # elementwise; normwise only where Model's own gradient holds the limit (grad_normwise: gradients cancel)
    tols, unused = applied_tolerances(back.grads, sess.judge.tolerance, sess.judge.ref), set(reply.get("unused") or [])
    lost = [n for n in names if cond.owed and n in unused and n in due and owed(back, n)]  # (else compared: zeros)
    detached = [n for n in names if n in unused and owed(back, n) and not (cond.owed and n in due)]
    if detached:  # like an output without a gradient: a custom kernel's, or a cached layout (kernel_abi.md)
        notes.append(f"gradients: {', '.join(detached[:4])}{' ...' if len(detached) > 4 else ''}: not compared: "
                     "ModelNew's output does not reach it through autograd (a custom kernel, or a copy made from "
                     "it and cached), where Model's does: a user's training would leave it as it is")
    lost += [] if cond.owed else grads_gone(sess.problem.seen, cond.train, set(names) - unused, set(detached))
    rows = [bad_row(f"gradient of {n}", back.grads[n], why if cond.owed else GRAD_GONE) for n in lost]
    rows += [bad_row("backward()", back.grads[names[0]], w) for w in [backward_raised(sess.problem.seen, None)] if w]
    for (n, kind, key), (_, exp) in zip(targets, back.grads.items(), strict=True):
        if n in detached or n in lost:
            continue
        got = sh.bufs[sh.names[f"param:{key}"] if kind == "parameter" else key]
        if kind == "input":  # where the input is exactly zero no gradient is owed (backward_expected)
            got = comparing.zero_at_zeros(got, ds.args[n.partition(" ")[2][1:-1]])  # the buffer is reloaded per call
        tol = dict(tols[n], rel_l2=None)
        row = {"name": f"gradient of {n}", **compare(got, exp, tol["atol"], tol["rtol"]), "tolerance": tol}
        exact = (back.exact or {}).get(n)
        if not row["passed"] and exact is not None:  # held to float64 near each element (modes.grad_as_exact)
            ok, said = grad_as_exact(back, got, exp, exact, tol)
            row.update(passed=ok, note=f"{said}: as exact as Model's, or more" if ok else
                       f"{row['mismatches']} of {row['numel']} elements outside tolerance; {said}")
        if row["passed"] and exact is not None and (why := grad_normwise(got, exp, exact, tols[n])):
            row.update(passed=False, note=why)
        if not row["passed"]:
            row["note"] = (f"the {row['name']} after backward() in {mode} differs from Model's ("
                           + (row.get("note") or f"{row['mismatches']} of {row['numel']} elements outside "
                              "tolerance") + "): a custom backward must give Model's gradients, or its result "
                           "carry none")
        rows.append(row)
    notes.append(f"gradients: the gradients of the inputs and parameters after backward() in {mode} with "
                 f"autograd on were compared with Model's ({len(names)} tensors"
                 + (f", {len(reply.get('unused') or [])} of them unused by ModelNew" if reply.get("unused") else "")
                 + ")")
    return rows


def screen(shared: Shared, ds: DataSet, variant: int, names: list[str] | None = None) -> str | None:
    """The cheap check of every call: no poison left in an output where the reference has none (``names``: the
    outputs that were poisoned, every one by default)."""
    import torch

    for name, t in zip(ds.expected, shared.outputs(ds), strict=True):
        if names is not None and name not in names:
            continue
        if not (t.dtype.is_floating_point or t.dtype.is_complex) or t.numel() == 0:
            continue
        if ds.ref_props.get(name, {}).get("has_poison") is None:
            exp = ds.expected[name]
            ds.ref_props.setdefault(name, {})["has_poison"] = bool(count_poison(torch, exp, 0)
                                                                  or count_poison(torch, exp, 1))
        if ds.ref_props[name]["has_poison"]:
            continue
        left = count_poison(torch, t, variant)
        if left:
            return (f"output '{name}': {left} of {t.numel()} elements still hold the poison written before "
                    "the call (the kernel skipped this call, or part of it)")
    return None


# --- a loop of calls on one worker -----------------------------------------------------------------
class Session:
    """One worker bound to one shape's shared buffers, and the data sets the judge puts in them."""

    def __init__(self, judge: Any, worker: WorkerProc, problem: Problem, kernels: dict[str, tuple[Path, str]],
                 first: DataSet, tag: str, *, baseline: dict[str, dict] | None = None, keep: bool = False,
                 watch: list[dict] = ()):
        self.judge, self.worker, self.problem = judge, worker, problem
        self.first = first
        self.shared = Shared(problem, first, worker.folder, tag, judge.use_file, keep, tuple(w["like"] for w in watch))
        self.keeping = keep
        self.variant = 1  # the first call gets variant 0 (NaN), then they alternate
        self.calls = 0
        self.scalars = scalars_of(first)  # the non-tensor arguments the worker holds (bound from ``first``)
        self.baselines = baseline is not None  # ref.py's own code (eager, torch.compile): not held to a kernel's rules
        self.builds: dict[str, Any] = {}
        calls = {}
        for kid, (_path, kind) in kernels.items():
            extra = (baseline or {}).get(kid) or {}
            calls[kid] = problem.call_plan(first, kind, self.shared.names, **extra)
        judge.sync()  # the parameters' copies into the shared buffers done before the worker loads them
        self.reply = worker.request({"op": "bind", "buffers": self.shared.descriptors, "calls": calls})
        self.sets: list[DataSet] = [first]
        self.fresh = False
        self.draw_s = 0.0
        self.moved = 0  # verified timed calls whose inputs were moved to another range

    def prepare_sets(self, calls: int) -> None:
        """Fresh data for every call when drawing the inputs is cheap enough (an unverified call needs no
        reference), else two sets with other values, chosen at random per call.  With two sets a result remembered by
        the inputs' content is right on every call (seen: a GEMM memo keyed on a few elements, 310 us against the
        reference's 0.3 s, when a slow reference was counted in the drawing cost), so only the inputs' own cost counts,
        and the sets are drawn from seeds of the judge's secret generator: a kernel that drew the sets of the run's
        public seed at import and served them from a memo hit every timed call (a red team's find).  Drawn fresh, no
        set is kept but the first call's (seen on the H100 80GB: the l1norm example's benchmark, 16 GiB a set, ran the
        judge out of memory with a second beside the fresh draws); two sets that would take more than 1/PARK_SHARE of
        the device (``large``) are the first call's and one more."""
        rng = self.judge.rng
        t0 = time.monotonic()
        self.problem.draw(rng.randrange(1 << 30), reference=False)
        self.draw_s = time.monotonic() - t0
        self.fresh = self.draw_s * calls <= FRESH_DRAW_BUDGET_S
        if self.fresh:  # every call draws its own
            self.sets = [self.first]
        elif large(self.first, self.judge.device):  # room for one set more
            self.sets = [self.first, self.problem.draw(rng.randrange(1 << 30))]
        else:
            self.sets = [self.problem.draw(rng.randrange(1 << 30)) for _ in range(2)]

    def timed(self) -> None:
        """After the timed calls: the sets go and the judge's cached memory with them, so that the check on
        fresh inputs that follows (a draw and its reference) has the room (seen on the H100 80GB: the l1norm example's
        benchmark, 16 GiB a set, ran the judge out of memory there)."""
        self.sets = [self.first]
        free_cached()

    def pick(self, checked: bool, *, moved: bool = False, reference: bool = True) -> DataSet:
        """The data of the next call: a fresh draw (with its reference when the call is verified, unless
        ``reference`` is False: ``call`` then computes it after the kernel's call), or one of the two sets at random.
        ``moved``: a verified call may draw, two times in three, inputs moved to another range
        (conditions.VARIANTS) where correctness could check them, so that a timed call is held to what a
        correctness call is (a kernel that tells the timed calls apart, by counting calls or by its results'
        lifetimes, must still be right on moved inputs)."""
        rng = self.judge.rng
        if self.fresh:
            seed = rng.randrange(1 << 30)
            if moved and checked and rng.random() < 2 / 3:
                vary = rng.choice(sorted(set(VARIANTS) - {"masked"}))  # (correctness's alone: a second set to tell)
                ds = self.problem.draw(seed, vary=vary, reference=reference) if self._range_ok(vary) else None
                if ds is not None:
                    self.moved += 1
                    return ds
            return self.problem.draw(seed, reference=checked and reference)
        return self.sets[rng.randrange(len(self.sets))]

    def _range_ok(self, vary: str) -> bool:
        """Whether inputs moved to ``vary`` can be checked on this problem (conditions.range_ok, decided once)."""
        key = f"range:{vary}"
        if key not in self.problem.seen:
            try:
                varied = self.problem.draw(self.judge.rng.randrange(1 << 30), vary=vary)
                self.problem.seen[key] = range_ok(self.problem, self.first, varied, self.judge.tolerance) is None
            except Exception:  # the reference cannot run there: not a condition of this problem
                self.problem.seen[key] = False
        return bool(self.problem.seen[key])

    def call(self, kid: str, ds: DataSet, *, checked: bool, nvtx: bool = False, cond: Condition | None = None,
             inventory: bool = False, quiet: bool = False) -> dict[str, Any]:
        """One call on ``ds``: {"reply", "failure": None or text, "rows", "warnings"}.  The inputs are
        written into the shared buffers before every call (the worker hands back what the call left in
        them), and every output is poisoned, or for a correctness call prepared as ``cond`` says."""
        cond = cond or Condition()
        sh = self.shared
        sh.load(ds)
        self.variant ^= 1
        poisoned = sh.poison(self.first, self.variant, cond.pre, cond.stale)  # names and kinds: every draw's
        for n in ds.write_only() if cond.strided == "moved" and cond.pre == "poison" else ():  # earlier_outputs:
            if f"kept:{n}" in sh.names:  # poisoned too, where no worker hands a handed output back (a .cu's)
                sh.bufs[sh.names[f"kept:{n}"]].copy_(sh.bufs[sh.names[n]])
        self.calls += 1
        # the inputs' new values come with a new _version one call in two (a user's copy_), else at the same one (a
        # user's refill through .data or NumPy): a memo keyed on either, and a kernel wrong on either, is seen
        msg: dict[str, Any] = {"op": "call", "k": kid, "nvtx": nvtx, "bump": self.judge.rng.random() < 0.5}
        if inventory:  # the worker lists the kernels the call launched (torch's profiler): a hint, not a measure
            msg["inventory"] = True
        if quiet:  # an unverified call of the ring probe's (held.cycle_rings): what lives is frozen out of collections
            msg["quiet"] = True
        if cond.train or cond.grad or cond.inference:
            msg.update(train=cond.train, grad=cond.grad, inference=cond.inference, **({"frozen": list(cond.frozen)} if cond.frozen else {}),
                       **({"freeze": list(cond.fixed)} if cond.fixed else {}))
        if cond.nograd:  # a kernel function's call with autograd off (on by default)
            msg["grad"] = False
        if cond.keep or (self.keeping and checked):  # a keeping session's checked calls say whether they keep theirs:
            # the returned object itself one time in two, else a tensor of the caller's own over it (a red team's kernel
            # wrote a result while the object it returned lived, another reused its memory once the object died)
            msg["keep"] = cond.keep and ("object" if self.judge.rng.random() < 0.5 else True)
        if scalars_of(ds) != self.scalars:  # setup() may draw a scalar per seed: the kernel gets this draw's
            self.scalars = scalars_of(ds)
            msg["scalars"] = {n: protocol.encode_value(v) for n, v in self.scalars.items()}
        msg.update({k: v for k, v in (("strided", cond.strided), ("weights", cond.weights and "channels_last"),
                                       ("nudge", cond.nudge)) if v})
        if cond.twin:
            msg["twin"] = cond.twin
            draws_into(sh, self.problem, cond.twin.get("own") or (), twin=True)  # its own draws (then the first's)
        seen = self.problem.seen  # what the reference's call draws: the kernel's must leave its caller's generators so
        draws = seen.get("train_draws") if cond.train or (cond.twin or {}).get("train") else seen.get("draws")
        if seen.get("draws") and ds.start is None:  # the call starts where the reference's did (else where the
            msg["rng_state"] = start_state(self.judge.torch, self.judge.device, ds.seed).hex()  # previous call left them)
        if not (self.baselines or draws):
            msg["rng"] = True  # every generator as it was
        elif not self.baselines:
            msg["rng_other"] = not seen.get("draws_other")  # Python's and NumPy's as they were, unless Model draws there
            if not cond.train and cond.expected is None and ds.rng_after:  # torch's where the reference's call left them
                msg["rng_after"] = ds.rng_after.hex()
        if cond.stats is not None:  # the running statistics the call starts from, through the parameters' buffers
            for n, t in cond.stats.items():
                sh.bufs[sh.names[f"param:{n}"]].copy_(t)
            msg["stats"] = sorted(cond.stats)
        self.judge.sync()  # every write above done before the worker reads (a queued copy of the statistics: an H100 race)
        if cond.after:  # a training call's statistics left as it updated them, for the eval() call after it
            msg["after"] = cond.after  # (a red team's ModelNew wrote them at their _version and kept a stale fold)
        if cond.backward is not None and cond.backward.carries:  # inputs as a layer inside a network gets them (not
            msg["backward"] = "data" if cond.data else "nonleaf" if self.judge.rng.random() < 0.5 else True  # leaves:
            # a red team's kernel detached those), or as data, asking none (another's then gave the weights none)
        try:
            reply = self.worker.request(msg)
        except KernelFailed as exc:
            return {"reply": None, "failure": f"the kernel raised: {exc}", "rows": [], "warnings": [],
                    "raised": str(exc)}
        finally:  # (a call with statistics: the worker writes the first's back itself, compared in buffer_rows)
            draws_into(sh, self.problem, () if cond.stats is not None else (cond.twin or {}).get("own") or (), twin=False)
        if reply.get("build"):
            self.builds[kid] = reply["build"]
        out: dict[str, Any] = {"reply": reply, "failure": None, "rows": [], "warnings": []}
        held = {n: fingerprint(t) for n, t in zip(self.first.expected, sh.outputs(self.first), strict=True)
                } if checked else {}  # the outputs as the call returned (verify)
        why = screen(sh, self.first, self.variant, poisoned)
        if checked and cond.expected is None and not ds.expected:  # drawn without its reference (pick): computed
            self.problem.reference(ds)  # now, on the judge's own inputs, which the kernel never held
        if checked:
            exp = ds if cond.expected is None else dataclasses.replace(ds, expected=cond.expected)
            rows, warns = verify(sh, exp, reply.get("returned") or {}, self.judge.tolerance, self.judge.ref,
                                 self.problem if cond.expected is None or cond.made else None, held, cond) if exp.expected else ([], [])
            if cond.buffers:
                rows += buffer_rows(self, cond.buffers)
            out.update(rows=rows, warnings=warns, notes=[])
            if cond.backward is not None and not first_failure(rows):
                rows += gradient_rows(self, kid, ds, cond, reply, out["notes"])
            rows += earlier_outputs(self, ds, cond)
            why = first_failure(rows) or why
        out["failure"] = why
        return out


def earlier_outputs(sess: Session, ds: DataSet, cond: Condition) -> list[dict]:
    """In a call handed its outputs elsewhere (``moved``), the output buffers the earlier calls were handed, as the
    call left them (the worker hands them back in the ``kept:`` buffers): still the poison they held before it, or a
    caller's earlier output was written (a CUDA graph or a cache that replays into the first buffer it saw)."""
    import torch

    rows = []
    for n in ds.write_only() if cond.strided == "moved" and cond.pre == "poison" else ():
        t = sess.shared.bufs.get(sess.shared.names.get(f"kept:{n}", ""))
        if t is not None and t.dtype.is_floating_point and count_poison(torch, t, sess.variant) != t.numel():
            rows.append(bad_row(f"output '{n}' of the earlier calls", ds.expected[n],
                                f"the output buffer '{n}' the earlier calls were handed (this one was handed another) "
                                "changed during this call: a caller's earlier output was written (a CUDA graph or a "
                                "cache that replays into the first buffer it saw); write only the outputs a call is "
                                "handed"))
    return rows


def changed_state(sess: Session, kid: str = "k") -> tuple[list[str], int] | None:
    """The model parameters and buffers (by name) whose fingerprints differ between the worker and the judge, and
    how many there are ([], 0 without a model); None when the worker cannot say."""
    try:
        theirs = sess.worker.request({"op": "state", "k": kid})
    except (MeasuredFailure, UsageError):
        return None
    mine = theirs.get("parameters")
    if mine is None:
        return [], 0
    ours = {n: list(fingerprint(t, portable=True)[2:]) for n, t in sess.problem.state().items()}
    return [n for n in ours if mine.get(n) != ours[n]], len(ours)
