"""GPU state through NVML (``pynvml`` from nvidia-ml-py): clocks, temperature, power and the
clock-event ("throttle") reasons, so that a measurement says what state the GPU was in."""

from __future__ import annotations

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
