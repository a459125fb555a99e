"""The command-line front door: ``kernel-loop <subcommand>`` / ``python3 helpers/kloop.py``.

It only dispatches.  Each loop step lives in its own module under ``steps/``, which exposes
``register(subparsers)`` (adds its parser and sets ``func``) and raises
``UsageError`` / ``MeasuredFailure`` on bad input or failed results.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .common import EXIT_USAGE, PROG, KernelLoopError, missing_module_message, os_error_message

# Loop steps, in loop order: each is a module of kernel_loop.steps with register(subparsers).
STEPS: tuple[str, ...] = ("init", "env", "correctness", "profile", "kbs", "hypothesis", "gate", "next_version",
                          "finish", "extend", "status", "benchmark", "report", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        rc = args.func(args)
    except KernelLoopError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        print(f"{PROG}: error: {missing_module_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"{PROG}: error: {os_error_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0 if rc is None else int(rc)


if __name__ == "__main__":
    sys.exit(main())
