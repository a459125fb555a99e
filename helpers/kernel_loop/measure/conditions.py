"""The conditions a user's call can differ in, which correctness checks beside the problem's own draws.

A kernel that is right only in the conditions the judge always uses is wrong where a user calls it.  So
the correctness calls of each shape vary, in an order drawn at random (``condition_plan``):

- what the outputs handed to the kernel hold before the call: zeros, random values, the right answer of
  other inputs (a kernel that computes only where it finds the poison leaves a user's buffer as it was);
- a KernelBench model's mode and autograd: training mode with autograd on (a module as built), training
  mode without, eval() with autograd, eval() under inference_mode, each against Model in the same mode (``train_expected``; a Model
  whose training-mode output is random, dropout, is compared in eval() only, and the notes say so); a
  training-mode call starts from random running statistics (``running_stats``) and the buffers it leaves are
  compared with Model's; two runs of two or three training calls (a user's steps, with autograd in one run,
  without in the other) start from the statistics the model holds and leave them for the eval() calls after them; every call with autograd on is followed by backward() (normal or expanded output
  gradients, tensors.upstream), and the gradients of the parameters and inputs compared with Model's (``backward_expected``);
- a KernelBench model's inputs handed as strided views (``layout:strided``, ``layout:padded``), dense at a storage
  offset (``layout:offset``, a batch less its first row) or dense in another memory order (``layout:permuted``:
  channels_last, a transpose's, with the model's 4-d and 5-d weights channels_last too; ``layout:permuted:input``
  and ``layout:weights``, either without the other, a user's model and inputs each in their own order): right, or a refusal (it
  raises; a CUDA error that breaks the context, a misaligned address say, is a failure); every
  kernel's inputs handed in memory of their own, at another address (``layout:moved``): right;
- the inputs' range (``VARIANTS``): scaled up, down and shifted (each at both ends too), across zero (signs flipped,
  shifted down), each row on its own, every other row leading with -inf, where the reference stays finite and as
  well conditioned as on the problem's own inputs, judged in float64 (``range_ok``); integer, bool and
  discrete-valued inputs (masks, labels) keep their values;
- and, the results of every call held as a caller would hold them, that none shares storage with a later
  result and that each still holds its bytes after all the calls that followed (a kernel that returns a
  buffer it reuses overwrites a result its caller kept), and that none is still alive once the caller lets
  go of them (``calls.after_the_calls``: a ring of buffers larger than the calls made).

Runs in the judge only.
"""

from __future__ import annotations

import dataclasses
import math
import random
import zlib
from typing import Any

from ..compare import compare_outputs, constant_outputs
from ..tensors import is_tensor, nudge, nudge_scales, random_like, strided_view
from ..vocab import CONDITION_WORDS
from .exact import LOOSE, error_units, exact_reference, nonfinite
from .guards import moving_weights, weights_back, weights_channels_last
from .modes import (
    RANDOM_TRAINING,
    Backward,
    backward_expected,
    continuous,
    eval_expected,
    free_cached,
    frozen_norms,
    frozen_params,
    masks_nothing,
    model_copy,
    running_stats,
    train_expected,
)
from .problem import DataSet, Problem

# the input ranges correctness also checks: name -> (what is drawn, its low and high end, drawn log-uniformly)
VARIANTS = {"up": ("scale", 20.0, 500.0), "down": ("scale", 0.002, 0.05), "shift": ("shift", 2.0, 8.0),
            # across zero: inputs drawn never negative (rand) get negative values, randn's get a negative offset
            "flip": ("scale", -2.0, -0.5), "sink": ("shift", -500.0, -2.0),
            # each row (a slice along the first dim) shifted on its own, up or down: a red team's softmax took one max
            # over the whole tensor for each row's, exact while every row sat near the same level
            "rows": ("rows", 2.0, 500.0),
            # every other row (last dim) leading with -inf, a left-padded batch's logits: a red team's online softmax's NaN
            "masked": ("masked", 0.25, 0.75)}
ENDS = ("up", "down", "shift", "sink")  # the ranges also tried at both ends


@dataclasses.dataclass
class Condition:
    """How a correctness call differs from a plain one: ``pre``, what the outputs handed to the kernel hold before it
    ("poison", "zeros", "random", "stale": ``stale``'s expected values); ``train``/``grad``, the module's mode and autograd
    (``expected``, the reference's outputs there where they differ); ``keep``, the worker holds the returned tensors, as
    a caller would; ``strided``, the inputs' layout; after a training-mode call, ``buffers`` are Model's as the call
    leaves them, from ``stats`` loaded before it (``after``: left for the next); ``backward``: gradients compared."""

    pre: str = "poison"
    stale: DataSet | None = None
    train: bool = False
    grad: bool = False
    expected: dict[str, Any] | None = None
    keep: bool = False
    inference: bool = False
    nograd: bool = False  # a kernel function called with autograd off (it is on by default, as in a user's process)
    strided: str | None = None  # "step", "pad", "permuted", "lead" or "moved" (tensors.strided_view)
    nudge: dict[str, Any] | None = None  # {"seed", "scales", "sparse"?, "stays"?}: parameters changed first (tensors.nudge)
    twin: dict[str, Any] | None = None  # {"seed", "scales", "train"?}: a second instance so nudged is called (tensors.twin)
    stats: dict[str, Any] | None = None
    after: str | None = None  # "leave": the statistics the call updates stay for the next; "restore": then put back
    buffers: dict[str, Any] | None = None
    backward: Backward | None = None
    frozen: tuple = ()  # the submodules put in eval() inside the model in training mode (modes.frozen_norms)
    fixed: tuple = ()  # the parameters frozen (requires_grad off) by name (modes.frozen_params); the others compared
    made: Any = None  # the Model copy ``expected`` came from, run in float64 where a kernel misses it (exact.py)
    weights: bool = False  # the model's 4-d and 5-d weights channels_last for the call (guards.weights_channels_last)
    loose: bool = False  # the inputs of a range's call again (ds.vary is gone): held to float64 as that call (exact.LOOSE)
    data: bool = False  # the inputs plain data (no gradient asked of them), every parameter training: a first layer's

    @property
    def owed(self) -> bool:
        """A gradient ModelNew gave while every input and parameter trained must not be missing in this call."""
        return bool(self.fixed) or self.data


LATE_GRAD = ("mode:grad:frozen", "mode:grad:partial", "mode:grad:data",  # compared with what the calls with all
             "mode:train+grad:frozen", "mode:train+grad:partial", "mode:train+grad:data")  # training reached, either mode


def forget(prob: Problem) -> None:
    """Free what the conditions of a shape held (Model in float64) once its calls are made."""
    if prob.seen.pop("model64", None) is not None:
        free_cached()


TWIN_TRAIN = ["weights:twin:train"]
OTHER_BATCH = "batch:other"  # held.other_batches


def other_plan(rng, back: bool, prob: Problem, run: dict[str, int]) -> list[str]:
    """The calls at a batch size of the judge's own (held.other_batches), in an order drawn at random between two
    plain ones: a training call without autograd (its buffers compared) and one with it (its gradients), eval() with
    autograd and under inference_mode, one after the parameters changed, a second instance, 0 to 3 more plain calls
    (a twelfth red team's kernels changed after a fixed number of calls, or in a mode checked at the run's size alone),
    one after a change of the parameters that stays (``weights:stepped``, kept by the shapes after it), and for a model
    with running statistics a run of training steps that leave them, then eval() from them; ``back``, at the run's
    batch size again, a plain call, then one with a parameter changed alone (a fold stamped with another layer's
    parameters passed 7 runs in 10 on three such calls a run).  At batch size one, three or four calls: plain, with
    autograd, after an optimizer step that stays, plain (a red team's path for one row forgot the bias, a review's
    cached W.t() there), the next size after them; at input sizes other than the ``run``'s dims, the same, sizes:other."""
    weights = bool(nudge_scales(prob.model))  # (a model without parameters has no second instance of its own)
    sizes = any(prob.dims.get(k) != v for k, v in run.items() if k != "batch_size")
    if prob.dims.get("batch_size") == 1 or sizes:  # a user's one sample, a path of its own (a GEMV), or other widths
        middle, edge = ["mode:grad", *["weights:stepped"] * weights], "sizes:other" if sizes else OTHER_BATCH
        return [edge, *rng.sample(middle, len(middle)), edge]
    if back:
        return ["batch:back", "weights:updated" if weights else "batch:back"]
    middle = ["mode:train", "mode:train+grad", "mode:grad", "mode:inference", *["weights:updated"] * weights,
              *[OTHER_BATCH] * rng.randint(0, 3), *["weights:stepped"] * weights]
    rng.shuffle(middle)
    if weights:
        middle.insert(_twin_spot(rng, middle), "weights:twin")
    if running_stats(prob, 0):  # (the first instance next after the twin)
        at = rng.choice([i for i in range(len(middle) + 1) if middle[i - 1:i] != ["weights:twin"]])
        middle[at:at] = _steps(rng, rng.choice(("mode:train-step", "mode:train-step+grad")))
    return [OTHER_BATCH, *middle, OTHER_BATCH]


def step(prob: Problem, spec: dict[str, Any]) -> None:
    """A training step's change of the parameters that stays (``weights:stepped``): the judge's Model takes it too, and
    the shapes after this one (held.problem_at, which replays ``seen["steps"]`` on their Model; their bind carries the
    worker's weights over, problem.call_plan: a reload would be a new _version, which the stale cache would see)."""
    spec["stays"] = True
    nudge(prob.model, int(spec["seed"]), spec["scales"], keep=False)
    prob.seen.pop("model64", None)  # a float64 copy from before
    prob.seen.setdefault("steps", []).append(spec)


def alone(prob: Problem, scales: dict[str, float], seed: int) -> tuple[str, bool | str]:
    """The parameter a ``weights:updated`` call changes alone (half its elements) and how (tensors.nudge's ``sparse``):
    each in turn, in an order drawn once from the first such call's secret seed, carried through the shapes, as a user
    trains one layer alone; by noise or by a swap of half its values, every sum kept (alternating, each gets both).
    Red teams' caches stamped with one parameter's _version, or checked by its sum, passed the changes of all."""
    turn = prob.seen.setdefault("alone", {"order": random.Random(seed).sample(sorted(scales), len(scales)), "next": 0})
    order = [n for n in turn["order"] if n in scales] or sorted(scales)
    t, turn["next"] = turn["next"], turn["next"] + 1
    return order[t % len(order)], "swap" if (t % len(order) + t // len(order)) % 2 else True


def _twin_spot(rng, plan: list[str]) -> int:
    """Where a second instance's call goes: before a call of the first (a twin last, or before a nudge, left a cache the
    two share unseen, 4 seeds of 3000), never before the first's training call, where the twin's own training call comes."""
    return rng.choice([i for i, c in enumerate(plan) if not c.startswith("weights:") and c != "mode:train"])


def _steps(rng, step: str) -> list[str]:
    """A user's run of training steps: eval() without and with inference mode, two or three ``step`` calls leaving the
    running statistics, then eval() from them without and with inference mode."""
    return ["plain", "mode:inference:held", *[step] * rng.choice((2, 3)), "mode:after-train",
            "mode:after-train:inference"]


def condition_plan(rng, first: DataSet, prob: Problem, trials: int) -> list[str]:
    """Each correctness call's condition: the first plain (a model's, one time in two, under inference_mode, then training
    with autograd); every condition that applies once, in an order drawn at random, with running statistics two runs of steps."""
    import torch

    wanted: list[str] = []
    if first.write_only():
        wanted += ["pre:zeros", "pre:random", "pre:stale"]
    elif first.accumulates:
        wanted += ["pre:random"]
    if prob.model is not None:
        wanted += ["mode:train+grad", "mode:train", "mode:grad", "mode:inference"]
        wanted += ["mode:train:frozen"] if frozen_norms(prob.model) else []  # a user's frozen BatchNorm
        if nudge_scales(prob.model):  # a red team's ModelNew copied its weights on its first call and kept the copy
            wanted += ["weights:updated"] * 2 + ["weights:twin", "weights:twin:train"]  # a ninth's shared a cache across
            wanted += ["weights:updated:again", "weights:twin:again", "input:again"]  # instances; an eleventh's memo
            wanted += list(LATE_GRAD)  # a red team's backward gave the input (the bias) none once the weights were frozen,
            # another's the weights none where the input asked none (data): after mode:grad (what ModelNew reaches)
        elif prob.drawn:  # no parameters, buffers drawn per instance: a class cache of the first's passed (a red team)
            wanted += ["weights:twin", "weights:twin:train", "weights:twin:again"]
    elif prob.kind == "py":  # a function's caller may run without autograd (a red team's was right only with it)
        wanted += ["call:nograd", "call:inference"]
    if any(first.args[n].dtype.is_floating_point for n in first.input_names()):
        rows = any(is_tensor(t := first.args[n]) and t.dim() > 1 and t.shape[0] > 1 for n in first.input_names())
        wanted += [f"range:{k}{end}" for k in VARIANTS if k not in ("rows", "masked") or rows  # (one row: a shift's)
                   for end in (("", ":lo", ":hi") if k in ENDS else ("",))]
    if any(is_tensor(first.args[n]) for n in first.input_names()):
        wanted += ["layout:moved"]  # found by a red team: a kernel right only at the address of the first input it saw
    if prob.model is not None and any(max(first.args[n].shape, default=0) > 1 for n in first.input_names()):
        moving = bool(moving_weights(torch, prob.model))  # weights a user's channels_last model holds moved
        wanted += ["layout:strided", "layout:offset"]  # a module takes what its caller has; a run_kernel's inputs
        # are setup()'s (offset: a red team's kernel read its input's storage from the start; a float4 load faults)
        if any(sum(s > 1 for s in first.args[n].shape) > 1 for n in first.input_names() if is_tensor(first.args[n])):
            wanted += ["layout:padded", "layout:permuted"]  # a red team's kernel took empty_like's strides for row-major
            wanted += ["layout:permuted:input"] if moving else []  # and a red team's conv took its weight's order
            # from its input's: the two apart, the inputs alone here, the weights alone in layout:weights
        wanted += ["layout:weights"] if moving else []
        if any(is_tensor(a := first.args[n]) and a.dim() > 2 and min(a.shape[:2]) > 1 for n in first.input_names()):
            wanted += ["layout:lead"]  # and a review's, checking only the last dim's stride
    rng.shuffle(wanted)
    for late in LATE_GRAD if "mode:grad:frozen" in wanted else ():  # after mode:grad and mode:train+grad, whose
        wanted.remove(late)  # gradients say what ModelNew reaches (what follows only inserts: they stay after)
        wanted.insert(rng.randint(max(wanted.index("mode:grad"), wanted.index("mode:train+grad")) + 1, len(wanted)),
                      late)
    if len(wanted) > 1 and wanted[-1] == "layout:moved":  # its handed outputs are read after the next call: never the
        wanted[-2], wanted[-1] = wanted[-1], wanted[-2]  # last (before it, a frozen call or another: never mode:grad)
    if "weights:twin" in wanted:
        wanted.remove("weights:twin")
        wanted.insert(_twin_spot(rng, wanted), "weights:twin")
    if "weights:twin:train" in wanted:  # right before the first's training-mode call without autograd: a cache the
        wanted.remove("weights:twin:train")  # two shared in that mode alone gave the first the twin's (a red team's)
        wanted.insert(wanted.index("mode:train"), "weights:twin:train")
    if "weights:twin:again" in wanted:  # in inference_mode, the first next in inference_mode too (a red team's cache
        wanted.remove("weights:twin:again")  # the instances shared there alone)
        at = rng.choice([i for i in range(len(wanted) + 1) if wanted[i - 1:i] not in (["weights:twin"], TWIN_TRAIN)])
        wanted[at:at] = ["weights:twin:again", "mode:inference:held"]
    if prob.model is not None and running_stats(prob, 0):  # a ModelNew folded its statistics in eval() and kept the
        spots = [i for i in range(len(wanted) + 1) if wanted[i - 1:i] not in (["weights:twin:again"], TWIN_TRAIN)]
        spots = [rng.choice(spots) for _ in range(2)]  # fold while its own training call wrote them at
        blocks = [_steps(rng, step) for step in ("mode:train-step+grad", "mode:train-step")]
        for at, block in sorted(zip(spots, blocks, strict=True), reverse=True):  # the same _version: right
            wanted[at:at] = block  # while every training call's were put back; red teams' folds made at the first
            # of several steps, in one mode, or kept past steps of one kind: two or three steps of each kind
    start = "plain"
    if "mode:inference" in wanted and rng.random() < 0.5:  # a user's first call is often an evaluation's (a cache made
        wanted[wanted.index("mode:inference")], start = "plain", "mode:inference"  # there is an inference tensor),
        wanted.insert(0, "mode:train+grad")  # then training, before a new _version (a sixth red team's, 1 in 3 before)
    return [start, *wanted, *["plain"] * max(trials - 1 - len(wanted), 0)]


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
        free_cached()
        return Condition(keep=True), "plain", ds


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
        train, left = value.startswith("train"), prob.seen.pop("left", None)
        cond.stats = running_stats(prob, seed) or None  # in eval() too: a trained model's statistics are not 0 and 1
        if cond.stats is None and train and next(prob.model.buffers(), None) is not None:  # other buffers a training
            cond.stats = {}  # call updates (an EMA's) are compared too, loaded as they were (a red team's honest EMA)
        cond.stats = None if value == "inference:held" else cond.stats
        if value.startswith(("train-step", "after-train")):  # the statistics the model holds, then what steps left
            last = value == "after-train:inference"  # the last call of the block puts them back
            cond.stats, cond.after = ((left or {}) if train else left), ("leave" if train or not last else "restore")
            if cond.stats is None:
                notes.append(f"{CONDITION_WORDS[want]}: not compared: the training-mode call before it was not")
                return Condition(keep=True, after="restore" if last else None), "plain", ds
        cond.frozen = tuple(frozen_norms(prob.model)) if value == "train:frozen" else ()
        owed = value.partition("grad:")[2]  # (in either mode: a red team's backward was wrong in training mode alone)
        cond.data = owed == "data"  # (every parameter trains: none fixed)
        cond.fixed = frozen_params(prob.model, owed == "partial") if owed in ("frozen", "partial") else ()
        if train:
            expected, why = train_expected(prob, ds, tolerance, cond)
        else:
            expected, why = (eval_expected(prob, ds, cond) if cond.stats else None), None  # ("after-train": always)
        if why:
            notes.append(f"{CONDITION_WORDS[want]}: not compared: {why}")
            return Condition(keep=True), "plain", ds
        if expected == {} and (said := f"outputs in training mode: not compared: {RANDOM_TRAINING}; the buffers it "
                               "leaves are") not in notes:  # (RANDOM_TRAINING: no gradients either)
            notes.append(said)
        prob.seen["left"] = (cond.buffers if train else left) if cond.after == "leave" else None
        cond.train, cond.grad, cond.expected = train, "grad" in value, expected
        cond.inference = "inference" in value
        if cond.grad and expected != {} and prob.seen.get("backward") is not False:  # every call with autograd on: the gradients a user gets
            cond.backward = backward_expected(prob, ds, cond, seed, notes)
        if cond.after:  # nothing loaded: the call starts where the model was left (the judge's copy_ is a new _version)
            cond.stats = {} if cond.after == "leave" else None
    elif aspect == "call":
        cond.nograd, cond.inference = True, value == "inference"
    elif (want or "").endswith(":again"):  # inputs a call has just had, with weights changed or not: a memo keyed on their
        base = earlier or first  # values, blind to the weights and the instance (a red team's), is stale (_dense)
        ds = dataclasses.replace(ds, args={n: _dense(base.args[n].to(v.device)) if n in ds.input_names() else v
                                           for n, v in ds.args.items()}, ref_props={}, vary=None)
        prob.reference(ds)
        cond.loose = bool(base.vary)  # a range's inputs, held as that call was (exact.py)
    if aspect == "weights":  # a second instance's frozen parameters, norms' means and drawn buffers differ too
        twin, train = value.startswith("twin"), value == "twin:train"  # (a frozen layer or a norm's statistics are
        own = prob.drawn if twin else []  # reloaded alone too; a twin's own draws, as they are)
        scales = {n: v for n, v in nudge_scales(prob.model, every=twin or value == "updated").items() if n not in own}
        sparse = value == "updated" and bool(scales)  # one parameter alone, in turn, by noise or a swap (alone)
        name, sparse = alone(prob, scales, seed) if sparse else (None, False)
        scales = {name: scales[name]} if sparse else scales

        def nudged() -> Any:
            m = model_copy(prob, train, None, twin=twin)
            nudge(m, seed, scales, sparse=sparse)
            return m
        cond.made = nudged()  # never run (a forward may change its buffers); made now: "stepped" changes Model below
        runs = [prob.run_reference(ds.args, ds, nudged(), s) for s in (None, prob.cfg.seed + 2)[:1 + train]]
        if train and not all(r["passed"] for r in compare_outputs(runs[1], runs[0], tolerance, prob.ref)[0]):
            return _condition(tolerance, prob, first, ds, "weights:twin", earlier, seed, notes)  # random (dropout)
        cond.expected, spec = runs[0], {"seed": seed, "scales": scales, **({"train": True} if train else {}),
                                        **({"sparse": sparse} if sparse else {}), **({"own": own} if own else {})}
        if train and (names := {n for n, _ in prob.model.named_buffers()}):  # the first instance's buffers stay as
            cond.stats, cond.after = {}, "restore"  # loaded while the twin trains (a red team's wrote its own there)
            cond.buffers = {n: t.detach().clone() for n, t in prob.model.state_dict().items() if n in names}
        cond.nudge, cond.twin = (spec, None) if value.startswith(("updated", "stepped")) else (None, spec)
        if value == "stepped":  # the judge's Model too, and at the next sizes (held.problem_at): a thirteenth red
            step(prob, spec)  # team's per-batch-size cache, stamped once, was stale at the size it had not been called
        cond.inference = value == "twin:again"  # a red team's shared cache lived in inference_mode calls alone
    elif aspect == "layout":
        cond.weights = value in ("permuted", "weights")  # a user's model.to(memory_format=torch.channels_last)
        kind = {"strided": "step", "padded": "pad", "permuted:input": "permuted"}.get(value, value)  # the others by
        # strided_view's own names; "weights": the inputs as they are
        varied = dataclasses.replace(ds, args={n: strided_view(v, kind) if n in ds.input_names() and value != "weights"
                                                else v for n, v in ds.args.items()}, ref_props={})
        import torch  # Model's weights as the kernel's model holds them: cuDNN picks its algorithm by both layouts (on
        held = weights_channels_last(torch, prob.model if cond.weights else None, [])  # the H100, ModelNew = Model
        try:  # failed layout:weights against contiguous weights, 17_SqueezeNetFireModule's and 73_Conv2d_BatchNorm's)
            prob.reference(varied)
        finally:
            weights_back(held)
        cond.strided = None if value == "weights" else kind
        return cond, want, varied
    elif aspect == "range":
        varied = prob.draw(seed, vary=value, start=ds.start)
        why, off = range_why(prob, first, varied, tolerance, ds)
        if why and not off:
            notes.append(f"{CONDITION_WORDS[want]}: not checked: {why}")
            return cond, "plain", ds
        if why:  # held to float64 as any moved inputs are (exact.py): a one-pass variance and zeros on rows shifted
            # far passed 9 runs in 10 when ranges where the reference is off went unchecked
            notes.append(f"{CONDITION_WORDS[want]}: held to the reference in float64, within {LOOSE:g} times the float32 "
                         f"reference's own error there: {why}")
        if same := constant_outputs(varied.expected, first.expected):  # honest, if of little use: say so
            notes.append(f"{CONDITION_WORDS[want]}: checked, though the reference's output there is constant ({same})")
        return cond, want, varied
    return cond, want or "plain", ds


# --- the inputs' range -----------------------------------------------------------------------------
def _dense(v: Any) -> Any:
    """An input as the worker holds it in a plain call (its buffer's layout), whatever view the call before had it as
    (a layout condition's): a Model that draws randn_like(x) lays its numbers out as x is laid out."""
    return v.contiguous() if is_tensor(v) else v


def factor(vary: str, seed: int) -> float:
    """The scale or shift of a draw moved to ``vary``: "up", "down" or "shift" (VARIANTS), log-uniform in its
    range from the draw's seed; "up:lo", "up:hi" and so on, that range's low or high end."""
    name, _, end = vary.partition(":")
    _, lo, hi = VARIANTS[name]
    if end:
        return lo if end == "lo" else hi
    sign, lo, hi = (-1.0, -hi, -lo) if hi < 0 else (1.0, lo, hi)  # a negative range: log-uniform in its size
    return sign * float(math.exp(random.Random(seed * 7919 + len(name)).uniform(math.log(lo), math.log(hi))))


def move(ds: DataSet, vary: str) -> None:
    """Move ``ds``'s float inputs to the range ``vary`` names (VARIANTS): x * scale, or x + shift * RMS(x).  Integer,
    bool and discrete-valued inputs (DISCRETE_VALUES: masks, labels) and the outputs keep their values, and a
    shift leaves exact zeros as they are (triangular and masked inputs keep their structure)."""
    import torch

    what, f = VARIANTS[vary.partition(":")[0]][0], factor(vary, ds.seed)
    scale, shift_rms = (f, 0.0) if what == "scale" else (1.0, 0.0 if what == "masked" else f)
    for name in ds.input_names():
        t = ds.args[name]
        if not continuous(t):
            continue
        sample = t.detach().reshape(-1)[:65536].double()  # float64: the RMS takes every float dtype
        moved, rms = t.double() * scale, float(sample.square().mean().sqrt())
        shift = shift_rms * rms
        rng = random.Random(ds.seed * 104729 + zlib.crc32(name.encode()))  # (each input its own draws)
        if what == "rows" and t.dim() > 1 and not symmetric(t):  # row i by +-f_i RMS, f_i drawn as factor draws,
            f_i = [rng.choice((-1.0, 1.0)) * factor("rows", rng.randrange(1 << 30)) for _ in range(t.shape[0])]  # its sign
            shift = torch.tensor(f_i, dtype=torch.float64, device=t.device).view(-1, *[1] * (t.dim() - 1)) * rms
        if what == "masked" and t.dim() and t.shape[-1] > 1:  # rows 0, 2, 4, ... (of the last dim) lead with -inf
            n, lo, hi = t.shape[-1], *VARIANTS["masked"][1:]
            cut = torch.tensor([int(n * rng.uniform(lo, hi)) if i % 2 == 0 else 0 for i in range(t.numel() // n)],
                               device=t.device)
            moved = moved.reshape(-1, n).masked_fill(torch.arange(n, device=t.device) < cut[:, None], -math.inf).view(t.shape)
        if shift_rms:  # zeros stay zeros: a triangular, banded or masked input keeps its structure
            moved = torch.where(moved != 0, moved + shift, moved)
        ds.args[name] = moved.to(t.dtype)
    ds.vary = f"{vary.partition(':')[0]}: " + (f"x{f:.3g}" if what == "scale" else f"{f:+.3g} RMS" if what == "shift"
                                               else "each row by +-{:g} to {:g} RMS".format(*VARIANTS["rows"][1:])
                                               if what == "rows" else "every other row leading with -inf")


def symmetric(t: Any) -> bool:
    """A square matrix equal to its transpose: a kernel may read it either way (range:rows shifts it as a whole)."""
    return t.dim() == 2 and t.shape[0] == t.shape[1] and bool((t == t.T).all())


def range_ok(prob: Problem, base: DataSet, varied: DataSet, tolerance: Any, plain: DataSet | None = None) -> str | None:
    """Why the inputs of ``varied`` cannot be checked against the float32 reference (None when they can): the reference
    is not finite there, cannot run in float64, or is worse conditioned there than on the problem's own inputs ``base``
    (its error against float64, in units of the tolerance, more than twice that on ``base`` and above half the
    tolerance).  Where the reference itself holds up, an honest kernel does too."""
    return range_why(prob, base, varied, tolerance, plain)[0]


def range_why(prob: Problem, base: DataSet, varied: DataSet, tolerance: Any, plain: DataSet | None = None
              ) -> tuple[str | None, bool]:
    """range_ok's answer, and whether it is the reference's own error alone (a correctness call is made there all the
    same: moved inputs are held to float64 within exact.LOOSE times that error)."""
    if (varied.vary or "").startswith("masked") and masks_nothing(prob, varied, plain):
        return "an elementwise op: a mask's -inf changes no other output", False
    seen = prob.seen
    if "base_error" not in seen:
        exact = exact_reference(prob, base)  # the base's outputs on the device (the first's may wait on the host)
        seen["base_error"] = {"why": "the reference cannot run in float64"} if exact is None else \
            error_units({n: v.to(prob.device) for n, v in base.expected.items()}, exact, tolerance, prob.ref)
    if "why" in (base_err := seen["base_error"]):
        return base_err["why"], False
    if any(nonfinite(v) > nonfinite(base.expected[n]) for n, v in varied.expected.items()):
        return "the reference is not finite there", False
    exact = exact_reference(prob, varied)
    if exact is None:
        return "the reference cannot run in float64 there", False
    err = error_units(varied.expected, exact, tolerance, prob.ref)
    if "why" in err:
        return err["why"], False
    for key in ("ratio", "l2"):
        if err[key] > max(0.5, 2.0 * base_err[key]):
            return (f"the reference itself is off by {err[key]:.2g} of the tolerance there (against float64), "
                    f"{base_err[key]:.2g} on the problem's inputs"), True
    return None, False
