"""Shared plumbing: exit codes, errors, progress messages, JSON and atomic writes.

Every step module raises ``UsageError`` (exit 2: bad input or environment) or
``MeasuredFailure`` (exit 1: the measured result failed); ``cli.py`` turns them
into one ``kernel-loop: error: ...`` line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

PROG = "kernel-loop"


class Parser(argparse.ArgumentParser):
    """Every parser of the CLI (``add_subparsers`` makes its subcommands' of the same class): an option is
    taken only spelled out in full, so ``--tri 5`` is refused instead of being read as ``--trials 5``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


class KernelLoopError(Exception):
    exit_code = EXIT_USAGE


class UsageError(KernelLoopError):
    """Bad usage, bad input files, or a missing environment piece (exit 2)."""

    exit_code = EXIT_USAGE


class MeasuredFailure(KernelLoopError):
    """The measurement ran and its result failed (exit 1)."""

    exit_code = EXIT_FAILED


# Python packages the helpers themselves need, and the pip name that provides each.
REQUIRED_PACKAGES = {"jinja2": "jinja2", "yaml": "pyyaml"}


def missing_module_message(exc: ModuleNotFoundError) -> str:
    """One line for a package that is not installed: which one, and the pip line that installs it."""
    name = (exc.name or "").split(".")[0]
    pip = REQUIRED_PACKAGES.get(name, name)
    need = ("kernel-loop needs jinja2 and pyyaml" if name in REQUIRED_PACKAGES
            else "this step needs it in the Python that runs kernel-loop")
    return f"the Python package '{pip}' is not installed ({need}): pip install {pip}"


def os_error_message(exc: OSError) -> str:
    """One line for a file-system error: what failed, on which path, and what to check."""
    what = exc.strerror or str(exc)
    path = exc.filename if exc.filename is not None else ""
    hint = {13: "check the permissions of the folder and file (a read-only run directory or cache?)",
            20: "a part of the path is a file, not a folder", 21: "the path is a folder, not a file",
            28: "the disk is full", 30: "the file system is read-only", 2: "check the path"}.get(exc.errno or 0,
                                                                                               "check the path")
    return f"{what}: {path} ({hint})" if path else f"{what} ({hint})"


def invocation() -> str:
    """How the user ran this CLI: this interpreter and helpers/kloop.py, or the installed ``kernel-loop``."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "kloop.py" and argv0.is_file():
        return f"{shlex.quote(sys.executable)} {shlex.quote(str(argv0.resolve()))}"
    return PROG


def command(*words: Any) -> str:
    """A command line for a message, written the way this CLI was run, each argument shell-quoted (a run path
    with a space in it included): ``python3 /skill/helpers/kloop.py correctness '/runs/my run'``."""
    return " ".join([invocation(), *(shlex.quote(str(w)) for w in words)])


@contextmanager
def judge_tmpdir() -> Iterator[dict[str, str]]:
    """TMPDIR (and TEMP, TMP) for one judge and whatever it starts: a folder of the step's own, removed when the
    step ends however it ends (a judge stopped by Ctrl-C or a timeout cannot remove its own folders)."""
    folder = tempfile.mkdtemp()  # no mark of the harness in the name: the workers' TMPDIR is inside
    try:
        yield {"TMPDIR": folder, "TEMP": folder, "TMP": folder}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def progress(msg: str) -> None:
    """A progress line on stderr (data goes to stdout)."""
    print(f"[{PROG}] {msg}", file=sys.stderr, flush=True)


def warn(msg: str) -> None:
    print(f"[{PROG}] warning: {msg}", file=sys.stderr, flush=True)


@contextmanager
def step(msg: str) -> Iterator[None]:
    """Print ``msg ...`` then ``msg: done in 1.2 s`` around a long step."""
    progress(f"{msg} ...")
    t0 = time.monotonic()
    yield
    progress(f"{msg}: done in {time.monotonic() - t0:.1f} s")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename (``atomic_write_bytes``)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``data`` into ``path`` (``atomic_write_with``)."""
    atomic_write_with(path, lambda fh: fh.write(data))


def atomic_write_with(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """``write(fh)`` into a temporary file in the same folder, then rename: a reader sees the old file or the
    new one, never half of one, and a failed write leaves the old file as it was.  The new file gets
    the usual mode for the user's umask (mkstemp alone would make it private)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any, *, depth: int | None = None) -> None:
    """``data`` as JSON, indented by 2; with ``depth``, what lies deeper than ``depth`` levels is written on one line
    (json's indented writer is Python, its one-line writer C: a judge's result and correctness.json took 13 ms)."""
    text = json.dumps(data, indent=2, default=str) if depth is None else _indented(data, depth, 0)
    atomic_write_text(path, text + "\n")


def _indented(data: Any, depth: int, level: int) -> str:
    if level >= depth or not isinstance(data, (dict, list, tuple)) or not data:
        return json.dumps(data, default=str)
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(data, dict):
        parts = [f"{inner}{json.dumps(k if isinstance(k, str) else json.dumps(k))}: {_indented(v, depth, level + 1)}"
                 for k, v in data.items()]
        return "{\n" + ",\n".join(parts) + f"\n{pad}}}"
    return "[\n" + ",\n".join(inner + _indented(v, depth, level + 1) for v in data) + f"\n{pad}]"


def read_json(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):  # every sidecar is one JSON object
        raise UsageError(f"{path} holds a JSON {type(data).__name__}, not an object: the file is corrupt")
    return data


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def skill_root() -> Path:
    """The skill folder (holds SKILL.md, scripts/, references/)."""
    return Path(__file__).resolve().parent.parent.parent


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def cache_dir(*parts: str) -> Path:
    """A per-user cache folder (never inside the skill folder, which may be read-only)."""
    base = os.environ.get("KERNEL_LOOP_CACHE")
    if base:
        root = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "kernel-loop"
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
