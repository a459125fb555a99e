"""The conditions a user's call can differ in, which correctness checks beside the problem's own draws.

A kernel that is right only in the conditions the judge always uses is wrong where a user calls it.  So
the correctness calls of each shape vary, in an order drawn at random (``condition_plan``):

- what the outputs handed to the kernel hold before the call: zeros, random values, the right answer of
  other inputs (a kernel that computes only where it finds the poison leaves a user's buffer as it was);
- a KernelBench model's mode and autograd: training mode with autograd on (a module as built), training
  mode without, eval() with autograd, eval() under inference_mode, each against Model in the same mode (``train_expected``; a Model
  whose training-mode output is random, dropout, is compared in eval() only, and the notes say so);
- the inputs' range: scaled up (x20 to x500), down (x0.002 to x0.05) and shifted (2 to 8 RMS), the factor of
  each draw taken from its seed, so a kernel cannot aim at a fixed point (``VARIANTS``), where the reference stays finite
  and as well conditioned as on the problem's own inputs, judged against the reference in float64
  (``range_ok``); integer, bool and discrete-valued inputs (masks, labels) keep their values;
- and, the results of every call held as a caller would hold them, that none shares storage with a later
  result and that each still holds its bytes after all the calls that followed (a kernel that returns a
  buffer it reuses overwrites a result its caller kept).

Runs in the judge only.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

from ..tensors import is_tensor, normalize_outputs, poison_tensor, random_like
from .problem import DataSet, Problem, ref_pool

# the input ranges correctness also checks: name -> (what is drawn, its low and high end, drawn log-uniformly)
VARIANTS = {"up": ("scale", 20.0, 500.0), "down": ("scale", 0.002, 0.05), "shift": ("shift", 2.0, 8.0)}
DISCRETE_VALUES = 16  # a float input with at most this many distinct values (a mask, +-1 labels) keeps its values

# every condition, in words (correctness.md lists them)
CONDITION_WORDS = {
    "plain": "the problem's inputs, every output poisoned, eval() without autograd",
    "pre:zeros": "the outputs handed to the kernel held zeros before the call",
    "pre:random": "the outputs handed to the kernel held random values before the call",
    "pre:stale": "the outputs handed to the kernel held the right answer of other inputs before the call",
    "mode:train+grad": "the model in training mode with autograd on, as a freshly built module is called",
    "mode:train": "the model in training mode, autograd off",
    "mode:grad": "the model in eval() with autograd on",
    "mode:inference": "the model in eval() under torch.inference_mode()",
    "range:up": "inputs scaled up (x20 to x500)",
    "range:down": "inputs scaled down (x0.002 to x0.05)",
    "range:shift": "inputs shifted by 2 to 8 RMS (zeros kept)",
}


@dataclasses.dataclass
class Condition:
    """How a correctness call differs from a plain one: ``pre``, what the outputs handed to the kernel hold
    before it ("poison", "zeros", "random", "stale": ``stale``'s expected values); ``train``/``grad``, the
    module's mode and autograd (with ``expected``, the reference's outputs in that mode when they differ);
    ``keep``, the worker holds the returned tensors, as a caller would, to be checked after the later calls."""

    pre: str = "poison"
    stale: DataSet | None = None
    train: bool = False
    grad: bool = False
    expected: dict[str, Any] | None = None
    keep: bool = False
    inference: bool = False


def forget(prob: Problem) -> None:
    """Free what the conditions of a shape held (Model in float64) once its calls are made."""
    if prob.seen.pop("model64", None) is not None:
        _free()


def condition_plan(rng, first: DataSet, prob: Problem, trials: int) -> list[str]:
    """The condition of each correctness call of a shape: the first is plain; every condition that applies to
    this problem is met once, in an order drawn at random (a kernel cannot tell which comes when), spread over
    the trials and, past them, in calls of their own."""
    wanted: list[str] = []
    if first.write_only():
        wanted += ["pre:zeros", "pre:random", "pre:stale"]
    elif first.accumulates:
        wanted += ["pre:random"]
    if prob.model is not None:
        wanted += ["mode:train+grad", "mode:train", "mode:grad", "mode:inference"]
    if any(first.args[n].dtype.is_floating_point for n in first.input_names()):
        wanted += [f"range:{k}" for k in VARIANTS]
    rng.shuffle(wanted)
    return ["plain", *wanted, *["plain"] * max(trials - 1 - len(wanted), 0)]


def condition(tolerance: Any, prob: Problem, first: DataSet, ds: DataSet, want: str | None, earlier: DataSet | None,
              seed: int, notes: list[str]) -> tuple[Condition, str, DataSet]:
    """The Condition of one correctness call, its name (CONDITION_WORDS) and its data set (a range condition
    draws its own); a condition that cannot be checked on this problem is noted and the call is plain."""
    try:
        return _condition(tolerance, prob, first, ds, want, earlier, seed, notes)
    except Exception as exc:  # the reference, not the kernel: the condition is not checked, the call is plain
        text = " ".join(str(exc).split())[:160]
        oom = isinstance(exc, MemoryError) or "out of memory" in text.lower()
        why = ("its extra copies (float64, the model in training mode) did not fit in memory" if oom else
               f"the reference cannot run there ({type(exc).__name__}: {text})")
        notes.append(f"{CONDITION_WORDS.get(want or 'plain', want)}: not checked: {why}")
        prob.seen.pop("model64", None)
        _free()
        return Condition(keep=True), "plain", ds


def _free() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _condition(tolerance: Any, prob: Problem, first: DataSet, ds: DataSet, want: str | None,
               earlier: DataSet | None, seed: int, notes: list[str]) -> tuple[Condition, str, DataSet]:
    cond = Condition(keep=True)
    aspect, _, value = (want or "plain").partition(":")
    if aspect == "pre":
        cond.pre, cond.stale = value, earlier or first
        if value == "stale" and cond.stale is ds:
            cond.pre = "random"
        if ds.accumulates:  # the outputs the call adds to start from random values, the reference's too
            ds = prob.draw(seed, reference=False)
            for n in ds.accumulates:
                ds.args[n] = random_like(ds.args[n])
            prob.reference(ds)
    elif aspect == "mode":
        expected, why = train_expected(prob, ds, tolerance) if "train" in value else (None, None)
        if why:
            notes.append(f"{CONDITION_WORDS[want]}: not compared: {why}")
            return cond, "plain", ds
        cond.train, cond.grad, cond.expected = "train" in value, "grad" in value, expected
        cond.inference = value == "inference"
    elif aspect == "range":
        varied = prob.draw(seed, vary=value)
        why = range_ok(prob, first, varied, tolerance)
        if why:
            notes.append(f"{CONDITION_WORDS[want]}: not checked: {why}")
            return cond, "plain", ds
        return cond, want, varied
    return cond, want or "plain", ds


# --- the inputs' range -----------------------------------------------------------------------------
def factor(vary: str, seed: int) -> float:
    """The scale or shift of a draw moved to ``vary``: log-uniform in its VARIANTS range, from the draw's seed."""
    import random

    _, lo, hi = VARIANTS[vary]
    return float(math.exp(random.Random(seed * 7919 + len(vary)).uniform(math.log(lo), math.log(hi))))


def move(ds: DataSet, vary: str) -> None:
    """Move ``ds``'s float inputs to the range ``vary`` names (VARIANTS): x * scale, or x + shift * RMS(x).  Integer,
    bool and discrete-valued inputs (DISCRETE_VALUES: masks, labels) and the outputs keep their values, and a
    shift leaves exact zeros as they are (triangular and masked inputs keep their structure)."""
    import torch

    what, f = VARIANTS[vary][0], factor(vary, ds.seed)
    scale, shift_rms = (f, 0.0) if what == "scale" else (1.0, f)
    for name in ds.input_names():
        t = ds.args[name]
        if not t.dtype.is_floating_point or t.numel() == 0:
            continue
        sample = t.detach().reshape(-1)[:65536].double()  # float64: unique and the RMS take every float dtype
        if torch.unique(sample).numel() <= DISCRETE_VALUES:
            continue
        moved = t.double() * scale
        if shift_rms:  # zeros stay zeros: a triangular, banded or masked input keeps its structure
            moved = torch.where(moved != 0, moved + shift_rms * float(sample.square().mean().sqrt()), moved)
        ds.args[name] = moved.to(t.dtype)
    ds.vary = f"{vary}: " + (f"x{f:.3g}" if what == "scale" else f"+{f:.3g} RMS")


def range_ok(prob: Problem, base: DataSet, varied: DataSet, tolerance: Any) -> str | None:
    """Why the inputs of ``varied`` cannot be checked (None when they can): the reference is not finite
    there, cannot run in float64, or is worse conditioned there than on the problem's own inputs ``base``
    (its error against float64, in units of the tolerance, more than twice that on ``base`` and above half
    the tolerance).  Where the reference itself holds up, an honest kernel does too."""
    seen = prob.seen
    if "base_error" not in seen:
        exact = _exact(prob, base)
        seen["base_error"] = {"why": "the reference cannot run in float64"} if exact is None else \
            _error(base.expected, exact, tolerance, prob.ref)
    base_err = seen["base_error"]
    if "why" in base_err:
        return base_err["why"]
    if any(_nonfinite(v) > _nonfinite(base.expected[n]) for n, v in varied.expected.items()):
        return "the reference is not finite there"
    exact = _exact(prob, varied)
    if exact is None:
        return "the reference cannot run in float64 there"
    err = _error(varied.expected, exact, tolerance, prob.ref)
    if "why" in err:
        return err["why"]
    for key in ("ratio", "l2"):
        if err[key] > max(0.5, 2.0 * base_err[key]):
            return (f"the reference itself is off by {err[key]:.2g} of the tolerance there (against float64), "
                    f"{base_err[key]:.2g} on the problem's inputs")
    return None


def _exact(prob: Problem, ds: DataSet) -> dict[str, Any] | None:
    """The reference's outputs computed in float64 on ``ds``'s inputs, or None when it cannot run so."""
    import torch

    def up(v):
        if not is_tensor(v):
            return v
        v = v.detach()
        return v.to(torch.float64) if v.dtype.is_floating_point else v.clone()

    try:
        with torch.no_grad():
            if prob.model is not None:
                if "model64" not in prob.seen:
                    prob.seen["model64"] = copy.deepcopy(prob.model).to(torch.float64)
                value = prob.seen["model64"](*(up(ds.args[n]) for n in ds.args))
                names: list[str] = []
            else:
                fn = prob.reference_fn()
                kw = ref_pool(fn, {n: up(v) for n, v in ds.args.items()}, prob.dims)
                for name in ds.write_only():
                    if name in kw:
                        poison_tensor(kw[name])
                value = fn(**kw)
                names = list(ds.in_place)
                if value is None:
                    value = {n: kw[n] for n in names}
        out = normalize_outputs(value, names)
    except Exception:
        return None
    if set(out) != set(ds.expected) or not all(is_tensor(v) for v in out.values()):
        return None
    return out


def _nonfinite(t) -> int:
    import torch

    return int((~torch.isfinite(t)).sum()) if t.dtype.is_floating_point or t.dtype.is_complex else 0


def _error(got: dict, exact: dict, tolerance: Any, ref: Any) -> dict[str, Any]:
    """How far each output of the reference is from its float64 answer, the worst over the outputs: ``ratio``,
    the largest |got - exact| / (atol + rtol * |exact|); ``l2``, the relative L2 error over the normwise limit
    (0 where there is none); or {"why": ...} when the float64 answer is not finite where the reference is."""
    import torch

    from ..compare import applied_tolerances

    tols = applied_tolerances(got, tolerance, ref)
    ratio = l2 = 0.0
    for name, g in got.items():
        e = exact[name].to(device=g.device)
        if not (g.dtype.is_floating_point or g.dtype.is_complex):
            ratio = max(ratio, 0.0 if torch.equal(g, e.to(g.dtype)) else math.inf)
            continue
        gd, ed = g.detach().to(torch.float64), e.detach().to(torch.float64)
        if bool((torch.isfinite(gd) & ~torch.isfinite(ed)).any()):
            return {"why": "the float64 reference is not finite where the reference is"}
        finite = torch.isfinite(gd) & torch.isfinite(ed)
        tol = tols[name]
        d = (gd - ed).abs()[finite]
        bound = (tol["atol"] + tol["rtol"] * ed.abs()[finite]).clamp_min(1e-300)
        if d.numel():
            ratio = max(ratio, float((d / bound).max()))
        norm = float(ed[finite].norm())
        if tol.get("rel_l2") and norm > 0:
            l2 = max(l2, float(d.norm()) / norm / tol["rel_l2"])
    return {"ratio": ratio, "l2": l2}


# --- the module's mode -----------------------------------------------------------------------------
def train_expected(prob: Problem, ds: DataSet, tolerance: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A KernelBench model's expected outputs in training mode on ``ds`` (the judge's Model copied, so its own
    state stays as loaded): (outputs, None); (None, why) when training mode cannot be compared because
    Model's output there is random (dropout)."""
    import torch

    from ..compare import compare_outputs

    args = [ds.args[n] for n in ds.args]

    def run(seed: int) -> dict[str, Any]:
        m = copy.deepcopy(prob.model).train()
        torch.manual_seed(seed)
        with torch.no_grad():
            return normalize_outputs(m(*args), [])

    first = run(prob.cfg.seed + 1)
    if "train" not in prob.seen:
        same = all(r["passed"] for r in compare_outputs(first, ds.expected, tolerance, prob.ref)[0])
        again = all(r["passed"] for r in compare_outputs(run(prob.cfg.seed + 2), first, tolerance, prob.ref)[0])
        prob.seen["train"] = "same" if same else ("differs" if again else "random")
    if prob.seen["train"] == "random":
        return None, ("Model's output in training mode changes from call to call (dropout, say), so ModelNew is "
                      "compared in eval() only")
    return (ds.expected if prob.seen["train"] == "same" else first), None
