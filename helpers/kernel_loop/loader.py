"""Load one test case: the reference, the candidate kernel and fresh inputs for a seed.

Used inside child processes only (correctness, profile, benchmark), never in the CLI process.

Formats (see references/kernel_abi.md):
- ref.py with ``reference(**kwargs)`` and optionally ``setup(**dims)`` returning
  ``{"inputs": {...}, "outputs": [names]}`` (a plain dict is taken as the inputs);
- KernelBench: ref.py with ``Model``, ``get_inputs()``, ``get_init_inputs()``; the kernel defines
  ``ModelNew``.  Integer module-level names in ref.py that match a dim are set to the dim's value
  before ``get_inputs()`` so extra shapes apply;
- kernels: ``.cu`` exposing ``extern "C" void solve(...)`` (cuda-cpp, cutlass) or ``.py`` with
  ``run_kernel(**inputs)`` (triton, cute-dsl) that writes its outputs in place or returns them.

Device: ``"cuda:N"``; ``"cpu"`` is a test/dev mode (run.json ``"device": "cpu"`` or
``KERNEL_LOOP_DEVICE=cpu``) in which Triton kernels run under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import build
from .common import UsageError
from .config import RunConfig
from .tensors import (  # noqa: F401 - the tensor helpers are part of what the loader offers
    FLOAT_SENTINEL,
    INT_SENTINEL,
    clone_value,
    fingerprint,
    is_tensor,
    normalize_outputs,
    poison_tensor,
    storage_ptr,
)

_MODULES: dict[str, Any] = {}
_LIBS: dict[str, Any] = {}
_LAST_BUILD: dict[str, Any] = {}
_INSTANCES: dict[tuple, Any] = {}  # (kernel, ref, dims, device) -> (Model, ModelNew)


def device_for(cfg: RunConfig) -> str:
    """The torch device a run measures on; cpu only in the test/dev mode."""
    if os.environ.get("KERNEL_LOOP_DEVICE", "").lower() == "cpu" or cfg.device == "cpu":
        return "cpu"
    return f"cuda:{cfg.gpu}"


def last_build() -> dict | None:
    """Build info (command, cached, seconds, arch) of the .cu library loaded in this process (first load)."""
    return dict(_LAST_BUILD) if _LAST_BUILD else None


def import_file(path: Path, prefix: str) -> Any:
    """Import a .py file once per process (by path and content) under a private module name."""
    path = Path(path).resolve()
    data = path.read_bytes()
    key = f"{path}:{hashlib.sha256(data).hexdigest()}"
    if key in _MODULES:
        return _MODULES[key]
    name = f"_kl_{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    # the module runs from the bytes hashed above, compiled here: never from a __pycache__ file (one planted
    # beside the kernel would run other code than the file the records name), and the version folder is not
    # put on sys.path (code the kernel imports from beside it would not be measured; the gate refuses it)
    code = compile(data, str(path), "exec", dont_inherit=True)
    with _heartbeat(f"importing {path.name}" + (" (a load_inline / JIT build runs here; its cache is "
                                                "$TORCH_EXTENSIONS_DIR)" if prefix == "kernel" else "")):
        exec(code, mod.__dict__)
    _MODULES[key] = mod
    return mod


@contextmanager
def _heartbeat(what: str, every: float = 15.0):
    """A progress line every ``every`` seconds while a long step (a kernel's import and build) runs."""
    done = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            print(f"[kernel-loop] still {what}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


def call_with(fn: Callable, pool: dict, **extra: Any) -> Any:
    """Call ``fn`` with the entries of ``pool`` that its signature accepts (all of them for **kwargs)."""
    sig = inspect.signature(fn)
    params = sig.parameters
    kw = dict(pool)
    kw.update(extra)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kw = {k: v for k, v in kw.items() if k in params}
    missing = [n for n, p in params.items()
               if p.default is inspect.Parameter.empty and n not in kw
               and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    if missing:
        raise UsageError(f"{fn.__name__}() needs {', '.join(missing)}, which neither the inputs nor the dims provide "
                         f"(available: {', '.join(sorted(kw)) or 'none'})")
    return fn(**kw)


def _torch():
    import torch

    return torch


def _move(x: Any, device: str) -> Any:
    return x.to(device) if is_tensor(x) else x


def _check_not_zero(inputs: dict, outputs: set, seed: int) -> None:
    torch = _torch()
    for name, v in inputs.items():
        if name in outputs or not is_tensor(v) or v.numel() == 0:
            continue
        if v.dtype == torch.bool:
            continue
        if not bool(v.any()):  # no full-size temporary
            raise UsageError(f"input '{name}' is all zeros for seed {seed}: setup() must draw random data "
                             "(torch.randn / torch.rand / torch.randint), never zeros")


class Case:
    """One seeded case: ``inputs`` (all kernel arguments), ``outputs`` (buffers the kernel writes)."""

    def __init__(self, *, inputs: dict, outputs: dict, launch: Callable[[], dict],
                 ref_fn: Callable, ref_kwargs: dict, out_names: list[str], device: str, seed: int,
                 baseline_ok: bool, kind: str, build_info: dict | None = None):
        self.inputs = inputs
        self.outputs = outputs
        self._launch = launch
        self._ref_fn = ref_fn
        self._ref_kwargs = ref_kwargs
        self.out_names = out_names
        self.device = device
        self.seed = seed
        self._baseline_ok = baseline_ok
        self.kind = kind
        self.build = build_info

    def poison(self, variant: int = 0) -> None:
        for t in self.outputs.values():
            poison_tensor(t, variant)

    def launch(self) -> dict:
        return self._launch()

    def input_snapshot(self) -> dict:
        """A fingerprint of every input tensor that is not a declared output, to compare after a call
        (no copy of the inputs: the check costs a few chunks of memory, whatever their size)."""
        return {n: fingerprint(v) for n, v in self.inputs.items() if is_tensor(v) and n not in self.outputs}

    def changed_inputs(self, snapshot: dict) -> list[str]:
        """The names of the inputs whose bytes changed since ``snapshot``."""
        return [n for n, fp in snapshot.items() if fingerprint(self.inputs[n]) != fp]

    def _cloned_ref_kwargs(self) -> dict:
        """Clones of the inputs; output buffers poisoned, so the reference never sees kernel results."""
        kw = {k: clone_value(v) for k, v in self._ref_kwargs.items()}
        for name in self.outputs:
            if name in kw:
                poison_tensor(kw[name])
        return kw

    def reference(self, baseline: str | None = None, *, in_place: bool = False) -> dict:
        """The reference outputs.  By default the reference runs on clones of the inputs; ``in_place`` runs it
        on the case's own tensors (no copy of the inputs: correctness at full size), with the output buffers
        poisoned first and what it writes copied out, so the kernel later gets the same, untouched inputs."""
        if in_place:
            kw = dict(self._ref_kwargs)
            for name in self.outputs:
                if name in kw:
                    poison_tensor(kw[name])
        else:
            kw = self._cloned_ref_kwargs()
        extra = {}
        if baseline is not None:
            if not self._baseline_ok:
                raise UsageError(f"ref.py reference() takes no 'baseline' argument; cannot run baseline '{baseline}'")
            extra["baseline"] = baseline
        value = self._ref_fn(**kw, **extra)
        if value is None:
            if not self.outputs:
                raise UsageError("reference() returned nothing and setup() declares no outputs")
            missing = [n for n in self.outputs if n not in kw]
            if missing:
                raise UsageError(f"reference() returned nothing and does not take the outputs {missing}")
            return {n: kw[n].clone() if in_place else kw[n] for n in self.outputs}
        out = normalize_outputs(value, self.out_names)
        if in_place:  # a returned tensor that shares memory with an argument would change with the kernel's writes
            held = {storage_ptr(v) for v in kw.values() if is_tensor(v)}
            out = {n: v.clone() if is_tensor(v) and storage_ptr(v) in held else v for n, v in out.items()}
        return out

    def reference_fn(self) -> Callable[[], object]:
        kw = self._cloned_ref_kwargs()
        fn = self._ref_fn
        return lambda: fn(**kw)

    def reference_callable_and_args(self) -> tuple[Callable, dict]:
        return self._ref_fn, self._cloned_ref_kwargs()


def _ref_pool(fn: Callable, inputs: dict, dims: dict) -> dict:
    """The kwargs reference() accepts, from the inputs then the dims."""
    params = inspect.signature(fn).parameters
    pool = {**dims, **inputs}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return pool
    return {k: v for k, v in pool.items() if k in params and k != "baseline"}


def _setup_inputs(setup: Callable, dims: dict, seed: int, device: str) -> tuple[dict, list[str]]:
    torch = _torch()
    torch.manual_seed(seed)
    extra = {"device": device} if "device" in inspect.signature(setup).parameters else {}
    with torch.device(device):
        spec = call_with(setup, dims, **extra)
    if not isinstance(spec, dict):
        raise UsageError(f"setup() must return a dict, got {type(spec).__name__}")
    if "inputs" in spec:
        inputs, outs = spec["inputs"], list(spec.get("outputs") or [])
    else:
        inputs, outs = spec, []
    inputs = {k: _move(v, device) for k, v in inputs.items()}
    unknown = [o for o in outs if o not in inputs]
    if unknown:
        raise UsageError(f"setup() names outputs {unknown} that are not among its inputs")
    return inputs, outs


def _has_kernelbench(ref) -> bool:
    return hasattr(ref, "Model") and hasattr(ref, "get_inputs")


def load_case(cfg: RunConfig, run_root: Path, kernel_path: Path, dims: dict, seed: int, device: str,
              *, with_kernel: bool = True) -> Case:
    """A fresh seeded case for ``kernel_path`` against ``run_root/ref.py``.

    ``with_kernel=False`` is the checker's case: the same seeded inputs and the reference, but the kernel
    file is never imported, built or loaded (a .cu file's text is read for its signature only), and
    ``launch`` is not available."""
    run_root = Path(run_root)
    kernel_path = Path(kernel_path)
    if device.startswith("cuda"):
        _torch().cuda.set_device(_torch().device(device))  # .cu kernels launch on the current device
    ref = import_file(run_root / "ref.py", "ref")
    if kernel_path.suffix == ".cu":
        return _load_cu(cfg, ref, kernel_path, dims, seed, device, with_kernel)
    if kernel_path.suffix != ".py":
        raise UsageError(f"{kernel_path.name}: kernels are .cu or .py files")
    if device == "cpu" and cfg.impl == "triton":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    kmod = import_file(kernel_path, "kernel") if with_kernel else None
    if _has_kernelbench(ref) and not hasattr(ref, "reference"):
        return _load_kernelbench(ref, kmod, kernel_path, dims, seed, device)
    return _load_py(ref, kmod, kernel_path, dims, seed, device)


def _no_kernel(**_: Any) -> Any:
    raise RuntimeError("the checker's case has no kernel: it never imports the kernel file")


def _reference_of(ref) -> Callable:
    fn = getattr(ref, "reference", None)
    if not callable(fn):
        raise UsageError("ref.py defines no reference(**kwargs) (nor a KernelBench Model/get_inputs)")
    return fn


def accepts_baseline(fn: Callable) -> bool:
    params = inspect.signature(fn).parameters
    return "baseline" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _load_py(ref, kmod, kernel_path: Path, dims: dict, seed: int, device: str) -> Case:
    ref_fn = _reference_of(ref)
    run_kernel = getattr(kmod, "run_kernel", None) if kmod is not None else _no_kernel
    if not callable(run_kernel):  # the checker's case (no kernel module) gets one that refuses to run
        raise UsageError(f"{kernel_path.name} defines no run_kernel(**inputs)")
    setup = getattr(ref, "setup", None)  # never the kernel's own: a kernel must not choose its inputs
    if not callable(setup):
        raise UsageError("ref.py defines no setup(**dims): .py kernels get their inputs from it")
    inputs, outs = _setup_inputs(setup, dims, seed, device)
    _check_not_zero(inputs, set(outs), seed)
    outputs = {n: inputs[n] for n in outs}
    kpool = {**dims, **inputs}

    def launch() -> dict:
        value = call_with(run_kernel, kpool)
        if value is None:
            if not outputs:
                raise RuntimeError("run_kernel returned nothing and setup() declares no outputs to write")
            return dict(outputs)
        return normalize_outputs(value, outs)

    return Case(inputs=inputs, outputs=outputs, launch=launch, ref_fn=ref_fn,
                ref_kwargs=_ref_pool(ref_fn, inputs, dims), out_names=outs, device=device, seed=seed,
                baseline_ok=accepts_baseline(ref_fn), kind="py")


def _load_kernelbench(ref, kmod, kernel_path: Path, dims: dict, seed: int, device: str) -> Case:
    torch = _torch()
    model_new_cls = getattr(kmod, "ModelNew", None)
    if kmod is not None and model_new_cls is None:
        raise UsageError(f"ref.py is in KernelBench format, so {kernel_path.name} must define ModelNew")
    for k, v in dims.items():
        if isinstance(getattr(ref, k, None), int):
            setattr(ref, k, v)
    key = (str(kernel_path), id(ref), tuple(sorted(dims.items())), device, kmod is not None)
    if key not in _INSTANCES:  # one Model and one ModelNew per shape: every trial calls the same instance
        torch.manual_seed(seed)
        init = list(ref.get_init_inputs()) if hasattr(ref, "get_init_inputs") else []
        with torch.device(device):  # parameters are created where they are used
            torch.manual_seed(seed)
            model = ref.Model(*init).to(device).eval()
            torch.manual_seed(seed)
            model_new = None
            if kmod is not None:
                try:
                    model_new = model_new_cls(*init).to(device).eval()
                except TypeError as exc:
                    raise UsageError(f"ModelNew({', '.join(map(repr, init))}) failed ({exc}): ModelNew must take the "
                                     f"same constructor arguments as Model{inspect.signature(ref.Model.__init__)}") from None
        if model_new is not None:
            ref_state, new_state = model.state_dict(), model_new.state_dict()
            if ref_state and set(ref_state) == set(new_state) and all(
                    ref_state[k].shape == new_state[k].shape for k in ref_state):
                model_new.load_state_dict(ref_state)
        _INSTANCES[key] = (model, model_new)
    model, model_new = _INSTANCES[key]
    torch.manual_seed(seed)
    with torch.device(device):  # drawn on the device under the trial's seed: no host copy, no transfer
        args = [_move(a, device) for a in ref.get_inputs()]
    inputs = {f"arg{i}": a for i, a in enumerate(args)}
    _check_not_zero(inputs, set(), seed)
    names = list(inputs)

    def forward(**kw):
        with torch.no_grad():
            return model(*(kw[n] for n in names))

    def launch() -> dict:
        if model_new is None:
            _no_kernel()
        with torch.no_grad():
            return normalize_outputs(model_new(*args), [])

    return Case(inputs=inputs, outputs={}, launch=launch, ref_fn=forward, ref_kwargs=inputs,
                out_names=[], device=device, seed=seed, baseline_ok=False, kind="kernelbench")


def _flat_buffers(params: list[build.Param], size: int, device: str) -> dict:
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


def _lookup_int(name: str, dims: dict, inputs: dict) -> Any:
    if name in inputs and not is_tensor(inputs[name]):
        return inputs[name]
    if name in dims:
        return dims[name]
    folded = {k.lower(): v for k, v in dims.items()}
    if name.lower() in folded:
        return folded[name.lower()]
    return None


def _load_cu(cfg: RunConfig, ref, kernel_path: Path, dims: dict, seed: int, device: str,
             with_kernel: bool = True) -> Case:
    torch = _torch()
    if not device.startswith("cuda"):
        raise UsageError(f"{kernel_path.name} is CUDA C++: it needs a CUDA device, not '{device}'")
    if _has_kernelbench(ref) and not hasattr(ref, "reference"):
        raise UsageError("a .cu kernel needs ref.py with reference() (and setup()); KernelBench Model refs "
                         "work with .py kernels defining ModelNew")
    ref_fn = _reference_of(ref)
    params = build.parse_signature(kernel_path.read_text(encoding="utf-8"))
    lib, info = _load_library(cfg, kernel_path, device) if with_kernel else (None, None)
    setup = getattr(ref, "setup", None)
    if callable(setup):
        inputs, outs = _setup_inputs(setup, dims, seed, device)
    else:
        size = cfg.ptr_size
        if not size:
            raise UsageError("ref.py has no setup(): set --ptr-size at init so flat buffers can be sized")
        torch.manual_seed(seed)
        inputs, outs = _flat_buffers(params, int(size), device), [p.name for p in params if p.is_output]
        inputs.update({p.name: _lookup_int(p.name, dims, {}) for p in params if not p.pointer})
    # Output pointers the setup did not provide: shaped like the reference's returned outputs.
    missing_outs = [p for p in params if p.is_output and p.name not in inputs]
    if missing_outs:
        value = call_with(ref_fn, _ref_pool(ref_fn, {k: clone_value(v) for k, v in inputs.items()}, dims))
        got = normalize_outputs(value, [p.name for p in missing_outs]) if value is not None else {}
        for p in missing_outs:
            if p.name not in got or not is_tensor(got[p.name]):
                raise UsageError(f"solve() output '{p.name}' is neither a setup() input nor a named output "
                                 "returned by reference()")
            inputs[p.name] = torch.empty_like(got[p.name])
            outs.append(p.name)
    args, argtypes = [], []
    for p in params:
        if p.pointer:
            t = inputs.get(p.name)
            if not is_tensor(t):
                raise UsageError(f"solve() pointer '{p.name}' has no tensor: setup() inputs are "
                                 f"{', '.join(inputs) or 'none'}")
            if str(t.dtype).replace("torch.", "") != p.dtype:
                raise UsageError(f"solve() parameter '{p.name}' is {p.ctype}* but the tensor is {t.dtype}")
            if not t.is_contiguous():
                raise UsageError(f"tensor '{p.name}' is not contiguous; .cu kernels get raw pointers")
            args.append(ctypes.c_void_p(t.data_ptr()))
            argtypes.append(ctypes.c_void_p)
            if not p.const and p.name not in outs:
                outs.append(p.name)
        else:
            v = _lookup_int(p.name, dims, inputs) if p.ctype in build.INT_SCALARS else inputs.get(p.name)
            if v is None:
                raise UsageError(f"solve() scalar '{p.name}' ({p.ctype}) matches no dim (dims: "
                                 f"{', '.join(f'{k}={x}' for k, x in dims.items())}) and no setup() input")
            ct = getattr(ctypes, build.INT_SCALARS.get(p.ctype) or build.FLOAT_SCALARS[p.ctype])
            args.append(ct(v))
            argtypes.append(ct)
    _check_not_zero(inputs, set(outs), seed)
    if lib is not None:
        lib.solve.argtypes = argtypes
        lib.solve.restype = None
    outputs = {n: inputs[n] for n in outs}

    def launch() -> dict:
        if lib is None:
            _no_kernel()
        lib.solve(*args)
        err = lib.kl_last_error()
        if err:
            raise RuntimeError(f"CUDA launch error {err}: {lib.kl_error_string(err).decode()}")
        return dict(outputs)

    return Case(inputs=inputs, outputs=outputs, launch=launch, ref_fn=ref_fn,
                ref_kwargs=_ref_pool(ref_fn, inputs, dims), out_names=outs, device=device, seed=seed,
                baseline_ok=accepts_baseline(ref_fn), kind="cu", build_info=info)


def _load_library(cfg: RunConfig, kernel_path: Path, device: str):
    torch = _torch()
    cc = torch.cuda.get_device_capability(torch.device(device))
    built = build.build(kernel_path, cfg, tuple(cc))
    key = str(built.so)
    if key not in _LIBS:
        lib = ctypes.CDLL(key)
        lib.kl_last_error.restype = ctypes.c_int
        lib.kl_error_string.restype = ctypes.c_char_p
        lib.kl_error_string.argtypes = [ctypes.c_int]
        _LIBS[key] = lib
    info = built.info()
    if _LAST_BUILD.get("library") != info["library"]:  # keep the first (compiling) build of this library
        _LAST_BUILD.clear()
        _LAST_BUILD.update(info)
    return _LIBS[key], info
