"""The bytes a ref.py's inputs take at a shape, read from its source without running it: the torch factory calls of
a KernelBench ``get_inputs()`` or of a ``setup(**dims)`` whose sizes are pure expressions of the file's constants
(init refuses dims whose inputs clearly exceed the GPU's memory)."""

from __future__ import annotations

import ast
from typing import Any

from .kb_dims import _local_names, _module_function, size_constants
from .kb_eval import evaluate, is_int, value_of

# torch factories get_inputs() may call, and the bytes of an element of each dtype (float32 by default)
_FACTORIES = ("rand", "randn", "zeros", "ones", "empty", "full", "randint")
_DTYPE_BYTES = {"float64": 8, "double": 8, "int64": 8, "long": 8, "complex64": 8, "float32": 4, "float": 4,
                "int32": 4, "int": 4, "float16": 2, "half": 2, "bfloat16": 2, "int16": 2, "short": 2,
                "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def input_bytes(tree: ast.Module, dims: dict[str, int]) -> int:
    """A lower bound of the bytes of the inputs a KernelBench ``get_inputs()`` makes at ``dims``: the torch
    factory calls (torch.rand(batch_size, dim), torch.randn(*input_shape), ...) whose sizes are pure
    expressions of the file's constants, each counted once; any other call counts nothing."""
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if fn is None:
        return 0
    consts = evaluate(tree, dims, set(size_constants(tree)))
    return _factory_bytes(fn, {k: b.value for k, b in consts.items()})


def setup_bytes(tree: ast.Module, dims: dict[str, int]) -> int:
    """A lower bound of the bytes of the tensors a ref.py ``setup(**dims)`` makes at ``dims`` (its inputs and
    the outputs it allocates): the torch factory calls (torch.randn(N), torch.empty(M, N, dtype=...), ...)
    whose sizes are pure expressions of setup's parameters (the dims, else their defaults) and the file's
    constants, each counted once; a name assigned inside setup() and any other call count nothing."""
    fn = _module_function(tree, "setup")
    if fn is None:
        return 0
    env = {k: b.value for k, b in evaluate(tree).items() if k not in _local_names(fn)}
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [*([None] * (len(positional) - len(a.defaults))), *a.defaults, *a.kw_defaults]
    for arg, default in zip(positional + a.kwonlyargs, defaults, strict=True):
        if arg.arg in dims:
            env[arg.arg] = dims[arg.arg]
        elif default is not None:
            try:
                env[arg.arg] = value_of(default, env)
            except Exception:  # a default that is not a pure expression: the name stays unknown
                pass
    return _factory_bytes(fn, env)


def _factory_bytes(fn: ast.FunctionDef | ast.AsyncFunctionDef, env: dict[str, Any]) -> int:
    """The bytes of the torch factory calls in ``fn`` whose sizes are pure expressions of ``env``."""
    total = 0
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        f = call.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch"
                and f.attr in _FACTORIES):
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        args = list(call.args)
        if f.attr == "randint":
            args = [kw["size"]] if "size" in kw else args[-1:]
        elif f.attr == "full":
            args = [kw["size"]] if "size" in kw else args[:1]
        elif "size" in kw:
            args = [kw["size"]]
        sizes: list[Any] = []
        try:
            for a in args:
                v = value_of(a.value if isinstance(a, ast.Starred) else a, env)
                sizes.extend(v if isinstance(v, (tuple, list)) else [v])
        except Exception:  # a size that is not a pure expression of the constants: not counted
            continue
        if not sizes or not all(is_int(v) and v >= 0 for v in sizes):
            continue
        dtype = kw.get("dtype")
        name = dtype.attr if isinstance(dtype, ast.Attribute) else "int64" if f.attr == "randint" else "float32"
        numel = 1
        for v in sizes:
            numel *= v
        total += numel * _DTYPE_BYTES.get(name, 1)
    return total
