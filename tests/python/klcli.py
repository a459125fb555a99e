"""Run the kernel-loop CLI from tests: in-process (``main``) or as a subprocess (``run``).

While some loop steps are still being written, only the steps whose modules exist are
registered, so these tests exercise the real ``cli.main`` dispatch and error handling.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "helpers"
KERNELS = Path(__file__).resolve().parent / "kernels"

_RUNNER = (
    "import importlib.util, sys\n"
    "from kernel_loop import cli\n"
    "cli.STEPS = [s for s in cli.STEPS if importlib.util.find_spec('kernel_loop.' + s[0])]\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def _all_steps_present() -> bool:
    from kernel_loop import cli

    return all(importlib.util.find_spec(f"kernel_loop.{name}") for name, _ in cli.STEPS)


def command() -> list[str]:
    """``python helpers/kloop.py`` once every step exists; a filtered front door until then."""
    if _all_steps_present():
        return [sys.executable, str(HELPERS / "kloop.py")]
    return [sys.executable, "-c", _RUNNER]


def run(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full["PYTHONPATH"] = str(HELPERS) + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env or {})
    return subprocess.run(command() + [str(a) for a in args], capture_output=True, text=True,
                          env=full, timeout=timeout)


def main(*args: str) -> int:
    from kernel_loop import cli

    saved = cli.STEPS
    cli.STEPS = [s for s in saved if importlib.util.find_spec(f"kernel_loop.{s[0]}")]
    try:
        return cli.main([str(a) for a in args])
    finally:
        cli.STEPS = saved


def init_run(out: Path, ref: str, kernel: str, impl: str, dims: str, *extra: str) -> int:
    """``init --skip-env`` with kernels/ref files named relative to tests/python/kernels."""
    return main("init", out, "--kernel", Path(kernel).stem, "--ref", KERNELS / ref, "--impl", impl,
                "--baseline", KERNELS / kernel, "--dims", dims, "--skip-env", *extra)
