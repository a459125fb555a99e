"""The judge's data: the seeded inputs, the model parameters and the reference outputs, drawn from ref.py.

Runs in the judge only (it imports ref.py, never the kernel file; a ``.cu`` kernel's text is read for its
``solve`` signature only).  Formats (references/kernel_abi.md):

- ref.py with ``reference(**kwargs)`` and ``setup(**dims)`` returning ``{"inputs": {...}, "outputs":
  [names]}`` (a plain dict is taken as the inputs); ``.py`` kernels get ``run_kernel(**inputs)``, ``.cu``
  kernels ``solve(...)`` with pointers matched by name (no setup(): flat buffers of ``--ptr-size``);
- KernelBench: ``Model``, ``get_inputs()``, ``get_init_inputs()``; the kernel defines ``ModelNew``.
  The weights are one set per run: ``Model`` is built once from the **run's seed** (never a trial's), its
  learnable parameters then moved away from their initial values as training moves them (``as_trained``), and
  every process that builds ``Model`` or ``ModelNew`` gets exactly its parameters and buffers.  Trial seeds
  vary the inputs only.

Outputs are write-only unless ref.py names them in ``accumulates``: those keep setup()'s values as the call's
starting point, and the reference and the kernel both add to them.  ``draw(vary=...)`` moves the inputs to
another range (``conditions``, the conditions a user's call can differ in, which correctness checks too).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import build, loader
from ..common import UsageError
from ..config import RunConfig
from ..sidecars import REF_PY
from ..tensors import (
    WeakHold,
    clone_value,
    drawn_buffers,
    fingerprint,
    foreign_memory,
    is_tensor,
    normalize_outputs,
    nudge,
    nudge_scales,
    poison_tensor,
    spare_instance,
    state_names,
    storage_ptr,
)
from . import guards


class BadReference(UsageError):
    """ref.py itself misbehaves (it changes its inputs, returns no tensor): bad input, not a failed kernel."""


def kernel_kind(kernel: Path, ref: Any) -> str:
    """How the kernel is called: 'kb' (ModelNew), 'py' (run_kernel) or 'cu' (solve)."""
    if Path(kernel).suffix == ".cu":
        if is_kernelbench(ref):
            raise UsageError("a .cu kernel needs ref.py with reference() (and setup()); KernelBench Model refs "
                             "work with .py kernels defining ModelNew (load_inline for CUDA C++)")
        return "cu"
    if Path(kernel).suffix != ".py":
        raise UsageError(f"{Path(kernel).name}: kernels are .cu or .py files")
    return "kb" if is_kernelbench(ref) else "py"


def is_kernelbench(ref: Any) -> bool:
    return hasattr(ref, "Model") and hasattr(ref, "get_inputs") and not hasattr(ref, "reference")


def import_ref(run_root: Path) -> Any:
    path = Path(run_root) / REF_PY
    try:
        return loader.import_file(path, "ref")
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{path} failed to import: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
                         "(fix ref.py; it is copied into the run by init)") from None


@dataclass
class DataSet:
    """One seeded draw: every kernel argument by name (tensors and scalars), which tensors the kernel
    writes in place, and the reference's outputs on them."""

    seed: int
    args: dict[str, Any]
    in_place: list[str]
    expected: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, tuple] = field(default_factory=dict)  # the inputs as drawn (not the in-place ones)
    ref_props: dict[str, dict] = field(default_factory=dict)      # expanded / views of the reference's outputs
    accumulates: list[str] = field(default_factory=list)        # in-place outputs the call adds to (never poisoned)
    vary: str | None = None                                     # the input range this draw was moved to (VARIANTS)
    rng_after: bytes | None = None                              # torch's generators after the reference's call
    parked: bool = False                                        # its tensors wait on the host (held.between_calls)
    start: bytes | None = None                                  # torch's generators where the call starts, if not
    # reseeded from call_seed: where the previous call left them (conditions.continue_plan)

    def tensors(self) -> dict[str, Any]:
        return {n: v for n, v in self.args.items() if is_tensor(v)}

    def input_names(self) -> list[str]:
        return [n for n, v in self.args.items() if is_tensor(v) and n not in self.in_place]

    def write_only(self) -> list[str]:
        """The outputs the kernel is handed and must overwrite whole, whatever they held (not accumulated into)."""
        return [n for n in self.in_place if n not in self.accumulates]

    def nbytes(self) -> dict[str, int]:
        """Bytes of the inputs and of the reference's outputs."""
        def size(ts) -> int:
            return sum(v.numel() * v.element_size() for v in ts if is_tensor(v))

        return {"inputs_bytes": size(self.args[n] for n in self.input_names()),
                "outputs_bytes": size(self.expected.values())}


def _shapes(model: Any) -> dict[str, tuple]:
    return {n: tuple(t.shape) for n, t in model.state_dict().items()}


class Problem:
    """The run's problem at one shape: draws data sets and knows how a kernel is called on them."""

    def __init__(self, cfg: RunConfig, ref: Any, dims: dict[str, int], device: str, kind: str,
                 kernel_text: str | None = None):
        self.cfg, self.ref, self.dims, self.device, self.kind = cfg, ref, dict(dims), device, kind
        self.params = build.parse_signature(kernel_text) if kind == "cu" and kernel_text is not None else None
        self.model, self.spare, self.drawn = None, None, []  # a second Model, the state's buffers it draws otherwise
        self.init: list[Any] = []  # Model's constructor arguments, and the second instance's (_build_model)
        self.twin_init: list[Any] = []
        self.seen: dict[str, Any] = {}     # what the correctness conditions learnt of this problem (conditions.py)
        self.drew: tuple[bool, bool] = (False, False)  # the last run_reference's draws: torch's; Python's or NumPy's
        self.rng_after: bytes | None = None  # torch's generators after the last run_reference
        self._prev_out: dict[str, tuple[Any, tuple, int]] = {}  # the previous draw's reference's outputs, followed (not
        # held: a KernelBench output of 8 GiB more would not fit beside the rest), their fingerprints then, storages
        if is_kernelbench(ref):
            self._build_model()

    # --- KernelBench ----------------------------------------------------------------------------
    def _apply_dims(self) -> None:
        """Set this shape's dims on ref.py's module (a no-op while they are current: every draw asks)."""
        from .. import kb_dims

        if getattr(self.ref, "_kl_applied_dims", None) == self.dims:
            return
        kb_dims.apply_dims(self.ref, self.dims, Path(self.ref.__file__).read_text(encoding="utf-8"))
        self.ref._kl_applied_dims = dict(self.dims)

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """The constants of ref.py that Model reads (not only get_inputs) and this shape changes, {name: (the file's value,
        this shape's)}: a kernel file holding the file's value gets this shape's (loader.set_constants; VanillaRNN reads
        batch_size); one Model does not read keeps the file's, as in a user's import (a red team's copy of batch_size)."""
        from .. import kb_dims

        text = Path(self.ref.__file__).read_text(encoding="utf-8")
        reads = kb_dims.model_reads(text)
        return {n: c for n, c in kb_dims.changes(text, self.dims).items() if n in reads}

    def constants_note(self) -> list[str]:
        """The shape's note on the constants ``changes`` gives the kernel file, if any."""
        ch = self.changes() if self.model is not None else {}
        twin = [f"the second instance (weights:twin) is built with {repr(self.twin_init)[:200]}, not {repr(self.init)[:200]}: its "
                "float constructor arguments scaled alike, as a network's second layer with its own"] * (self.twin_init != self.init)
        twin += [f"weights:twin: the kernel refused the second instance's float arguments (building ModelNew with the scaled "
                 f"ones raised: {self.seen['twin_refused']}): built with the first's"] if self.seen.get("twin_refused") else []
        return [f"{', '.join(f'{n}={v[1]}' for n, v in ch.items())}: ref.py's Model reads "
                f"{'these constants' if len(ch) > 1 else 'this constant'} of its module, so the kernel file's own, "
                "where it holds ref.py's value, took this shape's too"] * bool(ch) + twin

    @property
    def model_seed(self) -> int:
        """The seed Model and ModelNew are built from: fixed by the run's seed, which it does not reveal (a one-way
        hash).  ModelNew's __init__ can read torch.initial_seed(); with the run's seed itself it could draw every
        correctness trial's inputs in advance (they come from the run's seed; a red team's find)."""
        import hashlib

        return int.from_bytes(hashlib.sha256(f"kernel-loop model {self.cfg.seed}".encode()).digest()[:7], "little")

    def _build_model(self) -> None:
        torch = _torch()
        self._apply_dims()
        guards.seed_torch(torch, self.model_seed)
        self.init = list(self.ref.get_init_inputs()) if hasattr(self.ref, "get_init_inputs") else []
        with torch.device(self.device):  # parameters are created where they are used, from the run's seed
            guards.seed_torch(torch, self.model_seed)
            self.model = self.ref.Model(*self.init).to(self.device).eval()
        self._after = guards.torch_rng(torch, self.device)  # where every second instance starts (_spare)
        # the second instance (weights:twin) gets every float constructor argument scaled by one factor of the run's, as
        # a network's second layer its own scale or slope (a kernel that hard-codes the value it was built with is wrong
        # there); built with the first's where the scaled ones fail or build parameters of other shapes (a width factor)
        self.twin_init = [v * (1.25 + self.model_seed % 500 / 1000) if type(v) is float else v for v in self.init]
        self._second()
        as_trained(self.model, self.model_seed)

    def refuse_twin(self, raised: str) -> None:
        """ModelNew raised when built with the scaled arguments (held.shape_notes): both second instances take the first's."""
        self.twin_init, self.seen["twin_refused"] = list(self.init), raised
        self._second()

    def _second(self) -> None:
        """The judge's second Model (``spare``) and the state's buffers it draws otherwise (``drawn``, sent to the worker)."""
        attrs = any(is_tensor(v) for m in self.model.modules() for v in vars(m).values())
        spare = self._spare() if self.twin_init != self.init else None
        if spare is None or _shapes(spare) != _shapes(self.model):
            self.twin_init = list(self.init)
            spare = self._spare() if attrs or next(self.model.buffers(), None) is not None else None
        drawn = drawn_buffers(self.model, spare)
        self.spare = spare.to(self.device).eval() if spare is not None and (
            attrs or drawn or self.twin_init != self.init) else None
        self.drawn = [n for n in drawn if n in self.model.state_dict()]

    def _spare(self) -> Any:
        """A second Model from torch's generators right after the first, as the worker's (an h0 drawn outside the state)."""
        torch = _torch()
        try:
            with torch.random.fork_rng(devices=[torch.device(self.device)] if self.device.startswith("cuda") else []):
                guards.set_torch_rng(torch, self.device, self._after)
                return spare_instance(self.model, self.twin_init, self.device)
        except Exception:  # (a dropout's p scaled past 1): the first's arguments
            return None

    def state(self) -> dict[str, Any]:
        """Model's parameters and buffers: the run's one set of weights."""
        return dict(self.model.state_dict()) if self.model is not None else {}

    # --- data sets ------------------------------------------------------------------------------
    def draw(self, seed: int, *, reference: bool = True, vary: str | None = None, start: bytes | None = None
             ) -> DataSet:
        """Fresh inputs for ``seed`` (moved to the range ``vary`` names, one of VARIANTS) and, unless
        ``reference`` is False, the reference outputs on them (the inputs checked unchanged by the reference), its
        call starting from torch's generators at ``start`` where that is given."""
        ds = self._draw_kernelbench(seed) if self.model is not None else self._draw_setup(seed)
        ds.start = start
        ds.accumulates = [n for n in self.accumulates() if n in ds.in_place]
        if vary is not None:
            from .conditions import move

            move(ds, vary)
        if reference:
            self.reference(ds)
        return ds

    def accumulates(self) -> list[str]:
        """The outputs ref.py declares the call adds to (``accumulates = ["out"]``): setup() gives their starting
        values, which the judge hands to the reference and the kernel alike (references/kernel_abi.md)."""
        names = getattr(self.ref, "accumulates", None) or []
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise UsageError("ref.py's accumulates must be a list of output names, e.g. accumulates = ['out']")
        return list(names)

    def _draw_kernelbench(self, seed: int) -> DataSet:
        torch = _torch()
        self._apply_dims()
        guards.seed_torch(torch, seed)
        with torch.device(self.device):  # drawn on the device under the trial's seed
            args = [a.to(self.device) if is_tensor(a) else a for a in self.ref.get_inputs()]
        return DataSet(seed, {f"arg{i}": a for i, a in enumerate(args)}, [])

    def _draw_setup(self, seed: int) -> DataSet:
        torch = _torch()
        setup = getattr(self.ref, "setup", None)  # never the kernel's own: a kernel must not choose its inputs
        fn = self.reference_fn()
        if callable(setup):
            guards.seed_torch(torch, seed)
            extra = {"device": self.device} if "device" in inspect.signature(setup).parameters else {}
            with torch.device(self.device):
                spec = loader.call_with(setup, self.dims, **extra)
            if not isinstance(spec, dict):
                raise UsageError(f"setup() must return a dict, got {type(spec).__name__}")
            inputs, outs = (dict(spec["inputs"]), list(spec.get("outputs") or [])) if "inputs" in spec else (dict(spec), [])
            inputs = {k: v.to(self.device) if is_tensor(v) else v for k, v in inputs.items()}
            unknown = [o for o in outs if o not in inputs]
            if unknown:
                raise UsageError(f"setup() names outputs {unknown} that are not among its inputs")
        elif self.kind == "cu":
            size = self.cfg.ptr_size
            if not size:
                raise UsageError("ref.py has no setup(): set --ptr-size at init so flat buffers can be sized")
            guards.seed_torch(torch, seed)
            inputs = _flat_buffers(self.params or [], int(size), self.device)
            outs = [p.name for p in self.params or [] if p.is_output]
            inputs.update({p.name: lookup_int(p.name, self.dims, {}) for p in self.params or [] if not p.pointer})
        else:
            raise UsageError("ref.py defines no setup(**dims): .py kernels get their inputs from it")
        if self.kind == "cu":
            for p in self.params or []:
                if p.pointer and not p.const and p.name not in outs and p.name in inputs:
                    outs.append(p.name)
            missing = [p for p in self.params or [] if p.is_output and p.name not in inputs]
            if missing:  # output pointers setup() does not provide: shaped like the reference's returned outputs
                value = loader.call_with(fn, ref_pool(fn, {k: clone_value(v) for k, v in inputs.items()}, self.dims))
                got = normalize_outputs(value, [p.name for p in missing]) if value is not None else {}
                for p in missing:
                    if p.name not in got or not is_tensor(got[p.name]):
                        raise UsageError(f"solve() output '{p.name}' is neither a setup() input nor a named output "
                                         "returned by reference()")
                    inputs[p.name] = torch.empty_like(got[p.name])
                    outs.append(p.name)
        return DataSet(seed, inputs, outs)

    def reference_fn(self):
        fn = getattr(self.ref, "reference", None)
        if not callable(fn):
            raise UsageError("ref.py defines no reference(**kwargs) (nor a KernelBench Model/get_inputs)")
        return fn

    def run_reference(self, args: dict[str, Any], ds: DataSet, model: Any = None,
                      seed: int | None = None) -> dict[str, Any]:
        """The reference's outputs by name on ``args`` (``ds``'s arguments, in another dtype or layout perhaps):
        ``model`` (Model by default) called on them in order under no_grad, or reference() with the write-only
        outputs poisoned and the accumulated ones on copies (``args`` keeps the starting values).  A reference()
        that returns nothing gives copies of its in-place outputs.  The one place the reference is called on a
        data set (``reference``, and the conditions' float64 and strided runs); torch's generators start from
        ``seed``, by default the data set's start_state (or its ``start``), from which the kernel's call starts where the
        reference draws.
        ``drew`` says afterwards whether it drew from torch's generators and from Python's or NumPy's, and
        ``rng_after`` where it left torch's."""
        torch = _torch()
        if seed is None:
            guards.set_torch_rng(torch, self.device, ds.start or guards.start_state(torch, self.device, ds.seed))
        else:
            guards.seed_torch(torch, seed)
        before, other = guards.torch_rng(torch, self.device), guards.other_rng()
        out = self._call_reference(args, ds, model)
        self.rng_after = guards.torch_rng(torch, self.device)
        self.drew = (self.rng_after != before, guards.other_rng() != other)
        if model is not None and model.training and any(self.drew):  # Model in training mode draws (a twin's too: a
            self.seen["train_draws"] = True  # dropout whose output shows none, 83_Conv3d_..._Dropout's, drew unseen)
        return out

    def _call_reference(self, args: dict[str, Any], ds: DataSet, model: Any) -> dict[str, Any]:
        torch = _torch()
        if self.model is not None:
            with torch.no_grad():
                return normalize_outputs((model or self.model)(*(args[n] for n in ds.args)), [])
        fn = self.reference_fn()
        kw = ref_pool(fn, args, self.dims)
        for name in ds.write_only():
            if name in kw:
                poison_tensor(kw[name])
        for name in ds.accumulates:  # the reference adds to a copy: the kernel gets the starting values
            if name in kw:
                kw[name] = kw[name].clone()
        value = fn(**kw)
        if value is not None:
            return normalize_outputs(value, ds.in_place)
        if not ds.in_place:
            raise BadReference("reference() returned nothing and setup() declares no outputs")
        missing = [n for n in ds.in_place if n not in kw]
        if missing:
            raise BadReference(f"reference() returned nothing and does not take the outputs {missing}")
        return {n: kw[n].clone() for n in ds.in_place}

    def reference(self, ds: DataSet) -> None:
        torch = _torch()
        # the draws with a reference only (the first among them): a host synchronisation per draw cost the l1norm
        # example's benchmark 5 s of its 147 (seen on the H100) in the timed calls' draws, which are never checked
        if ds.vary is None:  # a moved draw may scale a tiny input to 0 (a review): the drawn inputs are what is meant
            _check_not_zero({n: ds.args[n] for n in ds.input_names()}, ds.seed)
        ds.fingerprints = {n: fingerprint(ds.args[n]) for n in ds.input_names()}
        out = self.run_reference(ds.args, ds)
        # the storages the previous call returned that are still alive: a freed one's address is the allocator's to
        # give again (seen on the H100: the l1norm example's next output there, taken for a reused buffer, was cloned,
        # 8 GiB the judge did not have, and would have let a kernel's reused buffer pass that call)
        prev = {p for w, _, p in self._prev_out.values() if not w.ref.expired()}
        again = {n for n, (w, fp, _) in self._prev_out.items()  # Model wrote again what it still holds of what it
                 if (t := w.strong()) is not None and fingerprint(t) != fp}
        if again:  # returned (KernelBench's VanillaRNNHidden returns its state, updated in place): those outputs
            self.seen["overwrites"] = sorted(again | set(self.seen.get("overwrites") or ()))
        ds.rng_after = self.rng_after  # where the kernel's call must leave torch's generators
        if any(self.drew):  # a reference that draws (on the device too): the kernel may, from the same seed
            self.seen["draws"] = True
        if self.drew[1]:  # Python's random or NumPy's: not compared after the kernel's call
            self.seen["draws_other"] = True
        held = {storage_ptr(v): n for n, v in ds.args.items() if is_tensor(v)}
        for name, v in out.items():
            if not is_tensor(v):
                raise BadReference(f"the reference output '{name}' is a {type(v).__name__}, not a tensor")
            ds.ref_props[name] = {"expanded": _expanded(v), "views": held.get(storage_ptr(v)),
                                  "reuses": storage_ptr(v) in prev, "foreign": foreign_memory(v),
                                  "aliases": any(storage_ptr(o) == storage_ptr(v) for n, o in out.items()
                                                 if n != name and is_tensor(o))}
        ds.expected = {n: v.clone() if storage_ptr(v) in held or storage_ptr(v) in prev
                       or n in (self.seen.get("overwrites") or ()) else v for n, v in out.items()}
        self._prev_out = {n: (WeakHold(v), fingerprint(v), storage_ptr(v)) for n, v in out.items()}
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        changed = [n for n, fp in ds.fingerprints.items() if fingerprint(ds.args[n]) != fp]
        if changed:
            raise BadReference(f"ref.py's reference changed its input {changed[0]!r}: the kernel would get "
                               "modified inputs; make the reference work on copies")

    # --- how the worker calls the kernel ---------------------------------------------------------
    def call_plan(self, ds: DataSet, kind: str, buffers: dict[str, str], *, baseline: str | None = None,
                  compile: bool = False) -> dict[str, Any]:
        """What the worker needs to call a kernel of ``kind`` on the shared buffers (``buffers``: argument
        or output name -> judge buffer name): no data, no count, nothing about what is checked."""
        from .protocol import encode_value

        outputs = {n: buffers[n] for n in ds.expected}
        kept = {n: buffers[f"kept:{n}"] for n in ds.expected if f"kept:{n}" in buffers}
        if kind in ("kb", "ref-kb"):
            args = [buffers[n] if is_tensor(v) else {"value": encode_value(v)} for n, v in ds.args.items()]
            return {"init": encode_value(self.init), "twin_init": encode_value(self.twin_init), "seed": self.model_seed, "args": args,
                    "module_dims": {n: [encode_value(was), encode_value(now)] for n, (was, now) in self.changes().items()},
                    "model_state": state_names(self.model) if self.model is not None else [],
                    "state": {n: buffers[f"param:{n}"] for n in self.state()}, "outputs": outputs, "kept": kept,
                    "out_names": [], "compile": compile, "carry": bool(self.seen.get("steps"))}
        if kind == "cu":
            args = []
            for p in self.params or []:
                if p.pointer:
                    t = ds.args.get(p.name)
                    if not is_tensor(t):
                        raise UsageError(f"solve() pointer '{p.name}' has no tensor: setup() inputs are "
                                         f"{', '.join(ds.args) or 'none'}")
                    if str(t.dtype).replace("torch.", "") != p.dtype:
                        raise UsageError(f"solve() parameter '{p.name}' is {p.ctype}* but the tensor is {t.dtype}")
                    if not t.is_contiguous():
                        raise UsageError(f"tensor '{p.name}' is not contiguous; .cu kernels get raw pointers")
                    args.append({"ptr": buffers[p.name]})
                else:
                    v = lookup_int(p.name, self.dims, ds.args) if p.ctype in build.INT_SCALARS else ds.args.get(p.name)
                    if v is None:
                        raise UsageError(f"solve() scalar '{p.name}' ({p.ctype}) matches no dim (dims: "
                                         f"{', '.join(f'{k}={x}' for k, x in self.dims.items())}) and no setup() input")
                    args.append({"ctype": p.ctype, "value": v, "name": p.name})
            return {"args": args, "outputs": outputs, "kept": kept, "out_names": list(ds.in_place)}
        scalars = {**self.dims, **{n: v for n, v in ds.args.items() if not is_tensor(v)}}
        if kind == "ref":
            fn = self.reference_fn()
            scalars = {k: v for k, v in scalars.items() if k in ref_pool(fn, ds.args, self.dims) or _var_kw(fn)}
        return {"tensors": {n: buffers[n] for n, v in ds.args.items() if is_tensor(v)},
                "scalars": {k: encode_value(v) for k, v in scalars.items()}, "outputs": outputs, "kept": kept,
                "out_names": list(ds.in_place), "baseline": baseline, "compile": compile}


def _var_kw(fn) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())


def _expanded(t) -> bool:
    return any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape, strict=False))


def ref_pool(fn, inputs: dict, dims: dict) -> dict:
    """The kwargs reference() accepts, from the inputs then the dims."""
    pool = {**dims, **inputs}
    if _var_kw(fn):
        return pool
    params = inspect.signature(fn).parameters
    return {k: v for k, v in pool.items() if k in params and k != "baseline"}


def accepts_baseline(fn) -> bool:
    return "baseline" in inspect.signature(fn).parameters or _var_kw(fn)


def lookup_int(name: str, dims: dict, inputs: dict) -> Any:
    if name in inputs and not is_tensor(inputs[name]):
        return inputs[name]
    if name in dims:
        return dims[name]
    folded = {k.lower(): v for k, v in dims.items()}
    return folded.get(name.lower())


def _torch():
    import torch

    return torch


def as_trained(model: Any, seed: int) -> None:
    """Move every learnable float parameter of ``model`` away from its initial value, as training does (tensors.nudge):
    noise of half the parameter's own spread (a quarter of its magnitude, at least 0.25, where it is constant, as
    LayerNorm's weight 1 and bias 0 are).  Found by a red team: the only weights ever checked were the ones
    Model is built with, so a ModelNew that copied its weights in __init__ (ignoring what a user loads), or a fused
    LayerNorm without its affine transform, passed.  Frozen parameters (requires_grad False) and buffers stay."""
    nudge(model, seed ^ 0x7EA1ED, nudge_scales(model, spread=0.5, constant=0.25), keep=False)


def _check_not_zero(inputs: dict, seed: int) -> None:
    torch = _torch()
    for name, v in inputs.items():
        if not is_tensor(v) or v.numel() == 0 or v.dtype == torch.bool:
            continue
        if not bool(v.any()):  # no full-size temporary
            raise UsageError(f"input '{name}' is all zeros for seed {seed}: setup() must draw random data "
                             "(torch.randn / torch.rand / torch.randint), never zeros")


def _flat_buffers(params: list, size: int, device: str) -> dict:
    torch = _torch()
    out = {}
    for p in params:
        if not p.pointer:
            continue
        dt = getattr(torch, p.dtype)
        if dt.is_floating_point:
            out[p.name] = torch.randn(size, device=device).to(dt)
        elif dt == torch.bool:
            out[p.name] = torch.rand(size, device=device) < 0.5
        else:
            out[p.name] = torch.randint(1, 100, (size,), device=device, dtype=dt)
    return out


def flashinfer_missing(ref) -> str | None:
    """Why the FlashInfer baseline cannot run (None when it can), with what to do about it."""
    fn = getattr(ref, "reference", None)
    if not callable(fn) or not accepts_baseline(fn):
        return ("ref.py's reference() takes no 'baseline' argument (see references/kernel_abi.md: "
                "reference(..., baseline=None) that calls FlashInfer when baseline == 'flashinfer')")
    try:
        import flashinfer
    except Exception as exc:
        return (f"import flashinfer failed ({type(exc).__name__}: {' '.join(str(exc).split())[:160]}); "
                "pip install flashinfer-python, or see references/troubleshooting.md for a machine without network")
    return None if getattr(flashinfer, "__version__", None) else "flashinfer has no __version__ (a broken install)"
