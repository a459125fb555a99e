"""Run the kernel-loop CLI from tests: in-process through the real ``cli.main`` (``main``) or as a
subprocess of ``helpers/kloop.py`` (``run``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import KERNELS  # the test kernels, unpacked from tests/python/kernels/*.txt

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "helpers"


def run(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full["PYTHONPATH"] = str(HELPERS) + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env or {})
    return subprocess.run([sys.executable, str(HELPERS / "kloop.py")] + [str(a) for a in args],
                          capture_output=True, text=True,
                          env=full, timeout=timeout)


def main(*args: str) -> int:
    from kernel_loop import cli

    return cli.main([str(a) for a in args])


def init_run(out: Path, ref: str, kernel: str, impl: str, dims: str, *extra: str) -> int:
    """``init --skip-env`` with kernels/ref files named as members of the kernel packs (klcli.KERNELS)."""
    return main("init", out, "--kernel", Path(kernel).stem, "--ref", KERNELS / ref, "--impl", impl,
                "--baseline", KERNELS / kernel, "--dims", dims, "--skip-env", *extra)
