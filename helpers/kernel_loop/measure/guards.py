"""What the worker holds a kernel to besides its outputs, checked in the worker's process (a refusal is a
``KernelDefect``, said in one line by ``error_text``): no torch mode left active (``left_modes``), torch's process-wide
settings as they were before any kernel code ran (``process_settings``), its random number generators where the
reference leaves them (``rng_state``), nothing imported from the folder the step
was started in (``no_working_folder_on_path``), and a ModelNew with Model's parameters (``state_mismatch``).  The
generators' helpers both sides use live here too: where a call's generators start (``start_state``, the judge's), and
ModelNew's second instance (``second_instance``, the worker's)."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from .. import tensors


class KernelDefect(Exception):
    """The kernel file cannot be called as its format says (a failed correctness, said in one line)."""


def error_text(exc: BaseException) -> str:
    """An exception as a message: expected errors plainly, others with the innermost frames."""
    from ..build import BuildError
    from ..common import KernelLoopError

    if isinstance(exc, (KernelLoopError, BuildError, KernelDefect)):
        return str(exc)
    frames = traceback.format_tb(exc.__traceback__)[-3:]
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}\n" + "".join(frames).rstrip()


# kernel libraries whose compiled bindings (nanobind) count the objects still alive when they unload: Triton's
# printed some thirty lines of "leaked" objects on every exit of a frozen worker; CuTe DSL's MLIR bindings are built
# the same way
COUNTS_AT_EXIT = ("triton", "cutlass")


def leaving(code: int) -> int:
    """A worker's or judge's process exit status ``code``, everything alive first frozen out of the garbage collector
    (about 0.3 s of CPU a process: the interpreter's exit then does not trace torch's objects again in each of its
    last collections; some 20 s of `make test`), unless a library of COUNTS_AT_EXIT was imported.  The atexit
    handlers, the flush of the standard streams and the exit status are the exit's as before; only a reference cycle
    made before this is not collected at the exit (the system frees its memory)."""
    import gc

    if not any(m in sys.modules for m in COUNTS_AT_EXIT):
        gc.freeze()
    return code


def judge_failed(exc: BaseException) -> str:
    """The step's error where the judge itself raised; running out of device memory says what for, and what to do."""
    text = error_text(exc)
    if type(exc).__name__ == "OutOfMemoryError":
        return ("the judge ran out of device memory for the problem's data (the inputs and the reference's outputs of "
                "a call, the buffers it shares with the kernel's worker, and that worker's own): free the GPU of other "
                f"processes, or check a smaller shape with --dims ({text})")
    return f"the judge failed: {text}"


def state_mismatch(cls_name: str, ours: dict[str, list], theirs: dict[str, list]) -> str:
    """The refusal for a ModelNew whose parameters and buffers are not Model's, naming the first difference."""
    missing = [n for n in theirs if n not in ours]
    extra = [n for n in ours if n not in theirs]
    shaped = [n for n in theirs if n in ours and ours[n] != theirs[n]]
    if missing:
        what = f"lacks Model's '{missing[0]}' {theirs[missing[0]]}"
    elif extra:
        what = f"has '{extra[0]}' {ours[extra[0]]}, which Model does not"
    else:
        n = shaped[0]
        what = f"has '{n}' of shape {ours[n]} where Model's is {theirs[n]}"
    return (f"{cls_name}'s parameters and buffers must be Model's (same names and shapes, so both get the run's "
            f"one set of weights): {cls_name} {what}")


def process_settings(torch: Any) -> dict[str, Any]:
    """torch's process-wide settings that change what a caller's own computations give: the default dtype and
    device, float32 matmul precision, TF32 and reduced-precision reductions, cuDNN's choices, deterministic
    algorithms, the number of CPU threads, and whether the CPU flushes denormals to zero (no getter: a product
    that underflows tells)."""
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    out: dict[str, Any] = {
        "torch.get_default_dtype()": str(torch.get_default_dtype()),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.backends.cuda.matmul.allow_tf32": bool(cuda.allow_tf32),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            bool(cuda.allow_fp16_reduced_precision_reduction),
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            bool(cuda.allow_bf16_reduced_precision_reduction),
        "torch.backends.cudnn.allow_tf32": bool(cudnn.allow_tf32),
        "torch.backends.cudnn.enabled": bool(cudnn.enabled),
        "torch.backends.cudnn.deterministic": bool(cudnn.deterministic),
        "torch.are_deterministic_algorithms_enabled()": bool(torch.are_deterministic_algorithms_enabled()),
        "torch.get_num_threads()": int(torch.get_num_threads()),
        "torch.set_flush_denormal": bool((torch.tensor([1e-30], dtype=torch.float32) * 1e-10).item() == 0.0),
    }
    if hasattr(torch, "get_default_device"):
        out["torch.get_default_device()"] = str(torch.get_default_device())
    for dev in ("cpu", "cuda"):  # autocast left on: the caller's own matmuls come back in bfloat16 (a red team's find)
        out[f"torch.is_autocast_enabled({dev!r})"] = bool(torch.is_autocast_enabled(dev))
        out[f"torch.get_autocast_dtype({dev!r})"] = str(torch.get_autocast_dtype(dev))
    out["torch.is_grad_enabled()"] = bool(torch.is_grad_enabled())
    out["torch.backends.cudnn.benchmark"] = bool(cudnn.benchmark)
    out["torch.is_deterministic_algorithms_warn_only_enabled()"] = bool(torch.is_deterministic_algorithms_warn_only_enabled())
    if hasattr(cuda, "allow_fp16_accumulation"):
        out["torch.backends.cuda.matmul.allow_fp16_accumulation"] = bool(cuda.allow_fp16_accumulation)
    # the operators the worker hands results over with: a kernel that registers its own (torch.library, C++'s
    # TORCH_LIBRARY_IMPL) changes them for its caller too, and could compute there, outside the timed call
    for op in HANDOVER_OPS:
        out[f"the dispatcher's {op}"] = torch._C._dispatch_dump(op)
    return out


HANDOVER_OPS = ("aten::copy_", "aten::_copy_from", "aten::_to_copy", "aten::clone", "aten::detach", "aten::view",
                "aten::as_strided", "aten::empty_strided", "aten::empty.memory_format")


def left_modes(modes: tuple, when: str) -> str | None:
    """Why a kernel must be refused for a torch function or dispatch mode it left active (``modes``: the lengths of
    the two mode stacks, read before any kernel code ran), or None: the mode would run inside every torch call of the
    process after the kernel's, the hand-over of its results among them."""
    active = [n for n, f in zip(("function", "dispatch"), modes, strict=False) if f()]
    if not active:
        return None
    return (f"{when} a torch {' and '.join(active)} mode (TorchFunctionMode, TorchDispatchMode): it would run inside "
            "the harness's own torch calls, after the timed call; leave every mode before returning")


def same_grad_mode(value: Any, grad: bool, torch: Any) -> Any:
    """``value``, when the call left autograd's mode as it found it (``grad``); else a refusal: a kernel that turns
    autograd off leaves its caller's backward() without a graph (the worker's own ``with`` would hide it)."""
    if torch.is_grad_enabled() != grad:
        raise KernelDefect(f"the call turned autograd {'off' if grad else 'on'} (torch.set_grad_enabled) and left it "
                           "so: its caller's next computations would run without (or with) a graph; use "
                           "torch.no_grad() as a context around your own work")
    return value


_QUIET: list[Any] = []  # while the ring probe's quiet calls last: objects kept alive to set the collector's count


def before_call(torch: Any, device: str, msg: dict[str, Any]) -> None:
    """Before every call of the kernel's: Python's garbage collection as a user's process has it (automatic, unless the
    kernel's own code turned it off), but in the ``quiet`` calls of held.cycle_rings, which are never verified: there
    everything alive before the call is frozen out of every collection (gc.freeze), so that a ring of returned buffers
    that gives itself back when a collection frees a sentinel of its wraps and writes a result its caller holds (with
    collections at random it escaped in 10 of 12 CPU runs).  Collections of what the call makes still run, from a count
    drawn at random: a red team's kernel told the judge's calls from a user's where collection was off in every call (a
    finalizer on a fresh cycle that never ran), another the quiet calls where it was off in them.  After the quiet calls,
    everything frozen goes back.  Before a correctness call on a GPU, the device's cached memory given back past an
    eighth of it (tensors.spare_cached)."""
    import gc
    import secrets

    if msg.get("quiet"):
        gc.freeze()
        _QUIET[:] = [[] for _ in range(1 + secrets.randbelow(gc.get_threshold()[0] or 700))]
        if device.startswith("cuda") and torch.cuda.memory_allocated(device) * 2 > \
                torch.cuda.get_device_properties(device).total_memory:
            gc.collect()  # garbage in reference cycles made in these calls must not leave a large call short
    elif _QUIET:
        _QUIET.clear()
        gc.unfreeze()
    if device.startswith("cuda") and "keep" in msg:
        tensors.spare_cached(torch, device)


def ooms(torch: Any, device: str) -> int:
    """How many out-of-memory errors torch's caching allocator raised in this process on ``device`` (0 off CUDA).  One
    that torch caught itself counts too: a cuDNN convolution whose cached algorithm's workspace cannot be had runs
    another, with other rounding, and keeps it for that shape (ATen's cuDNN convolution code)."""
    return int(torch.cuda.memory_stats(device).get("num_ooms", 0)) if device.startswith("cuda") else 0


def seed_torch(torch: Any, seed: int) -> None:
    """torch.manual_seed for the generators the judge uses, the CPU's and CUDA's: torch's own also queues a seed for
    every other backend it knows, with a formatted traceback each (2.4 ms a call on a machine without CUDA, a sixth
    of the CPU test mode's judge time in a profile of its tests)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def torch_rng(torch: Any, device: str) -> bytes:
    """torch's random number generators' states (the CPU's and the device's), as bytes."""
    state = torch.random.get_rng_state().numpy().tobytes()
    return state + (torch.cuda.get_rng_state(device).numpy().tobytes() if device.startswith("cuda") else b"")


def other_rng() -> tuple:
    """Python's and NumPy's random number generators' states, to compare with ``==`` (NumPy's key as bytes; pickled,
    they cost 93 us a call, 6% of the CPU mode's judge time in a profile of its tests)."""
    import random

    np = sys.modules.get("numpy")
    name, key, *rest = np.random.get_state() if np is not None else ("", b"")
    return random.getstate(), name, bytes(key), *rest


def set_torch_rng(torch: Any, device: str, state: bytes) -> None:
    """torch's generators put where ``state`` (torch_rng's bytes) says: the CPU's, then the device's."""
    cpu = torch.random.get_rng_state().numel()
    torch.random.set_rng_state(torch.frombuffer(bytearray(state[:cpu]), dtype=torch.uint8))
    if device.startswith("cuda"):
        torch.cuda.set_rng_state(torch.frombuffer(bytearray(state[cpu:]), dtype=torch.uint8), device)


def rng_state(torch: Any, device: str) -> tuple:
    """The random number generators' states, torch's (the CPU's and the device's, as bytes), Python's and NumPy's."""
    return torch_rng(torch, device), *other_rng()


RNG_CHANGED = ("the call changed a random number generator's state (torch's, Python's random or NumPy's: a seed, or a "
               "random draw the reference does not make): the random numbers its caller draws next would change")
RNG_NOT_THE_REFERENCES = ("the call left torch's random number generators other than the reference's call leaves them "
                          "(a seed, or draws other than the reference's), or changed Python's random or NumPy's: the "
                          "random numbers its caller draws next would change")


def rng_before(torch: Any, device: str, msg: dict[str, Any]) -> tuple | None:
    """What a call's generators are checked against after it (rng_after): every state, where the reference draws no
    random number in the call's mode (``msg["rng"]``); else Python's and NumPy's (``msg["rng_other"]``, where the
    reference leaves those alone), with torch's checked against the states the reference's call from the same seed
    ended with (``msg["rng_after"]``); or nothing (a baseline)."""
    return rng_state(torch, device) if msg.get("rng") else other_rng() if msg.get("rng_other") else None


def rng_after(torch: Any, device: str, msg: dict[str, Any], before: tuple | None) -> None:
    """A refusal where the call left the generators otherwise than rng_before says they must be (found by red teams:
    kernels that drew as the reference does, then reseeded torch, Python's random and NumPy, passed; so did one that
    reseeded only in training mode, and one whose reference also drew from Python's random)."""
    if msg.get("rng"):
        if rng_state(torch, device) != before:
            raise KernelDefect(RNG_CHANGED)
        return
    if (before is not None and other_rng() != before) or (
            msg.get("rng_after") and torch_rng(torch, device).hex() != msg["rng_after"]):
        raise KernelDefect(RNG_NOT_THE_REFERENCES)


def changed_settings(before: dict[str, Any], torch: Any, when: str) -> str | None:
    """Why a kernel must be refused for changing a process-wide setting (process_settings) since ``before``, or None:
    a caller's process keeps its own, and every later computation of the caller's would run under the kernel's
    (found by a red team: flush-to-zero of denormals turned on by a first call, with right outputs)."""
    now = process_settings(torch)
    changed = [(n, v, now.get(n)) for n, v in before.items() if now.get(n) != v]
    if not changed:
        return None
    name, was, got = changed[0]
    return (f"{when} changed the process-wide setting {name} ({was} -> {got})"
            + (f" and {len(changed) - 1} more" if len(changed) > 1 else "")
            + ": a caller's process keeps its own settings; set it around your own work and restore it before "
            "returning")


def no_working_folder_on_path() -> None:
    """``python -m`` puts the folder the step was started in first on sys.path: a kernel could import code from
    there that is neither hashed into the records nor checked, and changed after its PASS (found by a red team).
    That entry goes, unless an absolute PYTHONPATH entry names the same folder."""
    here = os.path.realpath(os.getcwd())
    named = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)}
    sys.path[:] = [p for p in sys.path if p and (os.path.realpath(p) != here or here in named)]


def weights_channels_last(torch: Any, model: Any, left: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """A user's ``model.to(memory_format=torch.channels_last)`` for one call (a layout:permuted one): the model's 4-d
    weights (and buffers) held channels_last, 5-d ones channels_last_3d, as Module.to swaps a tensor's ``.data`` (a red
    team's conv read its weight's storage as contiguous OIHW); their old memory poisoned meanwhile, as a user's is
    freed (a review's alias kept from before read it).  ``weights_back`` undoes it with what the call left, first
    for ``left``, what a call that raised before its own undoing left."""
    weights_back(left)
    held = []
    for t, fmt in moving_weights(torch, model):
        held.append((t, t.data))
        t.data = t.data.contiguous(memory_format=fmt)
        held[-1][1].fill_(float("nan"))
    return held


def moving_weights(torch: Any, model: Any) -> list[tuple[Any, Any]]:
    """The weights and buffers ``model.to(memory_format=torch.channels_last)`` moves, each with its new format: 4-d
    and 5-d float tensors not in that order already (a 1x1 or a depthwise conv's weight is: Module.to leaves it where
    it is, and poisoning its old memory would poison the weight itself)."""
    out, seen = [], set()
    for t in [*model.parameters(), *model.buffers()] if model is not None else ():
        fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        if t.dim() in (4, 5) and t.is_floating_point() and id(t) not in seen and not t.is_contiguous(memory_format=fmt):
            seen.add(id(t))
            out.append((t, fmt))
    return out


def weights_back(held: list[tuple[Any, Any]]) -> None:
    for t, data in reversed(held):
        data.copy_(t.data)
        t.data = data
    held.clear()  # undone once (a call that raised before its own undoing leaves it to the next call's)


def call_seed(seed: int) -> int:
    """The seed torch's generators start a call from: the reference's, and the kernel's where the reference draws
    (KernelBench's LSTMs and GRUs draw their first hidden state in forward), so both get the same numbers.  A one-way
    hash, as torch.seed() draws them: an affine form of the trial's seed told a kernel that read torch.initial_seed()
    it was called by the judge (a red team's find)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"kernel-loop call {seed}".encode()).digest()[:8], "little") >> 2


def start_state(torch: Any, device: str, seed: int) -> bytes:
    """Where torch's generators start a call the judge reseeds (the reference's, and the kernel's where the reference
    draws): seeded from call_seed and moved on, as a user's are after drawing (the CPU generator by up to 4096 draws,
    the device's philox offset set): not freshly seeded (a red team's ModelNew was right only there and where its
    previous call left them), and reachable from the seed torch.initial_seed() reports (a ninth red team's was right
    only where the state could not be rebuilt from it, as it could not when another seed was written over it)."""
    import hashlib

    h = hashlib.sha256(f"kernel-loop start {seed}".encode()).digest()
    seed_torch(torch, call_seed(seed))
    torch.empty(1 + int.from_bytes(h[:2], "little") % (1 << 12), device="cpu").uniform_()
    state = bytearray(torch_rng(torch, device))
    if device.startswith("cuda"):  # the device's: its seed, then its offset (a multiple of 4)
        cpu = torch.random.get_rng_state().numel()
        state[cpu + 8:cpu + 16] = (4 * (1 + int.from_bytes(h[10:15], "little"))).to_bytes(8, "little")
    return bytes(state)


def second_instance(model: Any, twin_init: list, init: list, device: str) -> tuple[Any, str | None]:
    """ModelNew's second instance (weights:twin), built with the judge's arguments for it (problem.twin_init: the floats
    scaled); where ModelNew refuses them (raises), with the first's, and what it raised (the judge notes a refusal, as
    a red team's honest kernel made for the file's slope raises on another)."""
    try:
        return tensors.spare_instance(model, twin_init, device), None
    except Exception as exc:
        return tensors.spare_instance(model, init, device), error_text(exc).split("\n")[0][:200]
