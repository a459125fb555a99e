"""``gate <out>/vK [--final] [--structural | --dry-run] [--verbose]``: run the iteration gate.

The gate is the bash script scripts/check_iteration_gate.sh (an installed package carries a
copy, found by ``rundir.gate_script``).  This step runs it with the same arguments and hands
back its stdout, stderr and exit code unchanged: it adds no checks and no output of its own, so
``kernel-loop gate`` is the gate, for installs that have no scripts/ folder to call directly.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from ..rundir import gate_script

FLAGS = ("--final", "--structural", "--dry-run", "--verbose")


class _HelpWithChecks(argparse.Action):
    """``-h``: this parser's usage, then the gate's own --help (its checks and exit codes)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        print(f"\n--- {gate_script().name} --help ---\n", flush=True)
        sys.exit(subprocess.run(["bash", str(gate_script()), "--help"]).returncode)


def register(sub) -> None:
    p = sub.add_parser(
        "gate",
        add_help=False,
        help="run the iteration gate (check_iteration_gate.sh) on <out>/vK",
        description="Run the iteration gate on a version folder: transition mode checks vK and advances "
        "current_iteration.txt to v(K+1); --final audits v0..vN; --structural and --dry-run only read. Its output and "
        "exit code are the gate's, unchanged.",
        epilog="Exit codes (the gate's): 0 every check passed, 1 a check failed, 2 usage error.",
    )
    p.add_argument("-h", "--help", action=_HelpWithChecks, help="show this help and the gate's checks, then exit")
    p.add_argument("vdir", metavar="<out>/vK", help="the version folder to check")
    p.add_argument("--final", action="store_true", help="final audit of v0..vN (writes nothing)")
    p.add_argument("--structural", action="store_true", help="structural checks 1-7 only; read-only")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="every check, signatures verified, but write nothing (no state, no gate record)")
    p.add_argument("--verbose", action="store_true", help="also print a [PASS] line for every passed check")
    p.set_defaults(func=run)


def run(args) -> int:
    argv = [args.vdir, *(f for f in FLAGS if getattr(args, f[2:].replace("-", "_")))]
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run(["bash", str(gate_script()), *argv]).returncode
