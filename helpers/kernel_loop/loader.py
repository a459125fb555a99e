"""Importing user files (ref.py in the judge, the kernel in a worker) and calling them with what they take.

``import_file`` imports a ``.py`` file once per process from the bytes it hashed (never from a
``__pycache__`` file, never with its folder on ``sys.path``); ``call_with`` calls a function with the
entries of a pool its signature accepts.  ``device_for`` is the device a run measures on: ``"cuda:N"``,
or ``"cpu"``, the test/dev mode (run.json ``"device": "cpu"`` or ``KERNEL_LOOP_DEVICE=cpu``) in which
Triton kernels run under ``TRITON_INTERPRET=1``.  The data and the calls themselves live in
``measure/`` (``problem`` for the judge, ``worker`` for the kernel's side).
"""

from __future__ import annotations

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

from .common import UsageError
from .config import RunConfig

_MODULES: dict[str, Any] = {}


def device_for(cfg: RunConfig) -> str:
    """The torch device a run measures on; cpu only in the test/dev mode: a run initialised with --device cpu,
    or ``KERNEL_LOOP_DEVICE=cpu``, the harness tests' switch, whose results never count for a GPU run (no
    message may offer it as a way to check a GPU run on a machine without one)."""
    if os.environ.get("KERNEL_LOOP_DEVICE", "").lower() == "cpu" or cfg.device == "cpu":
        return "cpu"
    return f"cuda:{cfg.gpu}"


def check_runs_on(path: Path, device: str) -> None:
    """Refuse a kernel the device cannot run: a .cu file in the cpu test mode (the CLI says it before a judge
    starts, and the judge says the same)."""
    if device == "cpu" and Path(path).suffix == ".cu":
        raise UsageError(f"{Path(path).name} is CUDA C++: the cpu test mode (KERNEL_LOOP_DEVICE=cpu) runs .py "
                         "kernels only")


def import_file(path: Path, prefix: str) -> Any:
    """Import a .py file once per process (by path and content) under a private module name."""
    path = Path(path).resolve()
    data = path.read_bytes()
    key = f"{path}:{hashlib.sha256(data).hexdigest()}"
    if key in _MODULES:
        return _MODULES[key]
    # the name a user's `import kernel` gives it (a red team's kernel was right only under a name with a hash in it);
    # one with a hash where that name is taken (a benchmark's later versions; an installed module) or no identifier
    name = path.stem
    if not name.isidentifier() or name in sys.modules or importlib.util.find_spec(name) is not None:
        name = f"{path.stem}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    # the module runs from the bytes hashed above, compiled here: never from a __pycache__ file (one planted
    # beside the kernel would run other code than the file the records name), and the version folder is not
    # put on sys.path (code the kernel imports from beside it would not be measured; the gate refuses it)
    code = compile(data, str(path), "exec", dont_inherit=True)
    with _heartbeat(f"importing {path.parent.name}/{path.name}" + (" (a load_inline / JIT build runs here; its cache is "
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


_MISSING = object()


def set_constants(module: Any, first: dict[str, Any], dims: dict[str, list]) -> None:
    """One shape's sizes on a kernel file's ``module`` where it binds a constant of ref.py's file to the file's
    value (a KernelBench file's Model reads them in __init__, batch_size say): ``dims`` {name: [the file's value,
    this shape's]}.  ``first`` keeps each name's value at the first call (the module's own); a name an earlier shape
    set and this one does not goes back to it."""
    for name in dims:
        first.setdefault(name, getattr(module, name, _MISSING))
    for name, was in first.items():
        if name in dims:
            file_value, value = dims[name]
            if type(was) is type(file_value) and was == file_value:
                setattr(module, name, value)
        elif was is not _MISSING:
            setattr(module, name, was)
