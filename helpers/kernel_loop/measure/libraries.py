"""A version's load_inline libraries, kept in its folder so that later steps (profile, benchmark), on this machine
or a fresh one, load what correctness built instead of building it again (five builds of a KernelBench solution take
a minute or more on an empty cache, as every step has on a GPU machine started for it).

- Worker (``hook``): ``torch.utils.cpp_extension.load_inline`` is wrapped before a kernel's import.  A call's key is
  its arguments with what else decides the binary (torch, CUDA, the GPU's capability, Python, the compiler
  variables).  A key the judge handed a library for loads that file, as torch loads its own builds; any other call
  builds as torch does, and the library it made is reported in the worker's next reply (``drain``).
- Judge (``keep``): after correctness, the libraries its one worker reported are copied, gzipped, into
  ``<version>/lib/``, only from load_inline's cache and only a plain file with one link there (never a file the
  kernel names elsewhere: the record key, say).  ``correctness.json`` lists them with their sha256, so the signed
  correctness record binds them.  ``hand`` writes one of them into a worker's own folder, checked against that hash.
- Step (``stored``): the libraries of a version whose signed correctness record still holds (kernel and
  correctness.json unchanged); none where it does not, and the version builds as before.

A library changed or gone is built again, never an error.  The judge hands a version its own libraries only, each
written just before that version's import.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import re
import secrets
import stat
import sys
import threading
from pathlib import Path
from typing import Any

LIB_DIR = "lib"
MAX_LIBRARIES = 8  # a version's kept libraries (a kernel's further reports are ignored)
MAX_BYTES = 512 << 20
# compiler and build settings torch's JIT reads from the environment: each decides the binary
BUILD_VARS = ("TORCH_CUDA_ARCH_LIST", "CC", "CXX", "CUDA_HOME", "CUDA_PATH", "CFLAGS", "CXXFLAGS", "LDFLAGS",
              "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES")
_IGNORED_ARGS = ("verbose", "build_directory", "keep_intermediates")  # where and how loudly, not what is built
_NAME = re.compile(r"[A-Za-z_]\w{0,127}")
_KEY = re.compile(r"[0-9a-f]{64}")

# --- the worker's side ------------------------------------------------------------------------
_STORED: dict[str, dict[str, Any]] = {}  # key -> {"name", "module", "path"} handed by the judge
_BUILT: list[dict[str, Any]] = []        # what this process's load_inline built, until the next reply
_WRAP = threading.Lock()


def key_of(torch: Any, args: dict[str, Any]) -> str:
    """The key of one load_inline call: its arguments and what else decides the library it builds."""
    cuda = bool(torch.cuda.is_available())
    facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "git": getattr(torch.version, "git_version", ""),
             "python": sys.version, "machine": platform.machine(),
             "capability": list(torch.cuda.get_device_capability()) if cuda else None,
             "env": {v: os.environ.get(v) for v in BUILD_VARS}}
    kept = {k: v for k, v in args.items() if k not in _IGNORED_ARGS}
    return hashlib.sha256(json.dumps([kept, facts], sort_keys=True, default=repr).encode()).hexdigest()


def _load(torch: Any, lib: dict[str, Any]) -> Any:
    """A kept library loaded as torch loads the one it built: a Python module, or torch.ops' library."""
    if not lib["module"]:
        torch.ops.load_library(lib["path"])
        return lib["path"]
    spec = importlib.util.spec_from_file_location(lib["name"], lib["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hook(torch: Any, libs: list[dict[str, Any]] | None) -> None:
    """Wrap load_inline (once per process) and add the libraries the judge handed for the next import."""
    for lib in libs or []:
        _STORED[str(lib["key"])] = lib
    ext = importlib.import_module("torch.utils.cpp_extension")  # waits on an import another thread has begun
    with _WRAP:
        if getattr(ext.load_inline, "_kl_orig", None) is None:
            ext.load_inline = _wrapped(torch, ext.load_inline)


def _wrapped(torch: Any, orig: Any) -> Any:
    """load_inline that loads the kept library of its call's key, else builds as torch does and reports it."""
    sig = inspect.signature(orig)

    def load_inline(*a: Any, **kw: Any) -> Any:
        try:
            bound = sig.bind(*a, **kw)
        except TypeError:
            return orig(*a, **kw)  # torch says what is wrong with the call
        bound.apply_defaults()
        key = key_of(torch, dict(bound.arguments))
        if key in _STORED:
            return _load(torch, _STORED[key])
        out = orig(*a, **kw)
        module = bool(bound.arguments.get("is_python_module", True))
        path = getattr(out, "__file__", None) if module else out
        if isinstance(path, str) and len(_BUILT) < MAX_LIBRARIES:
            _BUILT.append({"key": key, "module": module, "path": path,
                           "name": getattr(out, "__name__", None) if module else Path(path).stem})
        return out

    load_inline.__doc__, load_inline._kl_orig = orig.__doc__, orig  # type: ignore[attr-defined]
    return load_inline


def drain() -> list[dict[str, Any]]:
    """What load_inline built since the last reply (said once)."""
    out = list(_BUILT)
    _BUILT.clear()
    return out


# --- the judge's side -------------------------------------------------------------------------
def keep(reported: list[Any], dest: str | None, hidden: list[Path] = ()) -> list[dict[str, Any]]:
    """The libraries a correctness worker reported, copied gzipped into ``dest`` (``<version>/lib``) from
    load_inline's cache ($TORCH_EXTENSIONS_DIR) only: a plain ``.so`` file with one link under that folder, and none
    in ``hidden`` (the record key and the run directory, which a cache named around them holds too).  Anything else
    a kernel names is ignored.  Returns correctness.json's list."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not dest or not root:
        return []
    root_real, out = Path(root).resolve(), []
    hide = [Path(h).resolve() for h in hidden]
    for item in reported[:MAX_LIBRARIES]:
        if not isinstance(item, dict) or not _KEY.fullmatch(str(item.get("key"))):
            continue
        if not _NAME.fullmatch(str(item.get("name"))) or not str(item.get("path")).endswith(".so"):
            continue
        data = _plain_file_under(Path(str(item.get("path"))), root_real, hide)
        if data is None:
            continue
        sha = hashlib.sha256(data).hexdigest()
        Path(dest).mkdir(parents=True, exist_ok=True)
        name = f"{sha[:20]}.so.gz"
        tmp = Path(dest) / f".{name}.{secrets.token_hex(4)}"
        with gzip.GzipFile(tmp, "wb", compresslevel=6, mtime=0) as gz:
            gz.write(data)
        os.replace(tmp, Path(dest) / name)
        out.append({"key": item["key"], "name": item["name"], "module": bool(item.get("module")),
                    "file": f"{LIB_DIR}/{name}", "sha256": sha, "bytes": len(data)})
    return out


def _plain_file_under(path: Path, root: Path, hidden: list[Path]) -> bytes | None:
    """The bytes of ``path`` if it is a regular file with one link, under ``root`` and in none of ``hidden`` once
    links are resolved."""
    try:
        real = path.resolve(strict=True)
        if not real.is_relative_to(root) or any(real == h or real.is_relative_to(h) for h in hidden):
            return None
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
    except (OSError, RuntimeError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def hand(libs: list[dict[str, Any]] | None, folder: str | None) -> list[dict[str, Any]]:
    """A version's kept libraries written into a worker's own ``folder``, each whose bytes still have the hash its
    correctness record binds (the others are left out: that version builds them again)."""
    out = []
    for lib in (libs or []) if folder else []:
        try:
            with gzip.open(lib["path"], "rb") as gz:
                data = gz.read(MAX_BYTES + 1)
        except (OSError, EOFError, KeyError, gzip.BadGzipFile):
            continue
        if hashlib.sha256(data).hexdigest() != lib.get("sha256"):
            continue
        path = Path(folder) / f"{secrets.token_hex(8)}.so"
        path.write_bytes(data)
        out.append({"key": lib["key"], "name": lib["name"], "module": bool(lib["module"]), "path": str(path)})
    return out


# --- the step's side --------------------------------------------------------------------------
def stored(root: Path, version: str, kernel: Path) -> list[dict[str, Any]]:
    """The kept libraries of ``version`` with their files' paths, where its signed correctness record still
    holds for ``kernel`` and correctness.json; [] otherwise (nothing kept, or changed: the version builds)."""
    from .. import records
    from ..common import UsageError, sha256_file

    vdir = Path(root) / version
    try:
        rec = records.latest(records.read(root), "correctness", version)
        files = rec.files() if rec else {}
        if (rec is None or rec.get("kernel") != sha256_file(kernel)
                or files.get("correctness.json") != sha256_file(vdir / "correctness.json")):
            return []
        libs = json.loads((vdir / "correctness.json").read_text(encoding="utf-8")).get("libraries") or []
    except (OSError, ValueError, AttributeError, UsageError):
        return []
    return [dict(lib, path=str(vdir / lib["file"])) for lib in libs
            if isinstance(lib, dict) and str(lib.get("file", "")).startswith(f"{LIB_DIR}/")
            and "/" not in str(lib["file"])[len(LIB_DIR) + 1:]]
