"""Starting and talking to workers: each in its own process group, over a socket in the judge's folder.

``WorkerProc`` starts ``[prefix...] python -m kernel_loop.measure.worker`` with an environment that holds
no kernel-loop variable (the record key above all), forwards its output and keeps the tail for error
messages, and turns a crash, a hang or a broken protocol into ``WorkerFailed`` and the kernel's own
exception into ``KernelFailed``.  ``Started`` starts the workers a mode needs first, before the judge
imports torch, so that their imports overlap.  ``import_kernel`` asks a worker to import (or build) a
kernel; ``prebuild`` builds every version's library at once, each in a short-lived worker of its own,
so that the timing worker then loads them from the cache.  Each worker is told, in its first request, what
to hide from itself (``sandbox.policy``: the record key and the run directory, all but the kernel files
and ref.py), and says whether it could.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from .. import proctree, records
from ..common import MeasuredFailure, UsageError, progress
from ..config import RunConfig
from ..profiling.kernel_names import builds_cpp_extension
from . import libraries, protocol, sandbox

CONNECT_TIMEOUT_S = 300.0
SANDBOX_ENV = "KERNEL_LOOP_SANDBOX"  # "off": the workers run unsandboxed (every step then says so)


class WorkerFailed(MeasuredFailure):
    """The worker crashed, hung or broke the protocol."""


class KernelFailed(MeasuredFailure):
    """The kernel raised in a call (its message is the worker's)."""


# --- a worker process ------------------------------------------------------------------------
def worker_env(extra: dict | None = None) -> dict:
    """The worker's environment: the judge's, less every kernel-loop variable (the record key above all)."""
    from .session import judge_env

    env = {k: v for k, v in judge_env().items() if not k.startswith("KERNEL_LOOP_")}
    env.update(extra or {})
    return env


# a process group of its own (the judge ends it whole), not a session: a session leader is a mark of the harness, since
# a process a user starts from a shell leads its group but not its session (a red team's kernel read os.getsid)
OWN_GROUP: dict = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}


EXIT_WAIT_S = 2.0  # a worker's exit after its goodbye (the ncu worker waits for its report: a wait of its own)


class WorkerProc:
    """A started worker: its process (in its own group), its channel, the tail of its output."""

    def __init__(self, folder: Path, name: str, device: str, *, prefix: list[str] | None = None,
                 env: dict | None = None, deadline: float, policy: dict | None = None,
                 libs: dict[str, list] | None = None):
        self.name = name
        self.policy = policy
        self.tmpdir = (env or {}).get("TMPDIR")  # its own folder (start), where the kept libraries are written
        self.libs = libs or {}  # kernel path -> its kept load_inline libraries (libraries.stored)
        self.built: list = []  # what load_inline built in it, as it said (libraries.keep takes only what it may)
        self.isolated: tuple[bool, str] | None = None  # what the worker said of its sandbox
        self.sock_path = folder / f"{secrets.token_hex(6)}.sock"  # a name that says nothing of the worker's role
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.sock_path))
        self.listener.listen(1)
        cmd = list(prefix or []) + [sys.executable, "-m", "kernel_loop.measure.worker"]
        self.tail: deque[str] = deque(maxlen=200)
        self.quiet_beats = False  # its import's heartbeat lines kept in the tail only (prebuild says one for all)
        self.deadline = deadline
        self.timeout_s = max(0.0, deadline - time.monotonic())
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=worker_env({protocol.SOCKET_ENV: str(
                                             self.sock_path), **(env or {})}), text=True, errors="replace",
                                         **OWN_GROUP)
        except OSError as exc:
            raise UsageError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()
        self.chan: protocol.Channel | None = None
        self.device = device
        self.folder = folder

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip("\n"))
            if not (self.quiet_beats and line.startswith("[kernel-loop] still importing")):
                sys.stderr.write(line)
        sys.stderr.flush()

    def _connect(self) -> protocol.Channel:
        if self.chan is None:
            self.listener.settimeout(0.2)
            while True:
                try:
                    conn, _ = self.listener.accept()
                    break
                except TimeoutError:
                    if self.proc.poll() is not None:
                        raise WorkerFailed(self.death("before it connected")) from None
                    if time.monotonic() > min(self.deadline, time.monotonic() + CONNECT_TIMEOUT_S):
                        raise WorkerFailed(f"the {self.name} worker did not start in time") from None
            self.chan = protocol.Channel(conn)
        return self.chan

    def death(self, when: str) -> str:
        rc = self.proc.poll()
        tail = "\n".join(self.tail)
        tail = f"\n--- last output of the {self.name} worker ---\n{tail}" if tail.strip() else ""
        sig = proctree.signal_name(rc)
        if sig:
            return f"the {self.name} worker was killed by {sig} {when} (a crash in the kernel or its launch){tail}"
        return f"the {self.name} worker exited with status {rc} {when}{tail}"

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        chan = self._connect()
        left = self.deadline - time.monotonic()
        if left <= 0:  # the time ran out between calls: the judge's own work and the calls so far took it all
            raise WorkerFailed(f"timed out after {self.timeout_s:.0f} s (run.json timeout_s), between two calls: the "
                               "calls so far and the judge's own checks (the reference, in float64 too, on every "
                               "condition) took it all; at large sizes, above all on the CPU, that is the judge's "
                               "work, not a hang: a new run with smaller --dims or a larger --timeout")
        try:
            chan.send(msg)
            reply = chan.recv(timeout=left)
        except TimeoutError:
            self.kill()
            raise WorkerFailed(f"timed out after {self.timeout_s:.0f} s (run.json timeout_s) while the {self.name} "
                               f"worker ran '{msg.get('op')}' (the kernel hangs or is far too slow); the worker and "
                               "every process it started were ended") from None
        except protocol.ProtocolError:
            time.sleep(0.2)
            raise WorkerFailed(self.death(f"during '{msg.get('op')}'")) from None
        built = reply.pop("built", None)
        if isinstance(built, list):
            self.built = (self.built + built)[:libraries.MAX_LIBRARIES]
        if not reply.get("ok"):
            err = str(reply.get("error") or "failed")
            if reply.get("usage"):
                raise UsageError(err)
            raise KernelFailed(err)
        return reply

    def hello(self, impl: str) -> dict[str, Any]:
        reply = self.request({"op": "hello", "device": self.device, "folder": str(self.folder), "impl": impl,
                              "sandbox": self.policy})
        self.isolated = (bool(reply.get("isolated")), str(reply.get("isolation") or "the worker did not say"))
        return reply

    def close(self, wait_s: float = EXIT_WAIT_S) -> int | None:
        """Ask it to leave, then end its group and every process it started; returns its exit status.  What it holds
        is let go before it replies, so a worker still exiting ``wait_s`` later is killed (a kernel's slow finalizer
        held every step 30 s a worker; torch.compile's baselines worker took 4 s)."""
        if self.chan is not None and self.proc.poll() is None:
            try:
                self.chan.send({"op": "bye"})
                self.chan.recv(timeout=5.0)
            except (protocol.ProtocolError, TimeoutError, OSError, ValueError):
                pass
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.reader.join(timeout=5)
        if self.chan is not None:
            self.chan.close()
        self.listener.close()


def kernel_files(spec: dict[str, Any]) -> list[str]:
    """Every kernel file a step's spec names (the one measured, or the solution and every version)."""
    files = [spec.get("kernel"), (spec.get("solution") or {}).get("kernel")]
    files += [v.get("kernel") for v in spec.get("versions") or []]
    return [str(f) for f in files if f]


def sandbox_policy(spec: dict[str, Any], tmpdir: str | None = None) -> dict[str, Any] | None:
    """What a worker of this step hides from itself (the record key and the run directory, whose kernel files
    and ref.py it may still read) and where it may write besides the build caches (its own temporary folder).
    None when the user switched the sandbox off."""
    if os.environ.get(SANDBOX_ENV, "").strip().lower() in ("off", "0", "no"):
        return None
    root = Path(spec["run_root"])
    return sandbox.policy([records.key_path(), root], [*kernel_files(spec), root / "ref.py"],
                          [tmpdir] if tmpdir else [])


# what torch.compile, Triton, CUDA and torch's own JIT read and write between processes: a baselines' worker gets
# every one of them in a folder of its own, made after the kernels' workers ended, so no kernel prepares them
BASELINE_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "CUDA_CACHE_PATH",
                   "PYTORCH_KERNEL_CACHE_PATH", "XDG_CACHE_HOME")


def start(folder: Path, name: str, spec: dict[str, Any], *, deadline: float, prefix: list[str] | None = None,
          env: dict | None = None, tmpdir: str | None = None, own_caches: bool = False) -> WorkerProc:
    """Start a worker.  ``tmpdir`` is the step's folder for temporary files: the worker gets a folder of its own
    in it (TMPDIR), the only place besides the build caches where its sandbox lets it write, and which no
    other worker reads; ``own_caches`` puts every cache of BASELINE_CACHES there too (a baselines' worker)."""
    extra = dict(env or {})
    if spec["device"] == "cpu" and spec["cfg"].get("impl") == "triton":
        extra.setdefault("TRITON_INTERPRET", "1")
    own = None
    if tmpdir:  # its own temporary folder, made before its sandbox's rules (see sandbox.py)
        own = tempfile.mkdtemp(dir=tmpdir)  # a name that says nothing of its role
        extra.update(TMPDIR=own, TEMP=own, TMP=own)
        if own_caches:
            for var in BASELINE_CACHES:
                extra[var] = os.path.join(own, var.lower())
                os.makedirs(extra[var], exist_ok=True)
    return WorkerProc(folder, name, spec["device"], prefix=prefix, env=extra, deadline=deadline,
                      policy=sandbox_policy(spec, own), libs=spec.get("libraries"))


class Started:
    """The judge's folder and the workers each mode needs first, started before the judge imports torch."""

    def __init__(self, spec: dict[str, Any]):
        self.deadline = time.monotonic() + float(spec.get("timeout_s") or 300)
        self.tmp = protocol.private_dir("kl-judge-", spec.get("scratch"))
        self.folder = Path(self.tmp.name)
        # the workers' temporary files land here, and go when the judge ends (whatever a kernel left)
        self.worker_tmp = tempfile.mkdtemp()  # a kernel reads its TMPDIR: the names say nothing of the harness
        self.workers: dict[str, WorkerProc] = {}
        mode = spec["mode"]
        if mode == "profile":
            self.workers["ncu"] = start(self.folder, "ncu", spec, deadline=self.deadline, prefix=spec["ncu_prefix"],
                                        tmpdir=self.worker_tmp)
        self.workers["kernel"] = start(self.folder, "kernel", spec, deadline=self.deadline,
                                       prefix=spec.get("prefix") if mode == "correctness" else None,
                                       env=spec.get("worker_env") if mode == "correctness" else None,
                                       tmpdir=self.worker_tmp)

    def close(self) -> None:
        for w in self.workers.values():
            w.kill()
        self.tmp.cleanup()
        shutil.rmtree(self.worker_tmp, ignore_errors=True)


def import_kernel(worker: WorkerProc, kid: str, path: Path, kind: str, cfg: RunConfig) -> dict[str, Any]:
    """Import (or build) a kernel in ``worker``; a .py that builds with load_inline gets the libraries its version
    kept (libraries.hand, written into the worker's folder just before), and its new builds are reported."""
    libs = {}
    if kind in ("py", "kb") and builds_cpp_extension(Path(path).read_text(encoding="utf-8", errors="replace")):
        libs = {"libs": libraries.hand(worker.libs.get(str(path)), worker.tmpdir)}
    return worker.request({"op": "import", "id": kid, "path": str(path), "kind": kind, "impl": cfg.impl, **libs,
                           "build": {"include_dirs": cfg.build.include_dirs, "nvcc_flags": cfg.build.nvcc_flags}})


BUILD_BEAT_S = 15.0  # a progress line this often while the versions' libraries build


def prebuild(judge: Any, entries: dict[str, tuple[Path, str]], meanwhile: Any = None) -> Any:
    """Build every version's library (nvcc, load_inline) at once, each in its own short-lived worker, so that
    the timing worker loads them from the cache one after another without waiting on each build.  ``meanwhile``
    (no arguments) runs here while they build, or before, where nothing is built (benchmark: the timing worker's
    start and the judge's first data set, which need no library); what it returns is returned."""
    todo: dict[str, tuple[Path, str]] = {}
    seen: set[tuple[bytes, str]] = set()
    same = 0
    for n, (path, kind) in entries.items():
        data = Path(path).read_bytes()
        if not (kind == "cu" or builds_cpp_extension(data.decode("utf-8", errors="replace"))):
            continue
        if (data, kind) in seen:  # the solution is a copy of its version: one build serves both
            same += 1
            continue
        kept = judge.spec.get("libraries", {}).get(str(path))
        if kept and all(Path(lib["path"]).is_file() for lib in kept):  # its correctness kept them: nothing to build
            continue
        seen.add((data, kind))
        todo[n] = (path, kind)
    if len(todo) < 2:
        return meanwhile() if meanwhile is not None else None
    progress(f"building {len(todo)} versions' libraries in parallel before timing"
             + (f" ({same} more {'is' if same == 1 else 'are'} byte-identical to one of them)" if same else ""))
    t0 = time.monotonic()
    workers = []
    for n, (path, kind) in todo.items():
        w = judge.start_worker(f"build-{n}")
        w.quiet_beats = True
        workers.append((w, n, path, kind))
    errors: list[str] = []

    def one(w: WorkerProc, n: str, path: Path, kind: str) -> None:
        try:
            w.hello(judge.cfg.impl)
            import_kernel(w, n, path, kind, judge.cfg)
        except (MeasuredFailure, UsageError) as exc:  # the timing worker reports it again, in its row
            errors.append(f"{n}: {exc}")

    threads = [threading.Thread(target=one, args=a) for a in workers]
    for t in threads:
        t.start()
    got = meanwhile() if meanwhile is not None else None  # (where it raises, Judge.close ends the builds' workers)
    beat = t0
    while any(t.is_alive() for t in threads):  # one line for all the builds, not one per worker every 15 s
        time.sleep(0.1)
        if time.monotonic() - beat >= BUILD_BEAT_S:
            beat = time.monotonic()
            busy = [n for (_w, n, *_), t in zip(workers, threads, strict=True) if t.is_alive()]
            progress(f"still building {', '.join(busy)} ({beat - t0:.0f} s; load_inline's cache: $TORCH_EXTENSIONS_DIR)")
    for t in threads:
        t.join()
    for w, *_ in workers:
        judge.end_worker(w)
    progress(f"built {len(todo) - len(errors)} of {len(todo)} versions' libraries in {time.monotonic() - t0:.1f} s"
             + (" (the failures are reported with their versions)" if errors else ""))
    return got
