"""The CLI's side of a measurement: start the judge, wait for it, end every process the step started.

``run_judge(mode, spec, timeout)`` writes the spec to a private folder, starts ``python -m
kernel_loop.measure.judge spec.json`` in its own session, forwards its output to stderr (keeping the
tail for error messages) and waits for it with the run's timeout plus a margin for its own start.  This
process becomes the child subreaper of everything it starts, so a worker's child that left its process
group (``setsid``) is still ended: on timeout, on Ctrl-C and after every measurement.  Nothing here
imports torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import proctree
from ..common import MeasuredFailure, UsageError, cache_dir, package_dir, write_json
from .protocol import private_dir

JUDGE_MARGIN_S = 120.0  # the judge's own start (torch, ref.py) and cleanup, beyond the run's timeout


@dataclass
class Outcome:
    """What the judge process left: its result (None when it wrote none) and how it ended."""

    result: dict | None
    returncode: int | None
    timed_out: bool
    seconds: float
    output_tail: str = ""

    def failure(self) -> str | None:
        """Why the judge gave no usable result; None when it finished and wrote one."""
        tail = f"\n--- last output ---\n{self.output_tail}" if self.output_tail.strip() else ""
        if self.timed_out:
            return (f"timed out after {self.seconds:.0f} s (the kernel hangs or is far too slow); every process "
                    f"of the step was ended{tail}")
        if self.result is None:
            sig = proctree.signal_name(self.returncode)
            if sig:
                return f"the judge process was killed by {sig}{tail}"
            return f"the judge process exited with status {self.returncode} without writing its result{tail}"
        return None

    @property
    def error(self) -> str | None:
        return (self.result or {}).get("error")

    def raise_usage(self) -> None:
        if self.result and self.result.get("usage"):
            raise UsageError(self.result["error"])

    def checked(self, what: str) -> dict[str, Any]:
        """The result, or the failure raised: MeasuredFailure, or UsageError for bad input."""
        why = self.failure()
        if why:
            raise MeasuredFailure(f"{what} failed: {why}")
        assert self.result is not None
        if self.result.get("error"):
            cls = UsageError if self.result.get("usage") else MeasuredFailure
            raise cls(f"{what} failed: {self.result['error']}")
        return self.result


def judge_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    helpers = str(package_dir().parent)
    env["PYTHONPATH"] = helpers + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if "TORCH_EXTENSIONS_DIR" not in env:  # load_inline builds land in the user's cache, never in the run directory
        env["TORCH_EXTENSIONS_DIR"] = str(cache_dir("torch_extensions"))
    env.update(extra or {})
    return env


def run_judge(mode: str, spec: dict[str, Any], timeout: float, *, env: dict | None = None,
              tail_lines: int = 200) -> Outcome:
    """Run the judge in ``mode`` to its end; never raises for a crash or a hang (the outcome says)."""
    proctree.become_subreaper()
    with private_dir("kl-step-") as tmp:
        result_path = Path(tmp) / "result.json"
        spec_path = Path(tmp) / "spec.json"
        write_json(spec_path, dict(spec, mode=mode, result_path=str(result_path), timeout_s=timeout, scratch=tmp))
        cmd = [sys.executable, "-m", "kernel_loop.measure.judge", str(spec_path)]
        tail: deque[str] = deque(maxlen=tail_lines)
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=judge_env(env), start_new_session=True, text=True, errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip("\n"))
                sys.stderr.write(line)
            sys.stderr.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout + JUDGE_MARGIN_S)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:
            _end(proc)
            raise
        finally:
            if timed_out:
                _end(proc)
            proctree.end_descendants()  # whatever a kernel started, wherever it went
        reader.join(timeout=5)
        result = None
        if not timed_out and result_path.is_file():
            try:
                result = json.loads(result_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                result = None
        return Outcome(result, proc.returncode, timed_out, time.monotonic() - t0, "\n".join(tail))


def _end(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    proctree.end_descendants()
