"""A KernelBench model's mode in a correctness call: what Model gives there, for ModelNew to match.

A user calls a module as built (training mode, autograd on), in eval(), under no_grad or inference_mode, after
a training step has moved its running statistics, and trains through it.  ``running_stats`` draws the statistics
a trained model holds; ``train_expected`` and ``eval_expected`` are Model's outputs (and buffers) in a mode from
them; ``backward_expected`` Model's gradients, which a call with autograd on is checked against.

Runs in the judge only (``conditions`` chooses the calls).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

from ..tensors import is_tensor, normalize_outputs, upstream
from . import guards
from .guards import start_state
from .problem import DataSet, Problem

if TYPE_CHECKING:
    from .conditions import Condition


@dataclasses.dataclass
class Backward:
    """The gradients a user's backward() gives on a call with autograd on: ``seed`` draws the gradient of each output
    (``upstream``), ``grads`` are Model's, by name ("input 'arg0'", "parameter 'fc.weight'"); ``carries``, whether
    Model's output carries a gradient at all; ``exact``, Model's in float64 (None where they could not be made);
    ``scale``, ZERO_GRAD's: the largest of them with every parameter training, or an earlier call's."""

    seed: int
    grads: dict[str, Any]
    carries: bool
    exact: dict[str, Any] | None = None
    scale: float = 0.0


def owed(back: Backward, name: str) -> bool:
    """Whether Model's gradient of ``name`` is not zero by the math: in float64 where made (its float32 one may hold
    rounding alone: a review's honest Linear + BatchNorm left the bias, cancelled by the batch's mean, out of autograd
    in training mode and failed on it), else in float32."""
    x = (back.exact or {}).get(name)
    return bool(back.grads[name].any()) if x is None else bool(x.numel()) and not vanishes(x, back.scale)


def vanishes(exact: Any, scale: float) -> bool:
    """Whether a float64 gradient is zero by the math: nowhere above 1e-9 of the call's scale (rounding alone)."""
    return float(exact.abs().max()) <= 1e-9 * scale


DISCRETE_VALUES = 16  # a float input with at most this many distinct values (a mask, +-1 labels) keeps its values


def continuous(t) -> bool:
    """Whether an input takes continuous values: a float tensor with more than DISCRETE_VALUES distinct values among
    its first 65536, or one of fewer elements whose values are all distinct and not all whole numbers (a slope, a scale:
    a red team's PReLU right only for slopes up to 1 passed while every input of at most 16 elements kept its range).
    A mask or +-1 labels (values that repeat) and whole numbers keep their values, and have no gradient."""
    import torch

    if not is_tensor(t) or not t.dtype.is_floating_point or t.numel() == 0:
        return False
    head = t.detach().reshape(-1)[:65536]
    for n in sorted({min(4 * DISCRETE_VALUES, head.numel()), head.numel()}):  # a prefix first: enough where continuous
        values = torch.unique(head[:n].double())
        if values.numel() > DISCRETE_VALUES:
            return True
    return values.numel() == head.numel() and not bool(torch.all(values == values.round()))


def backward_raised(seen: dict, raised: str | None, excused: bool = False) -> str | None:
    """Why a call's backward() fails it (``raised``: its error's first line, or None where it ran), or None: one that
    raised in some calls of a run and ran in others crashes a user's loss.backward() in some of theirs (a review's
    backward viewed the upstream gradient, which an output transposed downstream hands non-contiguous, and passed:
    each raise was a note).  One that raises in every call is a note (a kernel without a backward), and so is one
    ``excused`` (raise_excused: as an honest ModelNew's would for a user).  ``seen``: the run's (Problem.seen,
    carried across shapes)."""
    if raised is None:
        seen["backward_ran"], earlier = True, seen.pop("backward_raised", None)
        return None if earlier is None else (f"backward() ran here but raised in an earlier call ({earlier}): a user's "
                                             "loss.backward() crashes in some of their calls")
    if excused:
        return None
    if seen.get("backward_ran"):
        return (f"backward() raised here ({raised}), where it ran in earlier calls: a user's loss.backward() crashes "
                "in some of their calls (read the upstream gradient's strides, or make it contiguous)")
    seen.setdefault("backward_raised", raised)
    return None


SHORT_OF_MEMORY = 8  # a backward out of device memory is excused where less than 1/8 of the device is then free


def raise_excused(prob: Problem, train: bool, ds: DataSet, raised: str) -> tuple[bool, str]:
    """Whether a backward() that raised (``raised``: its error's first line) did as an honest ModelNew's would for a
    user, and the line as said: out of device memory while the device, as the judge reads it, has less than
    1/SHORT_OF_MEMORY free (its free memory is added to the line); through the graph an earlier call made, where
    Model itself does so (keeps_graph: then a ModelNew that raises so only where it would be wrong passes).  Their
    messages alone were excused before, and a red team's backward raised either where it would have been wrong (a
    non-contiguous upstream gradient) and passed."""
    import torch

    low = raised.lower()
    if "out of memory" in low or "outofmemoryerror" in low:
        if not str(prob.device).startswith("cuda"):
            return False, raised
        free, total = torch.cuda.mem_get_info(torch.device(prob.device))
        return free * SHORT_OF_MEMORY < total, f"{raised} [{free / 2**30:.1f} of {total / 2**30:.1f} GiB free after it]"
    return "through the graph a second time" in low and keeps_graph(prob, train, ds), raised


def grad_args(ds: DataSet, wide: bool = False, data: bool = False) -> list:
    """A call's arguments as a user's backward meets them: copies, the continuous ones asking a gradient (none where
    ``data``), in float64 where ``wide``."""
    return [(ds.args[n].detach().double() if wide and ds.args[n].dtype.is_floating_point else
             ds.args[n].detach().clone()).requires_grad_(continuous(ds.args[n]) and not data)
            if is_tensor(ds.args[n]) else ds.args[n] for n in ds.args]


GRAPH_CALLS = 6  # keeps_graph's calls of one instance (a red team's Model built a cache with history on its second)


def keeps_graph(prob: Problem, train: bool, ds: DataSet) -> bool:
    """Whether Model raises "backward through the graph a second time" where one instance is called GRAPH_CALLS times
    with a backward after each call (its state keeps autograd's history: level 3's VanillaRNN keeps its hidden state
    so, and ModelNew = Model raises there for a user too).  Once per mode a run (``prob.seen``)."""
    import torch

    key = f"keeps_graph:{train}"
    if key not in prob.seen:
        m, prob.seen[key] = model_copy(prob, train, None), False
        try:
            with torch.enable_grad():
                for _ in range(GRAPH_CALLS):
                    out = normalize_outputs(m(*grad_args(ds)), []).values()
                    out = [t for t in out if is_tensor(t) and t.requires_grad]
                    if not out:
                        break
                    torch.autograd.backward(out, [torch.ones_like(t) for t in out])
        except Exception as exc:  # (anything else Model raises here excuses nothing)
            prob.seen[key] = isinstance(exc, RuntimeError) and "through the graph a second time" in str(exc)
    return prob.seen[key]


def grads_seen(seen: dict, train: bool) -> tuple[set, set]:
    """The gradients ModelNew's output reached, and those owed it did not, in the run's calls with everything training
    in one mode (``train``); ``seen``: the run's (Problem.seen, carried across shapes).  What the frozen and plain-data
    calls owe (calls.gradient_rows) and what grads_gone compares."""
    return seen.setdefault("grads_seen", {}).setdefault(train, (set(), set()))


def grads_gone(seen: dict, train: bool, reached: set, detached: set) -> list[str]:
    """The gradients of a call with everything training (not frozen, not plain data) that ModelNew's output reaches
    in some of the run's calls in this mode and not in others, in either order (``reached``: this call's; ``detached``:
    those owed that it does not reach): a review's backward gave an input none where the upstream gradient was not
    contiguous, and passed (each was a note); a user's layers before it would not train in those steps.  Per mode (an
    eval()-only path without autograd is a note); both kept in ``grads_seen``."""
    got, none = grads_seen(seen, train)
    gone = sorted((detached & got) | (reached & none))
    got |= reached
    none |= detached
    return gone


UPSTREAM_TURNS = (0, 3, 1, 7, 2, 5, 6, 4)  # seed % 8 of a run's calls with autograd: both swaps in its first four
ZERO_GRAD = 1e-3  # a gradient zero in float64 may hold float32 rounding of this share of the call's largest


def grad_as_exact(back: Backward, got: Any, exp: Any, exact: Any, tol: dict[str, Any]) -> tuple[bool, str]:
    """Whether a gradient that failed the comparison with Model's is as exact as Model's, or more, and what was found:
    against Model's float64 gradient, each element within the tolerance or twice Model's own worst float32 error
    among its neighbours (compare.LOCAL of them, 256 or more in a gradient under 4 times that: a bias), as an output
    (measure.exact).  Local: one feature where Model's gradient is far off (sums that cancel) let a red team's backward
    round the whole gradient to bfloat16 while the allowance was Model's worst error added everywhere.  Where the
    gradient is zero in float64 (``vanishes``: a bias that feeds a BatchNorm; an honest one written out failed on its
    rounding on the H100, cuDNN's sum being more exact), the atol is raised by ZERO_GRAD of the call's scale."""
    from ..compare import LOCAL, within_the_references_error

    if not (got.dtype.is_floating_point and exact.dtype.is_floating_point):
        return False, "not re-checked against Model's float64 gradient (not a real floating-point gradient)"
    scale = back.scale
    zero = bool(exact.numel()) and vanishes(exact, scale)
    t = dict(tol, rel_l2=None, atol=tol["atol"] + (ZERO_GRAD * scale if zero else 0.0))
    near = min(LOCAL, max(256, exact.numel() // 4))  # (a review's: 1024 elements or fewer were one block; 64 failed
    # an honest BatchNorm written out on a 16 x 16 weight: a maximum over few elements varies more)
    worst, _ = within_the_references_error(got, exp, exact.to(exp.device), t, near)
    said = (f"against Model's float64 gradient, at most {worst:.3g} of each element's allowance (the tolerance"
            + (f" plus {ZERO_GRAD:g} of the largest gradient, this one being zero in float64" if zero else "")
            + ", or twice Model's own float32 error near it)")
    return worst <= 1.0, said


def grad_normwise(got: Any, exp: Any, exact: Any, tol: dict[str, Any]) -> str | None:
    """Why a gradient within its elementwise tolerance still fails (None when it passes): where Model's own float32
    gradient holds the relative L2 limit against its float64 one (under half of it), the kernel's must too, beyond
    twice Model's own error near each element (compare.within_the_references_error).  A red team's backward rounded
    its gradients to float16, within the elementwise tolerance, 25 times the limit; a gradient Model itself gets far
    from exact (cancellation) is held elementwise alone."""
    from ..compare import within_the_references_error

    limit, exact = tol.get("rel_l2"), exact.to(exp.device)
    norm = float(exact.double().norm()) if exact.numel() else 0.0
    if not limit or not norm > 0 or not float((exp.double() - exact).norm()) / norm <= limit / 2:  # (NaN: not held)
        return None
    _, l2 = within_the_references_error(got, exp, exact, tol)
    return None if l2 <= 1.0 else (f"its relative L2 error against Model's float64 gradient, beyond twice Model's own "
                                   f"float32 error near each element, is {l2:.3g} times the limit {limit:g}")


def free_cached() -> None:
    """The judge's cached device memory given back: what it drew or computed for one call (float64 references, moved
    inputs) must not leave the worker short (seen on the H200: ConvTranspose2d, the judge holding 75 GiB)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.ipc_collect()  # blocks a worker mapped, once it let go of them (protocol.let_go)
        torch.cuda.empty_cache()


def tracking_norms(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every BatchNorm-like layer of ``model`` (torch's _NormBase) that tracks running statistics."""
    from torch.nn.modules.batchnorm import _NormBase

    return [(n, m) for n, m in model.named_modules() if isinstance(m, _NormBase) and m.track_running_stats
            and m.running_mean is not None]


def frozen_norms(model: Any) -> list[str]:
    """The norm layers that track running statistics below the top module, by name: what a user fine-tuning with
    frozen BatchNorm puts in eval() inside a model in training mode (``mode:train:frozen``; a red team's ModelNew read
    the top module's .training and used the batch's statistics there)."""
    return [n for n, _ in tracking_norms(model) if n]


def frozen_params(model: Any, partial: bool) -> tuple[str, ...]:
    """The parameters a ``mode:grad:frozen`` call freezes, by every name they have: all that train (a user's frozen
    layers), or with ``partial`` all but the smallest (a bias or a norm's scale fine-tuned alone: a review's backward
    gave the bias a gradient only while the weight trained)."""
    named = [(n, p) for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad]
    keep = min((p for _, p in named), key=lambda p: p.numel()) if partial and len({id(p) for _, p in named}) > 1 else None
    return tuple(n for n, p in named if p is not keep)


def running_stats(prob: Problem, seed: int) -> dict[str, Any]:
    """Running statistics for a training-mode call to start from, drawn from ``seed``: every BatchNorm-like
    module's (torch's _NormBase that tracks them) running mean (normal), variance (0.5 to 1.5) and batch count (10
    to 100000), as a trained model holds them.  Those a model is built with (zeros and ones) equal the statistics of randn inputs, so a
    kernel that never updated them would be right within any tolerance there."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for prefix, mod in tracking_norms(prob.model):
        for name, t in (("running_mean", mod.running_mean), ("running_var", mod.running_var)):
            r = torch.rand(t.shape, generator=gen) + 0.5 if name == "running_var" else torch.randn(t.shape, generator=gen)
            out[f"{prefix}.{name}" if prefix else name] = r.to(device=t.device, dtype=t.dtype)
        if mod.num_batches_tracked is not None:  # a trained model's count (a red team's stopped updating at 3 batches)
            n = torch.randint(10, 100000, (), generator=gen).to(mod.num_batches_tracked)
            out[f"{prefix}.num_batches_tracked" if prefix else "num_batches_tracked"] = n
    return out


def model_copy(prob: Problem, train: bool, stats: dict[str, Any] | None, twin: bool = False, frozen: Any = ()):
    """The judge's Model copied (its own state stays as loaded) with its parameters' hooks, in training mode or
    eval(), with ``stats`` loaded; ``twin``: a second instance's (``prob.spare``): the first's state but its buffers
    drawn per instance, and its tensors outside the state, its own draws; ``frozen``: submodules then put in eval()
    (frozen_norms)."""
    import torch

    src = prob.spare if twin and prob.spare is not None else prob.model
    m = copy.deepcopy(src).train(train)
    for a, b in zip(src.parameters(), m.parameters(), strict=True):  # deepcopy drops a parameter's hooks (a red team's
        for hook in (a._backward_hooks or {}).values():  # Model clipped a weight's gradient so: ModelNew = Model failed)
            b.register_hook(hook)
        for hook in (getattr(a, "_post_accumulate_grad_hooks", None) or {}).values():
            b.register_post_accumulate_grad_hook(hook)
    if src is not prob.model:
        m.load_state_dict({n: t for n, t in prob.model.state_dict().items() if n not in prob.drawn}, strict=not prob.drawn)
    for name in frozen:
        m.get_submodule(name).eval()
    if stats:
        state = m.state_dict()
        with torch.no_grad():
            for n, t in stats.items():
                state[n].copy_(t)
    return m


def draws_into(sh: Any, prob: Problem, names: Any, twin: bool) -> None:
    """The buffers drawn per instance (a second instance's call, its ``own``: ``prob.drawn``) into the shared
    buffers of the model's state: the judge's second Model's draws for the call (the worker's second ModelNew loads
    them, tensors.twin), then the first's again (synchronized: the worker reads them at its next request)."""
    import torch

    state = (prob.spare if twin else prob.model).state_dict() if names else {}
    for n in names:
        sh.bufs[sh.names[f"param:{n}"]].copy_(state[n])
    if not twin and names and str(prob.device).startswith("cuda"):
        torch.cuda.synchronize(prob.device)


def train_expected(prob: Problem, ds: DataSet, tolerance: Any, cond: Condition
                   ) -> tuple[dict[str, Any] | None, str | None]:
    """A KernelBench model's expected outputs in training mode on ``ds``: (outputs, None), and ``cond.buffers``
    set to Model's buffers after that call (from ``cond.stats``); ({}, None) when Model's output there is random
    (dropout) and its buffers are not: those buffers alone are compared; (None, why) when all are random."""
    import torch

    from ..compare import compare_outputs

    def run(seed: int) -> tuple[dict[str, Any], Any]:
        m = model_copy(prob, True, cond.stats, frozen=cond.frozen)
        out = prob.run_reference(ds.args, ds, m, seed)  # (its draws noted there: seen["train_draws"])
        return out, m

    cond.made = model_copy(prob, True, cond.stats, frozen=cond.frozen)  # never run: a call changes its buffers
    first, model = run(prob.cfg.seed + 1)
    key = "train:frozen" if cond.frozen else "train"  # (with its norm layers in eval(), the model's output may not vary)
    if key not in prob.seen:
        same = all(r["passed"] for r in compare_outputs(first, ds.expected, tolerance, prob.ref)[0])
        again = all(r["passed"] for r in compare_outputs(run(prob.cfg.seed + 2)[0], first, tolerance, prob.ref)[0])
        prob.seen[key] = "same" if same else ("differs" if again else "random")
    names = {n for n, _ in model.named_buffers()}
    cond.buffers = {n: t.detach().clone() for n, t in model.state_dict().items() if n in names}
    if prob.seen[key] == "random":  # its buffers may not be (a BatchNorm before the dropout): compared alone; a red
        other = run(prob.cfg.seed + 2)[1].state_dict()  # team's ModelNew ran eval() in training mode and passed
        same = {n: t for n, t in cond.buffers.items() if torch.equal(t, other[n])}
        if not same:
            return None, RANDOM_TRAINING + ", so ModelNew is compared in eval() only"
        if len(same) < len(cond.buffers):  # some after the dropout: an eval() call from what it left is not compared
            cond.after, cond.buffers = None, same
        return {}, None
    return (ds.expected if prob.seen[key] == "same" else first), None


RANDOM_TRAINING = "Model's output in training mode changes from call to call (dropout, say)"


def eval_expected(prob: Problem, ds: DataSet, cond: Condition) -> dict[str, Any]:
    """Model's outputs in eval() on ``ds`` from the running statistics ``cond.stats`` (a ModelNew that assumed
    the statistics a model is built with, mean 0 and variance 1, is wrong here)."""
    cond.made = model_copy(prob, False, cond.stats)  # (not run: a forward may change its own buffers)
    return prob.run_reference(ds.args, ds, copy.deepcopy(cond.made))


def backward_expected(prob: Problem, ds: DataSet, cond: Condition, seed: int, notes: list[str]) -> Backward | None:
    """Model's gradients on ``ds`` in ``cond``'s mode: of every continuous float input (made to require grad, as a
    user's that trains through it does, unless ``cond.data``; zero where the input is exactly zero) and every parameter, for the outputs' gradients ``upstream`` draws.  None, with a
    note, where they cannot be computed (the notes say why: memory, a Model without backward)."""
    import torch

    prob.seen["backward"] = True  # False after a backward that cannot run: not tried again
    if prob.dims.get("batch_size") != 1:  # each of upstream's layouts in turn, with .grad empty and holding values
        turn = prob.seen["upstreams"] = prob.seen.get("upstreams", -1) + 1  # (tensors.grads_into); not at a batch of
        seed += UPSTREAM_TURNS[turn % 8] - seed % 8  # one, where swapping the first two dims swaps nothing

    def grads_of(m, wide: bool) -> dict[str, Any] | None:
        guards.set_torch_rng(torch, prob.device, start_state(torch, prob.device, ds.seed))  # the worker's call's start
        args = grad_args(ds, wide, cond.data)
        before = guards.rng_state(torch, prob.device)
        with torch.enable_grad():
            out = [t for t in normalize_outputs(m(*args), []).values() if is_tensor(t)]
            if wide and guards.rng_state(torch, prob.device) != before:  # its draws in float64 are other numbers
                return None  # (a red team's backward missing a noise term passed on them): no float64 gradients
            carries = [t for t in out if t.requires_grad]
            leaves = {**{f"parameter '{n}'": p for n, p in m.named_parameters() if p.requires_grad},
                      **{f"input '{n}'": a for n, a in zip(ds.args, args, strict=True)
                         if is_tensor(a) and a.requires_grad}}
            if not carries or not leaves:
                return None
            got = torch.autograd.grad(carries, list(leaves.values()), [upstream(seed, i, t) for i, t in
                                      enumerate(out) if t.requires_grad], allow_unused=True)
        grads = {n: (g if g is not None else torch.zeros_like(p)).detach()
                 for (n, p), g in zip(leaves.items(), got, strict=True)}
        for n in ds.args:  # an input's exact zeros may be structure (a triangle, a mask): no gradient is owed there
            if f"input '{n}'" in grads:
                grads[f"input '{n}'"] = torch.where(ds.args[n] != 0, grads[f"input '{n}'"], 0)  # a copy: autograd's
                # gradients share memory (a + b hands one tensor to both inputs; a sum's is a stride-0 view)
        return grads

    def copied(every: bool = False):  # (cond.fixed: the parameters frozen, as a user's frozen layers are, unless
        m = model_copy(prob, cond.train, cond.stats)  # ``every``: float64's, whose largest is ZERO_GRAD's scale as
        for n, p in m.named_parameters(remove_duplicate=False):  # where all train: a bias alone in training mode
            p.requires_grad_(p.requires_grad and (every or n not in cond.fixed))  # before a BatchNorm failed there)
        return m

    try:
        grads = grads_of(copied(), False)
        if grads is None:
            return Backward(seed, {}, False)
        exact, scale = None, 0.0
        for every in (True, False):  # Model's own gradients in float64: how far its float32 ones are from exact
            try:  # (rounding, cancellation); every parameter training first, for the scale (a level-3 model's may
                exact = grads_of(copied(every=every).double(), True)  # not fit: then the call's own)
                scale = max((float(e.abs().max()) for e in (exact or {}).values() if e.numel()), default=0.0)
                exact = {n: exact[n] for n in grads} if exact is not None and set(grads) <= set(exact) else None
                break
            except Exception:  # memory, an op without float64: compared with the float32 gradients alone
                exact = None
                free_cached()
        if seed % 4 != 1 and scale > 0:  # the last call's whose upstream is not one value expanded over the output:
            prob.seen["grad_scale"] = scale  # after a norm every gradient may vanish by the math there (a written-out
        scale = max(scale, prob.seen.get("grad_scale", 0.0))  # InstanceNorm failed on its rounding, 1e-13 the scale)
        return Backward(seed, grads, True, exact, scale)
    except Exception as exc:
        text = " ".join(str(exc).split())[:160]
        notes.append(f"gradients: not checked: Model's backward() could not run ({type(exc).__name__}: {text})")
        prob.seen["backward"] = False
        free_cached()
        return None


def masks_nothing(prob: Problem, varied: DataSet, plain: DataSet | None = None) -> bool:
    """Whether range:masked's -inf changes no output where the input kept its values: an elementwise op (a ReLU, a
    sigmoid), which a mask's -inf meets nowhere a user's would (a red team's ReLU written (x + |x|) / 2 gave NaN there:
    formally wrong, no user's case); the condition is for ops that couple a row's elements (a softmax, an argmax).
    ``plain``: the same draw unmasked (correctness's call has it), else drawn again; decided once a problem."""
    import torch

    if "elementwise" not in prob.seen:
        ins = [varied.args[n] for n in varied.input_names() if continuous(varied.args[n])]
        if len(ins) != 1:
            prob.seen["elementwise"] = False
            return False
        plain = plain if plain is not None else prob.draw(varied.seed, reference=False)  # (a lean draw: no new set)
        exp = plain.expected or prob.run_reference(plain.args, plain)
        keep = ins[0] != float("-inf")
        prob.seen["elementwise"] = all(is_tensor(o) and o.shape == keep.shape and is_tensor(exp.get(n)) and
                                       torch.equal(o[keep], exp[n][keep]) for n, o in varied.expected.items())
    return bool(prob.seen["elementwise"])
