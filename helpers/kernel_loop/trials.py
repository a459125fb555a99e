"""What the kernel's child processes of ``runner`` do, one function per mode.  Never run in the CLI process.

Every function takes the spec the parent wrote (``run_root``, ``cfg``: run.json's object,
``device``, ``kernel`` and the mode's own keys) and returns the mode's result dict.  The modes that
check outputs follow the parent's list ``spec["checks"]`` (tag, kernel, dims, seed, variant) and hand
each call's outputs and inputs to the checker (``checker``, another process, which never imports
the kernel file); the verdicts come from there, never from this process.

- ``correctness``: per shape, the kernel is loaded once (the same module, library or ModelNew
  instance serves every trial); per trial one ``checked_call``: fresh seeded inputs, the outputs
  poisoned, one call, everything handed over.
- ``time``: CUDA-event timing of the solution (``timing.time_callable``) with the GPU state
  before and after, then one ``checked_call`` on inputs the kernel has never seen.
- ``ncu``: warmup calls outside, then one call inside the NVTX range ``kl_measure`` (run under
  ``ncu --nvtx --nvtx-include kl_measure/``, so only that call's kernels are profiled).
- ``benchmark``: the solution and each version, checked before, after and on fresh inputs around
  their timed calls; then the A/B transitions timed alternating (A, B, B, A, ...).
- ``baselines``: eager, torch.compile and FlashInfer timed in a process that imports no kernel.
"""

from __future__ import annotations

import os
import time as time_mod
from pathlib import Path
from typing import Any

from .common import UsageError
from .compare import applied_tolerances, compare_outputs, first_failure
from .config import RunConfig
from .sidecars import REF_PY

NVTX_RANGE = "kl_measure"


class BadReference(UsageError):
    """ref.py itself misbehaves (it changes its inputs): bad input, not a failed kernel."""


def setup_child(spec: dict[str, Any]):
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


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _hand_over(spec: dict[str, Any], n: int, case, got: dict | None, error: str | None = None) -> None:
    """Give check ``n`` (outputs and the inputs after the call, or the error) to the checker; return once
    it has read them, so the tensors stay alive while it does."""
    from . import handoff

    item = spec["checks"][n]
    inputs = {k: v for k, v in case.inputs.items() if k not in case.outputs} if case is not None else {}
    handoff.publish(spec["handoff_dir"], n, item["tag"], outputs=got, inputs=inputs, error=error)
    pid = spec.get("checker_pid")
    handoff.wait_ack(spec["handoff_dir"], n, float(spec.get("timeout_s", 600)),
                     alive=(lambda: _alive(pid)) if pid else None)


def _alive(pid: int) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def checked_call(spec: dict[str, Any], n: int, cfg: RunConfig, device: str) -> dict[str, Any]:
    """Check ``n`` of the spec: fresh inputs from its seed, the outputs poisoned (its ``variant`` alternates
    NaN and a finite sentinel), one call of the loaded kernel, then everything handed to the checker.
    Returns the call's memory figures; a kernel that raises is handed over as the check's error, then
    re-raised."""
    from . import loader
    from .runner import error_text

    item = spec["checks"][n]
    _reset_peak(device)
    case = loader.load_case(cfg, Path(spec["run_root"]), Path(item["kernel"]), item["dims"], int(item["seed"]),
                            device)
    case.poison(int(item.get("variant", 0)))
    try:
        got = case.launch()
        sync(device)
    except Exception as exc:
        _hand_over(spec, n, None, None, error=error_text(exc))
        raise
    memory = _memory(device, case, got)
    _hand_over(spec, n, case, got)
    return memory


def correctness(spec: dict[str, Any]) -> dict[str, Any]:
    """Every check (shape x trial); stops at the first exception (reported as ``error``).  The verdicts
    come from the checker; this process records each trial's seed and memory."""
    import torch

    from . import loader
    from .runner import error_text

    cfg, device, _ = setup_child(spec)
    shapes: list[dict] = []
    result: dict[str, Any] = {"device": device, "shapes": shapes, "warnings": [], "error": None, "build": None,
                              "gpu_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else None}
    try:
        for n, item in enumerate(spec["checks"]):
            if int(item["trial"]) == 0:
                shapes.append({"dims": item["dims"], "trials": []})
            memory = checked_call(spec, n, cfg, device)
            shapes[-1]["trials"].append({"seed": int(item["seed"]), "tag": item["tag"], **memory})
    except Exception as exc:
        result["error"] = error_text(exc)
    result["build"] = loader.last_build()
    return result


def time(spec: dict[str, Any]) -> dict[str, Any]:  # noqa: A001 - the mode's name
    """The timing run, then one checked call on inputs the kernel has never seen (check 0 of the spec)."""
    import torch

    from . import gpustate, loader, timing

    cfg, device, _ = setup_child(spec)
    case = loader.load_case(cfg, Path(spec["run_root"]), Path(spec["kernel"]), cfg.dims, cfg.seed, device)
    props = torch.cuda.get_device_properties(torch.device(device))
    uuid = str(getattr(props, "uuid", "") or "") or None
    index = torch.device(device).index or 0
    before = gpustate.snapshot(index, uuid)
    result = timing.time_callable(case.launch, warmup=cfg.warmup, trials=cfg.trials, flush_l2=True, device=device)
    after = gpustate.snapshot(index, uuid)
    checked_call(spec, 0, cfg, device)
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
    cfg, device, _ = setup_child(spec)
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
    """(fns, warmup, trials, order) -> one timing result per callable, by the run's method."""
    from . import timing

    if method == "cuda_event":
        if not device.startswith("cuda"):
            raise UsageError("cuda_event timing needs a GPU; in the CPU dev mode use --timing host_time")
        return lambda fns, warmup, trials, order="same": timing.time_callables(
            fns, warmup=warmup, trials=trials, order=order, flush_l2=True)
    return lambda fns, warmup, trials, order="same": timing.host_time_callables(
        fns, warmup=warmup, trials=trials, order=order, sync=lambda: sync(device))


def _verdict(rows: list[dict]) -> tuple[bool, str | None]:
    why = first_failure(rows)
    return why is None, why


def _item(name: str) -> dict[str, Any]:
    return {"name": name, "available": True, "why": None, "correct": False, "correct_after": None,
            "error": None, "samples_us": [], "timing": None}


def benchmark(spec: dict[str, Any]) -> dict[str, Any]:
    """The kernels' part of the benchmark: the solution and each version, every one handed to the checker
    before its timed calls (``<name>:before``), with the last timed call's outputs (``:after``) and on fresh
    inputs (``:fresh``); then the A/B transitions, timed alternating.  The baselines are timed elsewhere
    (``baselines``): a process that has imported a kernel file never times them."""
    import torch

    from . import loader
    from .common import progress

    cfg, dev, _ = setup_child(spec)
    timer = _timer(spec["method"], dev)
    warmup, trials, drop = spec["warmup"], spec["trials"], spec["discard_first"]
    checks = {c["tag"]: n for n, c in enumerate(spec["checks"])}
    res: dict[str, Any] = {"device": {"name": dev}, "torch": torch.__version__, "items": [], "ab": []}
    if dev.startswith("cuda"):
        res["device"] = {"name": torch.cuda.get_device_name(),
                         "capability": ".".join(map(str, torch.cuda.get_device_capability()))}
    cases = {}
    for v in spec["kernels"]:
        name = v["name"]
        item = _item(name)
        res["items"].append(item)
        try:
            checked_call(spec, checks[f"{name}:before"], cfg, dev)
            case = loader.load_case(cfg, Path(spec["run_root"]), Path(v["kernel"]), cfg.dims, cfg.seed, dev)
            cases[name] = case
            last: dict[str, Any] = {}

            def timed(case=case, last=last):
                last["value"] = case.launch()

            case.poison()
            progress(f"timing {name}: {warmup} warmup + {trials} trials ({spec['method']})")
            item["timing"] = timer([timed], warmup, trials)[0]
            item["samples_us"] = item["timing"].pop("samples_us")[drop:]
            sync(dev)
            _hand_over(spec, checks[f"{name}:after"], case, last["value"])
            checked_call(spec, checks[f"{name}:fresh"], cfg, dev)
        except Exception as exc:
            item.update(available=False, why=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            progress(f"{name}: not available ({item['why']})")
            break  # the checks that follow would wait for manifests this process no longer writes
    for a, b in spec["ab"]:
        if a not in cases or b not in cases:
            continue
        progress(f"A/B {a} -> {b}: {trials} alternating trials each")
        ta, tb = timer([cases[a].launch, cases[b].launch], warmup, trials, "alternate")
        res["ab"].append({"from": a, "to": b, "samples_a": ta["samples_us"][drop:], "samples_b": tb["samples_us"][drop:],
                          "host_overhead_us": [ta["host_overhead_us"], tb["host_overhead_us"]]})
    return res


def baselines(spec: dict[str, Any]) -> dict[str, Any]:
    """The baselines' part of the benchmark, in a process that never imports a kernel file: the eager
    reference, torch.compile of it and FlashInfer (when ref.py's reference takes ``baseline``), each
    checked against the eager reference before and after its timed calls."""
    import torch

    from . import loader
    from .common import progress

    cfg, dev, ref = setup_child(spec)
    timer = _timer(spec["method"], dev)
    warmup, trials, drop = spec["warmup"], spec["trials"], spec["discard_first"]
    run_tol = spec["tolerance"]
    case = loader.load_case(cfg, Path(spec["run_root"]), Path(spec["kernel"]), cfg.dims, cfg.seed, dev,
                            with_kernel=False)
    expected = case.reference()
    first = next(iter(expected.values()))
    res: dict[str, Any] = {"items": [], "output_dtype": str(getattr(first, "dtype", "")).replace("torch.", "") or None,
                           "tolerances": applied_tolerances(expected, run_tol, ref)}

    def measure(name: str, wrap=None, **extra) -> dict[str, Any]:
        item = _item(name)
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

        try:
            poison()
            item["correct"], item["error"] = _verdict(compare_outputs(outputs_of(fn(**kw, **extra)), expected,
                                                                      run_tol, ref)[0])
            last: dict[str, Any] = {}

            def timed():
                last["value"] = fn(**kw, **extra)

            poison()
            progress(f"timing {name}: {warmup} warmup + {trials} trials ({spec['method']})")
            item["timing"] = timer([timed], warmup, trials)[0]
            item["samples_us"] = item["timing"].pop("samples_us")[drop:]
            item["correct_after"], err = _verdict(compare_outputs(outputs_of(last["value"]), expected, run_tol, ref)[0])
            item["error"] = item["error"] or err
        except Exception as exc:  # a baseline that cannot run is reported, not fatal
            item.update(available=False, why=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            progress(f"{name}: not available ({item['why']})")
        return item

    for b in spec["baselines"]:
        if b == "pytorch-eager":
            res["items"].append(measure(b))
        elif b == "torch-compile":
            res["items"].append(measure(b, wrap=torch.compile))
        elif b == "flashinfer":
            why = flashinfer_missing(ref)
            if why:
                res["items"].append(dict(_item(b), available=False, why=why, correct=None))
                progress(f"{b}: not available ({why})")
            else:
                res["items"].append(measure(b, baseline="flashinfer"))
    flops_fn, bytes_fn = getattr(ref, "flops", None), getattr(ref, "bytes_moved", None)
    res["flops"] = float(loader.call_with(flops_fn, cfg.dims)) if callable(flops_fn) else None
    res["bytes_moved"] = float(loader.call_with(bytes_fn, cfg.dims)) if callable(bytes_fn) else None
    res["roofline_why"] = None if (res["flops"] or res["bytes_moved"]) else \
        "ref.py declares neither flops(**dims) nor bytes_moved(**dims)"
    return res


def flashinfer_missing(ref) -> str | None:
    """Why the FlashInfer baseline cannot run (None when it can), with what to do about it."""
    from . import loader

    fn = getattr(ref, "reference", None)
    if not callable(fn) or not loader.accepts_baseline(fn):
        return ("ref.py's reference() takes no 'baseline' argument (see references/kernel_abi.md: "
                "reference(..., baseline=None) that calls FlashInfer when baseline == 'flashinfer')")
    try:
        import flashinfer
    except Exception as exc:
        return (f"import flashinfer failed ({type(exc).__name__}: {' '.join(str(exc).split())[:160]}); "
                "pip install flashinfer-python, or see references/troubleshooting.md for a machine without network")
    return None if getattr(flashinfer, "__version__", None) else "flashinfer has no __version__ (a broken install)"
