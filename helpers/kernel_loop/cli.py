"""The command-line front door: ``kernel-loop <subcommand>`` / ``python3 helpers/kloop.py``.

It only dispatches.  Each loop step lives in its own module, which exposes
``register(subparsers)`` (adds its parser and sets ``func``) and raises
``UsageError`` / ``MeasuredFailure`` on bad input or failed results.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .common import EXIT_USAGE, PROG, KernelLoopError

# Loop steps, in loop order: (module, one-line summary shown by --help).
STEPS: list[tuple[str, str]] = [
    ("init", "create a run directory with its fixed configuration"),
    ("env", "check the GPU, toolchain and profiler; measure roofline peaks"),
    ("correctness", "check the current version against ref.py"),
    ("profile", "profile the current version with Nsight Compute"),
    ("kbs", "query the knowledge base; draft kbs_evidence.md"),
    ("hypothesis", "draft vK/hypothesis.txt from the measurements"),
    ("next_version", "create v(K+1) after the gate has advanced the state"),
    ("status", "where the run stands and the next command"),
    ("benchmark", "time the best version against PyTorch baselines"),
    ("report", "render final_report.md from the measured sidecars"),
    ("demo", "re-run a bundled example (no GPU needed)"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Measured, one-change-at-a-time GPU kernel optimization loop.",
        epilog="Exit codes: 0 success, 1 the measured result failed, 2 bad usage or environment.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for mod_name, _summary in STEPS:
        module = importlib.import_module(f".{mod_name}", __package__)
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
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0 if rc is None else int(rc)


if __name__ == "__main__":
    sys.exit(main())
