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
import secrets
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
    forged: str | None = None  # why a result file that was there is not the judge's (read_result)

    def failure(self) -> str | None:
        """Why the judge gave no usable result; None when it finished and wrote one."""
        tail = f"\n--- last output ---\n{self.output_tail}" if self.output_tail.strip() else ""
        if self.forged:
            return self.forged + tail
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


def sealed_spec(spec: dict[str, Any], mode: str, result_path: Path, timeout: float,
                scratch: str | None = None) -> tuple[dict[str, Any], str]:
    """The judge's spec for ``mode`` and the seal in it: a secret the judge writes into its result.  The spec file is
    the only place it travels, and the judge removes that file before any worker starts (and the sandbox keeps a
    worker out of the judge's and the CLI's memory), so a result file a kernel wrote cannot carry it."""
    seal = secrets.token_hex(16)
    extra = {"scratch": scratch} if scratch else {}
    return dict(spec, mode=mode, result_path=str(result_path), timeout_s=timeout, seal=seal, **extra), seal


def read_result(path: Path, returncode: int | None, seal: str) -> tuple[dict | None, str | None]:
    """The judge's result and None, or None and why the file there is not the judge's.  The judge writes its result
    last and exits with status 0; a result without the spec's seal, or a judge that ended otherwise, means that
    something else wrote the file (a kernel's process that found the step's folder, then made the judge crash)."""
    if not path.is_file():
        return None, None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None, None
    if not isinstance(result, dict) or result.pop("seal", None) != seal:
        return None, ("the step's result file was not written by the judge (it lacks the seal the judge alone was "
                      "given): another process of the step wrote it, most likely the kernel's; it is discarded")
    if returncode != 0:
        return None, (f"the judge wrote its result but then ended with status {returncode}"
                      + (f" ({proctree.signal_name(returncode)})" if proctree.signal_name(returncode) else "")
                      + ": its result is discarded")
    return result, None


def run_judge(mode: str, spec: dict[str, Any], timeout: float, *, env: dict | None = None,
              tail_lines: int = 200) -> Outcome:
    """Run the judge in ``mode`` to its end; never raises for a crash or a hang (the outcome says)."""
    proctree.become_subreaper()
    with private_dir("kl-step-") as tmp:
        result_path = Path(tmp) / "result.json"
        spec_path = Path(tmp) / "spec.json"
        sealed, seal = sealed_spec(spec, mode, result_path, timeout, tmp)
        write_json(spec_path, sealed)
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
        result, forged = (None, None) if timed_out else read_result(result_path, proc.returncode, seal)
        return Outcome(result, proc.returncode, timed_out, time.monotonic() - t0, "\n".join(tail), forged)


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
