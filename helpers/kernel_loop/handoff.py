"""How the kernel's process hands its results to the checker, a process that never imports the kernel.

The kernel's process (``trials``: correctness, time, benchmark) calls the kernel; the checker
(``checker``) draws the same seeded inputs itself, runs the reference and compares.  What passes
between them, for every check in the order the parent listed them, is one *manifest* per check in
a folder both can reach (``dir``):

- ``<n>.json``: the check's tag, the kernel's outputs and its inputs *as they are after the call*
  (every tensor input that is not an output), each tensor described by dtype, shape, stride,
  storage offset and where its bytes are; the storage address ranges (for the alias check); or
  the error the kernel raised.  JSON only: the checker never unpickles what the kernel's process
  wrote, so that process cannot run code in the checker.
- ``<n>.ack``: written by the checker when it has read check ``n``; the kernel's process keeps
  the tensors alive until then.
- ``done``: written when the kernel's process ends, so the checker stops waiting for checks that
  will never come (the kernel failed before them; its own result says why).

Two transports for a tensor's bytes:

- ``cuda-ipc`` (CUDA tensors): the storage's CUDA IPC handle (``UntypedStorage._share_cuda_``,
  the mechanism ``torch.multiprocessing`` uses).  The checker maps the kernel's own device
  memory: no copy, whatever the size.
- ``file`` (CPU tensors, CUDA memory that IPC cannot export, or every tensor when
  ``KERNEL_LOOP_HANDOFF=file``; ``correctness --sanitize`` uses it): the raw bytes in a
  file of ``dir`` (the folder is made under ``/dev/shm`` where it exists), mapped by the checker
  with ``torch.from_file``.

The kernel's process can still lie in a manifest, but only by writing to this protocol on
purpose; what it cannot do is change how the checker computes the reference or compares, or
what the parent does with the timings: those run in other interpreters.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_TRANSPORT = "KERNEL_LOOP_HANDOFF"
POLL_S = 0.002


def make_dir() -> tempfile.TemporaryDirectory:
    """A private folder for one measurement's manifests (in shared memory where the system has it)."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix="kl-handoff-", dir=base)


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _describe(t, path: Path, use_ipc: bool) -> dict[str, Any]:
    import torch

    entry: dict[str, Any] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                             "stride": list(t.stride()), "offset": int(t.storage_offset()),
                             "device": str(t.device)}
    storage = t.untyped_storage()
    entry["range"] = [int(storage.data_ptr()), int(storage.nbytes())]
    shared = None
    if t.is_cuda and use_ipc:
        try:
            shared = storage._share_cuda_()
        except RuntimeError:  # memory CUDA IPC cannot export (as under compute-sanitizer): copy the bytes
            shared = None
    if shared is not None:
        dev, handle, size, off, rc_handle, rc_off, ev_handle, ev_sync = shared
        entry["transport"] = "cuda-ipc"
        entry["ipc"] = {"device": int(dev), "handle": _b64(handle), "size": int(size), "offset": int(off),
                        "ref_counter": _b64(rc_handle), "ref_counter_offset": int(rc_off),
                        "event": None if ev_handle is None else _b64(ev_handle), "event_sync": bool(ev_sync)}
        return entry
    flat = t.detach().contiguous().reshape(-1)
    flat = flat.cpu() if flat.is_cuda else flat
    raw = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
    raw.numpy().tofile(str(path))
    entry.update(transport="file", file=path.name, nbytes=int(raw.numel()), stride=None, offset=0)
    return entry


def publish(folder: str | Path, n: int, tag: str, *, outputs: dict | None = None, inputs: dict | None = None,
            error: str | None = None, extra: dict | None = None) -> None:
    """Write manifest ``n`` (check ``tag``): the outputs and inputs after the call, or the error."""
    folder = Path(folder)
    use_ipc = os.environ.get(ENV_TRANSPORT, "cuda-ipc") != "file"
    doc: dict[str, Any] = {"n": n, "tag": tag, "error": error, "outputs": {}, "inputs": {}, "values": {},
                           **(extra or {})}
    for group, items in (("outputs", outputs or {}), ("inputs", inputs or {})):
        for i, (name, v) in enumerate(items.items()):
            if _is_tensor(v):
                doc[group][name] = _describe(v, folder / f"{n}-{group[0]}{i}.bin", use_ipc)
            elif group == "outputs":
                doc["values"][name] = v if isinstance(v, (int, float, bool, str, type(None))) else repr(v)
    _write_atomic(folder / f"{n}.json", json.dumps(doc))


def wait_ack(folder: str | Path, n: int, timeout_s: float, alive=None) -> None:
    """Block until the checker has read manifest ``n`` (``alive()`` False: give up at once)."""
    path = Path(folder) / f"{n}.ack"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline or (alive is not None and not alive()):
            raise RuntimeError(f"the checker never read check {n} (it stopped or timed out)")
        time.sleep(POLL_S)


def ack(folder: str | Path, n: int) -> None:
    _write_atomic(Path(folder) / f"{n}.ack", "ok")


class KernelEnded(Exception):
    """The kernel's process finished without handing over this check (it failed before the call)."""


def mark_done(folder: str | Path) -> None:
    """Written by the kernel's process when it has finished, whatever happened."""
    _write_atomic(Path(folder) / "done", "done")


def wait_manifest(folder: str | Path, n: int, timeout_s: float) -> dict[str, Any]:
    path, done = Path(folder) / f"{n}.json", Path(folder) / "done"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if done.exists() and not path.exists():
            raise KernelEnded(f"the kernel's process ended before check {n}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the kernel's process never handed over check {n}")
        time.sleep(POLL_S)
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("n") != n:
        raise ValueError(f"manifest {n} is malformed")
    return doc


def open_tensor(folder: str | Path, entry: dict[str, Any]):
    """The tensor a manifest entry describes, mapped without a copy (cuda-ipc) or read from its file."""
    import torch

    dtype = getattr(torch, str(entry["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {entry['dtype']!r} in a manifest")
    shape = [int(s) for s in entry["shape"]]
    if entry.get("transport") == "cuda-ipc":
        ipc = entry["ipc"]
        storage = torch.UntypedStorage._new_shared_cuda(
            int(ipc["device"]), _unb64(ipc["handle"]), int(ipc["size"]), int(ipc["offset"]),
            _unb64(ipc["ref_counter"]), int(ipc["ref_counter_offset"]),
            None if ipc["event"] is None else _unb64(ipc["event"]),
            bool(ipc["event_sync"]))
        t = torch.empty(0, dtype=dtype, device=f"cuda:{int(ipc['device'])}")
        t.set_(storage, int(entry["offset"]), shape, [int(s) for s in entry["stride"]])
        return t
    if entry.get("transport") != "file":
        raise ValueError(f"unknown transport {entry.get('transport')!r} in a manifest")
    path = Path(folder) / Path(str(entry["file"])).name  # never outside the folder
    nbytes = int(entry["nbytes"])
    if not path.is_file() or path.stat().st_size != nbytes:
        raise ValueError(f"manifest names {path.name}, which is not a file of {nbytes} bytes in the hand-over folder")
    raw = torch.from_file(str(path), shared=False, size=nbytes, dtype=torch.uint8) if nbytes else \
        torch.empty(0, dtype=torch.uint8)
    t = raw.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype)
    dev = str(entry.get("device") or "cpu")
    return t.to(dev) if dev != "cpu" else t
