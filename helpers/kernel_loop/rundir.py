"""The run directory: paths of every file, the typed run configuration, the current version.

Layout (fixed; names in ``sidecars``, described in references/artifacts.md):
    <out>/run.json, env.json, env_check.md, ref.py, current_iteration.txt
    <out>/vK/kernel.{cu,py}, correctness.{md,json}, ncu.json, ncu_summary.md,
             ncu_details.md, kbs_queries.jsonl, kbs_evidence.md, hypothesis.txt,
             measured.sha256
    <out>/benchmark.{md,json}, final_report.md, final_report.png

``RunDir.kernel_file`` is the Python side of the gate's kernel rule (check 4): kernel.py or
kernel.cu, never both, else the one .py/.cu file other than ref.py.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from . import sidecars as sc
from .common import UsageError, package_dir, read_json, skill_root
from .config import RunConfig
from .vocab import KERNEL_SUFFIXES

VERSION_RE = re.compile(r"^v(0|[1-9][0-9]*)$")
SAFE_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")  # the gate's rule for a kernel file name (check 4)


def what_path_is(path: str | Path) -> str:
    """What a path names, as a message fragment: "is a directory", "is a regular file", "is a device or
    other special file", "is a broken symbolic link", "cannot be read (permission denied)", "does not
    exist" (or that a part of it is a file)."""
    path = Path(path).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            return f"is a broken symbolic link (to {os.readlink(path)})"
        parent = next((q for q in path.parents if q.exists()), None)
        if parent is not None and not parent.is_dir():
            return f"does not exist ({parent} is a file, not a folder)"
        return "does not exist"
    except NotADirectoryError:
        return "does not exist (a part of the path is a file, not a folder)"
    except PermissionError:
        return "cannot be read (permission denied on a folder above it)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(st.st_mode):
        kind = "is a directory"
    elif stat.S_ISREG(st.st_mode):
        kind = "is a regular file" if st.st_size else "is an empty regular file"
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        kind = "is a device, not a regular file or directory"
    elif stat.S_ISFIFO(st.st_mode):
        kind = "is a named pipe, not a regular file or directory"
    else:
        kind = "is a special file (a socket), not a regular file or directory"
    if not os.access(path, os.R_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)):
        kind += " that cannot be read (permission denied)"
    return kind


def parse_version(name: str) -> int:
    m = VERSION_RE.match(name)
    if not m:
        raise UsageError(f"'{name}' is not a version name (v0, v1, ...)")
    return int(m.group(1))


def kernel_candidates(vd: Path) -> list[Path]:
    """The kernel file(s) of a version folder by the gate's rule: [kernel.py] or [kernel.cu] when
    present (both when both are: an error for the caller), else every .py/.cu file but ref.py."""
    if not vd.is_dir():
        return []
    named = [vd / n for n in sc.KERNEL_FILES if (vd / n).is_file()]
    if named:
        return named
    return [p for p in sorted(vd.iterdir()) if p.is_file() and p.suffix in KERNEL_SUFFIXES and p.name != sc.REF_PY]


@dataclass(frozen=True)
class VersionDir:
    """One version folder and the paths of its files."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    def __truediv__(self, other: str) -> Path:
        return self.path / other

    correctness_json = property(lambda self: self.path / sc.CORRECTNESS_JSON)
    correctness_md = property(lambda self: self.path / sc.CORRECTNESS_MD)
    ncu_json = property(lambda self: self.path / sc.NCU_JSON)
    ncu_summary_md = property(lambda self: self.path / sc.NCU_SUMMARY_MD)
    ncu_details_md = property(lambda self: self.path / sc.NCU_DETAILS_MD)
    ncu_report = property(lambda self: self.path / sc.NCU_REPORT)
    kbs_queries = property(lambda self: self.path / sc.KBS_QUERIES)
    kbs_evidence = property(lambda self: self.path / sc.KBS_EVIDENCE)
    hypothesis_txt = property(lambda self: self.path / sc.HYPOTHESIS_TXT)
    hypothesis_json = property(lambda self: self.path / sc.HYPOTHESIS_JSON)
    measured = property(lambda self: self.path / sc.MEASURED)


@dataclass(frozen=True)
class RunDir:
    root: Path

    @classmethod
    def open(cls, out: str | Path, *, must_exist: bool = True) -> RunDir:
        root = Path(out).expanduser().resolve()
        if must_exist:
            kind = what_path_is(out)
            if kind == "does not exist":
                raise UsageError(f"run directory {out} does not exist (run 'kernel-loop init' first)")
            if kind != "is a directory":
                raise UsageError(f"run directory {out} {kind}: give the folder that 'kernel-loop init' made")
            run_json = root / sc.RUN_JSON
            if not run_json.exists():
                raise UsageError(f"{out} has no run.json: it is not an initialised run directory")
            if not run_json.is_file() or not os.access(run_json, os.R_OK):
                raise UsageError(f"{run_json} {what_path_is(run_json)}: the run directory is damaged or unreadable")
        return cls(root)

    # --- fixed files -----------------------------------------------------------------
    run_json = property(lambda self: self.root / sc.RUN_JSON)
    env_json = property(lambda self: self.root / sc.ENV_JSON)
    state_file = property(lambda self: self.root / sc.STATE)
    ref_py = property(lambda self: self.root / sc.REF_PY)
    benchmark_json = property(lambda self: self.root / sc.BENCHMARK_JSON)
    benchmark_md = property(lambda self: self.root / sc.BENCHMARK_MD)
    final_report_md = property(lambda self: self.root / sc.FINAL_REPORT_MD)
    final_report_png = property(lambda self: self.root / sc.FINAL_REPORT_PNG)

    def config(self) -> RunConfig:
        return RunConfig.from_json(read_json(self.run_json))

    def vdir(self, k: int) -> Path:
        return self.root / f"v{k}"

    def v(self, k: int) -> VersionDir:
        return VersionDir(self.vdir(k))

    # --- versions ----------------------------------------------------------------------
    def versions(self) -> list[int]:
        """Every vK folder present, sorted."""
        return sorted(int(p.name[1:]) for p in self.root.iterdir() if p.is_dir() and VERSION_RE.match(p.name))

    def recorded_version(self) -> int | None:
        """The version named in current_iteration.txt, None before the first gate."""
        if not self.state_file.exists():
            return None
        text = self.state_file.read_text(encoding="utf-8").strip()
        try:
            return parse_version(text)
        except UsageError:
            raise UsageError(
                f"{self.state_file} holds '{text[:40]}', not a version name: the state is corrupt"
            ) from None

    def current_version(self) -> int:
        """The version the next measurement applies to: the state file's, or v0."""
        k = self.recorded_version()
        return 0 if k is None else k

    def kernel_file(self, k: int) -> Path:
        """The one kernel file of vK, by the gate's rule (check 4)."""
        vd = self.vdir(k)
        if not vd.is_dir():
            raise UsageError(f"{vd} does not exist")
        cands = kernel_candidates(vd)
        if len(cands) == 2 and all(p.name in sc.KERNEL_FILES for p in cands):
            raise UsageError(f"{vd} holds both kernel.py and kernel.cu: keep exactly one kernel file "
                             "(the gate fails this too)")
        if len(cands) != 1:
            raise UsageError(
                f"{vd} must hold exactly one kernel file (kernel.py or kernel.cu); found {len(cands)}"
            )
        if not SAFE_NAME_RE.match(cands[0].name):
            raise UsageError(f"{vd.name}/{cands[0].name!r}: a kernel file name may hold only letters, digits, '.', "
                             "'_' and '-' (the gate refuses others); rename it kernel.py or kernel.cu")
        return cands[0]


def gate_script() -> Path:
    """Path of scripts/check_iteration_gate.sh (source tree or installed copy)."""
    for cand in (skill_root() / "scripts" / "check_iteration_gate.sh",
                 package_dir() / "data" / "check_iteration_gate.sh"):
        if cand.is_file():
            return cand
    raise UsageError("scripts/check_iteration_gate.sh not found next to the helpers")


def copy_new(src: Path, dst: Path) -> None:
    """Copy a file, refusing to overwrite."""
    if dst.exists():
        raise UsageError(f"{dst} already exists; refusing to overwrite it")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
