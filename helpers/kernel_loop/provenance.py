"""vK/measured.sha256: which measured files the results belong to.

``sha256sum`` format (``<hex>  <path>``) with paths relative to vK, so that
``cd vK && sha256sum -c measured.sha256`` verifies it.  Steps add their files
with ``record``; entries for other files are kept.
"""

from __future__ import annotations

import os
from pathlib import Path

from .common import UsageError, atomic_write_text, sha256_file

FILENAME = "measured.sha256"


def read(vdir: Path) -> dict[str, str]:
    """{relative path: hex digest}; empty when the file does not exist."""
    path = Path(vdir) / FILENAME
    entries: dict[str, str] = {}
    if not path.exists():
        return entries
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        digest, _, rel = line.partition("  ")
        if not rel:  # binary-mode marker: "<hex> *path"
            digest, _, rel = line.partition(" *")
        entries[rel] = digest
    return entries


def record(vdir: Path, files: list[Path], *, drop: list[str] | None = None) -> None:
    """Hash ``files`` (absolute, or relative to vdir) into measured.sha256.

    ``drop`` removes entries that a re-measurement invalidates (for example
    correctness re-runs drop the profile's entries).
    """
    vdir = Path(vdir)
    entries = read(vdir)
    for rel in drop or []:
        entries.pop(rel, None)
    for f in files:
        f = Path(f)
        absf = f if f.is_absolute() else vdir / f
        rel = os.path.relpath(absf, vdir)
        entries[rel] = sha256_file(absf)
    text = "".join(f"{d}  {r}\n" for r, d in sorted(entries.items()))
    atomic_write_text(vdir / FILENAME, text)


def stale(vdir: Path) -> dict[str, str]:
    """{relative path: reason} for each recorded file that is missing or changed."""
    vdir = Path(vdir)
    out: dict[str, str] = {}
    for rel, digest in read(vdir).items():
        p = vdir / rel
        if not p.exists():
            out[rel] = "missing"
        elif sha256_file(p) != digest:
            out[rel] = "changed after it was measured"
    return out


def matches(vdir: Path, rel: str) -> bool:
    """True when ``rel`` is recorded and still matches."""
    vdir = Path(vdir)
    digest = read(vdir).get(rel)
    p = vdir / rel
    return digest is not None and p.exists() and sha256_file(p) == digest


def require_same_kernel(sidecar: Path, data: dict, kernel: Path, step: str) -> None:
    """Refuse a sidecar whose recorded ``kernel_sha256`` is not the kernel file as it is now."""
    recorded = data.get("kernel_sha256")
    if recorded is not None and recorded != sha256_file(kernel):
        raise UsageError(f"{sidecar.parent.name}/{sidecar.name} was measured on a different {kernel.name}: "
                         f"its numbers are stale; run '{step}' on {sidecar.parent.name} again")
