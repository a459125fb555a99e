"""A version's load_inline libraries, kept in its folder so that later steps (profile, benchmark), on this machine
or a fresh one, load what correctness built instead of building it again (five builds of a KernelBench solution take
a minute or more on an empty cache, as every step has on a GPU machine started for it).

- Worker (``hook``): ``torch.utils.cpp_extension.load_inline`` is wrapped before a kernel's import.  A call's key is
  a digest of its arguments and of what else decides the binary (torch's and CUDA's versions, Python's, the
  machine's architecture, the GPU's capability, the compiler variables).  A key that the judge handed a library for
  at this import loads that file, as torch loads its own builds (and builds if it does not load); any other call
  builds as torch does, and the library it made is reported in the worker's next reply (``drain``).
- Judge (``keep``): once correctness's one worker has ended, what it reported is copied, gzipped, into
  ``<version>/lib/``: only a plain ``.so`` file with one link, named under load_inline's cache and read without
  following a link, never the record key nor a file of the run.  ``correctness.json`` lists them with their
  sha256, so the signed correctness record binds them.  ``hand`` writes one into a worker's own folder, checked
  against that hash, just before that version's import.
- Step (``stored``): the libraries of a version whose signed correctness record still holds (kernel and
  correctness.json unchanged); none where it does not, and the version builds as before.

The keys are the kernel's own claim: they choose among its own version's libraries only (a version's import replaces
the table; a library another version kept is never handed to it).  A library changed, gone or that does not load is
built again, never an error.
"""

from __future__ import annotations

import contextlib
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
import zlib
from pathlib import Path
from typing import Any

from ..common import progress

LIB_DIR = "lib"
MAX_LIBRARIES = 8  # a version's kept libraries (a kernel's further reports are ignored)
MAX_BYTES = MAX_TOTAL = 256 << 20  # one library, and a version's together
# compiler and build settings torch's JIT reads from the environment: each decides the binary
BUILD_VARS = ("TORCH_CUDA_ARCH_LIST", "CC", "CXX", "CUDA_HOME", "CUDA_PATH", "CFLAGS", "CXXFLAGS", "LDFLAGS",
              "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES")
_IGNORED_ARGS = ("verbose", "build_directory", "keep_intermediates")  # where and how loudly, not what is built
_NAME = re.compile(r"[A-Za-z_]\w{0,127}")
_KEY = re.compile(r"[0-9a-f]{64}")

# --- the worker's side ------------------------------------------------------------------------
_STORED: dict[str, dict[str, Any]] = {}  # key -> {"name", "module", "path"} handed by the judge
_BUILT: list[dict[str, Any]] = []        # what this process's load_inline built, until the next reply
_SAID: set[str] = set()                  # the keys reported (each once)
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
    """Wrap load_inline (once per process); the libraries the judge handed for this import replace the last
    import's (a version's call never loads what another version's correctness kept, whatever key that one named;
    a call made after another version's import builds)."""
    _STORED.clear()
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
            try:
                return _load(torch, _STORED[key])
            except Exception as exc:  # a folder mounted noexec, another libstdc++: built as torch would
                print(f"[kernel-loop] the kept library of {_STORED.pop(key)['name']} did not load ({exc}); "
                      "building it", file=sys.stderr, flush=True)
        out = orig(*a, **kw)
        module = bool(bound.arguments.get("is_python_module", True))
        path = getattr(out, "__file__", None) if module else out
        if isinstance(path, str) and key not in _SAID and len(_SAID) < MAX_LIBRARIES:
            _SAID.add(key)
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
    load_inline's cache ($TORCH_EXTENSIONS_DIR) only: a plain ``.so`` file with one link, named under that folder and
    read without following a link (``_plain_file_under``), none in ``hidden`` (the record key and the run directory,
    which a cache named around them holds too).  Called once the worker has ended; anything else a kernel names is
    ignored, and a copy that cannot be written (a full disk) is said and skipped: later steps build it.  Returns
    correctness.json's list."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not dest or not root:
        return []
    hide, out, total = [Path(h).resolve() for h in hidden], [], 0
    for item in reported[:MAX_LIBRARIES]:
        if not (isinstance(item, dict) and _KEY.fullmatch(str(item.get("key"))) and _NAME.fullmatch(str(item.get(
                "name")))) or any(o["key"] == item["key"] for o in out):
            continue
        data = _plain_file_under(str(item.get("path")), root, hide)
        if data is None or total + len(data) > MAX_TOTAL:
            continue
        sha = hashlib.sha256(data).hexdigest()
        name = f"{sha[:20]}.so.gz"
        tmp = Path(dest) / f".{name}.{secrets.token_hex(4)}"
        try:
            Path(dest).mkdir(parents=True, exist_ok=True)
            with gzip.GzipFile(tmp, "wb", compresslevel=6, mtime=0) as gz:
                gz.write(data)
            os.replace(tmp, Path(dest) / name)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            progress(f"warning: {item['name']}'s library was not kept in {dest} ({exc.strerror or exc}): the steps "
                     "after correctness build it again")
            break
        total += len(data)
        out.append({"key": item["key"], "name": item["name"], "module": bool(item.get("module")),
                    "file": f"{LIB_DIR}/{name}", "sha256": sha, "bytes": len(data)})
    return out


def _plain_file_under(path: str, root: str, hidden: list[Path]) -> bytes | None:
    """The bytes of the ``.so`` file ``path`` names under ``root`` (as both are written: no '..' out of it), opened
    one name at a time from the real root without following a link, so that a folder swapped for a link meanwhile
    leads nowhere; a regular file with one link, neither in nor one of ``hidden``."""
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    parts = Path(rel).parts
    real = Path(root).resolve() / rel
    if (not path.endswith(".so") or not parts or parts[0] == os.pardir or os.path.isabs(rel)
            or any(real == h or real.is_relative_to(h) for h in hidden)):
        return None
    fd = -1
    try:
        fd = os.open(Path(root).resolve(), os.O_RDONLY | os.O_DIRECTORY)
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            fd, up = os.open(part, flags, dir_fd=fd), fd
            os.close(up)
        st = os.fstat(fd)
        same = [h for h in hidden if h.exists() and os.path.samestat(st, h.stat())]
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_BYTES or same:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_BYTES + 1)
    except (OSError, ValueError):  # a name with a NUL byte, say
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def hand(libs: list[dict[str, Any]] | None, folder: str | None) -> list[dict[str, Any]]:
    """A version's kept libraries written into a worker's own ``folder``, each whose bytes still have the hash its
    correctness record binds (the others are left out: that version builds them again)."""
    out = []
    for lib in (libs or []) if folder else []:
        path = Path(folder) / f"{secrets.token_hex(8)}.so"
        try:
            with gzip.open(lib["path"], "rb") as gz:
                data = gz.read(MAX_BYTES + 1)
            if hashlib.sha256(data).hexdigest() != lib.get("sha256"):
                continue
            path.write_bytes(data)
        except (OSError, EOFError, KeyError, TypeError, zlib.error):  # damaged, gone, a folder full: built again
            continue
        out.append({"key": lib["key"], "name": lib["name"], "module": bool(lib["module"]), "path": str(path)})
    return out


# --- the step's side --------------------------------------------------------------------------
def stored(root: Path, version: str, kernel: Path, device: str, gpu: int) -> list[dict[str, Any]]:
    """The kept libraries of ``version`` with their files' paths, where its signed correctness record still holds
    (records.require_correctness: a PASS for ``kernel`` as it is, its correctness.json unchanged); [] otherwise
    (nothing kept, or changed: the version builds)."""
    from .. import records
    from ..common import UsageError

    vdir = Path(root) / version
    try:
        records.require_correctness(Path(root), version, kernel, device, gpu)
        libs = json.loads((vdir / "correctness.json").read_text(encoding="utf-8")).get("libraries") or []
    except (OSError, ValueError, AttributeError, UsageError):
        return []
    return [dict(lib, path=str(vdir / lib["file"])) for lib in libs
            if isinstance(lib, dict) and str(lib.get("file", "")).startswith(f"{LIB_DIR}/")
            and "/" not in str(lib["file"])[len(LIB_DIR) + 1:]]
