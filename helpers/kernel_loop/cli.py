"""The command-line front door: ``kernel-loop <subcommand>`` / ``python3 helpers/kloop.py``.

It only dispatches.  Each loop step lives in its own module under ``steps/``, which exposes
``register(subparsers)`` (adds its parser and sets ``func``, and ``needs``: the packages it cannot write its
files without, imported here before it starts, so a missing one is refused before anything is written) and raises
``UsageError`` / ``MeasuredFailure`` on bad input or failed results.

Two things every command shares are handled here, once: a reader that closes the pipe early
(``kernel-loop kbs stats | head -1``) ends the command quietly, the Unix way, with the exit status
of a process killed by SIGPIPE; and an error message's hints name the command the way it was run
(``python3 helpers/kloop.py correctness ...`` when run from the skill folder, not ``kernel-loop``).
"""

from __future__ import annotations

import argparse
import errno
import functools
import importlib
import os
import re
import signal
import sys
from typing import Any

from . import __version__
from .common import (
    EXIT_USAGE,
    PROG,
    KernelLoopError,
    Parser,
    invocation,
    missing_module_message,
    os_error_message,
)

# Loop steps, in loop order: each is a module of kernel_loop.steps with register(subparsers).
STEPS: tuple[str, ...] = ("init", "env", "correctness", "profile", "kbs", "hypothesis", "gate", "next_version",
                          "finish", "extend", "status", "benchmark", "report", "demo")
COMMANDS = tuple("next" if s == "next_version" else s for s in STEPS)
# a quoted command line in a message, 'kernel-loop <command> ...' or `kernel-loop <command> ...` (a step named
# in prose, "after kernel-loop profile wrote it", stays as it is)
_HINT = re.compile(r"(?<=['`])kernel-loop (?=(?:" + "|".join(COMMANDS) + r")\b)")
EXIT_SIGPIPE = 128 + signal.SIGPIPE


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Measured, one-change-at-a-time GPU kernel optimization loop.",
        epilog="Exit codes: 0 success, 1 the measured result failed, 2 bad usage or environment.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for mod_name in STEPS:
        module = importlib.import_module(f".steps.{mod_name}", __package__)
        module.register(sub)
    return parser


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The CLI's parser, built once a process (its 14 steps' parsers took 10 ms a build: a test process runs the CLI
    hundreds of times).  Parsing leaves it as it was."""
    return build_parser()


def _step(func: Any) -> Any:
    """A step's function as its module holds it now (the cached parser keeps the one it was built with)."""
    return getattr(sys.modules.get(getattr(func, "__module__", ""), None), getattr(func, "__name__", ""), func)


def as_invoked(message: str) -> str:
    """``message`` with every quoted "kernel-loop <command>" hint written the way this CLI was run."""
    how = invocation()
    return message if how == PROG else _HINT.sub(how.replace("\\", "\\\\") + " ", message)


def _closed_pipe() -> int:
    """stdout's reader went away: send what is left nowhere (so the exit flush cannot fail again) and
    end as a process killed by SIGPIPE would, with no message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_SIGPIPE


def _stdout_broken(exc: OSError) -> bool:
    """Whether a broken pipe is stdout's (a reader like ``head`` exited), not a pipe to a child process."""
    if exc.errno != errno.EPIPE:
        return False
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):
        return True
    try:
        import select

        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (ImportError, AttributeError, OSError):  # no poll(): assume it was stdout
        return True


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the step is, so that it ends as after Ctrl-C: its judge and workers ended, its
    temporary folders removed (Python's own SIGTERM ends the process with neither)."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (a caller's own thread): its SIGTERM stays its own
        previous = None
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 PID` prints where a step is, every thread, on stderr (a step that hangs)
        import faulthandler

        try:
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
        except (AttributeError, OSError, ValueError, RuntimeError):  # no stderr with a file descriptor, not main thread
            pass
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    try:
        parser = _parser()
        args = parser.parse_args(argv)  # --help may meet a closed pipe too
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        for name in getattr(args, "needs", ()):  # the packages a step renders with: before it writes anything
            importlib.import_module(name)
        rc = _step(args.func)(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
    except KernelLoopError as exc:
        print(f"{PROG}: error: {as_invoked(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        print(f"{PROG}: error: {missing_module_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError as exc:
        if _stdout_broken(exc):
            return _closed_pipe()
        print(f"{PROG}: error: {os_error_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"{PROG}: error: {os_error_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        print(f"{PROG}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0 if rc is None else int(rc)


if __name__ == "__main__":
    sys.exit(main())
