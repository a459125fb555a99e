"""The reference in float64: how far the float32 reference (or a kernel) is from exact, and an output that failed
against a float32 reference forgiven where it is as exact as that reference, or more.

Runs in the judge only.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ..compare import applied_tolerances
from ..tensors import is_tensor
from .modes import free_cached
from .problem import DataSet, Problem


def exact_reference(prob: Problem, ds: DataSet, model: Any = None) -> dict[str, Any] | None:
    """The reference's outputs computed in float64 on ``ds``'s inputs, or None when it cannot run so.  ``model``: the
    Model (a copy in a mode, with statistics loaded or weights changed, as it was before the call that gave those
    outputs) run as a float64 copy.  None where the reference draws, in any mode: its draws in float64 are not the
    float32 run's, and an answer from other numbers would widen the allowance (a review's noise-adding Model)."""
    import torch

    def up(v):
        if not is_tensor(v):
            return v
        v = v.detach()  # on the device, where the first call's inputs waited on the host (held.between_calls)
        return v.to(prob.device, torch.float64) if v.dtype.is_floating_point else v.to(prob.device, copy=True)

    try:
        if model is not None:
            model = copy.deepcopy(model).to(torch.float64)
        elif prob.model is not None:
            if "model64" not in prob.seen:
                prob.seen["model64"] = copy.deepcopy(prob.model).to(torch.float64)
            model = prob.seen["model64"]
        out = prob.run_reference({n: up(v) for n, v in ds.args.items()}, ds, model)
    except Exception:
        return None
    if any(prob.drew):
        return None
    if set(out) != set(ds.expected) or not all(is_tensor(v) for v in out.values()):
        return None
    return out


LOOSE = 16.0  # on inputs moved to a range (DataSet.vary, Condition.loose): the kernel's error against float64, over
# the whole output, within this many times the reference's own (CPU, LayerNorm rows shifted 2-500 RMS, 600 draws: two
# honest ones written out within 6.3 times, 3 at the 95th percentile; a one-pass variance 20 times or more, zeros 980)
RANGE_L2 = 4.0  # and its relative L2 error within this many limits however exact the reference happened to be there (an
# honest LayerNorm failed 1.3-2.3 limits where the reference's rounding was the luckier, about one run in ten)


def as_exact_as_the_reference(prob: Problem, ds: DataSet, rows: list[dict], got: dict, held: dict | None = None,
                              cond: Any = None) -> None:
    """An output whose values failed the comparison with the float32 reference passes when it is as exact as the
    reference, or more: against the reference computed in float64, each element within the tolerance or twice the
    reference's own worst error among its compare.LOCAL neighbours (in units of the tolerance), and the relative L2 error
    within the limit, less twice the reference's own in each block of LOCAL.  Found by a CPU sweep (a ModelNew more exact than a reference far
    from exact: GroupNorm of one channel per group) and on the H200 (ConvTranspose2d, ModelNew = Model: 19 of 21 calls
    failed short of memory; cuDNN convolves float32 in TF32 by default, most likely in another algorithm there).  The
    allowance is local (a red team's kernel was sloppy where the reference is exact and passed on its worst error
    elsewhere), and a forgiven output still goes through every check after the values (verify).  ``cond.made``: the
    Model a condition's expected outputs came from, run in float64 the same way (a DenseNet layer more exact than
    cuDNN's TF32 conv failed every call in training mode or with its weights changed, on the H100).  On inputs moved to
    a range (``ds.vary``, or ``cond.loose`` for them again), where the reference may itself be off, the output may
    instead be within LOOSE times the reference's error (relative L2 within RANGE_L2 limits at least), both over the
    whole output (block by block, which of two honest roundings of a row's mean lands nearer is luck)."""
    from ..compare import degenerate, numeric_miss, outside, within_the_references_error
    from ..tensors import clone_or_none, fingerprint

    numeric = [r for r in rows if numeric_miss(r) and is_tensor(got.get(r["name"]))]
    if held is not None:  # private copies matching the call's return (a thread could write right values for this read)
        got = {**got, **{r["name"]: clone_or_none(got[r["name"]]) for r in numeric}}  # None: no room, not forgiven
        numeric = [r for r in numeric if got[r["name"]] is not None and fingerprint(got[r["name"]]) == held.get(r["name"])]
    made, loose = getattr(cond, "made", None), bool(ds.vary or getattr(cond, "loose", False))
    exact = exact_reference(prob, ds, made) if numeric else None
    for r in numeric if exact else ():
        n = r["name"]
        g, e, x = got[n], ds.expected[n], exact[n]
        if tuple(g.shape) != tuple(x.shape) or not (g.dtype.is_floating_point and x.dtype.is_floating_point):
            continue
        tol = r["tolerance"]  # what compare_outputs applied to this output
        worst, l2 = within_the_references_error(g, e, x, tol)
        said = (f"at most {worst:.3g} of the allowance of each element (the tolerance, or twice the float32 reference's "
                f"own error near it), relative L2 error beyond twice the reference's own, block by block, {l2:.3g} of "
                "the limit")
        ok = worst <= 1.0 and l2 <= 1.0
        if loose and not ok:
            (kr, kl), (rr, rl) = units(g, x, tol), units(e, x, tol)
            ok = kr <= max(1.0, LOOSE * rr) and kl <= max(RANGE_L2, LOOSE * rl)  # (NaN where the reference has none:
            # never re-checked, compare.numeric_miss)
            said = (f"{kr:.3g} of the tolerance at worst and {kl:.3g} of the relative L2 limit, the float32 reference "
                    f"{rr:.3g} and {rl:.3g} (moved inputs: within {LOOSE:g} times its error passes)")
        if ok and not degenerate(g, e, r, bool(tol.get("preset"))):
            r.update(passed=True, normwise_only=False,
                     note=f"against the reference in float64: {said}: as exact as the reference, or more")
        else:  # what the re-check found, beside what the float32 comparison said
            r["note"] = f"{outside(r)}; against the reference in float64 too: {said}"
    if exact:  # the float64 outputs go, and the memory with them
        exact = None
        free_cached()


def nonfinite(t) -> int:
    return int((~t.isfinite()).sum()) if t.dtype.is_floating_point or t.dtype.is_complex else 0


def error_units(got: dict, exact: dict, tolerance: Any, ref: Any) -> dict[str, Any]:
    """How far each output (the reference's, or a kernel's) is from its float64 answer, the worst over them: ``ratio``,
    the largest |got - exact| / (atol + rtol * |exact|); ``l2``, the relative L2 error over the normwise limit
    (0 where there is none); or {"why": ...} when the float64 answer is not finite where the reference is."""
    import torch

    tols = applied_tolerances(got, tolerance, ref)
    ratio = l2 = 0.0
    for name, g in got.items():
        e = exact[name].to(device=g.device)
        if not (g.dtype.is_floating_point or g.dtype.is_complex):
            ratio = max(ratio, 0.0 if torch.equal(g, e.to(g.dtype)) else math.inf)
            continue
        if bool((torch.isfinite(g) & ~torch.isfinite(e)).any()):
            return {"why": "the float64 reference is not finite where the reference is"}
        r, n = units(g, e, tols[name])
        ratio, l2 = max(ratio, r), max(l2, n)
    return {"ratio": ratio, "l2": l2}


def units(g: Any, e: Any, tol: dict[str, Any]) -> tuple[float, float]:
    """(the largest |g - e| / (atol + rtol * |e|), the relative L2 error over the limit or 0 without one) of a float
    output ``g`` against its float64 answer ``e``, where both are finite; infinite where ``g`` is finite and ``e`` is
    not (NaN or infinities elsewhere are the comparison's to judge)."""
    import torch

    gd, ed = g.detach().to(torch.float64), e.detach().to(device=g.device, dtype=torch.float64)
    if bool((torch.isfinite(gd) & ~torch.isfinite(ed)).any()):
        return math.inf, math.inf
    finite = torch.isfinite(gd) & torch.isfinite(ed)
    d = (gd - ed).abs()[finite]
    bound = (tol["atol"] + tol["rtol"] * ed.abs()[finite]).clamp_min(1e-300)
    ratio = float((d / bound).max()) if d.numel() else 0.0
    norm = float(ed[finite].norm())
    return ratio, float(d.norm()) / norm / tol["rel_l2"] if tol.get("rel_l2") and norm > 0 else 0.0
