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
# a GPU test's run (conftest sets GPU_TEST for tests marked gpu) profiles with --clock-control none unless the test
# says otherwise: ncu's own default locks the card's clocks to base while it profiles, and the card's settings are
# not the suite's to change (seen: 35_LSTM's whole-loop test profiled under the locked base clock)
GPU_TEST = False


def _args(args: tuple) -> list[str]:
    out = [str(a) for a in args]
    if GPU_TEST and out[:1] == ["init"] and not any(a.split("=", 1)[0] == "--clock-control" for a in out):
        out += ["--clock-control", "none"]
    return out


def run(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full["PYTHONPATH"] = str(HELPERS) + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env or {})
    return subprocess.run([sys.executable, str(HELPERS / "kloop.py")] + _args(args),
                          capture_output=True, text=True,
                          env=full, timeout=timeout)


def in_child(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -c code args`` with the helpers and these tests importable.  GPU tests whose own body would
    make a CUDA context run it here: a context held by pytest's process is, rightly, "another process
    computes on the GPU" to every later profile or benchmark of the suite."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(HELPERS), str(Path(__file__).parent), full.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=full,
                          timeout=timeout)


def main(*args: str) -> int:
    from kernel_loop import cli

    return cli.main(_args(args))


def init_run(out: Path, ref: str, kernel: str, impl: str, dims: str, *extra: str) -> int:
    """``init --skip-env`` with kernels/ref files named as members of the kernel packs (klcli.KERNELS)."""
    return main("init", out, "--kernel", Path(kernel).stem, "--ref", KERNELS / ref, "--impl", impl,
                "--baseline", KERNELS / kernel, "--dims", dims, "--skip-env", *extra)


def run_judge_here(mode: str, spec: dict, timeout: float, *, env: dict | None = None, tail_lines: int = 200):
    """``session.run_judge`` with the judge (``kernel_loop.measure.judge.main``) run in this process instead of
    a ``python -m kernel_loop.measure.judge`` child: for tests whose subject is a verdict, not the CLI ->
    judge process boundary (each child judge imports torch again, which this process has already done).
    The spec file, the judge's environment (``session.judge_env``) and the Outcome are what
    ``session.run_judge`` makes; the workers that run the kernel are real processes, started by the judge
    as always.  Tests of the boundary itself (a hang, the process tree, the CLI as a command) keep the
    real child."""
    import time

    from kernel_loop.common import write_json
    from kernel_loop.measure import judge, session
    from kernel_loop.measure.protocol import private_dir

    with private_dir("kl-step-") as tmp:
        result_path = Path(tmp) / "result.json"
        spec_path = Path(tmp) / "spec.json"
        sealed, seal = session.sealed_spec(spec, mode, result_path, timeout)
        write_json(spec_path, sealed)
        saved, judges = dict(os.environ), session.judge_env(env)
        os.environ.clear()
        os.environ.update(judges)
        t0 = time.monotonic()
        try:
            rc = judge.main([str(spec_path)])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        result, forged = session.read_result(result_path, rc, seal)
        return session.Outcome(result, rc, False, time.monotonic() - t0, "", forged)


def judge_in_this_process(monkeypatch) -> list[str]:
    """The steps (correctness, profile, benchmark) call ``run_judge_here`` in place of ``session.run_judge``.
    Returns the list of modes the judge ran in, so that a test can check it was used (or was not)."""
    from kernel_loop.steps import benchmark, correctness, profile

    modes: list[str] = []

    def run_judge(mode: str, spec: dict, timeout: float, **kw):
        modes.append(mode)
        return run_judge_here(mode, spec, timeout, **kw)

    for step in (correctness, benchmark, profile):
        monkeypatch.setattr(step, "run_judge", run_judge)
    return modes


class _ThreadProc:
    """What the judge reads of a worker's process (pid, poll, wait, returncode) for a worker that is a thread."""

    def __init__(self, thread):
        self.thread = thread
        self.pid = os.getpid()
        self.returncode = None

    def poll(self):
        if self.returncode is None and not self.thread.is_alive():
            self.returncode = 0
        return self.returncode

    def wait(self, timeout=None):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("worker thread", timeout)
        return self.poll()


def _thread_worker_class():
    """A ``launch.WorkerProc`` whose worker (``kernel_loop.measure.worker.Worker``, the real one) serves the
    judge from a thread of this process over a socket pair: the same requests, replies, buffers and
    verdicts, without a process that imports torch again.  No sandbox (it would restrict this process)."""
    import socket
    import threading
    import time
    from collections import deque

    from kernel_loop.measure import launch, protocol, worker

    class ThreadWorkerProc(launch.WorkerProc):
        def __init__(self, folder: Path, name: str, device: str, *, prefix=None, env=None, deadline: float,
                     policy=None, libs=None):
            self.name, self.policy, self.isolated = name, None, None
            self.tmpdir, self.libs, self.built = (env or {}).get("TMPDIR"), libs or {}, []
            self.tail = deque(maxlen=200)
            self.deadline = deadline
            self.timeout_s = max(0.0, deadline - time.monotonic())
            self.device, self.folder = device, folder
            ours, theirs = socket.socketpair()
            self.listener = ours  # closed by kill(), like the real listener
            self.chan = protocol.Channel(ours)

            def serve() -> None:
                chan = protocol.Channel(theirs)
                code = 0  # ended by the judge (its bye, or the channel closed by kill())
                try:
                    worker.Worker(chan).serve()
                except protocol.ProtocolError:
                    pass
                except SystemExit as exc:  # what a process would exit with: never read as a clean end
                    code = exc.code if isinstance(exc.code, int) and exc.code else 1
                except BaseException:
                    code = 1
                finally:
                    chan.close()
                    self.proc.returncode = code

            self.reader = threading.Thread(target=serve, daemon=True, name=f"kl-worker-{name}")
            self.proc = _ThreadProc(self.reader)
            self.reader.start()

        def kill(self) -> None:
            self.chan.close()  # the worker's next receive fails and its thread ends
            self.reader.join(timeout=30)

    return ThreadWorkerProc


def workers_in_this_process(monkeypatch) -> list[str]:
    """The judge in this process (``judge_in_this_process``) and its workers too, each a thread running the
    real ``Worker`` (``_thread_worker_class``): for tests of a verdict on a kernel that does not act on its
    process (no exit, hang, patching of modules or environment, reading of files the sandbox hides).  A
    worker under a prefix (ncu, compute-sanitizer) stays a real process.  Returns the names of the workers
    started as threads."""
    from kernel_loop.measure import judge, launch

    cls = _thread_worker_class()
    real = launch.start
    names: list[str] = []

    def start(folder, name, spec, *, deadline, prefix=None, env=None, tmpdir=None, own_caches=False):
        # a thread shares this process's folders: a baselines' worker's own temporary and cache folders (own_caches)
        # are what the tests with real workers check
        if prefix:
            return real(folder, name, spec, deadline=deadline, prefix=prefix, env=env, tmpdir=tmpdir,
                        own_caches=own_caches)
        wanted = dict(env or {})
        if spec["device"] == "cpu" and spec["cfg"].get("impl") == "triton":
            wanted.setdefault("TRITON_INTERPRET", "1")  # what launch.start gives a real worker
        if "TRITON_INTERPRET" in wanted:  # read when a kernel module is imported: set here for the test's duration
            monkeypatch.setenv("TRITON_INTERPRET", wanted.pop("TRITON_INTERPRET"))
        dropped = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
        if dropped:  # a thread shares this process's environment: it cannot take a worker environment of its own
            raise AssertionError(f"worker {name!r} needs the environment {dropped}: run this test with a real worker")
        names.append(name)
        return cls(folder, name, spec["device"], deadline=deadline)

    monkeypatch.setattr(launch, "start", start)
    monkeypatch.setattr(judge, "start", start)
    return names
