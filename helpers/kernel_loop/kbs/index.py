"""The KBS index: an SQLite FTS5 database of every corpus page, kept in the user cache.

The index file is named after a hash of the schema version and every corpus file (path and
content), so any change to any page, in a one-page file or a multi-page one, selects (and
builds) a new index.  A build writes a temporary file next to the index and renames it into
place, so racing builders of one corpus state agree; indexes of older states are pruned.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..common import UsageError, cache_dir, progress, warn
from .corpus import PageText, corpus_files, corpus_roots, file_pages, split_page
from .schema import LIST_VOCABS, as_list, body_links

SCHEMA_VERSION = 3  # 3: pages record the line they start on (multi-page files)

# FTS5 columns and their bm25 weights
FTS_COLUMNS = ("title", "tags", "symptoms", "meta", "body")
BM25_WEIGHTS = (10.0, 4.0, 4.0, 2.0, 1.0)

_SCHEMA_SQL = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE pages (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, path TEXT NOT NULL,
                    line INTEGER NOT NULL, front TEXT NOT NULL, body TEXT NOT NULL,
                    inlinks INTEGER NOT NULL);
CREATE VIRTUAL TABLE pages_fts USING fts5({", ".join(FTS_COLUMNS)}, tokenize='porter unicode61');
"""


def require_fts5() -> None:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(a)")
    except sqlite3.OperationalError:
        raise UsageError(
            f"this Python's sqlite3 (SQLite {sqlite3.sqlite_version}) has no FTS5 module, which the "
            "knowledge base needs; use a Python built against an SQLite with FTS5 (most are)"
        ) from None


def _indexable(pages: list[PageText]) -> dict[str, tuple[PageText, dict[str, Any], str]]:
    """{id: (page, front matter, body)} of the pages that parse; the others are warned about."""
    out: dict[str, tuple[PageText, dict[str, Any], str]] = {}
    for page in pages:
        front, body, problem = split_page(page.text)
        pid = front.get("id") if front else None
        if problem or not isinstance(pid, str) or not pid:
            warn(f"{page.where()}: {problem or 'no id'}; page left out of the index "
                 "(run 'kernel-loop kbs check')")
        elif pid in out:
            warn(f"{page.where(pid)}: id '{pid}' already used by {out[pid][0].where(pid)}; "
                 "page left out of the index")
        else:
            out[pid] = (page, front, body)
    return out


def _build(db: Path, pages: list[PageText]) -> None:
    """Build the index into a temporary file next to ``db``, then rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=".kbs-build-", suffix=".sqlite", dir=db.parent)
    os.close(fd)
    good = _indexable(pages)
    # how many other pages link to each page (related or body links): a small authority prior
    inlinks = Counter(t for pid, (_, front, body) in good.items()
                      for t in set(as_list(front.get("related")) + body_links(body)) if t != pid)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(_SCHEMA_SQL)
            for pid, (page, front, body) in good.items():
                lists = {k: as_list(front.get(k)) for k in LIST_VOCABS}
                meta = " ".join([str(front.get("kind", ""))] + lists["languages"] + lists["kernel_types"]
                                + lists["architectures"])
                cur = conn.execute(
                    "INSERT INTO pages (id, path, line, front, body, inlinks) VALUES (?, ?, ?, ?, ?, ?)",
                    (pid, str(page.path), page.line, json.dumps(front, default=str), body, inlinks[pid]),
                )
                conn.execute(
                    f"INSERT INTO pages_fts (rowid, {', '.join(FTS_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                    (cur.lastrowid, f"{pid} {front.get('title', '')}", " ".join(lists["tags"]),
                     " ".join(lists["symptoms"]), meta, body),
                )
            conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            conn.commit()
        finally:
            conn.close()
        os.replace(tmp, db)  # atomic: a racing builder of the same corpus writes the same content
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _prune(keep: Path, max_age_s: float = 3600.0) -> None:
    """Remove indexes of older corpus states and leftovers of killed builds (best effort)."""
    now = time.time()
    for p in [*keep.parent.glob("index-*.sqlite"), *keep.parent.glob(".kbs-build-*.sqlite")]:
        try:
            if p != keep and now - p.stat().st_mtime > max_age_s:
                p.unlink()
        except OSError:
            pass


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    return conn


def open_index(extra_roots: list[str] | None = None) -> sqlite3.Connection:
    """A read-only connection to the index of the current corpus, building it when needed."""
    require_fts5()
    files = corpus_files(corpus_roots(extra_roots))
    h = hashlib.sha256(f"kernel-loop-kbs-schema-{SCHEMA_VERSION}\0".encode())
    texts = []
    for p in files:
        data = p.read_bytes()
        h.update(str(p.resolve()).encode() + b"\0" + len(data).to_bytes(8, "little") + data)
        texts.append((p, data.decode("utf-8", errors="replace")))
    db = cache_dir("kbs") / f"index-{h.hexdigest()[:24]}.sqlite"
    if db.exists():
        try:
            return _connect(db)
        except sqlite3.DatabaseError:
            warn(f"the KBS index {db} cannot be read; rebuilding it")
    pages = [page for path, text in texts for page in file_pages(path, text)]
    progress(f"building the KBS index ({len(pages)} pages) in {db.parent}")
    _build(db, pages)
    _prune(db)
    try:
        return _connect(db)
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"the KBS index {db} cannot be read after a rebuild: {exc}") from None


_PAGES: dict[tuple[str, int, int], list[dict[str, Any]]] = {}  # (index file, mtime, size) -> its pages


def all_pages(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every indexed page: its front matter plus ``path``, ``line``, ``body``, ``rowid``, ``inlinks``.  Read once per
    index file (its name is the digest of the corpus it holds; a search reads every page, and decoding them was
    most of its time): the list and its pages are shared, for reading only."""
    key = None
    for _, name, file in conn.execute("PRAGMA database_list"):
        if name == "main" and file:
            st = os.stat(file)
            key = (file, st.st_mtime_ns, st.st_size)
    if key is not None and key in _PAGES:
        return _PAGES[key]
    out = []
    rows = conn.execute("SELECT rowid, path, line, front, body, inlinks FROM pages ORDER BY id")
    for rowid, path, line, front, body, inlinks in rows:
        page = json.loads(front)
        page.update(rowid=rowid, path=path, line=line, body=body, inlinks=inlinks)
        out.append(page)
    if key is not None:
        _PAGES.clear()  # one index at a time: the corpus a process searches
        _PAGES[key] = out
    return out


def page_row(conn: sqlite3.Connection, page_id: str) -> dict[str, Any] | None:
    """One indexed page: its front matter plus ``path``, ``line`` and ``body``; None when absent."""
    row = conn.execute("SELECT path, line, front, body FROM pages WHERE id = ?", (page_id,)).fetchone()
    if row is None:
        return None
    page = json.loads(row[2])
    page.update(path=row[0], line=row[1], body=row[3])
    return page


def page_ids(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT id FROM pages ORDER BY id")]
