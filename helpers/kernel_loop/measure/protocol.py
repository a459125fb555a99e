"""What passes between the judge and a worker: messages and tensors, and the worker's hand-over of results.

Messages are JSON objects, one per line, over a Unix stream socket that the judge listens on
(``SOCKET_ENV`` names its path in the worker's environment; the path travels through wrappers such as
ncu and compute-sanitizer, which keep the environment).  The worker never unpickles anything.

Tensors are the judge's: ``share`` describes one (dtype, shape, stride, offset, device) and how its
memory is reached, ``open_shared`` maps it in the worker.  Two transports:

- ``cuda-ipc``: the storage's CUDA IPC handle (the mechanism torch.multiprocessing uses), for CUDA
  tensors; the worker maps the judge's device memory itself;
- ``file``: a file in a private folder (under /dev/shm where the system has one) that both processes
  map with ``torch.from_file(shared=True)``: CPU tensors, and CUDA tensors when ``TRANSPORT_ENV`` is
  ``file`` (under compute-sanitizer, whose allocator IPC cannot export); the worker then stages the
  bytes on its own device.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

SOCKET_ENV = "KL_JUDGE_SOCKET"  # not KERNEL_LOOP_*: the worker sees no variable of that prefix
TRANSPORT_ENV = "KERNEL_LOOP_HANDOFF"
MAX_LINE = 64 << 20


class ProtocolError(RuntimeError):
    """The other side broke the protocol or went away."""


class Channel:
    """One JSON message per line over a connected stream socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = b""

    def send(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ProtocolError(f"the other side is gone ({exc.strerror or exc})") from None

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        self.sock.settimeout(timeout)
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ProtocolError(f"the other side is gone ({exc.strerror or exc})") from None
            if not chunk:
                raise ProtocolError("the other side closed the connection")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ProtocolError("a message longer than 64 MiB")
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        if not isinstance(msg, dict):
            raise ProtocolError("a message that is not a JSON object")
        return msg

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect_from_env() -> Channel:
    """The worker's end: connect to the socket the judge named in the environment."""
    path = os.environ.get(SOCKET_ENV)
    if not path:
        raise ProtocolError(f"{SOCKET_ENV} is not set: a worker is started by the judge only")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return Channel(s)


def private_dir(prefix: str, within: str | None = None) -> tempfile.TemporaryDirectory:
    """A private folder for one measurement's socket and shared files (in /dev/shm where it exists), or in
    ``within`` (the step's own folder, which the step removes however its judge ends: a judge killed by Ctrl-C or
    a timeout cannot remove its own)."""
    if within and os.path.isdir(within):
        return tempfile.TemporaryDirectory(prefix=prefix, dir=within)
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix=prefix, dir=base)


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def alloc_shared(like, folder: Path, name: str, use_file: bool):
    """A judge-owned tensor with ``like``'s shape, stride and dtype (its storage as large as ``like``'s)
    that a worker can map: device memory for CUDA IPC, else a file mapping in ``folder`` (a CPU tensor,
    also for a CUDA run over the file transport: the worker stages it on its device)."""
    import torch

    numel = max(like.untyped_storage().nbytes() // max(like.element_size(), 1), 1)
    if like.is_cuda and not use_file:
        base = torch.empty(numel, dtype=like.dtype, device=like.device)
    else:
        path = folder / f"{name}.bin"
        # made new, never through a name that exists (a link a worker planted would have the judge write elsewhere)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        base = torch.from_file(str(path), shared=True, size=numel, dtype=like.dtype)
    t = torch.empty(0, dtype=like.dtype, device=base.device)
    t.set_(base.untyped_storage(), like.storage_offset(), tuple(like.shape), tuple(like.stride()))
    return t


def share(t, folder: Path, name: str) -> dict[str, Any]:
    """The descriptor of a judge-owned tensor made by ``alloc_shared``."""
    entry: dict[str, Any] = {"name": name, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                             "stride": list(t.stride()), "offset": int(t.storage_offset())}
    if t.is_cuda:
        dev, handle, size, off, rc_handle, rc_off, ev_handle, ev_sync = t.untyped_storage()._share_cuda_()
        entry.update(transport="cuda-ipc", device=f"cuda:{int(dev)}",
                     ipc={"device": int(dev), "handle": _b64(handle), "size": int(size), "offset": int(off),
                          "ref_counter": _b64(rc_handle), "ref_counter_offset": int(rc_off),
                          "event": None if ev_handle is None else _b64(ev_handle), "event_sync": bool(ev_sync)})
        return entry
    path = folder / f"{name}.bin"
    entry.update(transport="file", device="cpu", file=path.name, numel=t.untyped_storage().nbytes() // max(
        t.element_size(), 1))
    return entry


def open_shared(folder: str | Path, entry: dict[str, Any]):
    """The worker's view of a judge-owned tensor (writes reach the judge)."""
    import torch

    dtype = getattr(torch, str(entry["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise ProtocolError(f"unknown dtype {entry['dtype']!r}")
    shape = [int(s) for s in entry["shape"]]
    stride = [int(s) for s in entry["stride"]]
    if entry.get("transport") == "cuda-ipc":
        ipc = entry["ipc"]
        storage = torch.UntypedStorage._new_shared_cuda(
            int(ipc["device"]), _unb64(ipc["handle"]), int(ipc["size"]), int(ipc["offset"]),
            _unb64(ipc["ref_counter"]), int(ipc["ref_counter_offset"]),
            None if ipc["event"] is None else _unb64(ipc["event"]), bool(ipc["event_sync"]))
        t = torch.empty(0, dtype=dtype, device=f"cuda:{int(ipc['device'])}")
        t.set_(storage, int(entry["offset"]), shape, stride)
        return t
    if entry.get("transport") != "file":
        raise ProtocolError(f"unknown transport {entry.get('transport')!r}")
    path = Path(folder) / Path(str(entry["file"])).name  # never outside the folder
    numel = max(int(entry["numel"]), 1)
    base = torch.from_file(str(path), shared=True, size=numel, dtype=dtype)
    t = torch.empty(0, dtype=dtype)
    t.set_(base.untyped_storage(), int(entry["offset"]), shape, stride)
    return t


def encode_value(v: Any) -> Any:
    """A constructor argument as JSON (tuples kept as tuples)."""
    if isinstance(v, tuple):
        return {"__tuple__": [encode_value(x) for x in v]}
    if isinstance(v, list):
        return [encode_value(x) for x in v]
    if isinstance(v, dict):
        return {"__dict__": [[encode_value(k), encode_value(x)] for k, x in v.items()]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise ProtocolError(f"a value of type {type(v).__name__} cannot travel to the worker")


def decode_value(v: Any) -> Any:
    if isinstance(v, dict) and "__tuple__" in v:
        return tuple(decode_value(x) for x in v["__tuple__"])
    if isinstance(v, dict) and "__dict__" in v:
        return {decode_value(k): decode_value(x) for k, x in v["__dict__"]}
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    return v


# --- the worker's side of the buffers: staging, and the hand-over of a call's results -----------------------
def handed_over(calls) -> set[str]:
    """The judge buffers some call passes to its kernel: arguments, pointers, tensors and parameters."""
    names: set[str] = set()
    for call in calls:
        for a in call.get("args") or []:  # a KernelBench call's buffer names; a .cu call's pointers and scalars
            if isinstance(a, str):
                names.add(a)
            elif isinstance(a, dict) and "ptr" in a:
                names.add(a["ptr"])
        names.update((call.get("tensors") or {}).values())
        names.update((call.get("state") or {}).values())
    return names


def span(t) -> tuple[int, int]:
    s = t.untyped_storage()
    return int(s.data_ptr()), int(s.data_ptr()) + int(s.nbytes())


def local_like(torch, t, device: str):
    """This process's own buffer for a judge tensor: the same layout on the run's device (the kernel
    works on memory this process allocated; the judge's copy is reached only around the call)."""
    numel = max(t.untyped_storage().nbytes() // max(t.element_size(), 1), 1)
    base = torch.empty(numel, dtype=t.dtype, device=device)
    out = torch.empty(0, dtype=t.dtype, device=device)
    out.set_(base.untyped_storage(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
    out.copy_(t)
    return out


def _a_parameter(k: Any, v: Any) -> bool:
    """Whether ``v`` lives in one of the kernel's model's parameters or buffers (loaded by the worker, however)."""
    from ..tensors import storage_ptr

    model = getattr(k, "model", None)
    return model is not None and storage_ptr(v) in {storage_ptr(t) for t in model.state_dict().values()}


def hand_over(w: Any, k: Any, value: Any, views: dict | None = None, objects: bool = False) -> tuple[dict, dict]:
    """The worker ``w``'s hand-over of a call of kernel ``k`` (its ``value`` known to be plain data), in the worker:
    results into the judge's buffers, in-place outputs and inputs as the call left them and every returned
    tensor into the buffer of its name.  Returns what the judge needs to read them (per returned
    output its layout, whether it views an input, another output or a result held from an earlier call), and
    the returned tensors a caller would hold (those not in a buffer the kernel was handed).  ``views``: the
    strided views the call was handed instead of some inputs (judge buffer name -> view).  An output the kernel
    was handed is read from its buffer: a tensor returned under its name elsewhere is reported, not copied."""
    from ..tensors import foreign_memory, normalize_outputs

    torch = w.torch
    for name, sh in w.shared.items():
        lo = w.local[name]
        if lo is not sh:
            sh.copy_(lo)
    returned = {} if value is None else normalize_outputs(value, k.out_names)
    handed = set(k.out_names) if k.kind != "ref" else set()  # a reference baseline may return its outputs instead
    report: dict[str, Any] = {}
    spans = [(n, span(t)) for n, t in w.local.items()] + [(n, span(t)) for n, t in (views or {}).items()]
    earlier = {f"{n} of call {i + 1}": span(t) for i, held in enumerate(k.kept) for n, t in held.items()
               if type(t) is torch.Tensor}  # held by the caller (one it did not keep, followed, it may free)
    for name, v in returned.items():
        buf = k.outputs.get(name)
        meta: dict[str, Any] = {"returned": True}
        if type(v) is not torch.Tensor:
            if name in handed:
                meta["elsewhere"] = True
            meta.update(value=v if isinstance(v, (int, float, bool, str, type(None))) else repr(v)[:200])
            report[name] = meta
            continue
        meta["grad"] = bool(v.requires_grad)
        v = v.detach()
        meta.update(shape=list(v.shape), dtype=str(v.dtype).replace("torch.", ""), stride=list(v.stride()),
                    expanded=any(s == 0 and n > 1 for s, n in zip(v.stride(), v.shape, strict=False)))
        lo, hi = span(v)
        meta["views"] = next((n for n, (a, b) in spans
                              if n != buf and v.numel() and a < b and lo < b and a < hi), None)
        meta["reuses"] = next((n for n, (a, b) in earlier.items() if v.numel() and a < b and lo < b and a < hi),
                              None)
        meta["aliases"] = next((n for n, o in returned.items() if n != name and type(o) is torch.Tensor
                                and o.numel() and v.numel() and span(o)[0] < hi and lo < span(o)[1]), None)
        if name in handed and buf in w.local:  # handed to the kernel: the buffer is what a caller reads
            meta["stored"] = True
            mine = [w.local[buf], *([views[buf]] if buf in (views or {}) else [])]  # its buffer, or the one it was handed
            meta["elsewhere"] = span(v) not in [span(t) for t in mine]
        elif buf is None or buf not in w.shared:
            meta["stored"] = False
        else:
            sh = w.shared[buf]
            if list(sh.shape) != list(v.shape) or sh.dtype != v.dtype:
                meta["stored"] = False
            else:
                if v.data_ptr() != w.local[buf].data_ptr():
                    sh.copy_(v.to(sh.device) if v.device != sh.device else v)
                meta["stored"] = True
        in_its_buffer = name in handed and buf in w.local and not meta["elsewhere"]
        meta["foreign"] = bool(v.numel() and not meta["views"] and not in_its_buffer and foreign_memory(v)
                               and not _a_parameter(k, v))
        report[name] = meta
    # a caller's hold on a result: the object returned (``objects``), or a tensor object of its own over the result's
    # storage (detach(), as a view is): a kernel that watches the object's life (a weak reference) is seen either way
    held = {n: v if objects else v.detach() for n, v in returned.items() if type(v) is torch.Tensor
            and not any(a <= span(v)[0] < b for _, (a, b) in spans)}
    return report, held


def hand_back(w: Any, k: Any, i: int, watch: dict[str, int] | None) -> dict[str, Any]:
    """Worker side: the results call ``i`` of kernel ``k`` returned (held, or a WeakHold: None once freed) into the
    judge buffers of their names, and the results ``watch`` names (judge buffer -> index in ``k.watch``) into those
    buffers.  Per name (or buffer): whether it was stored, and whether it was gone."""
    from ..tensors import WeakHold

    items = [(k.kept_bufs.get(name, ""), name, t.strong() if isinstance(t, WeakHold) else t)
             for name, t in (k.kept[i] if 0 <= i < len(k.kept) else {}).items()]
    items += [(b, b, k.watch[n]) for b, n in (watch or {}).items() if 0 <= n < len(k.watch)]
    out: dict[str, Any] = {}
    for buf, name, t in items:
        sh = w.shared.get(buf)
        ok = t is not None and sh is not None and list(sh.shape) == list(t.shape) and sh.dtype == t.dtype
        if ok:
            sh.copy_(t.to(sh.device) if t.device != sh.device else t)
        out[name] = {"stored": ok, "gone": t is None}
    if w.device.startswith("cuda"):
        w.torch.cuda.synchronize(w.device)
    return out


def let_go(w: Any) -> dict:
    """A shape's end (``unbind``) or the worker's (``bye``): every reference the worker ``w`` holds to the judge's
    buffers, and its staged copies of them, dropped (the instances and the results a caller keeps stay).  A CUDA IPC
    block stays allocated in the judge while any process maps it: seen on the H100 80GB, the next shape's buffers
    (another batch size) did not fit beside the last one's, which the worker still mapped."""
    w.shared.clear(), w.local.clear()
    for k in w.kernels.values():
        w._end_backward(k)
        k.inputs, k.handed, k.args, k.state_bufs, k.slots, k.fn, k.twin = [], [], [], {}, {}, None, None
    if w.torch is not None and w.device.startswith("cuda"):
        w.torch.cuda.synchronize(w.device)
        w.torch.cuda.ipc_collect()
        w.torch.cuda.empty_cache()
    return {}


def held_elsewhere(kept: list[dict]) -> bool:
    """Whether anything but their caller holds results ``kept`` holds (or follows: a WeakHold still alive): another
    tensor over a held one's storage (torch's count of its users, above a lone tensor's, measured here: no build
    promises its value), the sign of a kernel that keeps what it returns.  A hint that decides only whether more
    calls are made."""
    import sys

    import torch

    from ..tensors import WeakHold

    count = torch._C._storage_Use_Count
    lone = {"t": torch.empty(1)}  # held while counted: a storage's count is read through a live tensor only
    alone = count(lone["t"].untyped_storage()._cdata)  # one tensor's own count on this torch build
    refs = next(sys.getrefcount(t) for t in lone.values())  # a held object's references: the holder's, the loop's
    # a view returned and held as it is: its base counts; a returned object the caller holds, which the kernel holds
    # too (a ring served from a list), shows in its references, not in its storage's count
    return any(not t.ref.expired() if isinstance(t, WeakHold)
               else count(t.untyped_storage()._cdata) > alone + (t._base is not None) or sys.getrefcount(t) > refs
               for held in kept for t in held.values())


def still_held(kept: list[dict]) -> tuple[list[list], list[Any]]:
    """Which results [call index, name] are still alive once ``kept`` (per call, the results a caller holds, or their
    WeakHold) lets go of them: every reference dropped (the list emptied), a garbage collection.  The holder's
    references are the only ones a kernel that allocates its results afresh leaves, so each of its storages is
    freed here (an allocator that caches the memory caches a freed block, not the storage); one still alive is held
    by the kernel (a module global, an attribute, a compile cache, a pool).  Also each of those as a tensor again
    (over the storage the kernel holds, as it was returned), to be read after later calls."""
    import gc

    from ..tensors import WeakHold

    weak = [(i, n, t if isinstance(t, WeakHold) else WeakHold(t)) for i, held in enumerate(kept) for n, t in held.items()]
    kept.clear()
    if any(not w.ref.expired() for _, _, w in weak):  # a result in a reference cycle is freed by a collection
        gc.collect()
    alive = [(i, n, w.strong()) for i, n, w in weak]
    alive = [(i, n, t) for i, n, t in alive if t is not None]
    return [[i, n] for i, n, _ in alive], [t for _, _, t in alive]


def plain_types(torch) -> tuple:
    """(torch.Tensor, torch.return_types' structseq types): read before any kernel code runs, so no kernel adds one."""
    import torch.return_types as rt

    return (torch.Tensor, frozenset(t for t in vars(rt).values() if isinstance(t, type) and issubclass(t, tuple)))


def not_plain(value: Any, plain: tuple, depth: int = 0) -> str | None:
    """What in a returned value is not plain data, in words ('a MyTensor (a torch.Tensor subclass)'), or None: tensors
    exactly torch.Tensor, containers exactly dict, list or tuple (or a torch.return_types structseq), scalars exactly
    int, float, bool, str or None.  Types are compared with ``type()``, which no object can change; nothing is called."""
    tensor, structseqs = plain
    t = type(value)
    if t is tensor or value is None or t in (int, float, bool, str):
        return None
    if t in (list, tuple) or t in structseqs:
        items = tuple.__iter__(value) if t is not list else list.__iter__(value)
    elif t is dict:
        items = dict.values(value)
    else:
        what = f"{type.__getattribute__(t, '__module__')}.{type.__getattribute__(t, '__qualname__')}"
        for base, word in ((tensor, "torch.Tensor"), (dict, "dict"), (list, "list"), (tuple, "tuple")):
            if issubclass(t, base):  # the type's own bases: nothing of the object is asked
                return f"a {what} (a {word} subclass)"
        return f"a {what}"
    if depth > 4:
        return "containers nested more than 4 deep"
    for item in items:
        bad = not_plain(item, plain, depth + 1)
        if bad:
            return bad
    return None
