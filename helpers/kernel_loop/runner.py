"""The one child runner: every piece of user code (ref.py, the kernel) runs in a child process.

Parent side: ``run_child(mode, spec, timeout, prefix=...)`` (or ``start_child`` then ``wait``) writes the spec to a temporary
JSON file and starts ``[prefix...] python -m kernel_loop.runner <mode> <spec.json>`` in its own
process group (``prefix`` is how ncu and compute-sanitizer wrap the child).  On timeout, or
when the parent is interrupted, the whole group is killed.  The child's output is forwarded to
stderr and its last lines are kept for error messages.

Child side (``main``): reads the spec, runs the mode's function from ``trials`` and writes its
result to ``spec["result_path"]``.  One result format for every mode: a dict whose ``error``
is None on success, or the failure as text (``usage`` true when it is bad input rather than a
failed measurement).  A crash, a hang or an exit without a result is reported by
``ChildOutcome.failure()``; ``ChildOutcome.checked(what)`` turns any failure into an exception.

Modes: ``correctness`` (every shape and trial), ``time`` (CUDA-event timing of the solution),
``ncu`` (the measured call inside the NVTX range, run under ncu), ``benchmark`` (solution,
versions and A/B transitions), ``baselines`` (eager, torch.compile, FlashInfer; no kernel
imported) and ``check`` (the checker, ``checker.check``: it never imports the kernel file).

``run_checked`` runs a kernel child together with a checker: both get the same list of checks
(``correctness_checks``, ``fresh_check``, ``benchmark_checks``: tag, kernel, dims, seed, variant),
the kernel child hands each call's tensors over (``handoff``), and the checker's verdicts are
merged back by the step.  Before any user code runs, a child binds the timing primitives
(``timing.bind``).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import KernelLoopError, MeasuredFailure, UsageError, cache_dir, package_dir, write_json

MODES = ("correctness", "time", "ncu", "benchmark", "baselines", "check")
FRESH_SEED_OFFSET = 7_777_777  # the seed of the after-timing checks: never one a correctness trial used


@dataclass
class ChildOutcome:
    result: dict | None
    returncode: int | None
    timed_out: bool
    seconds: float
    output_tail: str = ""

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


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    helpers = str(package_dir().parent)
    env["PYTHONPATH"] = helpers + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if "TORCH_EXTENSIONS_DIR" not in env:  # load_inline builds land in the user's cache, never in the run directory
        env["TORCH_EXTENSIONS_DIR"] = str(cache_dir("torch_extensions"))
    env.update(extra or {})
    return env


class Child:
    """A started child process: ``wait()`` gives its ``ChildOutcome``; ``kill()`` ends its whole group.

    ``run_child`` is ``start_child(...).wait(timeout)``; ``profile`` starts the ncu child early so
    that its imports overlap the timing run, and releases it through ``spec["go_file"]``."""

    def __init__(self, mode: str, spec: dict, *, prefix: list[str] | None, env: dict | None, tail_lines: int):
        if mode not in MODES:
            raise ValueError(f"unknown child mode {mode!r}")
        self._tmp = tempfile.TemporaryDirectory(prefix="kl-child-")
        tmp = Path(self._tmp.name)
        self.result_path = tmp / "result.json"
        self.spec = dict(spec, mode=mode, result_path=str(self.result_path))
        spec_path = tmp / "spec.json"
        write_json(spec_path, self.spec)
        cmd = list(prefix or []) + [sys.executable, "-m", "kernel_loop.runner", mode, str(spec_path)]
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=child_env(env), start_new_session=True,
                                         text=True, errors="replace")
        except OSError as exc:
            self._tmp.cleanup()
            raise UsageError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip("\n"))
            sys.stderr.write(line)
        sys.stderr.flush()

    def kill(self) -> None:
        _kill_group(self.proc)
        self._tmp.cleanup()

    def wait(self, timeout: float) -> ChildOutcome:
        timed_out = False
        try:
            self.proc.wait(timeout=timeout)  # counted from this call
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(self.proc)
        except BaseException:
            _kill_group(self.proc)
            self._tmp.cleanup()
            raise
        self.reader.join(timeout=5)
        seconds = time.monotonic() - self.t0
        result = None
        if not timed_out and self.result_path.is_file():
            try:
                result = json.loads(self.result_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                result = None
        self._tmp.cleanup()
        return ChildOutcome(result, self.proc.returncode, timed_out, seconds, "\n".join(self.tail))


def start_child(mode: str, spec: dict, *, prefix: list[str] | None = None, env: dict | None = None,
                tail_lines: int = 200) -> Child:
    """Start ``[prefix...] python -m kernel_loop.runner mode spec.json`` in its own process group."""
    return Child(mode, spec, prefix=prefix, env=env, tail_lines=tail_lines)


def run_child(mode: str, spec: dict, timeout: float, *, prefix: list[str] | None = None,
              env: dict | None = None, tail_lines: int = 200) -> ChildOutcome:
    """Run a child to its end; never raises for a crash or a hang (the outcome says what happened)."""
    return start_child(mode, spec, prefix=prefix, env=env, tail_lines=tail_lines).wait(timeout)


# --- the checks a kernel child and its checker share ------------------------------------------------
def derive_seed(run_seed: int, shape_index: int, trial: int) -> int:
    """The seed of one correctness trial: distinct per shape and trial, fixed by the run seed."""
    return run_seed * 1000 + trial + 100_003 * shape_index


def correctness_checks(cfg_seed: int, kernel: str, shapes: list[dict], trials: int) -> list[dict]:
    return [{"tag": f"{si}:{t}", "kernel": kernel, "dims": dims, "seed": derive_seed(cfg_seed, si, t),
             "variant": t, "trial": t} for si, dims in enumerate(shapes) for t in range(trials)]


def fresh_check(name: str, kernel: str, dims: dict, cfg_seed: int) -> dict:
    """The check on inputs the kernel has never seen, after its timed calls."""
    return {"tag": f"{name}:fresh", "kernel": kernel, "dims": dims, "seed": cfg_seed + FRESH_SEED_OFFSET,
            "variant": 1}


def benchmark_checks(kernels: list[dict], dims: dict, cfg_seed: int) -> list[dict]:
    """Per kernel: before its timed calls, the last timed call's outputs, and fresh inputs."""
    out = []
    for k in kernels:
        out.append({"tag": f"{k['name']}:before", "kernel": k["kernel"], "dims": dims, "seed": cfg_seed, "variant": 0})
        out.append({"tag": f"{k['name']}:after", "kernel": k["kernel"], "dims": dims, "seed": cfg_seed, "variant": 0})
        out.append(fresh_check(k["name"], k["kernel"], dims, cfg_seed))
    return out


@dataclass
class CheckedOutcome:
    """A kernel child's outcome and its checker's: ``verdicts`` maps each check's tag to its rows
    (or to {"error": ...} where the kernel raised)."""

    kernel: ChildOutcome
    checker: ChildOutcome
    # "checker": the kernel's process was stopped because its checker failed first (report the checker)
    stopped_by: str | None = None

    @property
    def verdicts(self) -> dict[str, dict]:
        res = self.checker.result or {}
        return {c["tag"]: c for c in res.get("checks", [])}

    def failure_of(self, tag: str) -> str | None:
        """Why check ``tag`` failed (the kernel's error, or its first failing row), "no verdict" when the
        checker gave none, None when it passed."""
        from .compare import first_failure

        v = self.verdicts.get(tag)
        if v is None:
            return "the checker gave no verdict"
        return v.get("error") or first_failure(v.get("rows") or [])

    def checker_failure(self) -> str | None:
        """Why the checker gave no verdicts (None when it finished)."""
        why = self.checker.failure()
        if why:
            return f"the checker failed: {why}"
        if (self.checker.result or {}).get("error"):
            return f"the checker failed: {self.checker.result['error']}"
        return None

    def kernel_failure(self) -> str | None:
        """Why the kernel's process gave no result: the checker's failure when the kernel's process was
        stopped because its checker failed first, else the kernel's own."""
        return self.checker_failure() if self.stopped_by == "checker" else self.kernel.failure()

    def checked_kernel(self, what: str) -> dict[str, Any]:
        """The kernel's result, or a MeasuredFailure naming whichever process failed first."""
        if self.stopped_by == "checker":
            raise MeasuredFailure(f"{what} was stopped: {self.checker_failure()}")
        return self.kernel.checked(what)

    def raise_usage(self) -> None:
        """Bad input found by either process (a ref.py that changes its inputs, no GPU) is a UsageError."""
        for o in (self.checker, self.kernel):
            if o.result and o.result.get("usage"):
                raise UsageError(o.result["error"])


def run_checked(mode: str, spec: dict, checks: list[dict], timeout: float, *, prefix: list[str] | None = None,
                env: dict | None = None) -> CheckedOutcome:
    """Run the kernel child ``mode`` and the checker side by side over ``checks``."""
    from . import handoff

    with handoff.make_dir() as folder:
        cspec = dict(spec, checks=checks, handoff_dir=folder, timeout_s=timeout)
        checker = start_child("check", cspec)
        try:
            kernel = start_child(mode, dict(cspec, checker_pid=checker.proc.pid), prefix=prefix, env=env)
            deadline = time.monotonic() + timeout
            co, stopped_by = None, None
            while kernel.proc.poll() is None and time.monotonic() < deadline:
                if co is None and checker.proc.poll() is not None:
                    co = checker.wait(1.0)
                    if co.failure() or (co.result or {}).get("error"):
                        # the checker failed (or judged an error) before the kernel's process finished: that
                        # process would wait for acknowledgements that never come
                        time.sleep(0.5)
                        if kernel.proc.poll() is None:
                            kernel.kill()
                            stopped_by = "checker"
                        break
                    # else it judged every check; the kernel's process may still be timing (an A/B run)
                time.sleep(0.01)
            ko = kernel.wait(max(1.0, deadline - time.monotonic()))
        except BaseException:
            checker.kill()
            raise
        if co is not None:
            pass
        elif ko.failure() and checker.proc.poll() is None:  # its manifests will never come: stop the checker
            checker.kill()
            co = ChildOutcome(None, None, False, 0.0, "")
        else:
            co = checker.wait(timeout)
    return CheckedOutcome(ko, co, stopped_by)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a process stuck in the driver; nothing more can be done
        pass


def error_text(exc: BaseException) -> str:
    """An exception as a message: expected errors plainly, others with the innermost frames."""
    from .build import BuildError

    if isinstance(exc, (KernelLoopError, BuildError)):
        return str(exc)
    frames = traceback.format_tb(exc.__traceback__)[-3:]
    return f"{type(exc).__name__}: {exc}\n" + "".join(frames).rstrip()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in MODES:
        print(f"usage: python -m kernel_loop.runner {{{','.join(MODES)}}} SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    from . import timing

    try:
        timing.bind()  # before any user code: a kernel that patches the clock changes nothing measured
    except ImportError:
        pass  # no torch: the mode reports it
    if argv[0] == "check":
        from .checker import check as fn
    else:
        from . import trials

        fn = getattr(trials, argv[0])
    try:
        result: dict[str, Any] = fn(spec)
        result.setdefault("error", None)
    except UsageError as exc:
        result = {"error": str(exc), "usage": True}
    except Exception as exc:  # the kernel's failure is the result
        result = {"error": error_text(exc)}
    write_json(Path(spec["result_path"]), result)
    if spec.get("handoff_dir") and argv[0] != "check":
        from .handoff import mark_done

        mark_done(spec["handoff_dir"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
