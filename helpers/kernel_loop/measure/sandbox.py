"""The worker's file sandbox (Linux Landlock): runs in the worker, before the kernel is imported.

Landlock lets a process take rights away from itself and from every process it starts, for good, with
no privilege and no namespace.  The worker keeps:

- **read** rights everywhere (the Python installation, the CUDA toolkit, the user's files), except
- **nothing** in the hidden paths (the record key, the run directory), where it may read only the files it
  was given (its kernel file, ref.py), and
- **write** rights only in its own temporary folder (``TMPDIR``, made by the judge for this worker and read
  by no later one), in the build caches of kernels (Triton's, CUDA's, ``~/.cache``, ``TORCH_EXTENSIONS_DIR``,
  ``TRITON_CACHE_DIR``) and in ``/dev`` (the GPU's device files and the judge's shared buffers).

So a kernel cannot plant code that a later process runs (a ``.pth`` file in site-packages, a changed
library, a shell profile), cannot change the user's files, and cannot prepare a cache for the baselines'
worker, which runs with cache folders of its own (``judge.baselines``).  Listing a folder and executing
stay unrestricted, and so does every device ioctl (CUDA's).  Landlock's own rule adds that the worker
cannot trace or read the memory of a process outside its sandbox, the judge and the CLI among them; from
Landlock ABI 6 it cannot signal them either.  What it does not stop: a process outside the sandbox that
does the work when asked over a socket (a user's D-Bus session, say), or a hard link to the key made
beforehand elsewhere.

Landlock's rules only grant, and a folder's rule covers its whole subtree, so the zones are laid out
along the way from ``/`` down to each zone: every entry beside that way gets the rights of the zone it
lies in (or the read default), the folders on the way get no rule of their own, each zone its own
rights.  Entries created later directly inside a folder on the way get no rights, so the caches the
worker writes are made before the rules (``prepare``).

``policy`` (the judge) says what to hide, what to let be read there and where to write; ``apply`` (the
worker) returns ``(True, how)`` or ``(False, why)`` and never raises.
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


def policy(hide: list[str | Path], read: list[str | Path], write: list[str | Path] = ()) -> dict[str, Any]:
    """What the worker hides (folders or files), which files under them it may still read, and the folders it
    may write besides its caches (its own temporary folder)."""
    return {"hide": [os.path.realpath(p) for p in hide if p], "read": [os.path.realpath(p) for p in read if p],
            "write": [os.path.realpath(p) for p in write if p]}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


NONE, READ, ALL = "none", "read", "all"


def zones(pol: dict[str, Any], caches: list[str] = ()) -> dict[str, str]:
    """The policy as zones, path -> NONE | READ | ALL (everything else: READ).  A path named twice keeps the
    right named last in this order: written folders and caches, hidden paths, files read in hidden paths."""
    out: dict[str, str] = {}
    for w in [*caches, *(pol.get("write") or [])]:
        out[os.path.realpath(w)] = ALL
    for h in pol.get("hide") or []:
        out[os.path.realpath(h)] = NONE
    for r in pol.get("read") or []:
        if os.path.exists(r):
            out[os.path.realpath(r)] = READ
    out.pop("/", None)
    # a zone whose right is the one it would get anyway adds nothing, and inside another zone it would make that
    # one a folder on the way, where new entries get no rights (a cache folder inside the worker's own folder)
    return {z: r for z, r in out.items() if _right_of(z, {o: x for o, x in out.items() if o != z}) != r}


def _right_of(path: str, zs: dict[str, str]) -> str:
    """The right of the deepest zone holding ``path`` (READ where none does)."""
    best, right = "", READ
    for z, r in zs.items():
        if _inside(path, z) and len(z) > len(best):
            best, right = z, r
    return right


def grants(zs: dict[str, str]) -> list[tuple[str, str]]:
    """The Landlock rules that give every path the right of its deepest zone, as (path, READ | ALL): pure, so
    the CPU tests can check the plan itself.  Folders on the way to a zone are listed and get no rule of
    their own; an entry beside the way gets the right of the zone it lies in; an entry that holds a zone
    through a link gets nothing."""
    on_way: set[str] = set()
    for z in zs:
        p = os.path.dirname(z)
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
            if path in on_way:
                continue  # a folder on the way: listed in turn
            if real != path:  # a link: the right of its target, nothing if the target holds a zone or is hidden
                if real in on_way or any(_inside(z, real) and z != real for z in zs):
                    continue
                right = _right_of(real, zs)
            else:
                right = zs.get(path) or _right_of(folder, zs)
            if right != NONE:
                out.append((path, right))
    return out


def cache_folders() -> list[str]:
    """The build caches a kernel's worker writes: Triton's, CUDA's, ``~/.cache`` and the folders named by
    CACHE_VARS."""
    out = [str(Path.home() / name) for name in CACHES]
    out += [os.environ[v] for v in CACHE_VARS if os.environ.get(v)]
    return [*out, "/dev"]


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
    directly inside a folder on the way to a zone would get no rights)."""
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
        for path, what in grants(zones(pol, cache_folders())):
            is_dir = os.path.isdir(path)
            access = (handled if is_dir else file_rights) if what == ALL else _READ_FILE
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
                  "directory (it reads only its kernel file and ref.py there), writes only its own temporary "
                  "folder and the build caches, and cannot trace the judge" + (" or signal it" if version >= 6 else ""))
