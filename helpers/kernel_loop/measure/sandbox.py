"""The worker's file sandbox (Linux Landlock): runs in the worker, before the kernel is imported.

Landlock lets a process take rights away from itself and from every process it starts, for good, with
no privilege and no namespace.  Its rules only grant, so "everything but the hidden paths" is built as:
every entry beside the way from ``/`` down to each hidden path gets full rights (its whole subtree), the
folders on that way get none of their own, and the hidden paths get nothing, except the files the
worker must read (its kernel file, ref.py), which get read rights alone.  Listing a folder and
executing stay unrestricted, and so does every device ioctl (CUDA's).

What this gives the judge: the kernel's process cannot read or change the record key, cannot read,
write, create or delete anything in the run directory but read the files it was given, and (Landlock's
own rule) cannot trace or read the memory of a process outside its sandbox, the judge and the CLI among
them; from Landlock ABI 6 it cannot signal them either.  What it does not stop: a process outside the
sandbox that does the work when asked over a socket (a user's D-Bus session, say), or a hard link to
the key made beforehand elsewhere.

Entries created later directly inside a folder on the way (new files in ``$HOME`` or in ``/tmp`` when a
hidden path lies below it) get no rights, so the worker is given its own temporary folder (``TMPDIR``)
made before the rules, and the caches it writes (Triton's, CUDA's, ``~/.cache``) are made first.

``policy`` (the judge) says what to hide and what to let be read; ``apply`` (the worker) returns
``(True, how)`` or ``(False, why)`` and never raises.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path
from typing import Any

_SYS = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}  # the same on every Linux architecture
_PR_SET_NO_NEW_PRIVS = 38
_VERSION = 1            # LANDLOCK_CREATE_RULESET_VERSION
_PATH_BENEATH = 1       # LANDLOCK_RULE_PATH_BENEATH
_READ_FILE, _WRITE_FILE = 1 << 2, 1 << 1
_DIR_ONLY = sum(1 << b for b in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_SCOPE_SIGNAL = 1 << 1  # ABI 6
CACHES = (".triton", ".nv", ".cache")
CACHE_VARS = ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version, or 0 where there is none (not Linux, too old, switched off)."""
    if platform.system() != "Linux":
        return 0
    try:
        v = _libc().syscall(_SYS["create_ruleset"], None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(v), 0)


def policy(hide: list[str | Path], read: list[str | Path]) -> dict[str, Any]:
    """What the worker hides (folders or files) and which files under them it may still read."""
    return {"hide": [os.path.realpath(p) for p in hide if p], "read": [os.path.realpath(p) for p in read if p]}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def grants(hide: list[str], read: list[str]) -> list[tuple[str, str]]:
    """The rules, as (path, "all" | "read"): pure, so the CPU tests can check the plan itself."""
    hide = [h for h in dict.fromkeys(hide) if h != "/"]
    on_way: set[str] = set()
    for h in hide:
        p = os.path.dirname(h)
        while True:
            on_way.add(p)
            if p == "/":
                break
            p = os.path.dirname(p)
    out: list[tuple[str, str]] = []
    for folder in sorted(on_way):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            real = os.path.realpath(path)
            # an entry that is, lies in, or holds a hidden path (itself or through a link) gets no rule of its own:
            # the folders on the way are listed in turn, the hidden paths get nothing
            if any(_inside(real, h) or _inside(h, real) for h in hide):
                continue
            out.append((path, "all"))
    out += [(r, "read") for r in read if os.path.exists(r)]
    return out


def _add(lib, ruleset: int, path: str, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        attr = _PathBeneath(access, fd)
        if lib.syscall(_SYS["add_rule"], ruleset, _PATH_BENEATH, ctypes.byref(attr), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def prepare() -> None:
    """Make the folders the worker writes into later, while it still may (entries made after the rules
    directly inside a folder on the way to a hidden path would get no rights)."""
    for name in CACHES:
        try:
            (Path.home() / name).mkdir(exist_ok=True)
        except OSError:
            pass
    for var in CACHE_VARS:  # a cache named elsewhere (load_inline's builds, Triton's), made whole while it may be
        if os.environ.get(var):
            try:
                Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
            except OSError:
                pass


def apply(pol: dict[str, Any] | None) -> tuple[bool, str]:
    """Restrict this process (and all it starts) to ``pol``; (True, how) or (False, why)."""
    if not pol or not pol.get("hide"):
        return False, "the sandbox was switched off (KERNEL_LOOP_SANDBOX=off)"
    version = abi()
    if version < 1:
        return False, ("this kernel has no Landlock (Linux 5.13 or later with landlock in its LSM list): the worker "
                       "runs with the user's rights over the user's files, the record key among them")
    lib = _libc()
    handled = _READ_FILE | _WRITE_FILE | _DIR_ONLY | (_REFER if version >= 2 else 0) | (_TRUNCATE if version >= 3 else 0)
    file_rights = _READ_FILE | _WRITE_FILE | (_TRUNCATE if version >= 3 else 0)
    attr = _RulesetAttr(handled, 0, _SCOPE_SIGNAL if version >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else 8
    prepare()
    ruleset = lib.syscall(_SYS["create_ruleset"], ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return False, f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
    try:
        for path, what in grants(list(pol["hide"]), list(pol.get("read") or [])):
            is_dir = os.path.isdir(path)
            access = (handled if is_dir else file_rights) if what == "all" else _READ_FILE
            try:
                _add(lib, ruleset, path, access)
            except OSError:
                continue  # gone since it was listed, or a kind of file Landlock takes no rule for: it gets nothing
        if lib.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
        if lib.syscall(_SYS["restrict_self"], ruleset, ctypes.c_uint32(0)) != 0:
            return False, f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return True, (f"Landlock ABI {version}: the worker can neither read nor change the record key or the run "
                  "directory (it reads only its kernel file and ref.py there), nor trace the judge"
                  + (" or signal it" if version >= 6 else ""))
