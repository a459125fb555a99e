"""What the child processes of ``runner`` do, one function per mode.  Never run in the CLI process.

Every function takes the spec the parent wrote (``run_root``, ``cfg``: run.json's object,
``device``, ``kernel`` and the mode's own keys) and returns the mode's result dict.

- ``correctness``: per shape, the kernel is loaded once (the same module, library or ModelNew
  instance serves every trial); per trial one ``checked_call``: fresh seeded inputs, the reference
  on them (outputs poisoned first, its results copied out), the outputs poisoned again, one call,
  then ``compare.compare_outputs``, the inputs' fingerprints and the output aliases.
- ``time``: CUDA-event timing of the solution (``timing.time_callable``) with the GPU state
  before and after, then one ``checked_call`` on inputs the kernel has never seen.
- ``ncu``: warmup calls outside, then one call inside the NVTX range ``kl_measure`` (run under
  ``ncu --nvtx --nvtx-include kl_measure/``, so only that call's kernels are profiled).
- ``benchmark``: the solution, each baseline and each version checked against the eager
  reference, timed, and checked again on the timed calls' outputs; then the A/B transitions
  timed interleaved (A, B, B, A, ...).
"""

from __future__ import annotations

import time as time_mod
from pathlib import Path
from typing import Any

from .common import UsageError
from .compare import applied_tolerances, changed_input_row, compare_outputs
from .config import RunConfig
from .sidecars import REF_PY

NVTX_RANGE = "kl_measure"


class BadReference(UsageError):
    """ref.py itself misbehaves (it changes its inputs): bad input, not a failed kernel."""


def _setup(spec: dict[str, Any]):
    """The run configuration, the device (checked here, in the child: the CLI never imports torch)
    and ref.py imported.  A missing GPU or a ref.py that fails to import is bad input (UsageError)."""
    from . import loader

    cfg = RunConfig.from_json(spec["cfg"])
    device = spec["device"]
    kernel = Path(spec.get("kernel") or "kernel")
    if device == "cpu" and kernel.suffix == ".cu":
        raise UsageError(f"{kernel.name} is CUDA C++: the cpu test mode (KERNEL_LOOP_DEVICE=cpu) runs .py kernels only")
    try:
        import torch
    except ImportError:
        raise UsageError("torch is not installed: pip install torch (a CUDA build)") from None
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"no CUDA GPU visible: torch.cuda.is_available() is False (torch {torch.__version__}, "
                             f"CUDA build {torch.version.cuda}); {spec['mode']} needs a GPU "
                             "(init --device cpu, or KERNEL_LOOP_DEVICE=cpu, is the test mode for .py kernels)")
        index = torch.device(device).index or 0
        if index >= torch.cuda.device_count():
            raise UsageError(f"run.json gpu {index} does not exist: {torch.cuda.device_count()} GPU(s) visible")
        torch.cuda.set_device(torch.device(device))
    ref_path = Path(spec["run_root"]) / REF_PY
    try:
        ref = loader.import_file(ref_path, "ref")
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{ref_path} failed to import: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
                         "(fix ref.py; it is copied into the run by init)") from None
    return cfg, device, ref


def _wait_for_go(spec: dict[str, Any]) -> None:
    """Block until the parent creates ``spec["go_file"]`` (profile's timing run has finished)."""
    go = spec.get("go_file")
    if not go:
        return
    deadline = time_mod.monotonic() + float(spec.get("go_timeout_s", 600))
    while not Path(go).exists():
        if time_mod.monotonic() > deadline:
            raise RuntimeError("the parent never released the ncu run (its timing run did not finish)")
        time_mod.sleep(0.05)


def _reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def _memory(device: str, case, expected: dict) -> dict[str, Any]:
    """Peak device memory of one trial, next to what its inputs and reference outputs take."""
    from .loader import is_tensor

    def nbytes(ts) -> int:
        return sum(v.numel() * v.element_size() for v in ts if is_tensor(v))

    out = {"inputs_bytes": nbytes(v for n, v in case.inputs.items() if n not in case.outputs),
           "outputs_bytes": nbytes(expected.values()), "peak_mem_bytes": None}
    if device.startswith("cuda"):
        import torch

        out["peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return out


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def correctness(spec: dict[str, Any]) -> dict[str, Any]:
    """Every shape and trial; stops at the first exception (reported as ``error``, results so far kept)."""
    from . import loader
    from .runner import error_text

    cfg, device, ref = _setup(spec)
    run_root, kernel = Path(spec["run_root"]), Path(spec["kernel"])
    shapes: list[dict] = []
    result: dict[str, Any] = {"device": device, "shapes": shapes, "warnings": [], "error": None, "build": None}
    try:
        for si, dims in enumerate(spec["shapes"]):
            trials: list[dict] = []
            shapes.append({"dims": dims, "trials": trials})
            for t in range(int(spec["trials"])):
                seed = derive_seed(cfg.seed, si, t)
                _reset_peak(device)
                rows, warns, memory = checked_call(cfg, run_root, kernel, dims, seed, device, ref, variant=t)
                trials.append({"seed": seed, "outputs": rows, "passed": all(r["passed"] for r in rows), **memory})
                result["warnings"] += [w for w in warns if w not in result["warnings"]]
    except BadReference:
        raise
    except Exception as exc:
        result["error"] = error_text(exc)
    result["build"] = loader.last_build()
    return result


def checked_call(cfg: RunConfig, root: Path, kernel: Path, dims: dict, seed: int, device: str, ref: Any,
                 variant: int = 0) -> tuple[list[dict], list[str], dict[str, Any]]:
    """One checked call of the loaded kernel on fresh inputs drawn from ``seed``: the reference runs on the
    case's own inputs (a reference that changes them is bad input), the outputs are poisoned (``variant``
    alternates NaN and a finite sentinel), the kernel is called once, then every output is compared, every
    input that is not an output must be unchanged, and no output may be a view of such an input.
    Returns (rows, warnings, memory of the call)."""
    from . import loader

    case = loader.load_case(cfg, root, kernel, dims, seed, device)
    snapshot = case.input_snapshot()
    expected = case.reference(in_place=True)  # on the case's own inputs: no copy of them
    _sync(device)
    changed = case.changed_inputs(snapshot)
    if changed:
        raise BadReference(f"ref.py's reference changed its input {changed[0]!r}: the kernel would get "
                           "modified inputs; make the reference work on copies")
    case.poison(variant)
    got = case.launch()
    _sync(device)
    rows, warns = compare_outputs(got, expected, cfg.tolerance, ref)
    rows += [changed_input_row(n, case.inputs[n]) for n in case.changed_inputs(snapshot)]
    _refuse_aliases(rows, got, case)
    return rows, warns, _memory(device, case, expected)


def _refuse_aliases(rows: list[dict], got: dict, case) -> None:
    """An output that shares memory with an input the kernel may not write (a view of it) is no result."""
    from .loader import is_tensor, storage_ptr

    inputs = {storage_ptr(v): n for n, v in case.inputs.items() if is_tensor(v) and n not in case.outputs}
    for row in rows:
        g = got.get(row["name"])
        if is_tensor(g) and storage_ptr(g) in inputs and row["passed"]:
            row.update(passed=False, note=f"output '{row['name']}' shares memory with the input "
                       f"'{inputs[storage_ptr(g)]}' (a view of it): the kernel must write its own result")


FRESH_SEED_OFFSET = 7_777_777  # the seed of the after-timing check: never one a correctness trial used


def derive_seed(run_seed: int, shape_index: int, trial: int) -> int:
    """The seed of one correctness trial: distinct per shape and trial, fixed by the run seed."""
    return run_seed * 1000 + trial + 100_003 * shape_index


def fresh_check(cfg: RunConfig, root: Path, kernel: Path, device: str, ref: Any) -> str | None:
    """Call the kernel once more, after its timed calls, on inputs it has never seen (the same loaded kernel
    instance, a new seed): None when right, else why.  A kernel that serves timed calls from a cache, or
    changes its behaviour after many calls, fails here."""
    rows, _, _ = checked_call(cfg, root, kernel, cfg.dims, cfg.seed + FRESH_SEED_OFFSET, device, ref, variant=1)
    ok, why = _verdict(rows)
    return None if ok else f"with fresh inputs after the timed calls: {why}"


def time(spec: dict[str, Any]) -> dict[str, Any]:  # noqa: A001 - the mode's name
    import torch

    from . import gpustate, loader, timing

    cfg, device, ref = _setup(spec)
    case = loader.load_case(cfg, Path(spec["run_root"]), Path(spec["kernel"]), cfg.dims, cfg.seed, device)
    props = torch.cuda.get_device_properties(torch.device(device))
    uuid = str(getattr(props, "uuid", "") or "") or None
    index = torch.device(device).index or 0
    before = gpustate.snapshot(index, uuid)
    result = timing.time_callable(case.launch, warmup=cfg.warmup, trials=cfg.trials, flush_l2=True, device=device)
    after = gpustate.snapshot(index, uuid)
    wrong = fresh_check(cfg, Path(spec["run_root"]), Path(spec["kernel"]), device, ref)
    if wrong:
        return {"error": f"the kernel is wrong {wrong}: its timing cannot stand"}
    return {"timing": result, "gpu_state": {"before": before, "after": after},
            "gpu": {"name": props.name, "cc": f"{props.major}.{props.minor}",
                    "sm_count": props.multi_processor_count}}


def ncu(spec: dict[str, Any]) -> dict[str, Any]:
    """Under ncu: imports first (they may overlap the parent's timing run), then, once released,
    the warmup calls outside and one call inside the NVTX range."""
    import torch

    from . import loader

    if Path(spec["kernel"]).suffix == ".py":  # the kernel's own imports (triton, cutlass) before the wait
        loader.import_file(Path(spec["kernel"]), "kernel")
    _wait_for_go(spec)
    cfg, device, _ = _setup(spec)
    case = loader.load_case(cfg, Path(spec["run_root"]), Path(spec["kernel"]), cfg.dims, cfg.seed, device)
    for _ in range(max(1, cfg.warmup)):
        case.launch()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    case.launch()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    return {"profiled_launches": 1}


# --- benchmark ----------------------------------------------------------------------------------
def _timer(method: str, device: str):
    """(fn, warmup, trials) -> samples in microseconds."""
    from . import timing

    if method == "cuda_event":
        if not device.startswith("cuda"):
            raise UsageError("cuda_event timing needs a GPU; in the CPU dev mode use --timing host_time")
        return lambda fn, warmup, trials: list(timing.time_callable(fn, warmup=warmup, trials=trials,
                                                                     flush_l2=True)["samples_us"])

    def host(fn, warmup, trials):
        for _ in range(warmup):
            fn()
        _sync(device)
        out = []
        for _ in range(trials):
            t0 = time_mod.perf_counter()
            fn()
            _sync(device)
            out.append((time_mod.perf_counter() - t0) * 1e6)
        return out

    return host



def _verdict(rows: list[dict]) -> tuple[bool, str | None]:
    bad = [r for r in rows if not r["passed"]]
    if not bad:
        return True, None
    r = bad[0]
    return False, f"{r['name']}: " + (r.get("note") or f"{r['mismatches']} of {r['numel']} elements outside tolerance")


def benchmark(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from . import loader, timing
    from .common import progress

    cfg, dev, ref = _setup(spec)
    timer = _timer(spec["method"], dev)
    warmup, trials, drop = spec["warmup"], spec["trials"], spec["discard_first"]
    root = Path(spec["run_root"])
    run_tol = spec["tolerance"]

    def load(kernel: str):
        return loader.load_case(cfg, root, Path(kernel), cfg.dims, cfg.seed, dev)

    def measure(name: str, call, outputs_of, poison, expected, case=None) -> dict[str, Any]:
        """Check ``call`` against ``expected``, time it, then check the outputs of the timed calls (and, for a
        kernel, that none of its inputs changed)."""
        item: dict[str, Any] = {"name": name, "available": True, "why": None, "correct": False,
                                "correct_after": None, "error": None, "samples_us": [], "stats_us": None}
        try:
            poison()
            snapshot = case.input_snapshot() if case is not None else {}
            item["correct"], item["error"] = _verdict(compare_outputs(outputs_of(call()), expected, run_tol, ref)[0])
            last: dict[str, Any] = {}

            def timed():
                last["value"] = call()

            poison()
            progress(f"timing {name}: {warmup} warmup + {trials} trials ({spec['method']})")
            samples = timer(timed, warmup, trials)[drop:]
            ok_after, err_after = _verdict(compare_outputs(outputs_of(last["value"]), expected, run_tol, ref)[0])
            changed = case.changed_inputs(snapshot) if case is not None else []
            if changed:
                ok_after, err_after = False, changed_input_row(changed[0], case.inputs[changed[0]])["note"]
            del snapshot
            item["correct_after"] = ok_after
            item["error"] = item["error"] or err_after
            item["samples_us"], item["stats_us"] = samples, timing.summarize(samples)
            progress(f"{name}: median {item['stats_us']['median']:.2f} us, correct {item['correct'] and ok_after}")
        except Exception as exc:  # a baseline that cannot run is reported, not fatal
            item.update(available=False, why=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            progress(f"{name}: not available ({item['why']})")
        return item

    def kernel_item(name: str, case, expected, kernel: str) -> dict[str, Any]:
        item = measure(name, case.launch, lambda v: v, case.poison, expected, case)
        if item["available"] and item["correct_after"]:
            wrong = fresh_check(cfg, root, Path(kernel), dev, ref)
            if wrong:
                item["correct_after"], item["error"] = False, item["error"] or wrong
        return item

    def reference_item(name: str, case, expected, wrap=None, **extra) -> dict[str, Any]:
        fn, kw = case.reference_callable_and_args()
        fn = wrap(fn) if wrap else fn

        def outputs_of(value):
            if value is None:  # the reference wrote its outputs in place
                return {n: kw[n] for n in case.outputs}
            return loader.normalize_outputs(value, case.out_names)

        def poison():
            for n in case.outputs:
                if n in kw:
                    loader.poison_tensor(kw[n])

        return measure(name, lambda: fn(**kw, **extra), outputs_of, poison, expected)

    res: dict[str, Any] = {"device": {"name": dev}, "torch": torch.__version__, "items": [], "ab": []}
    if dev.startswith("cuda"):
        res["device"] = {"name": torch.cuda.get_device_name(),
                         "capability": ".".join(map(str, torch.cuda.get_device_capability()))}
    sol = load(spec["solution"]["kernel"])
    expected = sol.reference()
    first = next(iter(expected.values()))
    res["output_dtype"] = str(getattr(first, "dtype", "")).replace("torch.", "") or None
    res["tolerances"] = applied_tolerances(expected, run_tol, ref)
    res["items"].append(kernel_item("solution", sol, expected, spec["solution"]["kernel"]))

    for b in spec["baselines"]:
        if b == "pytorch-eager":
            res["items"].append(reference_item(b, sol, expected))
        elif b == "torch-compile":
            res["items"].append(reference_item(b, sol, expected, wrap=torch.compile))
        elif b == "flashinfer":
            why = None
            if not loader.accepts_baseline(ref.reference):
                why = "ref.py's reference() takes no 'baseline' argument"
            else:
                try:
                    import flashinfer  # noqa: F401
                except Exception as exc:
                    why = f"import flashinfer failed: {exc}"
            if why:
                res["items"].append({"name": b, "available": False, "why": why, "correct": None,
                                     "correct_after": None, "error": None, "samples_us": [], "stats_us": None})
                progress(f"{b}: not available ({why})")
            else:
                res["items"].append(reference_item(b, sol, expected, baseline="flashinfer"))

    flops_fn, bytes_fn = getattr(ref, "flops", None), getattr(ref, "bytes_moved", None)
    res["flops"] = float(loader.call_with(flops_fn, cfg.dims)) if callable(flops_fn) else None
    res["bytes_moved"] = float(loader.call_with(bytes_fn, cfg.dims)) if callable(bytes_fn) else None
    res["roofline_why"] = None if (res["flops"] or res["bytes_moved"]) else \
        "ref.py declares neither flops(**dims) nor bytes_moved(**dims)"

    cases = {}
    for v in spec["versions"]:
        case = load(v["kernel"])
        cases[v["version"]] = case
        res["items"].append(kernel_item(v["version"], case, case.reference(), v["kernel"]))
    for a, b in spec["ab"]:
        ca, cb = cases[a], cases[b]
        for c in (ca, cb):
            for _ in range(warmup):
                c.launch()
        progress(f"A/B {a} -> {b}: {trials} interleaved trials each")
        sa, sb = [], []
        for i in range(trials):
            order = ((ca, sa), (cb, sb)) if i % 2 == 0 else ((cb, sb), (ca, sa))
            for c, dst in order:
                dst.extend(timer(c.launch, 0, 1))
        res["ab"].append({"from": a, "to": b, "samples_a": sa[drop:], "samples_b": sb[drop:]})
    return res
