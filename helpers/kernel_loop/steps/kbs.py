"""The knowledge base (KBS): markdown pages searched by measured symptoms through SQLite FTS5.

Pages are markdown files with YAML front matter (schema in ``REQUIRED_KEYS`` and
``kbs check``).  They come from the bundled ``kbs_corpus/`` folder, from every
``--corpus DIR`` and from the folders of ``$KERNEL_LOOP_KBS_PATH`` (os.pathsep-separated),
so a team can add its own pages.  The index is an SQLite file in the user cache,
named after a hash of every corpus file, and is rebuilt whenever a page changes.

Ranking (``search``): FTS5 ``bm25()`` over id+title (weight 10), tags (4), symptoms (4),
kind / languages / kernel types / architectures (2) and body (1), scaled so the best text
match scores 1.  Filters are soft boosts added on top, so a page matching more of them ranks
higher and one matching none can still rank on its text:

* ``--symptom``: the share of the given symptoms the page lists, each weighted by its rarity
  in the corpus (idf), plus a bonus when they lead the page's list (pages list their main
  symptoms first);
* ``--arch`` / ``--language`` / ``--kernel-type``: a match, more for a page specific to the
  value; when one is not given, pages that apply broadly get a small edge instead;
* ``--tag``: the share of the given tags the page lists;
* always: a small prior for pages that many other pages link to.

``--kind`` is the one hard filter.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import os
import re
import shlex
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .. import provenance, vocab
from ..common import (
    UsageError,
    atomic_write_text,
    cache_dir,
    now_iso,
    package_dir,
    progress,
    read_json,
    warn,
)
from ..rundir import RunDir
from ..templating import fmt, render

SCHEMA_VERSION = 2
KINDS = ("pattern", "hardware", "language", "kernel-playbook", "pitfall", "tool")
ARCHITECTURES = ("sm70", "sm75", "sm80", "sm86", "sm89", "sm90", "sm100", "sm120")
LANGUAGES = ("cuda-cpp", "triton", "cutlass", "cute-dsl")
KERNEL_TYPES = ("gemm", "attention", "softmax", "norm", "reduction", "scan", "elementwise",
                "transpose", "conv", "moe", "any")
CONFIDENCE = ("verified", "source-reported", "inferred", "experimental")
REQUIRED_KEYS = ("id", "title", "kind", "symptoms", "architectures", "languages", "kernel_types",
                 "confidence", "sources")
OPTIONAL_KEYS = ("tags", "perf_claims", "related")
# list-valued keys and the vocabulary each must come from (None: free words)
LIST_VOCABS: dict[str, tuple[str, ...] | None] = {
    "symptoms": None,  # filled from symptoms.all_tags() at check time
    "architectures": ARCHITECTURES,
    "languages": LANGUAGES,
    "kernel_types": KERNEL_TYPES,
    "tags": None,
    "related": None,
}
ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
LINK_RE = re.compile(r"\]\(kbs:([^)\s]*)\)")
URL_RE = re.compile(r"^https?://\S+$")
MIN_BODY_CHARS = 200
ENV_PATH = "KERNEL_LOOP_KBS_PATH"
TODO = "TODO(kernel-loop)"
PURPOSES = ("kernel", "bottleneck", "extra")

# FTS5 columns and their bm25 weights
FTS_COLUMNS = ("title", "tags", "symptoms", "meta", "body")
BM25_WEIGHTS = (10.0, 4.0, 4.0, 2.0, 1.0)
# soft-filter boosts, in units of the best text match (which scores 1)
W_SYMPTOMS, W_FOCUS, W_ARCH, W_LANG, W_KTYPE, W_TAG, W_LINKS = 2.0, 0.5, 0.3, 0.5, 0.5, 0.5, 0.2
SPECIFIC_SYMPTOMS = 5  # pages listing more symptoms than this get a damped symptom boost
GENERALITY = 0.3  # share of a filter's weight that broad pages get when that filter is not given
CONFIDENCE_RANK = {c: i for i, c in enumerate(CONFIDENCE)}


def bundled_corpus() -> Path:
    return package_dir() / "kbs_corpus"


# --- corpus files and pages ------------------------------------------------------------------
def corpus_roots(extra: list[str] | None = None) -> list[Path]:
    """The bundled corpus, then every --corpus DIR, then $KERNEL_LOOP_KBS_PATH (deduplicated)."""
    roots = [bundled_corpus()]
    for d in extra or []:
        p = Path(d).expanduser()
        if not p.is_dir():
            raise UsageError(f"--corpus {d}: no such folder")
        roots.append(p)
    for d in os.environ.get(ENV_PATH, "").split(os.pathsep):
        if d.strip():
            p = Path(d.strip()).expanduser()
            if p.is_dir():
                roots.append(p)
            else:
                warn(f"${ENV_PATH} names {d}, which is not a folder; skipped")
    seen: set[Path] = set()
    out = []
    for r in roots:
        key = r.resolve()
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def corpus_files(roots: list[Path]) -> list[Path]:
    files: list[Path] = []
    for r in roots:
        if r.is_dir():
            files += sorted(p for p in r.glob("*.md") if p.is_file() and p.name.lower() != "readme.md")
    return files


def split_page(text: str) -> tuple[dict[str, Any] | None, str, str | None]:
    """(front matter, body, problem) of one page; front matter is None when it does not parse."""
    import yaml

    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text, "no YAML front matter (the file must start with a '---' line)"
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            head, body = "".join(lines[1:i]), "".join(lines[i + 1:])
            break
    else:
        return None, "", "the front matter is not closed by a '---' line"
    try:
        front = yaml.load(head, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        return None, body, "YAML does not parse: " + " ".join(str(exc).split())
    if not isinstance(front, dict):
        return None, body, "the front matter is not a YAML mapping"
    return front, body, None


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def body_links(body: str) -> list[str]:
    return LINK_RE.findall(body)


# --- the index --------------------------------------------------------------------------------
_SCHEMA_SQL = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE pages (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, path TEXT NOT NULL,
                    front TEXT NOT NULL, body TEXT NOT NULL, inlinks INTEGER NOT NULL);
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


def _build(db: Path, files: list[tuple[Path, str]]) -> None:
    """Build the index into a temporary file next to ``db``, then rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=".kbs-build-", suffix=".sqlite", dir=db.parent)
    os.close(fd)
    pages: dict[str, tuple[Path, dict[str, Any], str]] = {}
    for path, text in files:
        front, body, problem = split_page(text)
        pid = front.get("id") if front else None
        if problem or not isinstance(pid, str) or not pid:
            warn(f"{path}: {problem or 'no id'}; page left out of the index (run 'kernel-loop kbs check')")
        elif pid in pages:
            warn(f"{path}: id '{pid}' already used by {pages[pid][0]}; page left out of the index")
        else:
            pages[pid] = (path, front, body)
    # how many other pages link to each page (related or body links): a small authority prior
    inlinks = Counter(t for pid, (_, front, body) in pages.items()
                      for t in set(_as_list(front.get("related")) + body_links(body)) if t != pid)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(_SCHEMA_SQL)
            for pid, (path, front, body) in pages.items():
                lists = {k: _as_list(front.get(k)) for k in LIST_VOCABS}
                meta = " ".join([str(front.get("kind", ""))] + lists["languages"] + lists["kernel_types"]
                                + lists["architectures"])
                cur = conn.execute(
                    "INSERT INTO pages (id, path, front, body, inlinks) VALUES (?, ?, ?, ?, ?)",
                    (pid, str(path), json.dumps(front, default=str), body, inlinks[pid]),
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
    """A read-only connection to the index of the current corpus, building it when needed.

    The index file is named after a hash of the schema version and every corpus file
    (path and content), so any change to a page selects, and builds, a new index.
    """
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
    progress(f"building the KBS index ({len(files)} pages) in {db.parent}")
    _build(db, texts)
    _prune(db)
    try:
        return _connect(db)
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"the KBS index {db} cannot be read after a rebuild: {exc}") from None


def all_pages(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every indexed page: its front matter plus ``path``, ``body`` and ``rowid``."""
    out = []
    rows = conn.execute("SELECT rowid, path, front, body, inlinks FROM pages ORDER BY id")
    for rowid, path, front, body, inlinks in rows:
        page = json.loads(front)
        page.update(rowid=rowid, path=path, body=body, inlinks=inlinks)
        out.append(page)
    return out


# --- search -----------------------------------------------------------------------------------
def fts_expression(terms: str) -> str:
    """User text as a safe FTS5 query: every word quoted as a string, ORed together."""
    words: list[str] = []
    for w in re.findall(r"\w+", terms.lower()):
        if w not in words:
            words.append(w)
    return " OR ".join(f'"{w}"' for w in words[:64])


def _first_sentences(body: str, limit: int = 220) -> str:
    lines = [ln for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "```", "|"))]
    text = " ".join(" ".join(lines).split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    end = max(cut.rfind(". "), cut.rfind("; "))
    return cut[: end + 1] if end > limit // 3 else cut.rstrip() + " ..."


def _focus(positions: list[int]) -> float:
    """1.0 when the matched symptoms lead the page's list (pages list their main symptoms first)."""
    if not positions:
        return 0.0
    ideal = sum(1.0 / (1 + i) for i in range(len(positions)))
    return sum(1.0 / (1 + p) for p in positions) / ideal


def _specificity(n_page_symptoms: int) -> float:
    """Pages keyed by many symptoms are less specific advice: damp their symptom boost."""
    return min(1.0, math.sqrt(SPECIFIC_SYMPTOMS / max(n_page_symptoms, 1)))


def _fit(wanted: str | None, values: list[str], vocabulary: tuple[str, ...]) -> float:
    """How well a page's architectures / languages / kernel types fit one filter (0..1).

    With the filter given, a match scores 0.6 plus up to 0.4 for being specific (a page about
    this language only beats one listing all four); kernel type ``any`` counts as a broad match.
    Without it, a small generality score (the share of the vocabulary the page covers), so
    advice that holds everywhere comes before advice for one language or one kernel type.
    """
    if wanted:
        if wanted in values:
            return 0.6 + 0.4 / len(values)
        return 0.6 if "any" in values else 0.0
    breadth = 1.0 if "any" in values else len(set(values) & set(vocabulary)) / len(vocabulary)
    return GENERALITY * breadth


def search(
    conn: sqlite3.Connection,
    terms: str = "",
    *,
    symptoms: list[str] | tuple[str, ...] = (),
    arch: str | None = None,
    language: str | None = None,
    kernel_type: str | None = None,
    kind: str | None = None,
    tags: list[str] | tuple[str, ...] = (),
    limit: int = 10,
) -> list[dict[str, Any]]:
    """Ranked hits; see the module docstring for the scoring."""
    expr = fts_expression(terms or "")
    symptoms = list(dict.fromkeys(symptoms))
    soft = bool(symptoms or arch or language or kernel_type or tags)
    if not expr and not (soft or kind):
        raise UsageError("give search terms or at least one filter (--symptom, --arch, --language, "
                         "--kernel-type, --kind, --tag)")
    pages = all_pages(conn)
    text: dict[int, float] = {}
    if expr:
        sql = f"SELECT rowid, bm25(pages_fts, {', '.join(map(str, BM25_WEIGHTS))}) FROM pages_fts WHERE pages_fts MATCH ?"
        text = {rowid: -rank for rowid, rank in conn.execute(sql, (expr,))}
    best_text = max(text.values(), default=0.0) or 1.0
    df = Counter(s for p in pages for s in set(_as_list(p.get("symptoms"))))
    # rarer symptoms weigh more, and so do the ones named first (callers list the main one first)
    idf = {s: math.log(1.0 + len(pages) / max(df[s], 1)) / (1.0 + 0.25 * i) for i, s in enumerate(symptoms)}
    sym_total = sum(idf.values()) or 1.0
    max_links = math.log1p(max((p["inlinks"] for p in pages), default=0)) or 1.0
    dims = ((W_ARCH, arch, "architectures", ARCHITECTURES), (W_LANG, language, "languages", LANGUAGES),
            (W_KTYPE, kernel_type, "kernel_types", KERNEL_TYPES))

    hits = []
    for p in pages:
        if kind and p.get("kind") != kind:
            continue
        page_syms = _as_list(p.get("symptoms"))
        matched = [s for s in symptoms if s in page_syms]
        boosts = [
            W_SYMPTOMS * sum(idf[s] for s in matched) / sym_total * _specificity(len(page_syms)),
            W_FOCUS * _focus([page_syms.index(s) for s in matched]),
            W_TAG * len(set(tags) & set(_as_list(p.get("tags")))) / max(len(tags), 1),
            sum(w * _fit(v, _as_list(p.get(field)), voc) for w, v, field, voc in dims if v),
        ]
        t = text.get(p["rowid"], 0.0) / best_text
        if not (t > 0 or any(boosts) or (not expr and not soft)):
            continue
        boosts.append(sum(w * _fit(None, _as_list(p.get(field)), voc) for w, v, field, voc in dims if not v))
        boosts.append(W_LINKS * math.log1p(p["inlinks"]) / max_links)
        hits.append({
            "id": p["id"],
            "title": str(p.get("title", "")),
            "kind": p.get("kind"),
            "score": round(t + sum(boosts), 3),
            "confidence": p.get("confidence"),
            "symptoms": page_syms,
            "matched_symptoms": matched,
            "architectures": _as_list(p.get("architectures")),
            "languages": _as_list(p.get("languages")),
            "kernel_types": _as_list(p.get("kernel_types")),
            "sources": [s for s in (p.get("sources") or []) if isinstance(s, dict)],
            "path": p["path"],
            "_rowid": p["rowid"],
            "_body": p["body"],
        })
    hits.sort(key=lambda h: (-h["score"], CONFIDENCE_RANK.get(h["confidence"], 9), h["id"]))
    hits = hits[: max(limit, 0)]
    snippets: dict[int, str] = {}
    if expr and hits:
        rowids = [h["_rowid"] for h in hits]
        sql = (f"SELECT rowid, snippet(pages_fts, {FTS_COLUMNS.index('body')}, '**', '**', ' ... ', 24) "
               f"FROM pages_fts WHERE pages_fts MATCH ? AND rowid IN ({', '.join('?' * len(rowids))})")
        snippets = {r: s for r, s in conn.execute(sql, (expr, *rowids))}
    for h in hits:
        snip = " ".join(re.sub(r"(?m)^\s*#+\s+", "", snippets.get(h["_rowid"], "")).split())
        h["excerpt"] = snip if "**" in snip else _first_sentences(h["_body"])
        del h["_rowid"], h["_body"]
    return hits


def filters_of(symptoms=(), arch=None, language=None, kernel_type=None, kind=None, tags=()) -> dict[str, Any]:
    """The filters that were given, as logged in kbs_queries.jsonl."""
    given = {"symptoms": list(symptoms), "arch": arch, "language": language,
             "kernel_type": kernel_type, "kind": kind, "tags": list(tags)}
    return {k: v for k, v in given.items() if v}


def _quote(s: str) -> str:
    return f'"{s}"' if re.fullmatch(r"[\w .,:+/=-]*", s) else shlex.quote(s)


def query_command(terms: str, filters: dict[str, Any], corpus: list[str]) -> str:
    """The exact command that re-runs a query."""
    parts = ["kernel-loop", "kbs"]
    for c in corpus:
        parts += ["--corpus", shlex.quote(c)]
    parts += ["query", _quote(terms)]
    for s in filters.get("symptoms", []):
        parts += ["--symptom", s]
    for key in ("arch", "language", "kernel_type", "kind"):
        if filters.get(key):
            parts += [f"--{key.replace('_', '-')}", filters[key]]
    for t in filters.get("tags", []):
        parts += ["--tag", _quote(t)]
    return " ".join(parts)


def log_query(rd: RunDir, purpose: str, terms: str, filters: dict[str, Any], hits: list[dict],
              command: str) -> Path:
    """Append one line to vK/kbs_queries.jsonl of the run's current version."""
    vdir = rd.vdir(rd.current_version())
    if not vdir.is_dir():
        raise UsageError(f"{vdir} does not exist: cannot log the query there")
    path = vdir / "kbs_queries.jsonl"
    line = {"purpose": purpose, "query": terms, "filters": filters, "hits": [h["id"] for h in hits],
            "time": now_iso(), "command": command}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    return path


# --- check ------------------------------------------------------------------------------------
def _suggest(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_corpus(roots: list[Path]) -> tuple[list[tuple[Path, str]], int]:
    """Every problem of every page as (path, problem), and the number of pages read."""
    files = corpus_files(roots)
    problems: list[tuple[Path, str]] = []
    ids: dict[str, Path] = {}
    links: list[tuple[Path, str, str]] = []
    known = {**LIST_VOCABS, "symptoms": tuple(sorted(vocab.all_tags()))}
    if not files:
        problems.append((roots[0], "no pages (*.md) found in any corpus folder"))
    for path in files:
        def bad(msg: str, path: Path = path) -> None:
            problems.append((path, msg))

        front, body, problem = split_page(path.read_text(encoding="utf-8", errors="replace"))
        if problem:
            bad(problem)
            continue
        for key in REQUIRED_KEYS:
            # an overview page may match no symptom, but it says so: ``symptoms: []``
            if key not in front or front[key] in (None, "") or (front[key] == [] and key != "symptoms"):
                bad(f"required key '{key}' is missing or empty")
        for key in sorted(set(front) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS)):
            bad(f"unknown key '{key}'")
        pid = front.get("id")
        if isinstance(pid, str) and pid:
            if not ID_RE.match(pid):
                bad(f"id '{pid}' is not kebab-case")
            if pid != path.stem:
                bad(f"id '{pid}' differs from the file name '{path.stem}'")
            if pid in ids:
                bad(f"duplicate id '{pid}' (also in {ids[pid]})")
            else:
                ids[pid] = path
        elif pid is not None:
            bad("id is not a string")
        for key, allowed, name in (("kind", KINDS, "kind"), ("confidence", CONFIDENCE, "confidence")):
            if front.get(key) is not None and front.get(key) not in allowed:
                bad(f"{name} '{front.get(key)}' is not one of {', '.join(allowed)}")
        for key, allowed in known.items():
            value = front.get(key)
            if value is None:
                continue
            if not isinstance(value, list):
                bad(f"'{key}' must be a list")
                continue
            for v in value:
                if allowed is not None and v not in allowed:
                    bad(f"{key}: '{v}' is not a known name{_suggest(str(v), allowed)}")
        sources = front.get("sources")
        if isinstance(sources, list):
            for i, src in enumerate(sources, 1):
                if not isinstance(src, dict):
                    bad(f"source {i} is not a mapping with url and supports")
                    continue
                if not URL_RE.match(str(src.get("url", ""))):
                    bad(f"source {i} has no http(s) url")
                if not str(src.get("supports") or "").strip():
                    bad(f"source {i} has an empty 'supports'")
        elif sources is not None:
            bad("'sources' must be a list")
        claims = front.get("perf_claims")
        if claims is not None and not isinstance(claims, list):
            bad("'perf_claims' must be a list")
        for i, claim in enumerate(claims if isinstance(claims, list) else [], 1):
            missing = [k for k in ("gpu", "metric", "value", "source")
                       if not isinstance(claim, dict) or not str(claim.get(k) or "").strip()]
            if missing:
                bad(f"perf claim {i} lacks {', '.join(missing)}")
        if len(body.strip()) < MIN_BODY_CHARS:
            bad(f"the body has {len(body.strip())} characters; at least {MIN_BODY_CHARS} are needed")
        for target in _as_list(front.get("related")) if isinstance(front.get("related"), list) else []:
            links.append((path, target, "related"))
        for target in body_links(body):
            links.append((path, target, "body link"))
    for path, target, where in links:
        if target not in ids:
            problems.append((path, f"{where} 'kbs:{target}' names no page{_suggest(target, ids)}"))
    return problems, len(files)


# --- evidence ---------------------------------------------------------------------------------
KEY_METRICS = ("duration_us", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct",
               "l1_hit_rate_pct", "l2_hit_rate_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct",
               "registers_per_thread", "block_size", "grid_size", "waves_per_sm", "issue_active",
               "sectors_per_request_ld", "sectors_per_request_st", "local_spill_requests",
               "tensor_pipe_pct", "fma_pipe_pct")
MAX_BOTTLENECK_TAGS = 6
EVIDENCE_HITS = 5


def arch_of_cc(cc: Any) -> str | None:
    """Compute capability "9.0" -> sm90; an unlisted minor falls back to the family's listed arch."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(cc or ""))
    if not m:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    same_family = [a for a in ARCHITECTURES if a.startswith(f"sm{major}") and len(a) == len(f"sm{major}") + 1]
    exact = f"sm{major}{minor}"
    if exact in ARCHITECTURES:
        return exact
    lower = [a for a in same_family if int(a[-1]) <= minor]
    return lower[-1] if lower else None


def _why(hit: dict[str, Any], filters: dict[str, Any]) -> list[str]:
    reasons = []
    if hit["matched_symptoms"]:
        reasons.append("lists the measured symptom(s) " + ", ".join(hit["matched_symptoms"]))
    for key, field, label in (("arch", "architectures", "covers"), ("language", "languages", "covers"),
                              ("kernel_type", "kernel_types", "covers kernel type")):
        if filters.get(key) and filters[key] in hit[field]:
            reasons.append(f"{label} {filters[key]}")
    return reasons or ["matches the query text"]


def _dedupe_words(text: str) -> str:
    return " ".join(dict.fromkeys(text.split()))


def draft_evidence(rd: RunDir, *, corpus: list[str], force: bool = False) -> tuple[Path, list[dict]]:
    """Run the kernel and bottleneck queries, log them, write vK/kbs_evidence.md; returns (path, queries)."""
    k = rd.current_version()
    vdir = rd.vdir(k)
    ncu_path = vdir / "ncu.json"
    if not ncu_path.is_file():
        raise UsageError(f"{ncu_path} does not exist: run 'kernel-loop profile {rd.root}' first")
    target = vdir / "kbs_evidence.md"
    if target.exists() and TODO not in target.read_text(encoding="utf-8") and not force:
        raise UsageError(f"{target} is already filled in (no {TODO} marker left); "
                         "refusing to overwrite it (use --force to redraft)")
    ncu, cfg = read_json(ncu_path), rd.config()
    if ncu.get("kernel_sha256") is not None:
        provenance.require_same_kernel(ncu_path, ncu, rd.kernel_file(k), "profile")
    gpu = ncu.get("gpu") or {}
    arch = arch_of_cc(gpu.get("cc"))
    if arch is None:
        warn(f"ncu.json gives compute capability {gpu.get('cc')!r}, which maps to no known architecture; "
             "queries run without --arch")
    ktype = cfg.kernel_type if cfg.kernel_type in KERNEL_TYPES else None
    impl = cfg.impl if cfg.impl in LANGUAGES else None
    fired = [s for s in ncu.get("symptoms") or [] if isinstance(s, dict) and s.get("tag")]
    tags = [t for t in [ncu.get("bottleneck")] + [s["tag"] for s in fired] if t and vocab.is_known(t)]
    tags = vocab.by_priority(tags)[:MAX_BOTTLENECK_TAGS]

    conn = open_index(corpus)
    queries = []
    specs = [
        ("kernel", _dedupe_words(" ".join(str(getattr(cfg, key) or "") for key in ("kernel", "kernel_type", "impl"))),
         filters_of(arch=arch, language=impl, kernel_type=ktype)),
        ("bottleneck", " ".join(tags), filters_of(symptoms=tags, arch=arch, language=impl, kernel_type=ktype)),
    ]
    for purpose, terms, filters in specs:
        hits = search(conn, terms, symptoms=filters.get("symptoms", ()), arch=filters.get("arch"),
                      language=filters.get("language"), kernel_type=filters.get("kernel_type"),
                      limit=EVIDENCE_HITS) if (terms or filters) else []
        command = query_command(terms, filters, corpus)
        log_query(rd, purpose, terms, filters, hits, command)
        queries.append({"purpose": purpose, "terms": terms, "filters": filters, "command": command,
                        "hits": hits})

    candidates: dict[str, dict[str, Any]] = {}
    for q in queries:
        for h in q["hits"]:
            c = candidates.setdefault(h["id"], {**h, "why": [], "queries": []})
            c["queries"].append(q["purpose"])
            c["why"].extend(_why(h, q["filters"]))
    for c in candidates.values():
        c["why"] = "; ".join(dict.fromkeys(c["why"]))  # a reason both queries give is said once
        c["urls"] = [s.get("url") for s in c["sources"] if s.get("url")]

    metrics = ncu.get("metrics") or {}
    key_metrics = [(m, fmt(metrics[m])) for m in KEY_METRICS if metrics.get(m) is not None]
    timing = ncu.get("timing") or {}
    if timing.get("median_us") is not None:
        key_metrics.insert(0, (f"timing.median_us ({timing.get('method', 'timed')})",
                               fmt(timing["median_us"])))
    fired_view = [{
        "tag": s["tag"],
        "measured": ", ".join(f"`{m}` = {fmt(v)}" for m, v in (s.get("metrics") or {}).items()),
        "thresholds": ", ".join(f"`{m}` {t}" for m, t in (s.get("thresholds") or {}).items()),
        "why": s.get("why") or vocab.SYMPTOMS.get(s["tag"], {}).get("summary", ""),
    } for s in fired]

    text = render(
        "kbs_evidence.md.j2", k=k, todo=TODO, gpu=gpu, arch=arch, cfg=cfg, bottleneck=ncu.get("bottleneck"),
        bottleneck_why=vocab.BOTTLENECK_CLASSES.get(ncu.get("bottleneck") or "", ""),
        n_kernels=len(ncu.get("kernels") or []), key_metrics=key_metrics, fired=fired_view,
        queries=queries, candidates=list(candidates.values()),
    )
    atomic_write_text(target, text)
    return target, queries


# --- command line -----------------------------------------------------------------------------
def _check_choice(value: str | None, allowed, what: str) -> None:
    if value is not None and value not in allowed:
        raise UsageError(f"unknown {what} '{value}'{_suggest(value, allowed)}; known: {', '.join(sorted(allowed))}")


def _corpus_args(args) -> list[str]:
    return list(args.corpus or []) + list(getattr(args, "corpus_sub", None) or [])


def _print_hit(i: int, h: dict[str, Any]) -> None:
    print(f"{i}. {h['id']}  score {h['score']}  [{h['confidence']}]  {h['title']}")
    if h["symptoms"]:
        matched = f"  (matched: {', '.join(h['matched_symptoms'])})" if h["matched_symptoms"] else ""
        print(f"   symptoms: {', '.join(h['symptoms'])}{matched}")
    if h["excerpt"]:
        print(f"   {h['excerpt']}")
    for s in h["sources"]:
        print(f"   source: {s.get('url')}")


def cmd_query(args) -> int:
    for s in args.symptom or []:
        _check_choice(s, vocab.all_tags(), "symptom")
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    terms = " ".join(args.terms).strip()
    corpus = _corpus_args(args)
    rd = RunDir.open(args.log) if args.log else None
    conn = open_index(corpus)
    hits = search(conn, terms, symptoms=args.symptom or [], arch=args.arch, language=args.language,
                  kernel_type=args.kernel_type, kind=args.kind, tags=args.tag or [], limit=args.limit)
    if rd is not None:
        filters = filters_of(args.symptom or [], args.arch, args.language, args.kernel_type, args.kind,
                             args.tag or [])
        path = log_query(rd, args.purpose, terms, filters, hits, query_command(terms, filters, corpus))
        progress(f"query logged to {path}")
    if args.json:
        print(json.dumps(hits, indent=2, default=str))
    elif not hits:
        print("no matching pages")
    else:
        for i, h in enumerate(hits, 1):
            _print_hit(i, h)
    return 0


def get(page_id: str, extra_roots: list[str] | None = None) -> dict[str, Any] | None:
    """One page: its front matter plus ``path`` and ``body``; None when no page has that id."""
    conn = open_index(extra_roots)
    try:
        row = conn.execute("SELECT path, front, body FROM pages WHERE id = ?", (page_id,)).fetchone()
        if row is None:
            return None
    finally:
        conn.close()
    page = json.loads(row[1])
    page.update(path=row[0], body=row[2])
    return page


def cmd_get(args) -> int:
    page = get(args.id, _corpus_args(args))
    if page is None:
        known = [row[0] for row in open_index(_corpus_args(args)).execute("SELECT id FROM pages")]
        close = difflib.get_close_matches(args.id, known, n=5, cutoff=0.5)
        raise UsageError(f"no page with id '{args.id}'" + (f"; close matches: {', '.join(close)}" if close else ""))
    if args.json:
        print(json.dumps(page, indent=2, default=str))
        return 0
    print(f"# {page.get('title')}  ({page['id']})")
    print(f"path: {page['path']}")
    for key in ("kind", "confidence", "symptoms", "architectures", "languages", "kernel_types", "tags", "related"):
        value = page.get(key)
        if value:
            print(f"{key}: {', '.join(map(str, value)) if isinstance(value, list) else value}")
    print("sources:")
    for s in page.get("sources") or []:
        print(f"  - {s.get('url')}  ({s.get('supports')})" if isinstance(s, dict) else f"  - {s}")
    for c in page.get("perf_claims") or []:
        print(f"perf claim: {json.dumps(c, default=str)}")
    print()
    print(page["body"].strip())
    return 0


def corpus_stats(pages: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"pages": len(pages)}
    for key, field in (("kind", "kind"), ("symptom", "symptoms"), ("architecture", "architectures"),
                       ("language", "languages"), ("kernel_type", "kernel_types"), ("confidence", "confidence")):
        counts = Counter(v for p in pages for v in _as_list(p.get(field)))
        out[key] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def cmd_stats(args) -> int:
    stats = corpus_stats(all_pages(open_index(_corpus_args(args))))
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"pages: {stats['pages']}")
    for key, counts in stats.items():
        if key != "pages":
            print(f"{key}: " + (", ".join(f"{k} {n}" for k, n in counts.items()) or "-"))
    return 0


def cmd_check(args) -> int:
    roots = corpus_roots(_corpus_args(args))
    problems, n = check_corpus(roots)
    for path, msg in problems:
        print(f"{path}: {msg}")
    if problems:
        progress(f"kbs check: {len(problems)} problem(s) in {n} page(s)")
        return 1
    print(f"kbs check: OK, {n} pages in {len(roots)} corpus folder(s)")
    return 0


def cmd_evidence(args) -> int:
    path, queries = draft_evidence(RunDir.open(args.out), corpus=_corpus_args(args), force=args.force)
    print(path)
    for q in queries:
        print(f"{q['purpose']}: {q['command']}")
        for i, h in enumerate(q["hits"], 1):
            print(f"  {i}. {h['id']}  score {h['score']}  {h['title']}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "kbs",
        help="query the knowledge base; draft kbs_evidence.md",
        description="Search the kernel-loop knowledge base (markdown pages keyed by measured symptoms) "
        f"through a local SQLite FTS5 index. Pages come from the bundled corpus, every --corpus DIR and "
        f"${ENV_PATH} ({os.pathsep}-separated folders).",
    )
    p.add_argument("--corpus", action="append", metavar="DIR",
                   help="another folder of pages with the same schema (repeatable)")
    sub = p.add_subparsers(dest="kbs_command", metavar="<kbs command>", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--corpus", dest="corpus_sub", action="append", metavar="DIR",
                        help="another folder of pages (repeatable; same as the group option)")

    q = sub.add_parser(
        "query", parents=[common], help="ranked search by text and measured symptoms",
        description="Rank pages by bm25 text match (title weighs most, then tags and symptoms, then body) "
        "plus soft boosts for every matching --symptom (rarer symptoms weigh more), --arch, --language, "
        "--kernel-type and --tag: a page matching more of them ranks higher, one matching none can still "
        "rank on its text. --kind is a hard filter. Terms may be empty when a filter is given.",
    )
    q.add_argument("terms", nargs="*", help="search words (any punctuation is ignored)")
    q.add_argument("--symptom", action="append", metavar="S", help="a measured symptom or bottleneck class (repeatable)")
    q.add_argument("--arch", choices=ARCHITECTURES)
    q.add_argument("--language", choices=LANGUAGES)
    q.add_argument("--kernel-type", choices=KERNEL_TYPES)
    q.add_argument("--kind", choices=KINDS, help="only pages of this kind (hard filter)")
    q.add_argument("--tag", action="append", metavar="T", help="a free keyword the page lists (repeatable)")
    q.add_argument("--limit", type=int, default=10)
    q.add_argument("--json", action="store_true", help="print the hits as a JSON list")
    q.add_argument("--log", metavar="OUT", help="append the query to OUT/vK/kbs_queries.jsonl (current version)")
    q.add_argument("--purpose", choices=PURPOSES, default="extra", help="purpose recorded with --log")
    q.set_defaults(func=cmd_query)

    g = sub.add_parser("get", parents=[common], help="show one page", description="Show one page with its "
                       "front matter and sources; an unknown id exits 2 and suggests close ids.")
    g.add_argument("id")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_get)

    s = sub.add_parser("stats", parents=[common], help="page counts by kind, symptom, architecture, ...")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_stats)

    c = sub.add_parser(
        "check", parents=[common], help="validate every corpus page (CI runs it)",
        description="Validate the corpus: YAML front matter, required keys, controlled vocabularies, "
        "kebab-case ids equal to the file name and unique across folders, sources with http(s) urls and "
        "'supports', internal links (related and [text](kbs:id)) that resolve, a body of at least "
        f"{MIN_BODY_CHARS} characters. Prints 'path: problem' lines and exits 1 if there is any.",
    )
    c.set_defaults(func=cmd_check)

    e = sub.add_parser(
        "evidence", parents=[common], help="run the kernel and bottleneck queries; draft vK/kbs_evidence.md",
        description="For the current version K: read vK/ncu.json and run.json, run the 'kernel' query "
        "(kernel name, type, language) and the 'bottleneck' query (bottleneck class and fired symptoms), "
        f"append both to vK/kbs_queries.jsonl and draft vK/kbs_evidence.md with {TODO} markers for the "
        "agent. A draft whose markers are all gone is never overwritten without --force.",
    )
    e.add_argument("out", help="the run directory")
    e.add_argument("--force", action="store_true", help="redraft even a filled-in kbs_evidence.md")
    e.set_defaults(func=cmd_evidence)
