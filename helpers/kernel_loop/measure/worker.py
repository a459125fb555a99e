"""The worker: the untrusted side.  It imports the kernel, maps the judge's buffers and calls the kernel
when told.  It decides nothing: every verdict, and every figure that is checked, comes from the judge.

Started by the judge as ``python -m kernel_loop.measure.worker`` (under ncu or compute-sanitizer when the judge
wraps it), with nothing on its command line; it serves, over the socket its environment names, one request at a time:

- ``hello``: the device; the timing primitives were bound before any user code ran (``timing.bind``);
  the sandbox the judge asks for (``sandbox.apply``) is put in place, and the reply says whether it held;
- ``import``: import a kernel file (``.py``, run from its hashed bytes) or build and load a ``.cu``
  library; a baseline worker imports ref.py instead (the judge never asks a kernel's worker for that);
- ``bind``: map the judge's tensors and make each kernel's call: ``run_kernel(**inputs)``, ``solve(...)``,
  ``ModelNew(*init)`` with the judge's parameters loaded (the same instance at another batch size: those a step
  left, ``carry``, are not loaded again), or the reference for a baseline;
- ``call``: one call, always the same way: the judge's tensors staged into this process's own buffers, a
  device-side delay, an L2 flush, CUDA events around the call (an NVTX range too when asked), the
  results copied back into the judge's buffers, a synchronize.  The reply gives the event time and the
  host's dispatch time; the judge never tells whether a call is a warmup, a timed, a verified or a
  profiled one (the NVTX range is asked for under ncu only, where it marks what ncu measures);
- ``backward``: backward() after a correctness call that asked for it, the gradients into the judge's buffers;
- ``kept``/``release``: the results a caller holds, handed back; then let go of, saying which the kernel still holds;
- ``unbind``: a shape's end, the judge's buffers let go (``protocol.let_go``);
- ``state``: fingerprints of what this process holds (parameters, inputs), for the judge's diagnosis; ``bye``.

This module imports support code (loader, build, timing, tensors), ``protocol``, ``guards`` and ``libraries``; never the judge.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Any

from .. import tensors
from ..common import UsageError
from . import guards, libraries, protocol, sandbox

NVTX_RANGE = "kl_measure"


class Kernel:
    """One imported kernel (or baseline) and, once bound, its call."""

    def __init__(self, kind: str, module: Any = None, lib: Any = None, build: dict | None = None):
        self.kind, self.module, self.lib, self.build = kind, module, lib, build
        self.fn = None            # (grad) -> returned value, over the worker's own buffers
        self.outputs: dict[str, str] = {}   # expected output name -> judge buffer name
        self.kept_bufs: dict[str, str] = {}  # returned output name -> the judge buffer its kept copy goes to
        self.out_names: list[str] = []
        self.model = None
        self.handed: list = []    # (box, key, judge buffer) of the outputs a run_kernel is handed
        self.slots: dict[str, tuple] = {}  # a scalar argument's name -> (where the call reads it, its key there)
        self.restore, self.froze, self.thawed = False, [], []  # (op_call, _end_backward)
        self.buffers: dict[str, Any] = {}   # the model's buffers as loaded (restored after a call in training mode)
        self.kept: list[dict[str, Any]] = []  # what each call asked to keep returned, as a caller holding it would
        self.holding = False  # whether the kernel was seen holding any of them before a call (op_call, op_release)
        self.watch: list[Any] = []  # results the kernel held after their caller let go (a compile cache's), to reread
        self.inputs: list[tuple[Any, Any, str]] = []  # (where the call reads it, its key there, judge buffer) per input
        self.state_bufs: dict[str, Any] = {}  # the model's parameters and buffers by name -> the judge's buffer
        self.pending: tuple | None = None     # a call's outputs and input leaves, until its backward() (op_backward)
        self.consts: dict[str, Any] = {}  # the module's constants the run's dims change, as imported (loader)
        self.model_state: list[str] = []  # the names of the tensors Model keeps on its modules (tensors.uninfer)
        self.init, self.args, self.twin, self.spare, self.made, self.refused = [], [], None, None, None, None  # (op_bind)
        self.formats: list[tuple[Any, Any]] = []  # the weights a channels_last call swapped (guards.weights_back)


class Worker:
    def __init__(self, chan: protocol.Channel):
        self.chan, self.kernels = chan, {}  # (kernels: by id)
        self.shared: dict[str, Any] = {}   # judge buffer name -> the judge's tensor, mapped here
        self.local: dict[str, Any] = {}    # judge buffer name -> this process's staged copy
        self.device, self.folder, self.torch, self.timer, self.plain = "cpu", "", None, None, ()
        self.modes: tuple = ()  # the two mode stacks' lengths, read before any kernel code ran
        self.no_function_mode: Any = None  # torch._C.DisableTorchFunction, read before any kernel code ran
        self.settings: dict[str, Any] = {}  # guards.process_settings(), read before any kernel code ran

    def serve(self) -> None:
        while True:
            msg = self.chan.recv(None)
            op = str(msg.get("op"))
            handler = getattr(self, f"op_{op}", None)
            try:
                if handler is None:
                    raise protocol.ProtocolError(f"unknown request {op!r}")
                reply = {"ok": True, **(handler(msg) or {}), "built": libraries.drain()}
            except UsageError as exc:
                reply = {"ok": False, "error": str(exc), "usage": True}
            except Exception as exc:  # the kernel's failure is the reply
                reply = {"ok": False, "error": guards.error_text(exc)}
            self.chan.send(reply)
            if op == "bye":
                return

    def op_hello(self, msg: dict) -> dict:
        try:
            import torch
        except ImportError:
            raise UsageError("torch is not installed: pip install torch (a CUDA build)") from None
        self.torch, self.device, self.folder = torch, str(msg["device"]), str(msg["folder"])
        if self.device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise UsageError("no CUDA GPU is visible to the worker")
            torch.cuda.set_device(torch.device(self.device))
        elif msg.get("impl") == "triton":
            os.environ.setdefault("TRITON_INTERPRET", "1")
        self.plain = protocol.plain_types(torch)  # before any of the kernel's code runs: what a call may return
        self.modes = (torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack)
        self.no_function_mode = torch._C.DisableTorchFunction
        self.settings = guards.process_settings(torch)
        # before any of the kernel's code runs, for good: no record key, no run directory but the files given
        isolated, how = sandbox.apply(msg.get("sandbox"))
        return {"pid": os.getpid(), "torch": torch.__version__, "isolated": isolated, "isolation": how}

    def op_bye(self, msg: dict) -> dict:
        return protocol.let_go(self)  # the judge's memory is released before it ends

    def op_unbind(self, msg: dict) -> dict:
        return protocol.let_go(self)  # a shape's end: the judge frees its buffers once no process maps them

    def op_import(self, msg: dict) -> dict:
        from .. import loader

        path, kind = Path(msg["path"]), str(msg["kind"])
        if kind in ("py", "kb", "ref", "ref-kb"):
            prefix = "ref" if kind.startswith("ref") else "kernel"
            libraries.hook(self.torch, msg["libs"]) if "libs" in msg else None  # load_inline: kept ones, and reported
            module = loader.import_file(path, prefix)
            self._no_mode(f"{path.name} left active at import")
            self._same_settings(f"{path.name}'s import") if prefix == "kernel" else None
            self.kernels[msg["id"]] = Kernel(kind, module=module)
            return {}
        if kind == "cu":
            lib, info = self._load_library(path, msg)
            self.kernels[msg["id"]] = Kernel(kind, lib=lib, build=info)
            return {"build": info}
        raise protocol.ProtocolError(f"unknown kernel kind {kind!r}")

    def _load_library(self, path: Path, msg: dict):
        from .. import build

        if not self.device.startswith("cuda"):
            raise UsageError(f"{path.name} is CUDA C++: it needs a CUDA device, not '{self.device}'")
        cc = self.torch.cuda.get_device_capability(self.torch.device(self.device))
        return build.load_built(path, str(msg.get("impl") or ""), msg.get("build"), tuple(cc))

    # --- binding ------------------------------------------------------------------------------
    def op_bind(self, msg: dict) -> dict:
        torch = self.torch
        self.shared.clear(), self.local.clear()
        given = protocol.handed_over(msg["calls"].values())
        for entry in msg["buffers"]:
            self.shared[entry["name"]] = t = protocol.open_shared(self.folder, entry)
            # a buffer no call is given (a returned output's) only receives the returned tensor: not staged
            self.local[entry["name"]] = protocol.local_like(torch, t, self.device) if entry["name"] in given else t
        self._stage_in()
        info = {}
        for kid, call in msg["calls"].items():
            k = self.kernels[kid]
            k.outputs, k.kept_bufs = dict(call.get("outputs") or {}), dict(call.get("kept") or {})
            k.out_names, k.kept, k.holding = list(call.get("out_names") or []), [], False
            info[kid] = self._make_call(k, call)
        for call in msg["calls"].values():  # the parameters now live in every model: not staged per call
            for b in (call.get("state") or {}).values():
                self.local.pop(b, None)
                self.shared.pop(b, None)
        return {"kernels": info}

    def _tensor_pool(self, call: dict) -> dict:
        pool = {name: protocol.decode_value(v) for name, v in (call.get("scalars") or {}).items()}
        pool.update({arg: self.local[buf] for arg, buf in (call.get("tensors") or {}).items()})
        return pool

    def _make_call(self, k: Kernel, call: dict) -> dict:
        from .. import loader

        torch = self.torch
        if k.kind in ("py", "ref"):
            name = "reference" if k.kind == "ref" else "run_kernel"
            fn = getattr(k.module, name, None)
            if not callable(fn):
                what = "ref.py" if k.kind == "ref" else Path(k.module.__file__ or "kernel").name
                raise UsageError(f"{what} defines no {name}(**inputs)")
            pool = self._tensor_pool(call)
            extra = {"baseline": call["baseline"]} if call.get("baseline") else {}
            if call.get("compile"):
                fn = torch.compile(fn)

            def run(grad=None, fn=fn, pool=pool, extra=extra, user=k.kind == "py"):  # a user's process has autograd on
                with torch.set_grad_enabled(on := user if grad is None else bool(grad)):
                    return guards.same_grad_mode(loader.call_with(fn, pool, **extra), on, torch)
            k.fn, k.slots = run, {n: (pool, n) for n in call.get("scalars") or {}}
            handed = set(call.get("out_names") or [])
            k.inputs = [(pool, a, b) for a, b in (call.get("tensors") or {}).items() if a not in handed]
            k.handed = [(pool, a, b) for a, b in (call.get("tensors") or {}).items() if a in handed]
            return {}
        if k.kind in ("kb", "ref-kb"):
            cls_name = "Model" if k.kind == "ref-kb" else "ModelNew"
            cls = getattr(k.module, cls_name, None)
            if cls is None:
                raise UsageError(f"ref.py is in KernelBench format, so {Path(k.module.__file__).name} must define "
                                 f"{cls_name}")
            init = protocol.decode_value(call.get("init") or [])
            loader.set_constants(k.module, k.consts, {n: [protocol.decode_value(v) for v in pair]
                                                     for n, pair in (call.get("module_dims") or {}).items()})
            same = k.kind == "kb" and k.model is not None and k.made == (init, call.get("module_dims")) and set(
                call.get("model_state") or ()) <= set(call.get("state") or ())  # no state of Model's own to carry
            torch.manual_seed(int(call.get("seed") or 0))
            with torch.device(self.device):  # a shape's batch sizes alone changed: the same instance, as a user's
                try:  # (a red team's ModelNew fixed its batch at its first call)
                    model = k.model if same else cls(*init)
                except TypeError as exc:
                    raise guards.KernelDefect(f"{cls_name}({', '.join(map(repr, init))}) failed ({exc}): {cls_name} "
                                              "must take the same constructor arguments as Model") from None
                model = model.to(self.device).eval()  # the judge sets the mode of each call (op_call)
            state = {n: self.local[b] for n, b in (call.get("state") or {}).items()}
            k.state_bufs = {n: self.shared[b] for n, b in (call.get("state") or {}).items()}
            mine = model.state_dict()
            theirs = {n: list(t.shape) for n, t in state.items()}
            ours = {n: list(t.shape) for n, t in mine.items()}
            if ours != theirs:
                raise UsageError(guards.state_mismatch(cls_name, ours, theirs))
            if state:  # on the same instance, the parameters a step at another batch size left (carry): no new _version
                keep = {n for n, _ in model.named_parameters(remove_duplicate=False)} if same and call.get("carry") else set()
                model.load_state_dict({n: t for n, t in state.items() if n not in keep}, strict=not keep)
            buffer_names = {n for n, _ in model.named_buffers()}
            k.buffers = {n: t.detach().clone() for n, t in model.state_dict().items() if n in buffer_names}
            plan = call.get("args") or []  # a judge buffer's name, or {"value": ...} for a get_inputs() scalar
            args = [self.local[b] if isinstance(b, str) else protocol.decode_value(b["value"]) for b in plan]
            k.inputs = [(args, i, b) for i, b in enumerate(plan) if isinstance(b, str)]
            k.slots = {f"arg{i}": (args, i) for i, b in enumerate(plan) if not isinstance(b, str)}
            k.model, k.model_state, k.init, k.args, k.twin = model, list(call.get("model_state") or []), init, args, None
            k.spare, k.refused = (k.spare, k.refused) if same else guards.second_instance(model, protocol.decode_value(call.get("twin_init") or call.get("init") or []), init, self.device) if k.kind == "kb" else (None, None)
            k.made = (init, call.get("module_dims"))  # its twin's instance too is built before any call
            target = torch.compile(model) if call.get("compile") else model

            def forward(grad=False, target=target, args=args):
                with torch.set_grad_enabled(bool(grad)):
                    return guards.same_grad_mode(target(*args), bool(grad), torch)
            k.fn = forward
            return {"twin_refused": k.refused} if k.refused else {}
        if k.kind == "cu":
            from .. import build

            args, argtypes = [], []
            for a in call["args"]:
                if "ptr" in a:
                    t = self.local[a["ptr"]]
                    args.append(ctypes.c_void_p(t.data_ptr()))
                    argtypes.append(ctypes.c_void_p)
                else:
                    ct = getattr(ctypes, build.INT_SCALARS.get(a["ctype"]) or build.FLOAT_SCALARS[a["ctype"]])
                    args.append(ct(a["value"]))
                    argtypes.append(ct)
            lib, k.lib.solve.argtypes, k.lib.solve.restype = k.lib, argtypes, None

            def solve(grad=False, lib=lib, args=args):
                lib.solve(*args)
                err = lib.kl_last_error()
                if err:
                    raise RuntimeError(f"CUDA launch error {err}: {lib.kl_error_string(err).decode()}")
            k.fn, k.slots = solve, {a["name"]: (args, i) for i, a in enumerate(call["args"]) if "name" in a}
            return {}
        raise protocol.ProtocolError(f"cannot bind a kernel of kind {k.kind!r}")

    # --- one call -----------------------------------------------------------------------------
    def _stage_in(self, bump: bool = False) -> None:
        for name, sh in self.shared.items():  # through .data: new values at the same address and _version, as a
            lo = self.local[name]              # buffer refilled through NumPy or .data (a red team's memo keyed on both);
            if lo is not sh:                   # with ``bump``, a new _version, as after copy_ (a ninth red team's
                lo.data.copy_(sh)              # kernel was wrong only there)
            self.torch.autograd.graph.increment_version(lo) if bump else None

    def _no_mode(self, when: str) -> None:
        if why := guards.left_modes(self.modes, when):
            raise guards.KernelDefect(why)

    def _same_settings(self, when: str) -> None:
        if why := guards.changed_settings(self.settings, self.torch, when):
            raise guards.KernelDefect(why)

    def _stage_out(self, k: Kernel, value: Any, views: dict | None = None, objects: bool = False) -> tuple[dict, dict]:
        """The hand-over (protocol.hand_over), once the value is known to be plain data."""
        if odd := protocol.not_plain(value, self.plain):  # before anything touches it: a lazy object would compute here
            raise guards.KernelDefect(f"the call returned {odd}: a kernel returns plain torch.Tensor objects (or a tuple, "
                                      "list or dict of them); a subclass or a wrapper can compute when first read, "
                                      "outside the timed call")
        return protocol.hand_over(self, k, value, views, objects)

    def op_kept(self, msg: dict) -> dict:
        """The results call ``i`` returned (held by the caller, or followed), and ``watch`` ({judge buffer: index}:
        results the kernel held after its caller let go), as they are now, into their judge buffers
        (protocol.hand_back): the judge checks that nothing changed them."""
        self._no_mode("a call left active")
        with self.torch.no_grad(), self.no_function_mode():
            return {"kept": protocol.hand_back(self, self.kernels[msg["k"]], int(msg.get("i", -1)), msg.get("watch"))}

    def op_call(self, msg: dict) -> dict:
        """One call.  ``train``/``grad``: a KernelBench model's mode and autograd (eval() without autograd unless
        said); ``keep``: hold the returned tensors ("object": the objects themselves), and the outputs a ``moved`` call
        was handed, as a user keeps each call's (``op_kept`` hands them back); ``nvtx``: the call, the hand-over
        and the synchronize after it in one process-wide NVTX range; ``scalars``: the data set's own non-tensor
        arguments.  Correctness only: ``strided``, the inputs handed as views (what the kernel left in them comes
        back to their buffers); ``stats``, running statistics loaded before a training-mode call, the buffers
        written back after it; ``backward``, the float inputs require grad for an ``op_backward``.  Profile only:
        ``inventory``, the kernels the call launched as torch's profiler sees them (a hint)."""
        from ..timing import CallTimer, LaunchCount

        torch = self.torch
        k = self.kernels[msg["k"]]
        if k.fn is None:
            raise protocol.ProtocolError("call before bind")
        self._end_backward(k)  # then whether the kernel held earlier results, before any call (a ring given back at
        k.holding = k.holding or ("keep" in msg and protocol.held_elsewhere(k.kept))  # a collection may hold none at one)
        self.timer, cuda = self.timer or CallTimer(self.device), self.device.startswith("cuda")
        guards.before_call(torch, self.device, msg)  # automatic garbage collection as a user's, but in quiet calls
        train, grad, frozen = bool(msg.get("train")), msg.get("grad"), msg.get("frozen") or []  # grad None: the kind's own
        k.model.train(train) if k.model is not None and (k.model.training != train or frozen or k.froze) else None
        k.froze = [k.model.get_submodule(n).eval() for n in frozen]  # a user's frozen norm layers, by name (Model's)
        k.thawed = [p.requires_grad_(False) for n, p in k.model.named_parameters(remove_duplicate=False)
                    if p.requires_grad and n in msg["freeze"]] if msg.get("freeze") else []
        self._stage_in(bool(msg.get("bump")))
        step = msg.get("nudge") or {}  # put back after the call, unless it "stays" (a step; raised or not)
        saved = tensors.nudge(k.model, int(step["seed"]), step["scales"], not step.get("stays"), step.get("sparse") or False) if step else {}
        for n, v in (msg.get("scalars") or {}).items():  # this data set's own (setup() may draw a scalar per seed)
            box, key = k.slots.get(n, ({}, n))  # one it does not take (a solve() without it) goes nowhere
            box[key] = protocol.decode_value(v)
        if msg.get("stats") and k.model is not None:  # the running statistics the call starts from
            state = k.model.state_dict()
            with torch.no_grad():
                for n in msg["stats"]:
                    state[n].copy_(k.state_bufs[n])
        views: dict[str, Any] = {}
        k.formats = guards.weights_channels_last(torch, k.model if msg.get("weights") else None, k.formats)
        moved = msg.get("strided") == "moved"  # the outputs it is handed move too: a user's next buffers are elsewhere
        for box, key, buf in (k.inputs + (k.handed if moved else [])) if msg.get("strided") else ():
            view = tensors.strided_view(box[key], msg["strided"])  # the judge's layout (conditions.py)
            if view is not box[key]:
                box[key], views[buf] = view, view
        leaves = [(buf, box[key]) for box, key, buf in k.inputs
                  if msg.get("backward") not in (None, False, "data") and box[key].dtype.is_floating_point]
        for _, t in leaves:
            t.requires_grad_(True)
        for box, key, buf in k.inputs if msg.get("backward") == "nonleaf" else ():  # made by autograd, as a layer in a
            if box[key].requires_grad:  # network gets a previous one's output (a red team's kernel detached those)
                box[key] = views[buf] = box[key].view_as(box[key])  # no copy: an input may be 8 GiB
        torch.cuda.reset_peak_memory_stats(self.device) if cuda else None
        rid: list[Any] = []

        def nvtx(start: bool) -> None:  # the range ends below, after the results are handed over
            if start:
                rid.append(torch.cuda.nvtx.range_start(NVTX_RANGE))

        fn, inference = (self._twin(k, msg["twin"]) if msg.get("twin") else k.fn), bool(msg.get("inference"))

        def call(fn=fn, grad=grad, inference=inference):
            if not inference:
                return fn(grad)
            with torch.inference_mode():
                return fn(False)
        hint = LaunchCount(self.device) if msg.get("inventory") and cuda else None  # the call alone; not a sample
        call = hint.around(call) if hint is not None else call
        if msg.get("rng_state"):  # a reference that draws did from this state (problem.start_state)
            guards.set_torch_rng(torch, self.device, bytes.fromhex(msg["rng_state"]))
        rng = guards.rng_before(torch, self.device, msg)
        try:
            value, us, host, delay = self.timer.time(call, msg["k"], nvtx=nvtx if msg.get("nvtx") else None)
        except BaseException:
            self._unstride(k, views)
            tensors.put_back(k.model, saved)  # the model as a call that raised leaves a user's: its weights, and
            k.restore = k.restore or msg.get("stats") is not None  # its statistics as loaded (before the next call)
            for _, t in leaves:
                t.requires_grad_(False)
            raise
        self._no_mode("the call left active")
        guards.rng_after(torch, self.device, msg, rng)
        if k.kind in ("py", "kb"):
            self._same_settings("the call")
        with torch.no_grad(), self.no_function_mode():
            self._unstride(k, views)
            returned, held = self._stage_out(k, value, views, msg.get("keep") == "object")
            held.update({n: views[b] for n, b in k.outputs.items() if b in views} if moved and msg.get("keep") else {})
            if leaves or msg.get("backward") not in (None, False):  # (data, or integer inputs: the parameters alone)
                outs = [v for v in ([] if value is None else tensors.normalize_outputs(value, k.out_names).values())
                        if type(v) is torch.Tensor]
                k.pending = (outs, dict(leaves))
            del value
            views.clear()
            tensors.put_back(k.model, saved)
            for m in (k.model, k.spare) if inference else ():  # the twin's instance too (its call may be the one)
                tensors.uninfer(m, k.model_state) if m is not None else None
            if "keep" in msg:  # a keeping session's checked calls, one each: held, or followed without holding it
                k.kept.append(held if msg["keep"] else {n: tensors.WeakHold(t) for n, t in held.items()})
            del held
            if cuda:
                torch.cuda.synchronize(self.device)
            for r in rid:
                torch.cuda.nvtx.range_end(r)
            if (train or msg.get("stats") or msg.get("after")) and k.buffers:  # loaded or updated: the next call starts
                state = k.model.state_dict()  # from the judge's, unless this call's are left for it (after: "leave")
                for n in k.buffers if msg.get("stats") is not None else ():  # compared with Model's after the same call
                    k.state_bufs[n].copy_(state[n])
                torch.cuda.synchronize(self.device) if cuda else None  # written before the judge reads them (buffer_rows)
                k.restore = msg.get("after") != "leave"  # after the backward, if one comes: BatchNorm's reads them
                if k.pending is None:
                    self._end_backward(k)
        peak = int(torch.cuda.max_memory_allocated(self.device)) if cuda else None
        return {"us": us, "host_us": host, "delay_us": delay, "returned": returned, "peak_mem_bytes": peak,
                "ooms": guards.ooms(torch, self.device), "build": k.build,
                "inventory": hint.result() if hint is not None else None}

    def _twin(self, k: Kernel, spec: dict) -> Any:
        """A second ModelNew with other weights called in place of the first's (tensors.twin; built once a spec)."""
        if k.twin is None or k.twin[0] != spec:
            m = tensors.twin(k.model, k.init, spec, self.device, k.spare, {n: k.state_bufs[n] for n in spec.get("own", ())})

            def forward(grad=False, m=m, args=k.args, torch=self.torch):
                with torch.set_grad_enabled(bool(grad)):
                    return guards.same_grad_mode(m(*args), bool(grad), torch)
            k.twin = (spec, forward)
        return k.twin[1]

    def _unstride(self, k: Kernel, views: dict[str, Any]) -> None:
        """The inputs' (and handed outputs') own buffers back where the call reads them, with what it left in its views."""
        guards.weights_back(k.formats)  # the model's weights in their own format again
        for box, key, buf in k.inputs + k.handed:
            if buf in views:
                prior = self.shared.get(k.kept_bufs.get(next((n for n, b in k.outputs.items() if b == buf), ""), ""))
                if prior is not None:  # a handed output's own buffer, as the call left it: the judge checks it
                    prior.copy_(self.local[buf])
                if views[buf].data_ptr() != self.local[buf].data_ptr():  # a nonleaf view over the buffer stays as
                    self.local[buf].copy_(views[buf])  # it is (a copy onto itself would bump what the backward saved)
                box[key] = self.local[buf]

    def _end_backward(self, k: Kernel) -> None:
        """Forget a call's graph, its inputs stop requiring grad, the model's buffers go back as loaded (found by a CPU
        sweep: put back before the backward, they broke BatchNorm's, whose gradients were never compared)."""
        if k.restore:
            state = k.model.state_dict()
            with self.torch.no_grad():
                for n, t in k.buffers.items():
                    state[n].copy_(t)
            k.restore = False
        while k.thawed:  # what a call froze trains again
            k.thawed.pop().requires_grad_(True)
        if k.pending is not None:
            for t in k.pending[1].values():
                t.requires_grad_(False)
                t.grad = None
            k.pending = None

    def op_backward(self, msg: dict) -> dict:
        """backward() after the last call, as a user that trains through the model calls it (tensors.grads_into):
        ``targets`` [name, "parameter" or "input", its name or judge buffer] get their gradients in the judge's
        buffers of those parameters and inputs.  The model's own .grad fields are left as they were."""
        k = self.kernels[msg["k"]]
        if k.pending is None or k.model is None:
            raise protocol.ProtocolError("backward without a call that asked for it")
        params = dict(k.model.named_parameters(remove_duplicate=False))  # a tied one under Model's name too
        targets = [(n, params[key], k.state_bufs[key]) if kind == "parameter" else (n, k.pending[1][key], self.shared[key])
                   for n, kind, key in msg["targets"]]
        try:
            unused = tensors.grads_into(k.pending[0], targets, int(msg["seed"]), list(params.values()))
            if self.device.startswith("cuda"):
                self.torch.cuda.synchronize(self.device)
        finally:
            self._end_backward(k)
        return {"unused": unused, "ooms": guards.ooms(self.torch, self.device)}

    def op_release(self, msg: dict) -> dict:
        """The caller lets go of the results it kept (``probe``: says only whether the kernel holds any of them), but
        for call ``carry``'s: which [call index, name, watch index] the kernel still holds (protocol.still_held), each
        kept to be read after later calls (op_kept's ``watch``), and ``carried``: [name, watch index]."""
        k = self.kernels[msg["k"]]
        self._end_backward(k)
        if msg.get("probe"):
            return {"holding": k.holding or protocol.held_elsewhere(k.kept)}
        carry = k.kept[msg["carry"]] if 0 <= msg.get("carry", -1) < len(k.kept) else {}
        kept_on = {n: t for n, t in carry.items() if not isinstance(t, tensors.WeakHold)}  # held by the caller
        carried = [[n, len(k.watch) + j] for j, n in enumerate(kept_on)]
        k.watch += list(kept_on.values())
        carry.clear()
        held, again = protocol.still_held(k.kept)
        k.watch += again  # read back after later calls (op_kept with ``watch``): a compile cache never writes them
        return {"held": [[i, n, len(k.watch) - len(again) + j] for j, (i, n) in enumerate(held)], "carried": carried}

    def op_state(self, msg: dict) -> dict:
        out: dict[str, Any] = {"inputs": {n: list(tensors.fingerprint(t, portable=True)[2:]) for n, t in self.local.items()}}
        k = self.kernels.get(msg.get("k"))
        if k is not None and k.model is not None:
            self._end_backward(k)  # a backward the judge did not ask for: the buffers go back as loaded first
            out["parameters"] = {n: list(tensors.fingerprint(t, portable=True)[2:]) for n, t in k.model.state_dict().items()}
        return out


def main() -> int:
    from .. import timing

    guards.no_working_folder_on_path()
    try:
        timing.bind()  # before any user code: a kernel that rebinds the clock later changes nothing bound here
    except ImportError:
        pass
    try:
        chan = protocol.connect_from_env()
    except (protocol.ProtocolError, OSError) as exc:
        print(f"kernel-loop worker: {exc}", file=sys.stderr)
        return 2
    os.environ.pop(protocol.SOCKET_ENV, None)  # connected: the kernel learns nothing from its path
    try:
        Worker(chan).serve()
    except protocol.ProtocolError:
        return 3  # the judge went away: nothing to report to
    finally:
        chan.close()
    return 0


if __name__ == "__main__":
    sys.exit(guards.leaving(main()))
