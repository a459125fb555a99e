"""The GPU kernels a kernel file defines, by name, and whether a profile caught any of them.

A version whose measured call ran only kernels from PyTorch or its libraries (cuBLAS, cuDNN,
Inductor's own Triton code) is honest for a v0, but it is not a kernel of the run's own: the
profile, ``status`` and the report say so.  Names are read from the source text, never by
importing it:

- CUDA C++ (a ``.cu`` file, or CUDA source in a ``.py`` string for ``load_inline``): ``__global__``
  functions;
- Triton: functions decorated with ``@triton.jit`` (or ``@jit``), autotuned or not;
- CuTe DSL: functions decorated with ``@cute.kernel``.

A ``.cu`` file's kernels may also come from templates it instantiates (CUTLASS's
``cutlass::device_kernel<...>`` has no ``__global__`` in the file): those are read from the library
the run built from it, whose embedded device code names each kernel in a ``.text.<mangled name>``
section (``library_kernels``).
"""

from __future__ import annotations

import re

_GLOBAL = re.compile(r"__global__\s+[\w:<>,\s*&]*?\b(\w+)\s*\(")
_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_DECORATED = re.compile(r"((?:^[ \t]*@[^\n]*\n)+)[ \t]*def\s+(\w+)", re.MULTILINE)
_KERNEL_DECORATOR = re.compile(r"@\s*(?:triton\.)?jit\b|@\s*cute\.kernel\b")
_SECTION = re.compile(rb"\.text\.([A-Za-z_][A-Za-z0-9_$]*)")  # a function's code in embedded device code
_ATTRIBUTES = re.compile(rb"\.nv\.info\.([A-Za-z_][A-Za-z0-9_$]*)")  # a kernel's attributes (kernels only)
_LENGTH = re.compile(r"(\d+)")  # the length before each identifier of a mangled name


def defined_kernels(source: str) -> list[str]:
    """The kernel names ``source`` defines, in order of appearance, without repeats."""
    names = [m.group(1) for m in _GLOBAL.finditer(_BOUNDS.sub(" ", source))]
    names += [m.group(2) for m in _DECORATED.finditer(source) if _KERNEL_DECORATOR.search(m.group(1))]
    return list(dict.fromkeys(n for n in names if n not in ("void", "static", "inline")))


def _ident(rest: str) -> tuple[str, str] | None:
    """One ``<length><identifier>`` of a mangled name: (identifier, what follows), or None."""
    m = _LENGTH.match(rest)
    if not m or int(m.group(1)) > len(rest) - m.end():
        return None
    n = int(m.group(1))
    return rest[m.end():m.end() + n], rest[m.end() + n:]


def _qualified(mangled: str) -> str | None:
    """The qualified function name of an Itanium-mangled name, with the last identifier of its first
    template argument when it has one (``_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalI...`` ->
    ``cutlass::device_kernel<GemmUniversal``, ``_Z6my_addPfi`` -> ``my_add``); an unmangled name (``extern
    "C"``) is itself; None when the name cannot be read that way."""
    if not mangled.startswith("_Z"):
        return mangled
    nested = mangled.startswith("_ZN")
    rest = mangled[3:] if nested else mangled[2:]
    parts: list[str] = []
    while (got := _ident(rest)) is not None:
        parts.append(got[0])
        rest = got[1]
        if not nested:
            break
    if not parts:
        return None
    name = "::".join(parts)
    if not rest.startswith("I"):
        return name
    arg, last = rest[1:], None  # the first template argument: a (nested) class name, substitutions skipped
    nested_arg = arg.startswith("N")
    arg = arg[1:] if nested_arg else arg
    while arg:
        if arg.startswith("St"):
            arg = arg[2:]
        elif arg.startswith("S") and "_" in arg:
            arg = arg[arg.index("_") + 1:]
        elif (got := _ident(arg)) is not None:
            last, arg = got
            if not nested_arg:
                break
        else:
            break
    return f"{name}<{last}" if last else name


def library_kernels(library: bytes) -> list[str]:
    """The kernels whose device code a built library (``.so``) embeds: a ``.text.<mangled name>`` section
    with its ``.nv.info.<mangled name>`` (a kernel's attributes; device functions and host code have none),
    each as ``_qualified`` reads it; [] when it embeds none that can be read (compressed device code among
    them)."""
    info = set(_ATTRIBUTES.findall(library))
    names = (_qualified(m.group(1).decode("ascii")) for m in _SECTION.finditer(library) if m.group(1) in info)
    return list(dict.fromkeys(n for n in names if n))


def _pattern(d: str) -> re.Pattern:
    """A defined name as found in ncu's names.  A library kernel read as ``ns::fn<Arg`` matches ``fn<Arg`` or
    ``ns::fn<ns2::Arg`` (ncu drops the namespaces: ``void device_kernel<GemmUniversal<...>>(Params)`` on the
    H200), so a library kernel of another template (``device_kernel<cutlass3x_sm90_...>``) is not the
    version's own; any other name matches as a word, with Triton's signature suffix or CuTe DSL's prefix."""
    w, q = r"[A-Za-z0-9_]", r"(?:[A-Za-z0-9_]+::)*"
    if "<" in d:
        fn, arg = d.split("<", 1)
        return re.compile(rf"(?<!{w}){q}{re.escape(fn.rsplit('::', 1)[-1])}<\s*{q}{re.escape(arg)}(?!{w})")
    d = d.rsplit("::", 1)[-1]
    return re.compile(rf"(?<!{w}){re.escape(d)}(?:_[0-9][0-9a-z]*)*(?!{w})|(?<!{w})kernel_cutlass_{re.escape(d)}(?:_|(?!{w}))")


def own_kernels(profiled: list[str], defined: list[str]) -> list[str]:
    """The profiled kernel names that contain one of the defined names as a word.  Triton may append its
    signature suffix (``softmax_kernel_0d1d2d``); CuTe DSL names the compiled kernel
    ``kernel_cutlass_<name>_<its arguments' types>`` (``kernel_cutlass__add_kernel_tensorptrf32gmem...``
    for ``_add_kernel``)."""
    pats = [_pattern(d) for d in defined]
    return [p for p in profiled if any(rx.search(p) for rx in pats)]


def library_note(profiled: list[str], defined: list[str], kernel_file: str) -> str | None:
    """The note when no profiled kernel comes from the kernel file (None when one does)."""
    if not profiled or own_kernels(profiled, defined):
        return None
    shown = ", ".join(f"`{n[:80]}`" for n in profiled[:4]) + (" ..." if len(profiled) > 4 else "")
    if defined:
        return (f"library fallback: the profile caught none of the kernels {kernel_file} defines "
                f"({', '.join(defined[:6])}) in the measured call, only kernels of PyTorch or its libraries: {shown}")
    return (f"library fallback: {kernel_file} defines no kernel of its own (no __global__, @triton.jit or "
            f"@cute.kernel), so every kernel the profile caught in the measured call comes from PyTorch or its "
            f"libraries: {shown}")


# Matrix products in a kernel's own source: tl.dot, mma/wmma/wgmma, gemm or matmul calls, the @ operator,
# or a product of two different arrays accumulated (acc += A[..] * B[..], a dot product written out).
_MATRIX_SRC = re.compile(r"\btl\.dot\b|\b(?:w|wg)?mma\w*|\w*gemm\w*|\bmatmul\b|\bbmm\b|\beinsum\b|\bcublas\w*"
                         r"|[\w\])]\s*@\s*[\w(]", re.IGNORECASE)
_ACCUMULATED_PRODUCT = re.compile(r"\+=\s*(\w+)\s*\[[^\]]*\]\s*\*\s*(\w+)\s*\[")
# Matrix products in a library kernel's name (cuBLAS, CUTLASS, cuDNN): no source to read.
_MATRIX_NAME = re.compile(r"gemm|gemv|mma|matmul|cublas|conv(?!ert)|bmm", re.IGNORECASE)


def _body(source: str, name: str) -> str | None:
    """The text of kernel ``name``'s definition in ``source``: a Python function's indented block, or a CUDA
    function's braces; None when the source does not define it."""
    m = re.search(rf"^([ \t]*)def\s+{re.escape(name)}\s*\(", source, re.MULTILINE)
    if m:
        indent, lines = len(m.group(1).expandtabs()), source[m.end():].splitlines()
        body = [lines[0]]
        for ln in lines[1:]:
            if ln.strip() and len(ln) - len(ln.lstrip()) <= indent:
                break
            body.append(ln)
        return "\n".join(body)
    m = re.search(rf"__global__[^;{{]*?\b{re.escape(name)}\s*\(", source)
    start = source.find("{", m.end()) if m else -1
    if start < 0:
        return None
    depth = 0
    for i in range(start, len(source)):
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        if depth == 0:
            return source[start:i + 1]
    return source[start:]


def matrix_work(profiled: str, source: str | None) -> bool | None:
    """Whether the profiled kernel ``profiled`` does matrix products: read from its own definition in
    ``source`` (a GEMM and a GroupNorm in one file are told apart), else from its name (a library kernel);
    None without a source."""
    if source is None:
        return None
    for d in defined_kernels(source):
        if _pattern(d).search(profiled):
            body = _body(source, d.rsplit("::", 1)[-1])
            if body is not None:
                return bool(_MATRIX_SRC.search(body)) or any(
                    a != b for a, b in _ACCUMULATED_PRODUCT.findall(body))
    return bool(_MATRIX_NAME.search(profiled))  # template arguments included: device_kernel<GemmUniversal<...>>


def short_name(name: str, width: int = 48) -> str:
    """A profiled kernel's name cut to what tells kernels apart in a line of text: no return type, no
    template arguments or parameter list (``void at::elementwise_kernel<128, 2, ...>(int, T3)`` ->
    ``at::elementwise_kernel``), at most ``width`` characters."""
    n = re.split(r"[<(]", name.strip().removeprefix("void ").strip(), maxsplit=1)[0].strip() or name.strip()
    return n if len(n) <= width else n[: width - 3] + "..."


def builds_cpp_extension(source: str) -> bool:
    """Whether a .py kernel builds CUDA C++ through ``torch.utils.cpp_extension`` (``load_inline``, as a
    KernelBench ModelNew does, or ``load``): read from its text, never by importing it."""
    return "cpp_extension" in source
