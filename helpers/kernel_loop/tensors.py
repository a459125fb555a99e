"""Tensor helpers for the checks: poisoning output buffers, fingerprints of inputs, storage identity,
and turning a kernel's or reference's returned value into named outputs.  torch is imported lazily."""

from __future__ import annotations

import random
import secrets
import sys
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


def random_like(t):
    """Random finite values of ``t``'s shape, dtype and device (normal floats, 0..99 integers, coin-flip bools): an
    output's pre-state or an accumulated output's starting values that no kernel can expect."""
    torch = _torch()
    if t.dtype == torch.bool:
        return torch.rand(t.shape, device=t.device) < 0.5
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.randn(t.shape, device=t.device).to(t.dtype)
    return torch.randint(0, 100, t.shape, device=t.device).to(t.dtype)


def strided_view(t, kind: str = "step"):
    """``t``'s values as a user's other layouts hand them: ``step``, every other element of its last dim over 1 (a
    slice with a step); ``pad``, rows of a wider tensor (``big[:, :n]``), the elements between poisoned; ``moved``, a
    copy at another address (a user's next tensor); ``offset``, dense but a batch less its first row (``big[1:]``), 16-byte
    aligned only where a row is; dense in another order: ``permuted``, channels_last for 4 dims else a transpose's,
    ``lead``, its first two dims swapped (a sequence-first tensor made batch-first).  Else ``t``."""
    torch = _torch()
    if kind == "moved":
        return t.clone(memory_format=torch.contiguous_format)
    dims = [d for d in range(t.dim()) if t.shape[d] > 1]
    if not dims or (kind in ("pad", "permuted") and len(dims) < 2) or kind == "lead" and (t.dim() < 3 or min(t.shape[:2]) < 2):
        return t
    if kind in ("permuted", "lead"):
        a, b = (0, 1) if kind == "lead" else (1, 3) if t.dim() == 4 and t.shape[1] > 1 and t.shape[3] > 1 else dims[-2:]
        return t.movedim(a, b).contiguous().movedim(b, a)
    wide = list(t.shape)  # offset: a red team's kernel read from its storage's start; a float4 load faults there
    last = 0 if kind == "offset" else t.dim() - 1 if kind == "pad" else dims[-1]
    wide[last] += 1 if kind == "offset" else wide[last] if kind == "step" else 16
    base = torch.empty(wide, dtype=t.dtype, device=t.device)
    poison_tensor(base)
    cut = slice(None, None, 2) if kind == "step" else slice(1, None) if kind == "offset" else slice(0, t.shape[last])
    view = base[(slice(None),) * last + (cut,)]
    return view.copy_(t)


def drawn_buffers(model, spare) -> list[str]:
    """The buffers (non-persistent ones too) in which ``spare`` (a second instance built as ``model`` was, right after
    it: spare_instance) differs from ``model``: drawn per instance (a projection, a permutation, sorted thresholds),
    where the others are structure every instance builds alike (a causal mask, a sine table)."""
    torch = _torch()
    theirs = dict(spare.named_buffers(remove_duplicate=False)) if spare is not None else {}
    return [n for n, b in model.named_buffers(remove_duplicate=False) if (o := theirs.get(n)) is not None
            and (o.shape != b.shape or not torch.equal(o.to(b.device), b))]


def nudge_scales(model, spread: float = 0.1, constant: float = 0.1, every: bool = False) -> dict[str, float]:
    """Per learnable float parameter of ``model`` (with ``every``, frozen ones and the running means of its norms
    too: a second instance's differ as well; never other buffers, which hold a model's structure, a causal mask say,
    or are drawn per instance: a second instance's own draw, drawn_buffers), the size of the change ``nudge`` makes:
    ``spread`` times the parameter's spread, or where it is constant ``constant`` times its magnitude (at least 1).
    For a condition, computed once by the judge and sent to the worker."""
    from torch.nn.modules.batchnorm import _NormBase
    means = [(f"{p}.running_mean" if p else "running_mean", m.running_mean) for p, m in model.named_modules()
             if every and isinstance(m, _NormBase) and m.running_mean is not None]
    out = {}
    for name, p in sorted([*model.named_parameters(), *means], key=lambda np: np[0]):
        if (p.requires_grad or every) and p.dtype.is_floating_point and p.numel():
            flat = p.detach().reshape(-1).double()
            if not bool(flat.isfinite().all()) or not p.requires_grad and "running_mean" not in name and int(
                    flat.unique().numel()) <= 2:  # a frozen mask or constant (a -inf fill, a 0/1 causal mask): structure
                continue
            std = float(flat.std()) if p.numel() > 1 else 0.0
            out[name] = spread * std if std > 0 else constant * max(abs(float(flat.mean())), 1.0)
    return out


def nudge(model, seed: int, scales: dict[str, float], keep: bool = True, sparse: bool | str = False) -> dict[str, Any]:
    """Change ``model``'s parameters (or buffers) named in ``scales`` in place, as an optimizer step does (their
    ``_version`` moves on): normal noise of ``scales``' size (``sparse``: on about half the elements, as a step whose
    gradient is zero elsewhere; "swap": the values of about half the elements exchanged among them, as a checkpoint
    with its units in another order, every sum, norm and extreme kept), drawn on the parameter's device (upstream) from
    ``seed`` and each name's place in ``scales``: the judge (for Model) and the worker (for ModelNew) make the same
    change.  A tied parameter is found under any of its names (a ModelNew may register it first).  Returns the old (``keep``)."""
    torch = _torch()
    params, saved = _named(model), {}
    with torch.no_grad():
        for i, (name, scale) in enumerate(sorted(scales.items())):
            p = params[name]
            if keep:
                saved[name] = p.detach().clone()
            gen = torch.Generator(device=p.device).manual_seed((seed * 7919 + i) % (1 << 63))  # (see upstream)
            if sparse == "swap":  # each chosen place takes the next one's value in a random cycle: none keeps its own
                at = (torch.rand(tuple(p.shape), generator=gen, device=p.device) < 0.5).reshape(-1).nonzero().squeeze(1)
                at = at[torch.randperm(at.numel(), generator=gen, device=p.device)]
                old = p.detach().reshape(-1)
                flat = old.clone()
                flat[at] = old[at.roll(1)]
                if not torch.equal(flat, old):  # (values all alike there, a running mean's zeros: noise instead)
                    p.copy_(flat.view(tuple(p.shape)))
                    continue
            step = torch.randn(tuple(p.shape), generator=gen, device=p.device).mul_(scale)
            step = step.mul_(torch.rand(tuple(p.shape), generator=gen, device=p.device) < 0.5) if sparse else step
            p.add_(step.to(device=p.device, dtype=p.dtype))
    return saved


def _named(model) -> dict[str, Any]:
    """``model``'s parameters under every name they have (tied ones under each), then its buffers."""
    return {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}


def spare_instance(model, init: list, device: str):
    """A second instance of ``model``'s class (None when it has neither parameters nor buffers: a fourteenth red team's
    class cache of a model whose one buffer is a projection drawn per instance passed), built as ``model`` was, before
    its first call, as a user builds a network's layers before the first forward (a tenth red team's ModelNew made every
    instance built before its first call share the first one's weights), under a fork of torch's generators."""
    torch = _torch()
    if next(iter(model.parameters()), None) is None and next(iter(model.buffers()), None) is None:
        return None
    with torch.random.fork_rng(devices=[torch.device(device)] if device.startswith("cuda") else []), \
            torch.device(device):
        return type(model)(*init)


def twin(model, init: list, spec: dict[str, Any], device: str, made=None, own: dict[str, Any] | None = None):
    """A second instance of ``model``'s class, built as a user builds a network's second layer of one shape
    (``cls(*init)``; ``made``, one built before ``model``'s first call, spare_instance), ``model``'s parameters nudged
    (``nudge`` from ``spec``'s seed and scales, as the judge's Model copy's) and loaded (load_state_dict), in eval() or
    (``spec`` "train") training mode: a cache shared across instances (keyed on shapes or _version) gives one the other's
    (a ninth red team's; an eleventh's in training mode alone).  ``own``: the buffers drawn per instance, as the judge's
    second Model drew them (drawn_buffers)."""
    torch = _torch()
    scratch = spare_instance(model, init, device).to(device)  # on the device, as the judge's copy: nudge draws there
    made = made if made is not None else spare_instance(model, init, device)
    scratch.load_state_dict(model.state_dict())
    nudge(scratch, int(spec["seed"]), spec["scales"], keep=False, sparse=spec.get("sparse") or False)
    made.load_state_dict(scratch.state_dict())
    with torch.no_grad():
        for name, t in (own or {}).items():  # (a red team's class cache of a random projection or permutation)
            _named(made)[name].copy_(t)
    theirs, mine = model.state_dict(), made.state_dict()
    for name, p in mine.items():  # at ``model``'s _version too, as two layers built alike are (whichever is behind
        for low, high in ((p, theirs.get(name)), (theirs.get(name), p)) if name in theirs else ():  # moves on: a
            while low._version < high._version:  # second twin of one spare is ahead of the first instance)
                torch.autograd.graph.increment_version(low)
    return made.to(device).train(bool(spec.get("train")))


def put_back(model, saved: dict[str, Any]) -> None:
    """``model``'s parameters as ``nudge`` found them."""
    params = _named(model) if saved else {}
    for name, t in saved.items():
        params[name].detach().copy_(t)


def _tensor_state(model):
    """(name, store, key, value) of every tensor, or tuple or list holding one, on ``model``'s modules: attributes and
    buffers (a parameter is the judge's, loaded: one set in a call is the kernel's to answer for)."""
    torch = _torch()
    for prefix, mod in model.named_modules():
        for store in (mod.__dict__, mod._buffers):
            for key, t in list(store.items()):
                if isinstance(t, torch.Tensor) or (isinstance(t, (tuple, list))
                                                   and any(isinstance(x, torch.Tensor) for x in t)):
                    yield (f"{prefix}.{key}" if prefix else key), store, key, t


def state_names(model) -> list[str]:
    """The names of the tensors a model keeps on its modules: Model's, which ``uninfer`` may touch on ModelNew."""
    return [name for name, *_ in _tensor_state(model)]


def uninfer(model, names: list[str] | None = None) -> list[str]:
    """The tensors a call under torch.inference_mode() left on ``model``'s modules (attributes, buffers, tuples or
    lists of them: a recurrent state) among ``names`` (Model's own, ``state_names``; all by default) made normal
    tensors of the same values; returns their names.  A Model that keeps its state (KernelBench's VanillaRNN) fails
    its next call outside inference mode, as a user's would: the judge's other calls are not to fail on that.  A
    tensor of ModelNew's own (a cache) is left: a user's next call with autograd meets it.  Call under no_grad."""
    torch = _torch()

    def normal(t):
        if isinstance(t, torch.Tensor) and t.is_inference():
            return t.clone()
        if isinstance(t, (tuple, list)) and any(isinstance(x, torch.Tensor) and x.is_inference() for x in t):
            return type(t)(normal(x) for x in t) if type(t) in (tuple, list) else t
        return t

    fixed = []
    for name, store, key, t in _tensor_state(model):
        new = normal(t) if names is None or name in names else t
        if new is not t:
            store[key] = new
            fixed.append(name)
    return fixed


def upstream(seed: int, i: int, like):
    """The gradient handed to backward() for a call's ``i``-th output, drawn from ``seed`` on its device, judge and
    worker alike; by ``seed % 4``, then ``seed % 8 // 4``: normal, row-major (0); expanded over all dims, or some (1);
    dense with the dims reversed (2), or the first two, or the last two swapped (3: transpose(1, 2)).  Red teams'
    backwards stored row-major into empty_like of it, checked one stride, or took any stride 0 for one value."""
    torch, shape, kind, n, other = _torch(), like.shape, seed % 4, like.ndim, seed % 8 >= 4
    gen, big = torch.Generator(device=like.device).manual_seed(seed * 31 + i), [d for d in range(n) if shape[d] > 1]
    if kind in (2, 3):  # (dense: .to keeps the order; a dim of one has any stride, no place in it)
        a, b = (big[-2:] if other else big[:2]) if kind == 3 and len(big) > 2 else (0, 0)
        order = list(range(n))[::-1] if (a, b) == (0, 0) else [b if d == a else a if d == b else d for d in range(n)]
        drawn = torch.randn([shape[d] for d in order], generator=gen, device=like.device)
        return drawn.permute([order.index(d) for d in range(n)]).to(like.dtype)
    wide = [kind == 1] * n
    if kind == 1 and other and n > 1:  # some dims, not all, drawn by a generator of its own (not the caller's)
        wide = random.Random(seed * 31 + i).sample([True, False] * (n - 1), n)
    one = torch.randn([1 if w else d for w, d in zip(wide, shape, strict=True)], generator=gen, device=like.device)
    return one.to(device=like.device, dtype=like.dtype).expand(tuple(shape))


def grads_into(outs: list, targets: list[tuple[str, Any, Any]], seed: int, others: list | tuple = ()) -> list[str]:
    """backward() from ``outs`` (a call's returned tensors) with the gradients ``upstream`` draws from ``seed``: each
    target (name, leaf tensor, buffer) gets what a user's loss.backward() adds to its .grad: autograd's gradient plus
    what the backward added to .grad itself (Megatron's fused accumulation; a red team's gave it to autograd too),
    .grad then put back; it holds an earlier micro-batch's (``earlier``) first in every layout's call one time in two
    (backwards that overwrote it, or where the upstream was not row-major, passed).  Under
    checkpoint(use_reentrant=True), which refuses torch.autograd.grad (a backward 10% off passed), they are read from
    .grad after torch.autograd.backward, .grad empty first (a sum onto earlier values loses a small gradient's
    digits); the ``others``' .grad is put back too (the model's other leaves).  Zeros where unused."""
    torch = _torch()
    carries = [(i, o) for i, o in enumerate(outs) if o.requires_grad]
    leaves, ups, held = [t for _, t, _ in targets if t.requires_grad], [upstream(seed, i, o) for i, o in carries], []
    try:
        _prefill(torch, leaves, held, seed)
        got = iter(torch.autograd.grad([o for _, o in carries], leaves, ups, allow_unused=True))
    except Exception as exc:
        _put_back(held)
        if not isinstance(exc, RuntimeError) or "use_reentrant" not in str(exc) or not all(t.is_leaf for t in leaves):
            raise
        mine = {id(t) for t in leaves}  # (the others' .grad is put back as it was; the targets', by _put_back)
        held, rest = [], [(t, t.grad) for t in {id(t): t for t in others if id(t) not in mine}.values()]
        _prefill(torch, leaves, held, None)
        torch.autograd.backward([o for _, o in carries], ups)
        for t, was in rest:
            t.grad = was
        got = iter([None] * len(leaves))  # (read from .grad: what the backward wrote there is all of it)
    wrote, unused = _put_back(held), []
    with torch.no_grad():
        for name, t, buf in targets:
            g, own = next(got) if t.requires_grad else None, wrote.get(id(t))  # (a tied parameter: each name, all)
            if g is None and own is None:
                unused.append(name)
                buf.zero_()
            else:
                buf.copy_(g if own is None else own if g is None else g + own)
    return unused


def _prefill(torch, leaves: list, held: list, seed: int | None) -> None:
    """Each leaf's .grad kept in ``held``, then an earlier micro-batch's values there one time in two, or none."""
    with torch.no_grad():
        for j, t in enumerate({id(t): t for t in leaves if t.is_leaf}.values()):
            was = t.grad if t.grad is None else t.grad.detach().clone()
            fill = seed is not None and was is None and (seed + seed % 8 // 4) % 2 == 0
            t.grad = earlier(t, seed, j) if fill else None if seed is None else t.grad
            held.append((j, t, was, t.grad, None if t.grad is None else t.grad._version, seed))


def _put_back(held: list) -> dict:
    """What a backward wrote into each held leaf's .grad beyond what _prefill put there, by id; .grad put back."""
    wrote = {}
    for j, t, was, first, version, seed in held:
        if (now := t.grad) is not None and not (now is first and now._version == version):  # (untouched: no copy)
            base = None if first is None else earlier(t, seed, j) if was is None else was
            wrote[id(t)] = now.detach() - base if base is not None and now.shape == t.shape else now.detach()
        t.grad = was
    return wrote


def earlier(t, seed: int, j: int):
    """The ``j``-th leaf's .grad as an earlier micro-batch left it (grads_into): normal, from a generator of its own."""
    torch = _torch()
    gen = torch.Generator(device=t.device).manual_seed(seed * 31 + 1000 + j)
    return torch.randn(tuple(t.shape), generator=gen, device=t.device).to(t.dtype)


def foreign_memory(t) -> bool:
    """Whether a tensor lives in memory torch's allocator did not give its storage (torch.from_dlpack, frombuffer,
    from_numpy, a shared-memory mapping, a raw pointer): such a storage cannot be resized.  Its storage object
    dies when a caller lets go of it while the memory may stay with whoever made it, so ``protocol.still_held`` cannot
    see a kernel that keeps that memory and writes it again."""
    return not t.untyped_storage().resizable()


def spare_cached(torch: Any, device: str) -> None:
    """A process's cached but unused device memory given back when it exceeds an eighth of the device: a kernel's
    earlier calls (a convolution's workspace, results let go) must not leave a later call short (seen on the H100:
    ConvTranspose2d at KernelBench's size ran out of memory with 26 GiB reserved but unallocated)."""
    unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if unused * 8 > torch.cuda.get_device_properties(device).total_memory:
        torch.cuda.empty_cache()


class WeakHold:
    """A result its caller did not keep (tensors too large for every call's to be held): a weak reference to its
    storage and its layout, so that one the kernel still holds can be read (``strong``) without holding it."""

    def __init__(self, t: Any):
        from torch.multiprocessing.reductions import StorageWeakRef

        self.ref = StorageWeakRef(t.untyped_storage())
        self.meta = (t.dtype, t.storage_offset(), tuple(t.shape), tuple(t.stride()))

    def strong(self) -> Any:
        """The result as a tensor again over its storage, or None where the storage is freed."""
        import torch

        if self.ref.expired():
            return None
        st = torch.UntypedStorage._new_with_weak_ptr(self.ref.cdata)  # as torch's own storage cache does
        dtype, offset, shape, stride = self.meta
        return torch.empty(0, dtype=dtype, device=st.device).set_(st, offset, shape, stride)


FP_CHUNK = 1 << 24
_MASK64 = (1 << 64) - 1
# this process's secret: the weights of its own fingerprints derive from it, so a kernel (another process)
# cannot pick a change that leaves them equal; a fingerprint compared across processes uses key 0
_PROCESS_KEY = secrets.randbits(62) | 1
_WEIGHTS: dict[tuple[str, int], Any] = {}  # (device, key) -> the weights of a chunk's first positions


def _mix(x: int) -> int:
    """A 64-bit mixing function (the splitmix64 finalizer): a bijection whose outputs look random."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


_BLOCK = 1 << 16  # weights are drawn in blocks of this many positions, each from its own seed


def _weights(torch, device, key: int, n: int) -> Any:
    """The weights of the first ``n`` positions of a chunk (n <= FP_CHUNK), kept per device and key and grown as larger
    tensors come: odd 64-bit values drawn per block from every bit of (key, block) (torch's generators keep 32 bits of
    a seed), so that a product loses no bit of an element."""
    cache = (str(device), key)
    have = _WEIGHTS.get(cache)
    if have is None or have.numel() < n:
        blocks = [_secret_bytes(torch, key, b, _BLOCK * 8).view(torch.int64) * 2 + 1
                  for b in range(max(1, -(-n // _BLOCK)))]
        have = _WEIGHTS[cache] = torch.cat(blocks).to(device)
    return have


def _secret_bytes(torch, key: int, block: int, n: int) -> Any:
    """``n`` bytes drawn from all of ``key`` and ``block`` (Python's generator takes every bit of its seed)."""
    return torch.frombuffer(bytearray(random.Random((key << 64) | block).randbytes(n)), dtype=torch.uint8)


def _lanes(torch, flat) -> Any:
    """A flat tensor's bytes as integers: int32 lanes when they divide evenly (an 8-byte element is two: its top bit
    moves one lane by 2**31), else bytes; at an offset that is no multiple of 4, a copy's (its clone's lanes)."""
    raw = flat.contiguous().view(torch.uint8)
    if raw.numel() % 4 == 0:
        return (raw if raw.storage_offset() % 4 == 0 else raw.clone()).view(torch.int32)
    return raw


def _sums(torch, lanes, key: int) -> tuple:
    """The plain int64 sum of ``lanes`` and their sum weighted by ``key``'s odd 64-bit weights (wrapping at 2**64,
    a weight per chunk too), as device scalars, or on the CPU as Python ints (NumPy's, the same sums modulo 2**64:
    a fifth of torch's operator overhead on the CPU mode's small tensors).  The products are computed in int64."""
    weights = _weights(torch, lanes.device, key, min(lanes.numel(), FP_CHUNK))
    np = sys.modules.get("numpy") if lanes.device.type == "cpu" else None  # (torch imports it where it has it)
    lanes, weights = (lanes.numpy(), weights.numpy()) if np else (lanes, weights)
    s1 = s2 = None  # the sums of the first chunk start them (zeros and additions took a third of a small one's time)
    for c, s in enumerate(range(0, max(lanes.shape[0], 1), FP_CHUNK)):
        bits = lanes[s:s + FP_CHUNK]
        a, b = bits.sum(dtype=np.int64 if np else torch.int64), (bits * weights[:bits.shape[0]]).sum()
        a, b = (int(a), int(b) * _signed(_mix(key ^ (c + 1)) | 1)) if np else (a, b * _signed(_mix(key ^ (c + 1)) | 1))
        s1, s2 = (a, b) if s1 is None else (s1 + a, s2 + b)
    return s1, s2


MM_BYTES = 1 << 20  # a tensor of this many bytes or more is summed by rows of ROW bytes in an int8 product
ROW, _COLS, _ROWS_AT_ONCE = 4096, 16, 1 << 14  # int32 sums exact: 4096 * 128 * 128 = 2**26; 64 MiB a product
_ROW_WEIGHTS: dict[tuple[str, int], Any] = {}
_ROWS: dict[str, Any] = {}  # device -> whether torch._int_mm works there


def _row_weights(torch, device, key: int) -> Any:
    """The [ROW, 16] int8 matrix of ``key`` on ``device`` (15 secret columns from every bit of the key, then ones), or
    None where torch._int_mm does not work on that device (tried once on zeros: every tensor there then sums lanes)."""
    if (str(device), key) not in _ROW_WEIGHTS:
        w = _secret_bytes(torch, key, 1 << 40, ROW * _COLS).view(torch.int8).view(ROW, _COLS)
        w = torch.cat([w[:, 1:], torch.ones(ROW, 1, dtype=torch.int8)], 1).to(device)
        if str(device) not in _ROWS:
            try:
                _ROWS[str(device)] = torch._int_mm(torch.zeros(32, ROW, dtype=torch.int8, device=device), w) is not None
            except (AttributeError, RuntimeError, NotImplementedError):  # no int8 product in this torch or device
                _ROWS[str(device)] = False
        _ROW_WEIGHTS[(str(device), key)] = w if _ROWS[str(device)] else None
    return _ROW_WEIGHTS[(str(device), key)]


def _by_rows(torch, raw, key: int) -> tuple:
    """(plain, weighted) sums of int8 bytes ``raw`` (at least MM_BYTES): each ROW-byte row times 15 secret int8 columns
    and a column of ones in one int8 product (torch._int_mm: exact int32 sums, one read of the bytes), then the rows'
    secret sums and the last partial row as lanes.  A changed row keeps its 15 sums with a chance of at most 256**-15."""
    w = _row_weights(torch, raw.device, key)
    rows, parts, r0 = raw.numel() // ROW, [], 0
    while r0 < rows:  # torch._int_mm takes more than 16 rows, and cuBLASLt 16-byte aligned ones (a clone if not)
        r1 = rows if rows - r0 < _ROWS_AT_ONCE + 17 else r0 + _ROWS_AT_ONCE
        block = raw[r0 * ROW:r1 * ROW].view(r1 - r0, ROW)
        parts.append(torch._int_mm(block if block.data_ptr() % 16 == 0 else block.clone(), w))
        r0 = r1
    sums = torch.cat(parts)
    secret = _sums(torch, sums[:, :-1].reshape(-1), key)[1]
    tail = _sums(torch, raw[rows * ROW:], key ^ 0x7A11)
    return sums[:, -1].sum(dtype=torch.int64) + tail[0], secret + tail[1]  # the tail's weights are another key's


def fingerprint(t, *, portable: bool = False) -> tuple:
    """(shape, dtype, two sums) of a tensor's bytes: the plain sum of its 4-byte lanes and a sum weighted by an odd
    64-bit weight per position, in int64 (wrapping at 2**64); from MM_BYTES on, by rows (_by_rows).  A change is missed
    only if the weights' combination vanishes, which their secret key (``_PROCESS_KEY``; ``portable``: 0, the same in
    every process) keeps the kernel from arranging.  The sums are read once (one host synchronisation)."""
    torch = _torch()
    key = 0 if portable else _PROCESS_KEY
    flat = t.detach().reshape(-1)
    if flat.numel() * flat.element_size() >= MM_BYTES and _row_weights(torch, flat.device, key) is not None:
        s1, s2 = _by_rows(torch, flat.contiguous().view(torch.uint8).view(torch.int8), key)
    else:
        s1, s2 = _sums(torch, _lanes(torch, flat), key)
    sums = torch.stack([s1, s2]).cpu() if torch.is_tensor(s1) and torch.is_tensor(s2) else (s1, s2)  # (CPU: ints)
    return tuple(t.shape), str(t.dtype), *(int(x) % (1 << 64) for x in sums)


def normalize_outputs(value: Any, names: list[str]) -> dict:
    """A kernel's or reference's returned value as {name: tensor}."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (tuple, list)):
        keys = names if len(names) == len(value) else [f"out{i}" for i in range(len(value))]
        return dict(zip(keys, value, strict=False))
    return {names[0] if len(names) == 1 else "out": value}


def clone_or_none(t: Any) -> Any:
    """A copy of ``t``, or None where the device has no room for one (torch's OutOfMemoryError)."""
    try:
        return t.clone()
    except RuntimeError:
        return None
