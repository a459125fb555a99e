"""Child processes: ``python -m kernel_loop.worker <mode> <spec.json>`` and the parent side that runs them.

A kernel under test may crash the process (illegal address, segfault), exit, or hang, so it
only ever runs in a child.  The child reads a JSON spec and writes a JSON result to
``spec["result_path"]``; the parent (``run_child``) puts the child in its own process group,
kills the whole group on timeout, forwards the child's output to stderr and keeps its tail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import package_dir, write_json

# mode -> "module:function"; the function takes the spec dict and returns the result dict.
MODES = {"correctness": "kernel_loop.correctness:child_main"}


@dataclass
class ChildOutcome:
    result: dict | None
    returncode: int | None
    timed_out: bool
    seconds: float
    output_tail: str = ""
    extra: dict = field(default_factory=dict)

    def failure(self) -> str | None:
        """Why the child gave no usable result; None when it finished and wrote one."""
        tail = f"\n--- last output of the child ---\n{self.output_tail}" if self.output_tail.strip() else ""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (the kernel hangs or is far too slow); process group killed{tail}"
        if self.result is None:
            rc = self.returncode
            if rc is not None and rc < 0:
                try:
                    name = signal.Signals(-rc).name
                except ValueError:
                    name = f"signal {-rc}"
                return f"the child process was killed by {name} (a crash in the kernel or its launch){tail}"
            return f"the child process exited with status {rc} without writing its result{tail}"
        return None


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    helpers = str(package_dir().parent)
    env["PYTHONPATH"] = helpers + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def run_child(mode: str, spec: dict, timeout: float, *, module: str = "kernel_loop.worker",
              prefix: list[str] | None = None, env: dict | None = None, tail_lines: int = 40) -> ChildOutcome:
    """Run ``[prefix...] python -m module mode spec.json``; never raises for a crash or a hang."""
    with tempfile.TemporaryDirectory(prefix="kl-child-") as tmp:
        spec = dict(spec, result_path=str(Path(tmp) / "result.json"))
        spec_path = Path(tmp) / "spec.json"
        write_json(spec_path, spec)
        cmd = list(prefix or []) + [sys.executable, "-m", module, mode, str(spec_path)]
        tail: deque[str] = deque(maxlen=tail_lines)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_env(env), start_new_session=True, text=True, errors="replace")

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
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        except BaseException:
            _kill_group(proc)
            raise
        reader.join(timeout=5)
        seconds = time.monotonic() - t0
        result = None
        rpath = Path(spec["result_path"])
        if not timed_out and rpath.is_file():
            try:
                result = json.loads(rpath.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                result = None
        return ChildOutcome(result, proc.returncode, timed_out, seconds, "\n".join(tail))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def error_text(exc: BaseException) -> str:
    """An exception as a message: expected errors plainly, others with the innermost frames."""
    from .build import BuildError
    from .common import KernelLoopError

    if isinstance(exc, (KernelLoopError, BuildError)):
        return str(exc)
    frames = traceback.format_tb(exc.__traceback__)[-3:]
    return f"{type(exc).__name__}: {exc}\n" + "".join(frames).rstrip()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in MODES:
        print(f"usage: python -m kernel_loop.worker {{{','.join(MODES)}}} SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    mod_name, fn_name = MODES[argv[0]].split(":")
    import importlib

    fn = getattr(importlib.import_module(mod_name), fn_name)
    try:
        result: dict[str, Any] = fn(spec)
    except Exception as exc:  # the kernel's failure is the result
        result = {"error": error_text(exc)}
    write_json(Path(spec["result_path"]), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
