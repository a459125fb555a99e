"""``env``: check the GPU, toolchain and profiler; measure roofline peaks (see ``envcheck``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..common import UsageError
from ..envcheck import check_and_write
from ..rundir import RunDir
from ..vocab import IMPLS


def run_env(args: argparse.Namespace) -> int:
    impl, cfg_build, out, gpu = None, None, None, args.gpu
    if args.out:
        out = Path(args.out).expanduser()
        if (out / "run.json").is_file():
            cfg = RunDir.open(out).config()
            impl, cfg_build = cfg.impl, {"include_dirs": cfg.build.include_dirs}
            gpu = cfg.gpu if gpu is None else gpu
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {args.out} is a file: give a folder to write env.json and env_check.md into")
        out.mkdir(parents=True, exist_ok=True)
    if args.impl:
        impl = args.impl
    check_and_write(0 if gpu is None else gpu, impl, out, cfg_build, as_json=args.json, echo=True)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "env", help="check the GPU, toolchain and profiler; measure roofline peaks",
        description="Report the GPU, driver, CUDA/nvcc/ncu and Python package versions, whether ncu can read "
                    "performance counters, and measured peaks: device-to-device copy bandwidth at 256 MiB, 1 GiB "
                    "and 4 GiB (as free GPU memory allows; every size is listed, and the fastest is the copy peak "
                    "every roofline uses) and bf16/fp32 matmul TFLOP/s.",
        epilog="Exit codes: 0 every requirement met, 2 something required is missing (the report says what to "
               "install). Inside a run directory (--out with run.json) the run's impl and GPU are used.")
    p.add_argument("--gpu", type=int, default=None, help="CUDA device index (default: run.json gpu, else 0)")
    p.add_argument("--impl", choices=IMPLS, default=None, help="check the requirements of this implementation")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of markdown")
    p.add_argument("--out", default=None, help="folder to write env.json and env_check.md into")
    p.set_defaults(func=run_env)
