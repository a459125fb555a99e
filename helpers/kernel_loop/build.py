"""Building `.cu` kernels: parse the ``extern "C" void solve(...)`` ABI and compile it with nvcc.

The shared library is cached under ``cache_dir("build")`` by a key made of the source, the
nvcc command (flags, include folders, arch) and the nvcc path, so unchanged kernels are not
rebuilt.  A small shim compiled into the same library exposes ``kl_last_error()`` so the
harness can read launch errors from the CUDA runtime the kernel itself links against.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import UsageError, atomic_write_text, cache_dir, progress, sha256_text
from .config import BuildConfig, RunConfig

# C type name (after dropping const/restrict/pointer marks) -> torch dtype name.
POINTER_TYPES = {
    "float": "float32", "double": "float64",
    "half": "float16", "__half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16", "bf16": "bfloat16", "bfloat16": "bfloat16",
    "int": "int32", "int32_t": "int32", "unsigned": "int32", "unsigned int": "int32", "uint32_t": "int32",
    "long": "int64", "long long": "int64", "int64_t": "int64", "uint64_t": "int64", "size_t": "int64",
    "short": "int16", "int16_t": "int16",
    "char": "int8", "signed char": "int8", "int8_t": "int8",
    "unsigned char": "uint8", "uint8_t": "uint8",
    "bool": "bool",
}
# Scalar C type -> ctypes constructor name.
INT_SCALARS = {
    "int": "c_int", "int32_t": "c_int32", "unsigned": "c_uint", "unsigned int": "c_uint",
    "uint32_t": "c_uint32", "long": "c_long", "long long": "c_longlong", "int64_t": "c_int64",
    "uint64_t": "c_uint64", "size_t": "c_size_t",
}
FLOAT_SCALARS = {"float": "c_float", "double": "c_double"}

SHIM = """#include <cuda_runtime.h>
extern "C" int kl_last_error(void) { return (int)cudaGetLastError(); }
extern "C" const char* kl_error_string(int e) { return cudaGetErrorString((cudaError_t)e); }
"""

_SOLVE_RE = re.compile(r'extern\s+"C"\s*(?:\{\s*)?(?:__host__\s+)?void\s+solve\s*\(([^)]*)\)')
_QUALIFIERS = {"const", "__restrict__", "__restrict", "restrict", "volatile", "struct"}


class BuildError(Exception):
    """nvcc failed; the message holds the command and the compiler output."""


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str          # base C type, e.g. "float", "__nv_bfloat16", "int64_t"
    pointer: bool
    const: bool         # pointee is const: an input

    @property
    def is_output(self) -> bool:
        return self.pointer and not self.const

    @property
    def dtype(self) -> str | None:
        return POINTER_TYPES.get(self.ctype) if self.pointer else None


def strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def _parse_param(text: str) -> Param:
    spaced = re.sub(r"\*", " * ", " ".join(text.split()))
    tokens = spaced.split()
    if not tokens:
        raise UsageError("solve() has an empty parameter")
    if "&" in text or "[" in text:
        raise UsageError(f"solve() parameter '{text.strip()}': references and arrays are not supported")
    name = tokens[-1]
    if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in _QUALIFIERS or name == "*":
        raise UsageError(f"solve() parameter '{text.strip()}' has no name; name every parameter")
    body = tokens[:-1]
    stars = [i for i, t in enumerate(body) if t == "*"]
    if len(stars) > 1:
        raise UsageError(f"solve() parameter '{name}': pointers to pointers are not supported")
    pointer = bool(stars)
    before = body[: stars[0]] if pointer else body
    const = "const" in before
    base = " ".join(t for t in body if t not in _QUALIFIERS and t != "*")
    base = re.sub(r"^(signed )(?=int|long|short)", "", base)
    if pointer:
        if base not in POINTER_TYPES:
            raise UsageError(
                f"solve() parameter '{name}' has unsupported pointer type '{base} *'; supported: "
                + ", ".join(sorted(set(POINTER_TYPES)))
            )
    elif base not in INT_SCALARS and base not in FLOAT_SCALARS:
        raise UsageError(
            f"solve() parameter '{name}' has unsupported scalar type '{base}'; integer scalars "
            "(int, int64_t, size_t, long) come from --dims, float/double scalars from ref.py setup()"
        )
    return Param(name=name, ctype=base, pointer=pointer, const=const)


def parse_signature(source: str) -> list[Param]:
    """The parameters of ``extern "C" void solve(...)`` in a .cu source."""
    m = _SOLVE_RE.search(strip_comments(source))
    if not m:
        raise UsageError('the kernel must define extern "C" void solve(...) (see references/kernel_abi.md)')
    inner = m.group(1).strip()
    if inner in ("", "void"):
        raise UsageError("solve() takes no parameters; it needs at least one output pointer")
    params = [_parse_param(p) for p in inner.split(",")]
    names = [p.name for p in params]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UsageError(f"solve() repeats parameter names: {', '.join(sorted(dup))}")
    if not any(p.is_output for p in params):
        raise UsageError("solve() has no non-const pointer: const pointers are inputs, so nothing is an output")
    return params


def arch_flag(cc: tuple[int, int]) -> str:
    """-gencode for a compute capability; the arch-specific 'a' target from sm_90 on (wgmma, tcgen05)."""
    major, minor = cc
    tag = f"{major}{minor}" + ("a" if major >= 9 else "")
    return f"-gencode=arch=compute_{tag},code=sm_{tag}"


def cutlass_package_source() -> str | None:
    """The CUTLASS tree inside the ``nvidia-cutlass`` pip package (``<site>/cutlass_library/source``, holding
    ``include/{cutlass,cute}`` and ``tools/util/include``) when that package is on the path; it is not imported."""
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        src = Path(loc) / "source"
        if (src / "include" / "cutlass" / "cutlass.h").is_file():
            return str(src)
    return None


def include_dir_sources(cfg_dirs: list[str] | None, environ: dict | None = None,
                        package_source: str | None = None) -> list[tuple[str, str]]:
    """(folder, where it came from) for each nvcc include folder, in order: run.json build.include_dirs,
    $CUTLASS_PATH/{include,tools/util/include}, $CUTLASS_INCLUDE_DIR; when neither variable is set, the
    nvidia-cutlass pip package's include and tools/util/include (``package_source``: its
    cutlass_library/source folder; None looks it up, "" leaves it out)."""
    environ = os.environ if environ is None else environ
    out = [(str(Path(d).expanduser()), "run.json build.include_dirs") for d in (cfg_dirs or [])]
    cp = environ.get("CUTLASS_PATH")
    if cp:
        out += [(str(Path(cp) / "include"), "$CUTLASS_PATH"),
                (str(Path(cp) / "tools" / "util" / "include"), "$CUTLASS_PATH")]
    if environ.get("CUTLASS_INCLUDE_DIR"):
        out.append((environ["CUTLASS_INCLUDE_DIR"], "$CUTLASS_INCLUDE_DIR"))
    if not cp and not environ.get("CUTLASS_INCLUDE_DIR"):
        src = cutlass_package_source() if package_source is None else package_source
        if src:
            out += [(str(Path(src) / sub), "nvidia-cutlass package") for sub in ("include", "tools/util/include")
                    if (Path(src) / sub).is_dir()]
    first: dict[str, str] = {}
    for d, why in out:
        first.setdefault(d, why)
    return list(first.items())


def include_dirs(cfg_dirs: list[str] | None, environ: dict | None = None,
                 package_source: str | None = None) -> list[str]:
    """The nvcc include folders (``include_dir_sources`` without the origins)."""
    return [d for d, _ in include_dir_sources(cfg_dirs, environ, package_source)]


def find_cuda_tool(name: str) -> str | None:
    """nvcc, ncu, compute-sanitizer: PATH, then $CUDA_HOME/bin, /usr/local/cuda*/bin, Nsight Compute folders."""
    found = shutil.which(name)
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    roots += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    cands = [Path(r) / "bin" / name for r in roots if r]
    cands += [Path(p) for p in sorted(glob.glob(f"/opt/nvidia/nsight-compute/*/{name}"), reverse=True)]
    return next((str(c) for c in cands if c.is_file()), None)


def find_nvcc() -> str | None:
    return find_cuda_tool("nvcc")


def build_command(nvcc: str, sources: list[Path], out: Path, cc: tuple[int, int], impl: str,
                  incs: list[str], extra_flags: list[str]) -> list[str]:
    cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-lineinfo", arch_flag(cc)]
    if impl == "cutlass":
        cmd.append("--expt-relaxed-constexpr")
    cmd += [f"-I{d}" for d in incs]
    cmd += list(extra_flags)
    return cmd + ["-o", str(out)] + [str(s) for s in sources]


def cache_key(source: str, cc: tuple[int, int], impl: str, incs: list[str], flags: list[str], nvcc: str) -> str:
    blob = json.dumps({"src": source, "shim": SHIM, "cmd": build_command(nvcc, [], Path("x"), cc, impl, incs, flags)})
    return sha256_text(blob)[:32]


@dataclass
class Built:
    so: Path
    command: list[str]
    cached: bool
    seconds: float
    arch: str

    def info(self) -> dict:
        return {"command": self.command, "cached": self.cached, "seconds": round(self.seconds, 3),
                "arch": self.arch, "library": str(self.so)}


def build(kernel: Path, cfg: RunConfig, cc: tuple[int, int]) -> Built:
    """Compile ``kernel`` (cached); raise BuildError with nvcc's output on failure."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise UsageError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): install the CUDA toolkit")
    source = Path(kernel).read_text(encoding="utf-8")
    incs = include_dirs(cfg.build.include_dirs)
    flags = list(cfg.build.nvcc_flags)
    impl = cfg.impl
    key = cache_key(source, cc, impl, incs, flags, nvcc)
    folder = cache_dir("build", key)
    so = folder / "kernel.so"
    shim = folder / "kl_shim.cu"
    cmd = build_command(nvcc, [Path(kernel).resolve(), shim], so, cc, impl, incs, flags)
    arch = arch_flag(cc).rsplit("=", 1)[-1]
    if so.is_file():
        return Built(so, cmd, True, 0.0, arch)
    atomic_write_text(shim, SHIM)
    progress(f"compiling {Path(kernel).name} for {arch} with nvcc ...")
    t0 = time.monotonic()
    fd, tmp = tempfile.mkstemp(prefix=".kernel.", suffix=".so", dir=folder)
    os.close(fd)
    run_cmd = cmd[:-3] + [tmp] + cmd[-2:]
    proc = subprocess.run(run_cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise BuildError(f"nvcc failed (exit {proc.returncode}):\n$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}".rstrip())
    os.replace(tmp, so)
    progress(f"compiled in {seconds:.1f} s")
    return Built(so, cmd, False, seconds, arch)


def load_built(kernel: Path, impl: str, build_json: dict | None, cc: tuple[int, int]) -> tuple[Any, dict]:
    """A .cu kernel built (or found in the cache) and loaded, as the worker imports one: the ctypes library with its
    error functions typed, and the build's record."""
    import ctypes

    cfg = RunConfig(kernel=kernel.name, impl=impl or "cuda-cpp", dims={}, build=BuildConfig.from_json(build_json))
    built = build(kernel, cfg, tuple(cc))
    lib = ctypes.CDLL(str(built.so))
    lib.kl_last_error.restype = ctypes.c_int
    lib.kl_error_string.restype = ctypes.c_char_p
    lib.kl_error_string.argtypes = [ctypes.c_int]
    return lib, built.info()
