"""Shared plumbing: exit codes, errors, progress messages, JSON and atomic writes.

Every step module raises ``UsageError`` (exit 2: bad input or environment) or
``MeasuredFailure`` (exit 1: the measured result failed); ``cli.py`` turns them
into one ``kernel-loop: error: ...`` line on stderr, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

PROG = "kernel-loop"


class KernelLoopError(Exception):
    exit_code = EXIT_USAGE


class UsageError(KernelLoopError):
    """Bad usage, bad input files, or a missing environment piece (exit 2)."""

    exit_code = EXIT_USAGE


class MeasuredFailure(KernelLoopError):
    """The measurement ran and its result failed (exit 1)."""

    exit_code = EXIT_FAILED


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


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


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
