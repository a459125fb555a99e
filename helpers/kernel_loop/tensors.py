"""Tensor helpers for the checks: poisoning output buffers, fingerprints of inputs, storage identity,
and turning a kernel's or reference's returned value into named outputs.  torch is imported lazily."""

from __future__ import annotations

from typing import Any

INT_SENTINEL = -123456789


def _torch():
    import torch

    return torch


def is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def storage_ptr(t) -> int:
    """The address of a tensor's storage: equal for a tensor and every view of it."""
    return t.untyped_storage().data_ptr()


def clone_value(x: Any) -> Any:
    return x.detach().clone() if is_tensor(x) else x


FLOAT_SENTINEL = -8.5e37  # the second float poison: finite, so a kernel cannot hide behind a NaN reference


def poison_tensor(t, variant: int = 0) -> None:
    """Fill an output buffer with a value no honest kernel leaves behind.  ``variant`` alternates between two
    poisons (NaN or a finite sentinel; True or False; two integer sentinels), so an element the kernel
    never writes fails even where the reference happens to equal one of them."""
    torch = _torch()
    if t.dtype.is_floating_point or t.dtype.is_complex:
        t.fill_(float("nan") if variant % 2 == 0 else max(FLOAT_SENTINEL, -torch.finfo(t.dtype).max
                                                          if t.dtype.is_floating_point else FLOAT_SENTINEL))
    elif t.dtype == torch.bool:
        t.fill_(variant % 2 == 0)
    else:
        info = torch.iinfo(t.dtype)
        first = INT_SENTINEL if info.min <= INT_SENTINEL <= info.max else info.max
        t.fill_(first if variant % 2 == 0 else (info.min if first != info.min else info.max))


FP_CHUNK = 1 << 24
_INT_OF_SIZE = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
_WEIGHTS: dict[tuple[str, int], Any] = {}  # (device, FP_CHUNK) -> the position weights of one chunk


def _weights(torch, device) -> Any:
    """The weight of each position within a chunk, made once per device: a multiplicative hash of the
    position (no period), odd so that multiplying by it loses no bit of an element.  The chunks' own odd
    weights (fingerprint) tell the same position in two chunks apart."""
    key = (str(device), FP_CHUNK)
    if key not in _WEIGHTS:
        pos = torch.arange(FP_CHUNK, device=device, dtype=torch.int64)
        _WEIGHTS[key] = ((pos * -7046029254386353131) >> 20) & 0xFFFFFF | 1
    return _WEIGHTS[key]


def fingerprint(t) -> tuple:
    """(shape, dtype, two sums) of a tensor's bytes, taken chunk by chunk: the plain sum of its elements' bit
    patterns (wrapping at 2**32 for 4-byte elements, else at 2**64) and a sum weighted by a position-dependent
    pattern (exact in int64, wrapping at 2**64).  Any change of one or a few elements changes them, a swap
    too; equal fingerprints mean unchanged for every practical purpose, without holding a copy."""
    torch = _torch()
    flat = t.detach().reshape(-1)
    size = flat.element_size()
    if flat.dtype.is_complex or size not in _INT_OF_SIZE:
        flat, size = flat.view(torch.uint8), 1
    ints = getattr(torch, _INT_OF_SIZE[size])
    # a sum in the elements' own width needs no widened copy of them (a 4-byte one wraps at 2**32 and still
    # sees every change of one element); the weighted product is widened to int64 on the fly
    plain = ints if size >= 4 else torch.int64
    weights = _weights(torch, flat.device)
    # the sums stay on the tensor's device and are read once: one host synchronisation per tensor
    s1 = torch.zeros((), dtype=plain, device=flat.device)
    s2 = torch.zeros((), dtype=torch.int64, device=flat.device)
    for c, s in enumerate(range(0, flat.numel(), FP_CHUNK)):
        bits = flat[s:s + FP_CHUNK].view(ints)
        s1 += bits.sum(dtype=plain)
        s2 += (bits * weights[:bits.numel()]).sum() * ((c * -7046029254386353131 >> 20) & 0xFFFFFF | 1)
    return tuple(t.shape), str(t.dtype), int(s1) % (1 << 64), int(s2) % (1 << 64)


def normalize_outputs(value: Any, names: list[str]) -> dict:
    """A kernel's or reference's returned value as {name: tensor}."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (tuple, list)):
        keys = names if len(names) == len(value) else [f"out{i}" for i in range(len(value))]
        return dict(zip(keys, value, strict=False))
    return {names[0] if len(names) == 1 else "out": value}


def same_bytes(a, b) -> bool:
    """Whether two tensors hold the same shape, dtype and bytes (compared chunk by chunk, no full copy)."""
    torch = _torch()
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    fa, fb = a.detach().reshape(-1), b.detach().reshape(-1)
    if fa.device != fb.device:
        fb = fb.to(fa.device)
    size = fa.element_size()
    if fa.dtype.is_complex or size not in _INT_OF_SIZE:
        fa, fb, size = fa.view(torch.uint8), fb.view(torch.uint8), 1
    ints = getattr(torch, _INT_OF_SIZE[size])
    for s in range(0, fa.numel(), FP_CHUNK):
        if not torch.equal(fa[s:s + FP_CHUNK].view(ints), fb[s:s + FP_CHUNK].view(ints)):
            return False
    return True
