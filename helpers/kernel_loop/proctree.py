"""The processes a step starts, and ending all of them.

``become_subreaper`` makes this process the Linux child subreaper of its descendants: a process that
leaves its parent's session or process group (``setsid``, ``start_new_session``, a double fork) is still
re-parented here when its parent ends, so ``end_descendants`` finds and ends it.  Elsewhere than on
Linux both are best effort (descendants found by their parent links only).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """True when this process is now the subreaper of its descendants (Linux prctl)."""
    if not Path("/proc/self").exists():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    out = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) >= 2:
            out[int(entry.name)] = int(rest[1])
    return out


def descendants(pid: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (this process by default), found through /proc."""
    root = os.getpid() if pid is None else pid
    parents = _parents()
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def end_descendants(pid: int | None = None, rounds: int = 5, spare: tuple[int, ...] = ()) -> list[int]:
    """SIGKILL every descendant (repeated, since a dying process's children are re-parented to us), except
    the processes ``spare`` names and their own descendants, and reap the ones that are our children;
    returns the pids that were ended."""
    ended: list[int] = []
    for _ in range(rounds):
        kept = set(spare)
        for s in spare:
            kept.update(descendants(s))
        pids = [p for p in descendants(pid) if p not in kept]
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
                ended.append(p)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                got, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if got == 0:
                time.sleep(0.02)
    return ended


def signal_name(returncode: int | None) -> str | None:
    """'SIGSEGV' for a process that a signal ended (a negative return code), else None."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
