"""The run configuration: ``RunConfig``, the typed view of ``<out>/run.json``, with every default
defined once, and the parsers of the values ``init`` takes (dims, extra shapes).

run.json is written once by ``init`` and never changed; every later step reads it through
``RunDir.config()``.  Keys this version does not know are kept in ``extra`` and written back
unchanged, so an older or newer run.json round-trips.

Extra shapes name only the dims they change (``parse_extra_shapes``).  The check flags (``--dims``,
``--seed``, ``--gpu``) that later steps accept only to confirm that they agree with run.json live here too.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .common import UsageError
from .profiling.inventory import Budget

SCHEMA = 1
# Defaults: the one place each is defined.
DEFAULT_SEED = 42
DEFAULT_GPU = 0
DEFAULT_ITERATIONS = 3
DEFAULT_WARMUP = 25
DEFAULT_TRIALS = 100
DEFAULT_CORRECTNESS_TRIALS = 5  # KernelBench's own count; makes an every-other-call cheat fail
DEFAULT_TIMEOUT_S = 300
DEFAULT_NCU_SET = "detailed"
DEFAULT_NCU_SECTIONS = ("WarpStateStats", "SchedulerStats", "SourceCounters")
DEVICES = ("cuda", "cpu")


@dataclass
class NcuConfig:
    set: str = DEFAULT_NCU_SET
    sections: list[str] = field(default_factory=lambda: list(DEFAULT_NCU_SECTIONS))
    clock_control: str | None = None
    cache_control: str | None = None
    extra_args: list[str] = field(default_factory=list)
    # what gets ncu's full sections in a call of many kernels (profiling.inventory.Budget); a run.json
    # written before the budget existed gets the defaults
    budget: dict[str, Any] = field(default_factory=lambda: Budget().to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> NcuConfig:
        data = dict(data or {})
        try:
            budget = Budget.from_json(data.get("budget")).to_json()
        except (TypeError, ValueError) as exc:
            raise UsageError(f"run.json {exc}") from None
        return cls(set=data.get("set") or DEFAULT_NCU_SET,
                   sections=list(data["sections"]) if data.get("sections") is not None else list(DEFAULT_NCU_SECTIONS),
                   clock_control=data.get("clock_control"), cache_control=data.get("cache_control"),
                   extra_args=[str(a) for a in data.get("extra_args") or []], budget=budget)


@dataclass
class BuildConfig:
    include_dirs: list[str] = field(default_factory=list)
    nvcc_flags: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> BuildConfig:
        data = dict(data or {})
        return cls(include_dirs=list(data.get("include_dirs") or []), nvcc_flags=list(data.get("nvcc_flags") or []))


@dataclass
class RunConfig:
    """run.json as typed values.  ``tolerance`` stays the dict ``init`` resolved (atol, rtol,
    by, source; null fields fall back to dtype defaults at check time)."""

    kernel: str
    impl: str
    dims: dict[str, int]
    kernel_type: str = "any"
    extra_shapes: list[dict[str, int]] = field(default_factory=list)
    batch_shapes: list[dict[str, int]] = field(default_factory=list)  # correctness calls each (held.other_batches)
    seed: int = DEFAULT_SEED
    tolerance: dict[str, Any] = field(default_factory=dict)
    gpu: int = DEFAULT_GPU
    device: str = "cuda"
    iterations: int = DEFAULT_ITERATIONS
    warmup: int = DEFAULT_WARMUP
    trials: int = DEFAULT_TRIALS
    correctness_trials: int = DEFAULT_CORRECTNESS_TRIALS
    ptr_size: int | None = None
    timeout_s: int = DEFAULT_TIMEOUT_S
    ncu: NcuConfig = field(default_factory=NcuConfig)
    build: BuildConfig = field(default_factory=BuildConfig)
    baseline: str | None = None
    created: str | None = None
    schema: int = SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:
        """A RunConfig from run.json's object; missing keys take the defaults above."""
        known = {f.name for f in fields(cls)} - {"extra"}
        missing = [k for k in ("kernel", "impl", "dims") if k not in data]
        if missing:
            raise UsageError(f"run.json lacks {', '.join(missing)}: it was not written by 'kernel-loop init'")
        kw: dict[str, Any] = {k: v for k, v in data.items() if k in known and v is not None}
        kw["ncu"] = NcuConfig.from_json(data.get("ncu"))
        kw["build"] = BuildConfig.from_json(data.get("build"))
        kw["dims"] = {str(k): int(v) for k, v in dict(data["dims"]).items()}
        for name in ("extra_shapes", "batch_shapes"):
            kw[name] = [{str(k): int(v) for k, v in s.items()} for s in data.get(name) or []]
        kw["tolerance"] = dict(data.get("tolerance") or {})
        if data.get("ptr_size") is None:
            kw.pop("ptr_size", None)
        for name in ("seed", "gpu", "iterations", "warmup", "trials", "correctness_trials", "timeout_s"):
            if name in kw:
                kw[name] = int(kw[name])
        cfg = cls(**kw)
        cfg.extra = {k: v for k, v in data.items() if k not in known}
        return cfg

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        extra = out.pop("extra")
        order = ["schema", "kernel", "kernel_type", "impl", "device", "dims", "extra_shapes", "batch_shapes", "seed",
                 "tolerance", "gpu", "iterations", "warmup", "trials", "correctness_trials", "ptr_size", "timeout_s", "ncu",
                 "build", "baseline", "created"]
        return {**{k: out[k] for k in order}, **extra}

    @property
    def shapes(self) -> list[dict[str, int]]:
        """The run dims, then every extra shape: what correctness checks."""
        return [dict(self.dims)] + [dict(s) for s in self.extra_shapes]


# --- values init parses ------------------------------------------------------------------------
MAX_DIM = 2**31 - 1  # the largest value one dim may take (a kernel's 32-bit index; torch's int64 sizes aside)
MAX_NUMEL = 2**63 - 1  # the product of the dims must fit a 64-bit element count


def check_dim_limits(dims: dict[str, int], what: str = "--dims", product: bool = True) -> None:
    """Refuse (exit 2) a dim beyond 2^31-1 and, with ``product``, dims whose product overflows a 64-bit count: no
    kernel runs them (torch itself fails with "Overflow when unpacking long long").  A KernelBench file's dims are
    every size constant of its module (16 hidden-layer sizes of an MLP among them), no one tensor's: its tensors'
    bytes are checked where they are made (init.check_inputs_fit), not the product."""
    for key, n in dims.items():
        if abs(n) > MAX_DIM:
            raise UsageError(f"{what}: {key}={n} exceeds 2^31-1 ({MAX_DIM}), the largest value one dim may take")
    if not product:
        return
    count = 1
    for n in dims.values():
        count *= abs(n) or 1
    if count > MAX_NUMEL:
        raise UsageError(f"{what}: {format_dims(dims)}: the product of the dims ({float(count):.3g}) exceeds "
                         f"2^63-1, a 64-bit element count: no tensor of these sizes can be made")


def parse_dims(text: str, what: str = "--dims", positive: bool = True) -> dict[str, int]:
    """``M=4096,N=8192`` -> {"M": 4096, "N": 8192}; positive ints only (any int with ``positive=False``,
    for a caller that checks the names first and the values and limits after); each at most 2^31-1, and
    their product at most 2^63-1 (``check_dim_limits``)."""
    dims: dict[str, int] = {}
    parts = [p.strip() for p in (text or "").split(",")]
    if any(parts) and not all(parts):
        raise UsageError(f"{what} {text!r} has an empty entry (two commas, or one at an end): give NAME=VALUE pairs "
                         "separated by single commas, such as M=4096,N=8192")
    for part in [p for p in parts if p]:
        key, sep, val = part.partition("=")
        key, val = key.strip(), val.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"{what}: '{part}' is not NAME=VALUE (for example {what} M=4096,N=8192)")
        try:
            n = int(val)
        except ValueError:
            raise UsageError(f"{what}: {key}={val} is not an integer") from None
        if positive and n <= 0:
            raise UsageError(f"{what}: {key}={n} must be a positive integer")
        if key in dims:
            raise UsageError(f"{what}: {key} is given twice")
        dims[key] = n
    if not dims:
        raise UsageError(f"{what} is empty: give NAME=VALUE pairs such as M=4096,N=8192")
    if positive:  # a caller that checks the names first checks the limits after them
        check_dim_limits(dims, what)
    return dims


def batch_shapes(dims: dict[str, int], shapes: list[dict[str, int]],
                 complete: Callable[[dict[str, int]], dict[str, int]] | None, free: list[str] = ()) -> list[dict[str, int]]:
    """A KernelBench file's run dims at other batch sizes (one, a user's single sample: a red team's kernel had a path
    for one row that forgot the bias; half its ``batch_size``; and a quarter more made odd: a red team's kernel that
    left a tail of rows past its tile of 8 passed at 40 after 32), ``complete``
    making each whole: correctness calls them after the run's shapes on the instance those called (held.other_batches),
    as a user's next batch is often of another size (a red team's kernel sized by its first call passed).  No shapes
    for other refs (``complete`` None) or without a batch_size; one an --extra-shapes entry is already is not repeated
    (an agent's trial gave batch_size=333, and the sizes one, half and odd had all been dropped).  Last, where some
    dims reach get_inputs() alone (``free``: kb_dims.input_only), one shape with each made a quarter smaller and odd,
    at half the batch: a user's input of another width meets the same instance (a red team's ReLU left the tail past
    its last whole block of 1024 unwritten, right at every size a multiple of it)."""
    b = dims.get("batch_size", 0)
    if complete is None:
        return []
    own = [complete({"batch_size": v}) for v in sorted({1, b // 2, (b + max(1, b // 4)) | 1} - {0, b})] if b > 0 else []
    if free:
        own.append(complete({**({"batch_size": max(1, b // 2)} if b > 0 else {}), **{n: dims[n] * 3 // 4 | 1 for n in free}}))
    return [s for s in own if s not in shapes]


def parse_extra_shapes(text: str | None, dims: dict[str, int],
                       complete: Callable[[dict[str, int]], dict[str, int]] | None = None) -> list[dict[str, int]]:
    """``"M=333;N=1000,M=64"``: ``;``-separated shapes, each naming only the dims it changes; the dims it
    does not name keep the run's values, and each returned shape is complete (every run dim).

    ``complete(changes) -> shape``, when given, checks the names and values and builds the shape (a
    KernelBench ref: names are the file's size constants and constants derived from them follow); by
    default every name must be a run dim and the shape is ``{**dims, **changes}``."""
    shapes = []
    for chunk in [c for c in (text or "").split(";") if c.strip()]:
        changes = parse_dims(chunk, "--extra-shapes", positive=complete is None)
        if complete is not None:
            shapes.append(complete(changes))
            continue
        unknown = [k for k in changes if k not in dims]
        if unknown:
            raise UsageError(f"--extra-shapes: '{chunk.strip()}' names {', '.join(unknown)}, not a run dim (the run "
                             f"dims: {', '.join(dims)}); a shape names only the dims it changes")
        shapes.append({**dims, **changes})
    return shapes


def format_dims(dims: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items())


# --- flags that later steps may repeat only to confirm them ---------------------------------------
_CHECK_HELP = {"dims": "must equal run.json dims (they are fixed for the run)",
               "seed": "must equal run.json seed", "gpu": "must equal run.json gpu"}


def add_check_flags(parser: argparse.ArgumentParser, names=("dims", "seed", "gpu")) -> None:
    """Optional flags that must agree with run.json (the run configuration is fixed)."""
    for n in names:
        parser.add_argument(f"--{n}", type=str if n == "dims" else int, default=None, help=_CHECK_HELP[n])


def check_flags_against_run(cfg: RunConfig, args: argparse.Namespace) -> None:
    """Refuse (exit 2) flags that contradict the fixed run configuration."""
    for key in _CHECK_HELP:
        given = getattr(args, key, None)
        if given is None:
            continue
        fixed = getattr(cfg, key)
        if key == "dims":
            if parse_dims(given) != fixed:
                raise UsageError(f"dims are fixed for this run: {format_dims(fixed)} (got {given}); "
                                 "use a new run directory for other dims")
        elif given != fixed:
            raise UsageError(f"{key} is fixed for this run: {key}={fixed} (got {given})")
