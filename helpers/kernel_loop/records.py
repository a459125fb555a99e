"""``<out>/records.log``: signed, chained records of what the helpers measured and the gate passed.

Only the helpers and the gate write here; the gate trusts a result only through its record.  One
record per line, fields ``key=value`` separated by one TAB, always in this order::

    rec=1  seq=N  prev=<sha256 of the previous line>  step=...  version=vK  time=...  <step fields>  keyid=...  mac=...

``prev`` is the sha256 of the previous line's bytes without its newline (64 zeros on the first
line), so a line cannot be removed, reordered or rewritten without breaking every later one.
``mac`` is HMAC-SHA256, keyed with the 32 bytes of the record key, over the bytes of the line before
``<TAB>mac=``.  Values hold no TAB, CR or LF.  ``files`` is a comma list of ``name:sha256`` (names
relative to vK, or to <out> for run-level files); ``hits`` a comma list of KBS page ids.  The full
format, the field list of each step and the threat model are in references/artifacts.md.

The key is one per user: ``$KERNEL_LOOP_RECORD_KEY`` names its file, else
``${XDG_CONFIG_HOME:-~/.config}/kernel-loop/record.key``; created on first use (mode 0600, 64 hex
characters), never inside a run directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import secrets
from contextlib import contextmanager
from pathlib import Path

from .common import UsageError, command, now_iso, sha256_file

FILENAME = "records.log"
LOCK = ".gate.lock"  # the gate's lock: a helper's append never interleaves with a gate run
KEY_ENV = "KERNEL_LOOP_RECORD_KEY"
ZERO = "0" * 64
STEPS = ("init", "correctness", "profile", "kbs", "gate", "finish", "extend", "benchmark")
_BAD_VALUE = str.maketrans({"\t": " ", "\r": " ", "\n": " "})


class Record(dict):
    """One verified line: its fields, plus ``line`` (1-based) and ``raw`` (the line's text)."""

    def __init__(self, fields: dict[str, str], line: int, raw: str):
        super().__init__(fields)
        self.line, self.raw = line, raw

    def files(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in filter(None, self.get("files", "").split(",")):
            name, _, digest = item.rpartition(":")
            out[name] = digest
        return out

    def hits(self) -> list[str]:
        return [h for h in self.get("hits", "").split(",") if h]


# --- the key -------------------------------------------------------------------------------
def key_path() -> Path:
    given = os.environ.get(KEY_ENV)
    if given:
        return Path(given).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "kernel-loop" / "record.key"


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def load_key(root: Path | None = None, *, create: bool = True) -> bytes:
    """The record key's 32 bytes; created (0600) on first use when ``create``."""
    path = key_path()
    if root is not None and _inside(path, Path(root)):
        raise UsageError(f"the record key {path} lies inside the run directory {root}: it must live outside "
                         f"it (set {KEY_ENV} to a file elsewhere, or unset it for ~/.config/kernel-loop/record.key)")
    if not path.exists():
        if not create:
            raise UsageError(f"no record key at {path}: point {KEY_ENV} at the key file this run was made with (the "
                             f"one {KEY_ENV} named at init, else the ~/.config/kernel-loop/record.key of the user who "
                             "ran init); a new key cannot sign an existing run's records (init makes one only for a "
                             "new run); tell the user if it is lost")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another helper made it a moment ago
        else:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(32) + "\n")
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise UsageError(f"the record key {path} is not 64 lowercase hex characters: it is corrupt "
                         "(records signed with it can no longer be verified)")
    return bytes.fromhex(text)


def key_id(key: bytes) -> str:
    """A public name for a key (16 hex of its sha256), so a wrong key can be told from a forged line."""
    return hashlib.sha256(key).hexdigest()[:16]


def mac(key: bytes, body: str) -> str:
    return hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()


# --- reading ---------------------------------------------------------------------------------
def _parse(line: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in line.split("\t"):
        k, sep, v = part.partition("=")
        if not sep or k in fields:
            raise ValueError(f"field '{part[:30]}' is not key=value, or repeats a key")
        fields[k] = v
    return fields


def read(root: Path, *, verify: bool = True) -> list[Record]:
    """Every record of <out>/records.log, the chain and (``verify``) every signature checked.

    A line that breaks the chain or whose signature does not verify raises UsageError naming it.
    """
    path = Path(root) / FILENAME
    if not path.is_file():
        return []
    key = load_key(root, create=False) if verify else b""
    kid = key_id(key) if verify else None
    out: list[Record] = []
    prev = ZERO
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if line == "":
            continue
        where = f"{path}:{n}"
        try:
            f = _parse(line)
        except ValueError as exc:
            raise UsageError(f"{where} is not a record: {exc} (records.log is written only by the helpers)") from None
        if f.get("rec") != "1" or f.get("seq") != str(len(out) + 1) or "mac" not in f:
            raise UsageError(f"{where} is not record {len(out) + 1} of the chain (a line was added, removed or "
                             "reordered by hand)")
        if f.get("prev") != prev:
            raise UsageError(f"{where} does not follow the line before it (the chain is broken: a line was edited, "
                             "removed or reordered)")
        body = line[: line.rindex("\tmac=")]
        if verify and not hmac.compare_digest(mac(key, body), f["mac"]):
            other = f.get("keyid") not in (None, kid)
            raise UsageError(f"{where}: the signature does not verify ("
                             + (f"signed with key {f.get('keyid')}, not yours ({kid}, {key_path()})" if other
                                else "the line was edited after it was signed") + ")")
        out.append(Record(f, line=n, raw=line))
        prev = hashlib.sha256(line.encode("utf-8")).hexdigest()
    return out


def latest(recs: list[Record], step: str, version: str | None = None) -> Record | None:
    for r in reversed(recs):
        if r.get("step") == step and (version is None or r.get("version") == version):
            return r
    return None


# --- writing ---------------------------------------------------------------------------------
@contextmanager
def _locked(root: Path):
    with open(Path(root) / LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def files_field(base: Path, names: list[str]) -> str:
    return ",".join(f"{n}:{sha256_file(Path(base) / n)}" for n in names)


def append(root: Path, step: str, version: str = "-", **fields: str) -> Record:
    """Sign and append one record (under the gate's lock); returns it."""
    root = Path(root)
    if step not in STEPS:
        raise ValueError(step)
    path = root / FILENAME
    if step != "init" and not path.is_file():
        raise UsageError(f"{root} has no {FILENAME}: this run was made before signed records (or the file was "
                         "removed); start a new run with 'kernel-loop init'")
    key = load_key(root)
    with _locked(root):
        recs = read(root)
        prev = hashlib.sha256(recs[-1].raw.encode("utf-8")).hexdigest() if recs else ZERO
        items = {"rec": "1", "seq": str(len(recs) + 1), "prev": prev, "step": step, "version": version,
                 "time": now_iso(), **{k: str(v) for k, v in fields.items()}, "keyid": key_id(key)}
        body = "\t".join(f"{k}={str(v).translate(_BAD_VALUE)}" for k, v in items.items())
        line = f"{body}\tmac={mac(key, body)}"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    return Record(_parse(line), line=len(recs) + 1, raw=line)


# --- what the steps ask ----------------------------------------------------------------------
def run_hashes(root: Path) -> dict[str, str]:
    """The hashes every measurement record binds: ref.py and run.json as they are now."""
    return {"ref": sha256_file(Path(root) / "ref.py"), "run": sha256_file(Path(root) / "run.json")}


def check_run_files(root: Path, recs: list[Record]) -> str | None:
    """ref.py and run.json must still be what init recorded.  Returns the GPU init measured ("-": none)."""
    init = recs[0] if recs and recs[0].get("step") == "init" else None
    if init is None:
        raise UsageError(f"{Path(root) / FILENAME} has no init record: start a new run with 'kernel-loop init'")
    now = run_hashes(root)
    for key, name in (("ref", "ref.py"), ("run", "run.json")):
        if init.get(key) != now[key]:
            raise UsageError(f"{name} changed after init recorded it: restore it, or start a new run")
    return init.get("gpu")


def another_card(card: str, here: str, device: str) -> str:
    """The refusal of a measuring step on another card than the run's: the gate fails what it would record."""
    return (f"this run's GPU is the {card} init measured its peaks on, and {device} here is an {here}: the gate fails "
            "a version measured on another card, so nothing was measured: run the step where the run's GPU is")


def device_matches(run_device: str, gpu: int, rec_device: str) -> bool:
    return rec_device == ("cpu" if run_device == "cpu" else f"cuda:{gpu}")


def _require(recs: list[Record], root: Path, step: str, version: str, kernel: Path, result: str | None = None) -> Record:
    """The latest ``step`` record of ``version``: with ``result`` when given, for the kernel as it is now,
    and its files unchanged since."""
    rec = latest(recs, step, version)
    if rec is None:
        raise UsageError(f"{version} has no {step} record in {FILENAME}: run `{command(step, root)}` first")
    if result is not None and rec.get("result") != result:
        raise UsageError(f"{version} {step} is {rec.get('result')!r}, not {result}: fix the kernel and re-run {step}")
    if rec.get("kernel") != sha256_file(kernel):
        raise UsageError(f"{kernel.name} changed after {step} {'passed' if result else 'ran'}: re-run {step}")
    vdir = Path(root) / version
    for name, digest in rec.files().items():
        if not (vdir / name).is_file() or sha256_file(vdir / name) != digest:
            raise UsageError(f"{version}/{name} changed after {step} wrote it: re-run {step}")
    return rec


def require_correctness(root: Path, version: str, kernel: Path, run_device: str, gpu: int) -> Record:
    """The latest correctness record of ``version``: PASS, for the kernel as it is now, on the run's device,
    and its correctness files unchanged since."""
    recs = read(root)
    check_run_files(root, recs)
    rec = _require(recs, root, "correctness", version, kernel, result="PASS")
    if not device_matches(run_device, gpu, rec.get("device", "")):
        raise UsageError(f"{version} passed correctness on {rec.get('device')}, but this run measures on "
                         f"{'cpu' if run_device == 'cpu' else f'cuda:{gpu}'}: a CPU-mode result does not count for "
                         "a GPU run; run correctness without KERNEL_LOOP_DEVICE=cpu")
    return rec


def require_profile(root: Path, version: str, kernel: Path) -> Record:
    """The latest profile record of ``version``: for the kernel as it is now, its files unchanged since."""
    return _require(read(root), root, "profile", version, kernel)
