"""``init``: create a run directory with its fixed configuration (run.json), ref.py and v0.

run.json is written once.  Re-running init with the same configuration is a no-op; a
different configuration is refused with the differing keys.  ``check_flags_against_run``
lets later steps accept optional --dims/--seed/--gpu only to confirm they agree with run.json.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import envcheck, kb_bytes, kb_dims, records
from ..common import (
    UsageError,
    atomic_write_text,
    command,
    now_iso,
    progress,
    read_json,
    sha256_file,
    warn,
    write_json,
)
from ..config import (
    DEFAULT_CORRECTNESS_TRIALS,
    DEFAULT_GPU,
    DEFAULT_ITERATIONS,
    DEFAULT_NCU_SECTIONS,
    DEFAULT_NCU_SET,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TRIALS,
    DEFAULT_WARMUP,
    DEVICES,
    BuildConfig,
    NcuConfig,
    RunConfig,
    batch_shapes,
    check_dim_limits,
    format_dims,
    parse_dims,
    parse_extra_shapes,
)
from ..kbs import family as kfamily
from ..profiling.inventory import Budget
from ..profiling.kernel_names import builds_cpp_extension
from ..rundir import RunDir, copy_new, what_path_is
from ..sidecars import RUN_JSON
from ..vocab import IMPL_SUFFIXES, IMPLS, KERNEL_TYPES

_VOLATILE = ("created", "batch_shapes")  # not compared when re-running init (runs made before batch_shapes have none)
# --device cpu: tensors the problem draws beyond this make each correctness trial take minutes (warned at init)
CPU_WARN_BYTES = 256 * 2**20


def inspect_ref(path: Path) -> dict[str, Any]:
    """Parse ref.py without importing it: what it defines, literal atol/rtol/rel_l2 and, for a KernelBench
    file, its dims (``kb_dims``: the size constants by name, tuple elements as ``T_i``, axis arguments apart)."""
    _require_file(path, "--ref", "the ref.py file")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise UsageError(f"--ref {path} does not parse: {exc}") from None
    names = {node.name: node for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    consts = kb_dims.constants(tree)
    kernelbench = "Model" in names and "get_inputs" in names
    setup_params = None
    if isinstance(names.get("setup"), (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = names["setup"].args
        if not (a.vararg or a.kwarg):  # setup(**dims) takes any dims: nothing to check
            n_default = len(a.defaults)
            positional = a.posonlyargs + a.args
            required = [x.arg for x in positional[:len(positional) - n_default]]
            required += [x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None]
            setup_params = {"all": [x.arg for x in positional + a.kwonlyargs], "required": required}
    if "reference" not in names and not kernelbench:
        raise UsageError(f"--ref {path} defines neither reference(**kwargs) nor a KernelBench Model with "
                         "get_inputs() (see references/kernel_abi.md)")
    tol = {k: consts.get(k) for k in ("atol", "rtol", "rel_l2")}
    for k, v in tol.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise UsageError(f"--ref {path}: {k} must be a number, got {v!r}")
    kernelbench = kernelbench and "reference" not in names
    info = {"kernelbench": kernelbench, "has_setup": "setup" in names,
            "atol": tol["atol"], "rtol": tol["rtol"], "rel_l2": tol["rel_l2"], "setup_params": setup_params,
            "tree": tree}
    if kernelbench and "setup" not in names:
        info["kb_tree"] = tree  # its module constants are the dims (kb_dims)
        kb_dims.flatten_dims(kb_dims.size_constants(tree))  # a tuple element named like a constant: refused now
    return info


def _require_file(path: Path, flag: str, want: str) -> None:
    """Refuse a path that is not a readable regular file, saying what it is (a directory, a device, absent)."""
    if not (path.is_file() and os.access(path, os.R_OK)):
        raise UsageError(f"{flag} {path} {what_path_is(path)}: give {want}")


def _is_kb(ref_info: dict[str, Any]) -> bool:
    """A KernelBench ref whose module constants are the dims (one with its own setup() takes --dims)."""
    return bool(ref_info.get("kernelbench")) and not ref_info.get("has_setup")


def check_dims_against_ref(dims: dict[str, int], ref_info: dict[str, Any], what: str = "--dims") -> None:
    """Dims must fit ref.py: setup()'s parameters (all required ones named, no unknown ones; ``device``
    is supplied by the helpers), or for a KernelBench file its size constants (``kb_dims.check_changes``)."""
    params = ref_info.get("setup_params")
    if params is not None:
        accepted = set(params["all"]) - {"device"}
        unknown = [d for d in dims if d not in accepted]
        missing = [p for p in params["required"] if p not in dims and p != "device"]
        if unknown or missing:
            parts = ([f"ref.py setup() takes no {', '.join(unknown)}"] if unknown else []) + \
                    ([f"setup() needs {', '.join(missing)}"] if missing else [])
            raise UsageError(f"{what} {format_dims(dims)} does not match ref.py: {'; '.join(parts)} "
                             f"(setup's parameters: {', '.join(sorted(accepted)) or 'none'})")
    elif _is_kb(ref_info):
        kb_dims.check_changes(ref_info["kb_tree"], dims, what)


def _kb_checked(changes: dict[str, int], what: str, tree: ast.Module) -> dict[str, int]:
    """The dims one --dims or --extra-shapes entry changes in a KernelBench file, parsed with any int value:
    names are checked first (an axis is refused as such, whatever its value), then the values (positive)."""
    kb_dims.check_changes(tree, changes, what)
    bad = [f"{k}={v}" for k, v in changes.items() if v <= 0]
    if bad:
        raise UsageError(f"{what}: {', '.join(bad)} must be a positive integer")
    check_dim_limits(changes, what, product=False)
    return changes


def run_shapes(args: argparse.Namespace, ref_info: dict) -> tuple[dict[str, int], list[dict[str, int]], list]:
    """The run dims, the extra shapes and the batch shapes (config.batch_shapes), each complete.  --dims is required
    except for a KernelBench file, whose size constants are the dims (--dims changes some by name).  Each
    --extra-shapes entry names only the dims it changes; the others keep the run dims, and in a KernelBench file
    constants derived from the changed ones follow (``kb_dims.shape_dims``)."""
    complete = None
    if _is_kb(ref_info):
        tree = ref_info["kb_tree"]
        pinned = {} if args.dims is None else _kb_checked(parse_dims(args.dims, "--dims", positive=False),
                                                          "--dims", tree)
        dims = kb_dims.shape_dims(tree, pinned)
        if not dims:
            raise UsageError("the KernelBench file has no module-level size constants: give --dims")

        def complete(changes: dict[str, int]) -> dict[str, int]:
            return kb_dims.shape_dims(tree, {**pinned, **_kb_checked(changes, "--extra-shapes", tree)})

        check_dim_limits(dims, "--dims" if args.dims else "the size constants of ref.py", product=False)
        shapes = parse_extra_shapes(args.extra_shapes, dims, complete)
    else:
        if args.dims is None:
            raise UsageError("--dims is required: the problem size, e.g. --dims M=4096,N=8192")
        dims = parse_dims(args.dims)
        shapes = parse_extra_shapes(args.extra_shapes, dims)
    for shape in shapes:  # complete shapes: a changed dim and those it keeps or derives, together
        check_dim_limits(shape, "--extra-shapes", product=not _is_kb(ref_info))
    free = kb_dims.input_only(ref_info["kb_tree"], dims) if complete is not None else []
    return dims, shapes, batch_shapes(dims, shapes, complete, free)


def check_inputs_fit(ref_info: dict[str, Any], shapes: list[dict[str, int]], gpu: dict[str, Any] | None) -> None:
    """Refuse dims whose inputs clearly exceed the GPU's memory: known for a KernelBench ref (its get_inputs()
    read without running it) on a GPU whose memory the environment check measured; otherwise nothing is known."""
    mem_gib = (gpu or {}).get("memory_gib")
    if not _is_kb(ref_info) or not isinstance(mem_gib, (int, float)) or mem_gib <= 0:
        return
    for shape in shapes:
        need = kb_bytes.input_bytes(ref_info["kb_tree"], shape)
        if need > mem_gib * 2**30:
            raise UsageError(f"at dims {format_dims(shape)} the inputs get_inputs() makes take at least "
                             f"{need / 2**30:.3g} GiB, and {gpu.get('name') or 'the GPU'} has {mem_gib:.3g} GiB: "
                             "give smaller --dims (a KernelBench constant is changed by name, e.g. "
                             f"--dims {next(iter(shape))}=...)")


def _size_text(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def warn_large_cpu_inputs(ref_info: dict[str, Any], dims: dict[str, int], extra: list[dict[str, int]]) -> None:
    """For the cpu test mode, one warning line when the tensors the problem draws at its largest shape
    (``kb_dims``' lower bound: get_inputs()'s for a KernelBench ref, else setup()'s) exceed CPU_WARN_BYTES:
    correctness then computes for minutes on the CPU with nothing else said.  Never refuses."""
    kb = _is_kb(ref_info)
    count = kb_bytes.input_bytes if kb else kb_bytes.setup_bytes
    need, shape = max(((count(ref_info["tree"], s), s) for s in [dims, *extra]), key=lambda t: t[0])
    if need > CPU_WARN_BYTES:
        flag = "--dims" if shape is dims else "--extra-shapes"
        warn(f"at dims {format_dims(shape)} the {'inputs get_inputs()' if kb else 'tensors setup()'} makes take "
             f"at least {_size_text(need)}: the cpu test mode (--device cpu) computes every correctness call on "
             f"the CPU, which at this size can take minutes; give smaller {flag} for the cpu mode (under "
             f"{_size_text(CPU_WARN_BYTES)}), e.g. {flag} {next(iter(shape))}=...")


def resolve_run_tolerance(cli_atol, cli_rtol, ref_atol, ref_rtol, cli_rel_l2=None, ref_rel_l2=None) -> dict[str, Any]:
    """run.json tolerance: per field CLI > ref.py; null fields fall back to dtype defaults at check time."""
    out: dict[str, Any] = {"atol": None, "rtol": None, "rel_l2": None,
                           "by": {"atol": None, "rtol": None, "rel_l2": None}}
    for field, cli, ref in (("atol", cli_atol, ref_atol), ("rtol", cli_rtol, ref_rtol),
                            ("rel_l2", cli_rel_l2, ref_rel_l2)):
        if cli is not None:
            out[field], out["by"][field] = float(cli), "cli"
        elif ref is not None:
            out[field], out["by"][field] = float(ref), "ref.py"
    by = set(out["by"].values())
    out["source"] = "cli" if "cli" in by else "ref.py" if "ref.py" in by else "dtype-default"
    return out


def _budget(text: str | None) -> dict[str, Any]:
    try:
        return Budget.parse(text).to_json()
    except ValueError as exc:
        raise UsageError(f"--ncu-budget: {exc}") from None


def build_config(args: argparse.Namespace, ref_info: dict, kernel_type: str) -> dict[str, Any]:
    dims, extra_shapes, others = run_shapes(args, ref_info)
    tolerance = resolve_run_tolerance(args.atol, args.rtol, ref_info["atol"], ref_info["rtol"],
                                      args.rel_l2, ref_info["rel_l2"])
    if args.preset == "kernelbench":
        tolerance = {**tolerance, "preset": "kernelbench", "source": "kernelbench preset"}
    cfg = RunConfig(
        kernel=args.kernel, impl=args.impl, dims=dims,
        kernel_type=kernel_type,
        extra_shapes=extra_shapes, batch_shapes=others, seed=args.seed,
        tolerance=tolerance,
        gpu=args.gpu, device=args.device, iterations=args.iterations, warmup=args.warmup, trials=args.trials,
        correctness_trials=args.correctness_trials, ptr_size=args.ptr_size, timeout_s=args.timeout,
        ncu=NcuConfig(set=args.ncu_set, sections=list(args.ncu_section or DEFAULT_NCU_SECTIONS),
                      clock_control=args.clock_control, cache_control=args.cache_control,
                      budget=_budget(args.ncu_budget)),
        build=BuildConfig(include_dirs=[str(Path(d).expanduser().resolve()) for d in args.include_dir or []],
                          nvcc_flags=list(args.nvcc_flag or [])),
        baseline=str(Path(args.baseline).expanduser().resolve()), created=now_iso())
    return cfg.to_json()


def _check_kernel_name(name: str) -> None:
    if not name.strip():
        raise UsageError("--kernel is empty: give the kernel's name (free text used in the KBS queries, e.g. "
                         "--kernel softmax)")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UsageError(f"--kernel {name!r} holds a control character (a newline or tab): give a one-line name")


def _check_kernel_suffix(baseline: Path, impl: str) -> None:
    """A .cu is never Triton or CuTe DSL; --impl's suffixes are ``IMPL_SUFFIXES``."""
    want = IMPL_SUFFIXES[impl]
    if baseline.suffix not in want:
        cuda = " (a .cu kernel is --impl cuda-cpp or cutlass)" if baseline.suffix == ".cu" else ""
        raise UsageError(f"--impl {impl} needs a {' or '.join(want)} kernel, but --baseline is {baseline.name}{cuda}")


def _check_kernel_language(baseline: Path, impl: str) -> None:
    """A .py for cuda-cpp or cutlass must build CUDA C++ with torch.utils.cpp_extension (load_inline, as a
    KernelBench ModelNew does: ``builds_cpp_extension``, the test ``measure.launch.prebuild`` uses too)."""
    if ".cu" in IMPL_SUFFIXES[impl] and baseline.suffix == ".py" and \
            not builds_cpp_extension(baseline.read_text(encoding="utf-8", errors="replace")):
        raise UsageError(f"--impl {impl} takes a .cu kernel or a .py that builds CUDA C++ with "
                         f"torch.utils.cpp_extension (load_inline, as a KernelBench ModelNew does); --baseline "
                         f"{baseline.name} does not use torch.utils.cpp_extension: for a Triton or Python kernel "
                         "give --impl triton (or cute-dsl)")


def _validate(args: argparse.Namespace) -> tuple[Path, Path, dict]:
    _check_kernel_name(args.kernel)
    ref = Path(args.ref).expanduser()
    ref_info = inspect_ref(ref)
    baseline = Path(args.baseline).expanduser()
    _require_file(baseline, "--baseline", "the v0 kernel file (.py or .cu)")
    if not baseline.read_bytes().strip():
        raise UsageError(f"--baseline {baseline} is empty: give the v0 kernel file (the gate fails an empty kernel)")
    _check_kernel_suffix(baseline, args.impl)
    for name in ("iterations", "warmup", "trials", "correctness_trials", "timeout"):
        v = getattr(args, name)
        if v is None or v < (0 if name == "warmup" else 1):
            raise UsageError(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'warmup' else 'positive'}")
    if args.gpu is None or args.gpu < 0:
        raise UsageError(f"--gpu must be a CUDA device index (0, 1, ...), got {args.gpu}")
    for name in ("atol", "rtol", "rel_l2"):
        v = getattr(args, name)
        if v is not None and not (v >= 0 and v == v and v != float("inf")):
            raise UsageError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    if args.preset == "kernelbench":
        given = [f for f in ("atol", "rtol", "rel_l2") if getattr(args, f) is not None]
        if given:
            raise UsageError(f"--preset kernelbench fixes the tolerances (KernelBench's own); drop "
                             f"{', '.join('--' + g.replace('_', '-') for g in given)}")
        if args.correctness_trials != DEFAULT_CORRECTNESS_TRIALS:
            raise UsageError("--preset kernelbench fixes the correctness trials at KernelBench's 5; drop "
                             "--correctness-trials")
    if args.ptr_size is not None and args.ptr_size <= 0:
        raise UsageError("--ptr-size must be positive")
    if baseline.suffix == ".cu" and not ref_info["has_setup"] and args.ptr_size is None:
        raise UsageError("ref.py has no setup(): a .cu kernel then gets flat buffers, so give --ptr-size N")
    if args.device == "cpu" and ".cu" in IMPL_SUFFIXES[args.impl]:
        raise UsageError(f"--impl {args.impl} needs a CUDA GPU, whatever the kernel file's suffix: the cpu test mode "
                         "(--device cpu) runs Triton under TRITON_INTERPRET=1 and plain PyTorch only")
    _check_kernel_language(baseline, args.impl)
    dims, extra_shapes, _ = run_shapes(args, ref_info)
    if baseline.suffix == ".py" or ref_info["has_setup"]:
        check_dims_against_ref(dims, ref_info)
    for shape in extra_shapes:
        check_dims_against_ref(shape, ref_info, "--extra-shapes")
    for d in args.include_dir or []:
        if not Path(d).expanduser().is_dir():
            raise UsageError(f"--include-dir {d} is not a folder")
    out = Path(args.out).expanduser().resolve()
    for parent in out.parents:
        if (parent / RUN_JSON).is_file():
            raise UsageError(f"{args.out} is inside the run directory {parent}: give a folder outside any run")
    return ref, baseline, ref_info


def kernel_sources(vdir: Path) -> list[Path]:
    """The .py and .cu files of a version folder but ref.py (which never counts as a kernel, as in the gate)."""
    return sorted(p for p in vdir.iterdir() if p.is_file() and p.suffix in (".cu", ".py")
                  and p.name != "ref.py") if vdir.is_dir() else []


def _differences(old: dict, new: dict) -> list[str]:
    keys = sorted((set(old) | set(new)) - set(_VOLATILE))
    return [k for k in keys if old.get(k) != new.get(k)]


def _same_file(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and sha256_file(a) == sha256_file(b)


@contextmanager
def _undone_on_failure(rd: RunDir, files: list[Path]):
    """On any failure inside, put the run directory back as it was: the folders made here removed (with
    what they hold), and in a folder that was there before, each of ``files`` restored to its old bytes or
    removed, and v0/ removed if it was made here and is left empty."""
    made = next((q for q in [rd.root, *rd.root.parents] if q.exists()), None)
    top = rd.root if made is None or made == rd.root else \
        next(q for q in [rd.root, *rd.root.parents] if q.parent == made)
    new_root = not rd.root.exists()
    v0_made = not rd.vdir(0).exists()
    old = {f: (f.read_bytes() if f.is_file() else None) for f in files}
    try:
        yield
    except BaseException:
        if new_root:
            shutil.rmtree(top, ignore_errors=True)
            raise
        for f, data in old.items():
            if data is None:
                f.unlink(missing_ok=True)
            elif not f.is_file() or f.read_bytes() != data:
                f.write_bytes(data)
        if v0_made and rd.vdir(0).is_dir() and not any(rd.vdir(0).iterdir()):
            rd.vdir(0).rmdir()
        raise


def _record_init(rd: RunDir, cfg: dict[str, Any], v0_kernel: Path) -> None:
    """The first signed record: ref.py, run.json and the baseline kernel as init wrote them."""
    env = read_json(rd.env_json) if rd.env_json.is_file() else {}
    records.append(rd.root, "init", iterations=str(cfg["iterations"]),
                   device="cpu" if cfg.get("device") == "cpu" else f"cuda:{cfg['gpu']}",
                   gpu=(env.get("gpu") or {}).get("name") or "-", **records.run_hashes(rd.root),
                   files=records.files_field(rd.root, [f"v0/{v0_kernel.name}"] if v0_kernel.is_file() else []))


def run_init(args: argparse.Namespace) -> int:
    ref, baseline, ref_info = _validate(args)
    typed, how = ((args.kernel_type, "as --kernel-type set it") if args.kernel_type
                  else kfamily.kernel_type_of(args.kernel, Path(args.ref)))
    cfg = build_config(args, ref_info, typed)
    rd = RunDir.open(args.out, must_exist=False)
    kind = what_path_is(args.out)
    if kind not in ("is a directory", "does not exist"):
        raise UsageError(f"{args.out} {kind}: give a new folder or an existing run directory")
    v0_kernel = rd.vdir(0) / f"kernel{Path(args.baseline).suffix}"
    if rd.run_json.exists():
        old = rd.config().to_json()  # normalised: keys an older init did not write take their defaults
        if not args.kernel_type and old.get("kernel_type", typed) != typed:  # a guessed type is the run's as it was
            cfg["kernel_type"], how = old["kernel_type"], "as this run's first init guessed it"  # (an older init's)
        diffs = _differences(old, cfg)
        if rd.ref_py.exists() and not _same_file(rd.ref_py, ref):
            diffs.append("ref.py (contents)")
        if v0_kernel.exists() and not _same_file(v0_kernel, baseline):
            diffs.append(f"baseline (contents differ from {v0_kernel.relative_to(rd.root)})")
        if diffs:
            raise UsageError(f"{rd.root} is already initialised with a different configuration; differing: "
                             + ", ".join(diffs) + ". run.json is fixed for a run: use a new <out> folder")
        beside = [p.name for p in kernel_sources(rd.vdir(0)) if p != v0_kernel]
        if beside:
            raise UsageError(f"{rd.vdir(0)} holds {', '.join(beside)} beside {v0_kernel.name}: a version takes exactly "
                             "one kernel file (the gate fails a second source file); move it out of v0")
        if not (rd.root / records.FILENAME).is_file():
            _record_init(rd, cfg, v0_kernel)
        print(f"{rd.root} is already initialised with this configuration; nothing to do")
        return 0
    if rd.vdir(0).is_dir():
        others = kernel_sources(rd.vdir(0))
        if others and not (len(others) == 1 and others[0] == v0_kernel and _same_file(v0_kernel, baseline)):
            raise UsageError(f"{rd.vdir(0)} already holds {', '.join(p.name for p in others)}; refusing to "
                             "overwrite it (use a new <out> folder)")
    if rd.ref_py.exists() and not _same_file(rd.ref_py, ref):
        raise UsageError(f"{rd.ref_py} exists and differs from {ref}; refusing to overwrite it")
    records.load_key(rd.root)  # made (or refused: inside the run directory) before anything is written
    report = None
    if not (args.skip_env or args.device == "cpu"):  # the cpu mode needs no GPU toolchain
        # checked before anything is written: a machine that cannot run the kernel gets no half-made folder
        report = envcheck.check_and_write(gpu=args.gpu, impl=args.impl, out=None, cfg_build=cfg["build"])
        check_inputs_fit(ref_info, [cfg["dims"], *cfg["extra_shapes"]], report.get("gpu"))
    with _undone_on_failure(rd, [rd.env_json, rd.root / "env_check.md", rd.ref_py, v0_kernel, rd.run_json,
                                 rd.root / records.FILENAME]):
        rd.root.mkdir(parents=True, exist_ok=True)
        if report is None:
            envcheck.write_skipped(rd.root, "`init --skip-env`" if args.skip_env else
                                   "`init --device cpu`: the cpu test mode needs no GPU toolchain")
        else:
            write_json(rd.env_json, report)
            atomic_write_text(rd.root / "env_check.md", envcheck.render_markdown(report))
            progress(f"wrote {rd.root / 'env_check.md'}")
        if not rd.ref_py.exists():
            copy_new(ref, rd.ref_py)
        if not v0_kernel.exists():
            copy_new(baseline, v0_kernel)
        write_json(rd.run_json, cfg)
        _record_init(rd, cfg, v0_kernel)
    progress(f"records.log is signed with the record key at {records.key_path()} (key id "
             f"{records.key_id(records.load_key(rd.root))}); every later step must find the same key there")
    progress(f"run.json written: {cfg['impl']}; dims {', '.join(f'{k}={v}' for k, v in cfg['dims'].items())}; kernel type "
             f"{cfg['kernel_type']}, {how} (the KBS queries weigh it; --kernel-type sets it)")
    if args.device == "cpu":
        warn_large_cpu_inputs(ref_info, cfg["dims"], cfg["extra_shapes"])
    print(f"initialised {rd.root}: v0 = {v0_kernel.relative_to(rd.root)}; next: {command('correctness', args.out)}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "init", help="create a run directory with its fixed configuration",
        description="Create <out>/run.json (fixed for the whole run), copy ref.py, check the environment "
                    "(env_check.md, env.json) and place the baseline as v0/kernel.cu or v0/kernel.py.",
        epilog="Exit codes: 0 done (or already initialised identically), 2 bad input, a different existing "
               "configuration, or a missing requirement.")
    p.add_argument("out", help="run directory to create")
    p.add_argument("--kernel", required=True, help="kernel name (free text, used in KBS queries)")
    p.add_argument("--ref", required=True, help="ref.py defining reference(**kwargs) or a KernelBench Model")
    p.add_argument("--impl", required=True, choices=IMPLS, help="implementation language of the kernel")
    p.add_argument("--baseline", required=True,
                   help="the v0 kernel: .py for triton and cute-dsl; .cu, or a .py that builds CUDA C++ with "
                        "torch.utils.cpp_extension.load_inline (a KernelBench ModelNew), for cuda-cpp and cutlass")
    p.add_argument("--dims", default=None,
                   help="problem size, K=V[,K=V...] (positive integers); required, except for a KernelBench ref.py, "
                        "whose module-level size constants are its dims: there --dims names only the constants it "
                        "changes, the others keep the file's values and constants computed from them follow "
                        "(bias_shape = (out_features,)). A tuple constant is changed by element: element i of "
                        "input_shape = (32768,) is input_shape_<i>, e.g. input_shape_0=1000. A constant used as an "
                        "axis (dim=/axis=, e.g. dim = 1 passed to torch.cumsum(x, dim=self.dim)) is not a size and "
                        "cannot be changed")
    p.add_argument("--kernel-type", choices=KERNEL_TYPES, default=None,
                   help="kernel family (default: guessed from --kernel, else any)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"run seed (default {DEFAULT_SEED})")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (beats ref.py and dtype defaults)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (beats ref.py and dtype defaults)")
    p.add_argument("--preset", choices=("kernelbench",), default=None,
                   help="kernelbench: KernelBench's own correctness protocol (5 trials; torch.allclose with atol = "
                        "rtol = 1e-4 for float32, 1e-2 for float16/bfloat16; no normwise bound), to compare a "
                        "result with a KernelBench score; correctness.md warns where kernel-loop's own check "
                        "would fail")
    p.add_argument("--rel-l2", type=float, default=None, dest="rel_l2",
                   help="limit of the relative L2 error ||got - ref|| / ||ref|| of each output (beats ref.py's "
                        "rel_l2 and the dtype default: float32 1e-5, bfloat16 2e-2, ...; see references/kernel_abi.md)")
    p.add_argument("--device", choices=DEVICES, default="cuda",
                   help="cuda (default): measure on the GPU; cpu: a test and dry-run mode that runs .py kernels on "
                        "the CPU (Triton under TRITON_INTERPRET=1); profile needs a GPU")
    p.add_argument("--gpu", type=int, default=DEFAULT_GPU, help=f"CUDA device index (default {DEFAULT_GPU})")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"planned final version N (default {DEFAULT_ITERATIONS})")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help=f"timing warmups (default {DEFAULT_WARMUP})")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help=f"timing trials (default {DEFAULT_TRIALS})")
    p.add_argument("--correctness-trials", type=int, default=DEFAULT_CORRECTNESS_TRIALS,
                   help=f"fresh-input correctness trials (default {DEFAULT_CORRECTNESS_TRIALS})")
    p.add_argument("--ptr-size", type=int, default=None,
                   help="elements per flat .cu buffer when ref.py has no setup()")
    p.add_argument("--extra-shapes", default=None,
                   help='more shapes correctness also checks, separated by ";": "M=333;N=1000,M=64". Each shape '
                        'names only the dims it changes; the dims it does not name keep the run dims (for a '
                        'KernelBench ref, constants computed from a changed one follow, and a tuple element is '
                        'named <tuple>_<i>, e.g. "input_shape_0=1000"). Give one that is not a power of two, so '
                        'tail and masking bugs fail')
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds per child process (default {DEFAULT_TIMEOUT_S})")
    p.add_argument("--include-dir", action="append", default=None,
                   help="extra nvcc include folder (repeatable; $CUTLASS_PATH is added automatically)")
    p.add_argument("--nvcc-flag", action="append", default=None, help="extra nvcc flag (repeatable)")
    p.add_argument("--ncu-set", default=DEFAULT_NCU_SET, help=f"ncu --set (default {DEFAULT_NCU_SET})")
    p.add_argument("--ncu-section", action="append", default=None,
                   help="ncu --section added to the set (repeatable; default WarpStateStats, "
                        "SchedulerStats, SourceCounters)")
    p.add_argument("--ncu-budget", metavar="kernels=N,share=F,configs=N,census=N", default=None,
                   help="what gets ncu's full sections when the call launches more kernels than 'kernels': ncu's "
                        "census lists every launch (the first 'census' where the call launches more), then the "
                        "version's own kernels and the largest shares of the call's time until 'share', at most "
                        "'kernels' kernels and 'configs' launch configurations, one launch each. Ranges: kernels 1 "
                        "to 64, share above 0 and at most 1, configs from the value of kernels to 256, census 16 to "
                        "100000; each key once (default kernels=8,share=0.9,configs=16,census=400; fixed in "
                        "run.json)")
    p.add_argument("--clock-control", choices=("base", "none"), default=None,
                   help="ncu --clock-control (default: ncu's own)")
    p.add_argument("--cache-control", choices=("all", "none"), default=None,
                   help="ncu --cache-control (default: ncu's own)")
    p.add_argument("--skip-env", action="store_true",
                   help="do not run the environment check (CPU-only tests, dry runs); env_check.md says so")
    p.set_defaults(func=run_init)
