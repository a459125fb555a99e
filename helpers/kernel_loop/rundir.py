"""The run directory: paths, the fixed run configuration (run.json), the current version.

Layout (fixed; see references/artifacts.md):
    <out>/run.json, env.json, env_check.md, ref.py, current_iteration.txt
    <out>/vK/kernel.{cu,py}, correctness.{md,json}, ncu.json, ncu_summary.md,
             ncu_details.md, kbs_queries.jsonl, kbs_evidence.md, hypothesis.txt,
             measured.sha256
    <out>/benchmark.{md,json}, final_report.md, final_report.png
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import UsageError, package_dir, read_json, skill_root

VERSION_RE = re.compile(r"^v(0|[1-9][0-9]*)$")
KERNEL_SUFFIXES = (".py", ".cu")
IMPLS = ("cuda-cpp", "cutlass", "cute-dsl", "triton")
IMPL_SUFFIX = {"cuda-cpp": ".cu", "cutlass": ".cu", "cute-dsl": ".py", "triton": ".py"}


def parse_version(name: str) -> int:
    m = VERSION_RE.match(name)
    if not m:
        raise UsageError(f"'{name}' is not a version name (v0, v1, ...)")
    return int(m.group(1))


@dataclass(frozen=True)
class RunDir:
    root: Path

    @classmethod
    def open(cls, out: str | Path, *, must_exist: bool = True) -> RunDir:
        root = Path(out).expanduser().resolve()
        if must_exist:
            if not root.is_dir():
                raise UsageError(f"run directory {out} does not exist (run 'kernel-loop init' first)")
            if not (root / "run.json").is_file():
                raise UsageError(f"{out} has no run.json: it is not an initialised run directory")
        return cls(root)

    # --- fixed files -----------------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def state_file(self) -> Path:
        return self.root / "current_iteration.txt"

    @property
    def ref_py(self) -> Path:
        return self.root / "ref.py"

    def config(self) -> dict[str, Any]:
        return read_json(self.run_json)

    def vdir(self, k: int) -> Path:
        return self.root / f"v{k}"

    # --- versions ----------------------------------------------------------------------
    def versions(self) -> list[int]:
        """Every vK folder present, sorted."""
        out = []
        for p in self.root.iterdir():
            if p.is_dir() and VERSION_RE.match(p.name):
                out.append(int(p.name[1:]))
        return sorted(out)

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
        """The one kernel file of vK, by the gate's rule (check 4: never both kernel.py and kernel.cu)."""
        vd = self.vdir(k)
        if not vd.is_dir():
            raise UsageError(f"{vd} does not exist")
        if (vd / "kernel.py").is_file() and (vd / "kernel.cu").is_file():
            raise UsageError(f"{vd} holds both kernel.py and kernel.cu: keep exactly one kernel file "
                             "(the gate fails this too)")
        for name in ("kernel.py", "kernel.cu"):
            if (vd / name).is_file():
                return vd / name
        cands = [p for p in sorted(vd.iterdir()) if p.suffix in KERNEL_SUFFIXES and p.name != "ref.py"]
        if len(cands) != 1:
            raise UsageError(
                f"{vd} must hold exactly one kernel file (kernel.py or kernel.cu); found {len(cands)}"
            )
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
