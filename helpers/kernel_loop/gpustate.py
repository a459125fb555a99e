"""GPU state through NVML (``pynvml`` from nvidia-ml-py): clocks, temperature, power and the
clock-event ("throttle") reasons, so that a measurement says what state the GPU was in."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# NVML clock-event reason bits (nvmlClocksEventReason* constants).
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that lower the clock under load (the others are idle or configuration states).
SLOWDOWN_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown")


def gpu_visible() -> bool | None:
    """Whether an NVIDIA GPU is visible to processes started here; None when it cannot be told without
    importing torch (the steps that decide where a command runs never import it)."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    if not sys.platform.startswith("linux") or Path("/dev/dxg").exists():  # not Linux, or WSL
        return None
    return any(Path("/dev").glob("nvidia[0-9]*"))


def decode_throttle(mask: int) -> list[str]:
    """NVML reason bitmask -> names; unknown bits appear as ``bit_0x...``."""
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_BITS)
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


def _handle(pynvml: Any, cuda_index: int, uuid: str | None) -> Any:
    if uuid:
        u = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(u)
        except pynvml.NVMLError:
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)


def snapshot(cuda_index: int = 0, uuid: str | None = None) -> dict[str, Any]:
    """{"available": True, name, sm_clock_mhz, mem_clock_mhz, temperature_c, power_w,
    throttle_reasons, throttle_mask} or {"available": False, "why": "..."}.  ``uuid`` (the CUDA
    device UUID, e.g. from torch's device properties) picks the NVML device when CUDA and NVML
    number devices differently."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "why": "nvidia-ml-py (pynvml) is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses, or a missing libnvidia-ml
        return {"available": False, "why": f"NVML did not start: {exc}"}
    try:
        h = _handle(pynvml, cuda_index, uuid)
        name = pynvml.nvmlDeviceGetName(h)
        out: dict[str, Any] = {
            "available": True,
            "name": name.decode() if isinstance(name, bytes) else name,
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        }
        try:
            out["power_w"] = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        except pynvml.NVMLError:
            out["power_w"] = None
        try:
            mask = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        except (AttributeError, pynvml.NVMLError):  # older pynvml or driver
            mask = int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        out["throttle_mask"] = mask
        out["throttle_reasons"] = decode_throttle(mask)
        return out
    except pynvml.NVMLError as exc:
        return {"available": False, "why": f"NVML query failed: {exc}"}
    finally:
        pynvml.nvmlShutdown()


def slowdowns(state: dict[str, Any] | None) -> list[str]:
    """The clock-lowering reasons present in a snapshot."""
    return [r for r in (state or {}).get("throttle_reasons", []) if r in SLOWDOWN_REASONS]


def compute_processes(cuda_index: int = 0, uuid: str | None = None) -> list[dict[str, Any]] | None:
    """The compute processes NVML sees on the GPU, [{pid, name, used_mb}], or None when NVML cannot tell."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        h = _handle(pynvml, cuda_index, uuid)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        out = []
        for p in procs:
            pid = int(p.pid)
            try:
                name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                name = ""
            used = getattr(p, "usedGpuMemory", None)
            out.append({"pid": pid, "name": name[:160] or "(not visible from here)",
                        "used_mb": int(used) // (1 << 20) if isinstance(used, int) else None})
        return out
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def foreign_processes(procs: list[dict[str, Any]] | None, own: set[int], users: int) -> list[dict[str, Any]]:
    """The processes of ``procs`` that are not ours; ``users`` is how many of ours hold the GPU (the judge
    and its live workers).  When some pid NVML lists is ours, pids compare: every other one is foreign.
    When none is, NVML sees another pid namespace (a container): then only a count can tell, and the
    processes beyond our ``users`` are foreign."""
    if not procs:
        return []
    unmatched = [p for p in procs if p["pid"] not in own]
    if len(unmatched) < len(procs):
        return unmatched
    return unmatched[users:]


def not_alone(p: dict[str, Any], what: str, parent: int) -> str:
    """The refusal for a process found computing on the GPU beside a step's own (``parent``: the step's caller)."""
    if p["pid"] == parent:  # kernel-loop used as a library by a process that has itself used CUDA
        return (f"the process that started this step (pid {p['pid']}: {p['name']}) holds a CUDA context of its own, "
                f"so {what} would share the GPU with it: run the step from a process that has not used CUDA (the "
                "kloop.py command does not)")
    return (f"another process computes on the GPU (pid {p['pid']}: {p['name']}); {what} would time it too: end it "
            "and run the step again")
