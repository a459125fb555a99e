"""Ranked KBS search, one page by id, corpus counts, and the query log of a run.

Ranking (``search``): FTS5 ``bm25()`` over id+title (weight 10), tags (4), symptoms (4),
kind / languages / kernel types / architectures (2) and body (1), scaled so the best text
match scores 1.  Filters are soft boosts added on top, so a page matching more of them ranks
higher and one matching none can still rank on its text:

* ``symptoms``: the share of the given symptoms the page lists, each weighted by its rarity
  in the corpus (idf), plus a bonus when they lead the page's list (pages list their main
  symptoms first);
* ``arch`` / ``language`` / ``kernel_type``: a match, more for a page specific to the
  value; when one is not given, pages that apply broadly get a small edge instead;
* ``tags``: the share of the given tags the page lists;
* always: a small prior for pages that many other pages link to;
* the kernel family (``family.py``: ``family``, else ``kernel_type``, else the words of the query, such
  as softmax, decode, moe, rmsnorm, cumsum, quant): pages of that family get a boost, more for a page
  about that family alone.  A symptom alone would pull generic pattern pages to the top, so two of the
  first five places are kept for the family: when the family's playbook or its best-ranked PR note is
  not in the first five, it takes the fifth place (both: the fourth and fifth), and the pages it passes
  move down one (``family_slot`` says why a page is there).  The first three places are never changed.
* an op family (``family.OP_FAMILIES``: conv-transpose, pooling, rnn, loss ...) ranks the same way, its parent
  kernel type weighing WEAK, and so do the pages its own (non-PR-note) pages link to, the reading they point to; when the query's first family is an op family that no page of the corpus
  belongs to, pages that match the query's words only are left out, and ``coverage_gap`` says so in one line
  (the CLI prints it above the hits), so the first places are not filled by pages that merely share a word;
* when no ``kind`` is asked for, at most three of the first five places are PR notes (before the family
  slots): the precedent backs a pattern page, it does not push every pattern off the first screen.

Hard filters: ``kind`` (only that kind), ``exclude_kinds`` (none of these), ``repo`` (PR notes on that
repository), ``confidence`` (only that level) and ``has_claims`` (only pages quoting a measured
number, ``perf_claims``).  Ties go to the more confident page, then to the smaller id.

Every query a run relies on is appended to ``vK/kbs_queries.jsonl`` with the exact command that
re-runs it (``log_query``, ``query_command``).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from .. import records, vocab
from ..common import UsageError, now_iso, sha256_file
from ..rundir import RunDir
from ..sidecars import KBS_QUERIES
from . import family as kfamily
from .corpus import corpus_roots
from .index import BM25_WEIGHTS, FTS_COLUMNS, all_pages, open_index, page_row
from .schema import as_list, body_links

# soft-filter boosts, in units of the best text match (which scores 1)
W_SYMPTOMS, W_FOCUS, W_ARCH, W_LANG, W_KTYPE, W_TAG, W_LINKS = 2.0, 0.5, 0.3, 0.5, 0.5, 0.5, 0.2
W_FAMILY = 0.6  # a page of the query's first family (family.WEAK of it for a weakly named or a second family)
PR_NOTES_WITHIN = 3      # of the first FAMILY_SLOTS_WITHIN places, at most this many PR notes (no kind asked)
FAMILY_SLOTS_WITHIN = 5  # the family's playbook and best PR note are kept within the first five places
SPECIFIC_SYMPTOMS = 5  # pages listing more symptoms than this get a damped symptom boost
GENERALITY = 0.3  # share of a filter's weight that broad pages get when that filter is not given
CONFIDENCE_RANK = {c: i for i, c in enumerate(vocab.CONFIDENCE)}
PURPOSES = ("kernel", "bottleneck", "precedent", "extra")


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
    exclude_kinds: list[str] | tuple[str, ...] = (),
    repo: str | None = None,
    confidence: str | None = None,
    has_claims: bool = False,
    family: str | None = None,
) -> list[dict[str, Any]]:
    """Ranked hits; see the module docstring for the scoring."""
    expr = fts_expression(terms or "")
    symptoms = list(dict.fromkeys(symptoms))
    families = kfamily.families_for(terms or "", kernel_type, family)
    soft = bool(symptoms or arch or language or kernel_type or tags or family in kfamily.FAMILIES)
    hard = bool(kind or repo or confidence or has_claims)
    if not expr and not (soft or hard):
        raise UsageError("give search terms or at least one filter (--symptom, --arch, --language, "
                         "--kernel-type, --kind, --tag, --repo, --confidence, --has-claims)")
    pages = all_pages(conn)
    gap = _gap_family(pages, families)
    near = _family_neighbours(pages, families)
    text: dict[int, float] = {}
    if expr:
        sql = f"SELECT rowid, bm25(pages_fts, {', '.join(map(str, BM25_WEIGHTS))}) FROM pages_fts WHERE pages_fts MATCH ?"
        text = {rowid: -rank for rowid, rank in conn.execute(sql, (expr,))}
    best_text = max(text.values(), default=0.0) or 1.0
    df = Counter(s for p in pages for s in set(as_list(p.get("symptoms"))))
    # rarer symptoms weigh more, and so do the ones named first (callers list the main one first)
    idf = {s: math.log(1.0 + len(pages) / max(df[s], 1)) / (1.0 + 0.25 * i) for i, s in enumerate(symptoms)}
    sym_total = sum(idf.values()) or 1.0
    max_links = math.log1p(max((p["inlinks"] for p in pages), default=0)) or 1.0
    dims = ((W_ARCH, arch, "architectures", vocab.ARCHITECTURES),
            (W_LANG, language, "languages", vocab.LANGUAGES),
            (W_KTYPE, kernel_type, "kernel_types", vocab.KERNEL_TYPES))

    hits = []
    for p in pages:
        if (kind and p.get("kind") != kind) or p.get("kind") in exclude_kinds:
            continue
        if repo and str(p.get("repo") or "").lower() != repo.lower():
            continue
        if (confidence and p.get("confidence") != confidence) or (has_claims and not p.get("perf_claims")):
            continue
        page_syms = as_list(p.get("symptoms"))
        matched = [s for s in symptoms if s in page_syms]
        boosts = [
            W_SYMPTOMS * sum(idf[s] for s in matched) / sym_total * _specificity(len(page_syms)),
            W_FOCUS * _focus([page_syms.index(s) for s in matched]),
            W_TAG * len(set(tags) & set(as_list(p.get("tags")))) / max(len(tags), 1),
            sum(w * _fit(v, as_list(p.get(field)), voc) for w, v, field, voc in dims if v),
            W_FAMILY * max(max((kfamily.fit(p, f) * w for f, w in families), default=0.0),
                           kfamily.WEAK if p["id"] in near else 0.0),
        ]
        t = text.get(p["rowid"], 0.0) / best_text
        if not (t > 0 or any(boosts) or (not expr and not soft)):  # hard filters alone list every page they keep
            continue
        if gap and not any(boosts):  # the family has no page: a shared word alone is no reason to list one
            continue
        boosts.append(sum(w * _fit(None, as_list(p.get(field)), voc) for w, v, field, voc in dims if not v))
        boosts.append(W_LINKS * math.log1p(p["inlinks"]) / max_links)
        hits.append({
            "id": p["id"],
            "title": str(p.get("title", "")),
            "kind": p.get("kind"),
            "score": round(t + sum(boosts), 3),
            "confidence": p.get("confidence"),
            "symptoms": page_syms,
            "matched_symptoms": matched,
            "architectures": as_list(p.get("architectures")),
            "languages": as_list(p.get("languages")),
            "kernel_types": as_list(p.get("kernel_types")),
            "sources": [s for s in (p.get("sources") or []) if isinstance(s, dict)],
            "repo": p.get("repo"),
            "pr": p.get("pr"),
            "merged": p.get("merged"),
            "merge_sha": p.get("merge_sha"),
            "perf_claims": [c for c in (p.get("perf_claims") or []) if isinstance(c, dict)],
            "path": p["path"],
            "line": p["line"],
            "family_slot": None,
            "_rowid": p["rowid"],
            "_body": p["body"],
            "_page": p,
        })
    hits.sort(key=lambda h: (-h["score"], CONFIDENCE_RANK.get(h["confidence"], 9), h["id"]))
    if kind is None:
        hits = _cap_pr_notes(hits)
    if families:
        hits = _keep_family_slots(hits, families[0][0])
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
        del h["_rowid"], h["_body"], h["_page"]
    return hits


def _family_neighbours(pages: list[dict[str, Any]], families: list[tuple[str, float]]) -> set[str]:
    """The pages that the pages of the query's first family link to (related, body links), when that family is
    an op family: what its pattern pages send a reader to next weighs like a weakly named family."""
    if not families or families[0][0] not in kfamily.OP_FAMILIES:
        return set()
    fam = families[0][0]
    out: set[str] = set()
    for p in pages:
        if kfamily.fit(p, fam) > 0 and p.get("kind") != "pr-note":
            out.update(as_list(p.get("related")))
            out.update(body_links(str(p.get("body") or "")))
    return out


def _gap_family(pages: list[dict[str, Any]], families: list[tuple[str, float]]) -> str | None:
    """The query's first family when it is an op family that no page belongs to, else None."""
    if not families or families[0][0] not in kfamily.OP_FAMILIES:
        return None
    fam = families[0][0]
    return None if any(kfamily.fit(p, fam) for p in pages) else fam


def coverage_gap(conn: sqlite3.Connection, terms: str = "", *, kernel_type: str | None = None,
                 family: str | None = None) -> str | None:
    """One line saying the corpus has no page of the op family a query is about (None when it has one, or
    when the query names no op family)."""
    families = kfamily.families_for(terms or "", kernel_type, family)
    fam = _gap_family(all_pages(conn), families)
    if fam is None:
        return None
    return (f"no page covers the {fam} family; pages of its kernel type ({kfamily.parent(fam)}) and of the "
            "filters follow, none listed for sharing a word alone")


def _cap_pr_notes(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most PR_NOTES_WITHIN of the first FAMILY_SLOTS_WITHIN places go to PR notes (when no kind is asked
    for): precedent is there to back a pattern, not to crowd it out of the first screen. The notes passed
    over follow the window, everything keeping its order."""
    first, later, notes = [], [], 0
    for h in hits:
        if len(first) < FAMILY_SLOTS_WITHIN and (h["kind"] != "pr-note" or notes < PR_NOTES_WITHIN):
            notes += h["kind"] == "pr-note"
            first.append(h)
        else:
            later.append(h)
    # too few other pages to fill the window: the notes fill it after all
    return first + later if len(first) == FAMILY_SLOTS_WITHIN else hits


def _keep_family_slots(hits: list[dict[str, Any]], fam: str) -> list[dict[str, Any]]:
    """The ranked hits with the family's playbook and its best-ranked PR note moved up into the first
    FAMILY_SLOTS_WITHIN places when they are below (the last places of that window; the others keep their
    order).  Only pages the query already returned move, so hard filters still hold."""
    window = FAMILY_SLOTS_WITHIN
    playbook = next((h for h in hits if kfamily.is_playbook_of(h["_page"], fam)), None)
    note = next((h for h in hits if h["kind"] == "pr-note" and kfamily.fit(h["_page"], fam) > 0), None)
    keep = [(h, why) for h, why in ((playbook, f"the {fam} playbook"), (note, f"the best-ranked {fam} PR note"))
            if h is not None and hits.index(h) >= window]
    if not keep:
        return hits
    moved = [h for h, _ in keep]
    for h, why in keep:
        h["family_slot"] = why
    rest = [h for h in hits if all(h is not m for m in moved)]
    cut = max(window - len(moved), 0)
    return rest[:cut] + moved + rest[cut:]


def get(page_id: str, extra_roots: list[str] | None = None) -> dict[str, Any] | None:
    """One page: its front matter plus ``path``, ``line`` and ``body``; None when no page has that id."""
    conn = open_index(extra_roots)
    try:
        return page_row(conn, page_id)
    finally:
        conn.close()


def corpus_stats(pages: list[dict[str, Any]]) -> dict[str, Any]:
    """Page counts by kind, repository (PR notes), symptom, architecture, language, kernel type and
    confidence, and how many pages quote a measured number."""
    out: dict[str, Any] = {"pages": len(pages), "with_perf_claims": sum(1 for p in pages if p.get("perf_claims"))}
    for key, field in (("kind", "kind"), ("repository", "repo"), ("symptom", "symptoms"),
                       ("architecture", "architectures"), ("language", "languages"),
                       ("kernel_type", "kernel_types"), ("confidence", "confidence")):
        counts = Counter(v for p in pages for v in as_list(p.get(field)))
        out[key] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


# --- the query log ---------------------------------------------------------------------------
def filters_of(symptoms=(), arch=None, language=None, kernel_type=None, kind=None, tags=(), *,
               exclude_kinds=(), repo=None, confidence=None, has_claims=False, family=None) -> dict[str, Any]:
    """The filters that were given, as logged in kbs_queries.jsonl."""
    given = {"symptoms": list(symptoms), "arch": arch, "language": language,
             "kernel_type": kernel_type, "kind": kind, "tags": list(tags), "exclude_kinds": list(exclude_kinds),
             "repo": repo, "confidence": confidence, "has_claims": bool(has_claims), "family": family}
    return {k: v for k, v in given.items() if v}


def search_filtered(conn: sqlite3.Connection, terms: str, filters: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """``search`` with the filters as ``filters_of`` gives them (what the query log records)."""
    return search(conn, terms, symptoms=filters.get("symptoms", ()), arch=filters.get("arch"),
                  language=filters.get("language"), kernel_type=filters.get("kernel_type"), kind=filters.get("kind"),
                  tags=filters.get("tags", ()), limit=limit, exclude_kinds=filters.get("exclude_kinds", ()),
                  repo=filters.get("repo"), confidence=filters.get("confidence"),
                  has_claims=bool(filters.get("has_claims")), family=filters.get("family"))


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
    for key in ("arch", "language", "kernel_type", "family", "kind", "repo", "confidence"):
        if filters.get(key):
            parts += [f"--{key.replace('_', '-')}", filters[key]]
    for k in filters.get("exclude_kinds", []):
        parts += ["--exclude-kind", k]
    if filters.get("has_claims"):
        parts.append("--has-claims")
    for t in filters.get("tags", []):
        parts += ["--tag", _quote(t)]
    return " ".join(parts)


def log_query(rd: RunDir, purpose: str, terms: str, filters: dict[str, Any], hits: list[dict],
              command: str, *, roots: list[str] | None = None, sign: bool = True) -> Path:
    """Append one line to vK/kbs_queries.jsonl of the run's current version (``sign``: and sign it).

    The log must be the one the last kbs record signed: a hand edit is refused, never signed over."""
    vdir = rd.vdir(rd.current_version())
    if not vdir.is_dir():
        raise UsageError(f"{vdir} does not exist: cannot log the query there")
    last = signed_log(rd, vdir) if sign else None
    path = vdir / KBS_QUERIES
    line = {"purpose": purpose, "query": terms, "filters": filters, "hits": [h["id"] for h in hits],
            "time": now_iso(), "command": command}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    if sign:
        sign_queries(rd, vdir, last, line["hits"], roots)
    return path


def signed_log(rd: RunDir, vdir: Path) -> records.Record | None:
    """vK's last kbs record (None before the first query); refuses a query log that is not the one it signed."""
    last = records.latest(records.read(rd.root), "kbs", vdir.name)
    path = vdir / KBS_QUERIES
    if last is None:
        if path.is_file() and path.stat().st_size:
            raise UsageError(f"{path} exists but no kernel-loop kbs record signed it: it was written by hand; "
                             "move it aside and log the queries again with kernel-loop kbs")
    elif not path.is_file() or sha256_file(path) != last.files().get(KBS_QUERIES):
        raise UsageError(f"{path} differs from what kernel-loop kbs last logged (records.log line {last.line}): it "
                         "was edited by hand; restore it (a hand-edited log is never signed over)")
    return last


def corpus_label(roots: list[str] | None) -> str:
    """'bundled' when the search used the bundled KBS alone, else the other roots (the gate refuses those)."""
    extra = [str(p) for p in corpus_roots(roots)[1:]]
    return "bundled" if not extra else "extra:" + ";".join(extra)


def sign_queries(rd: RunDir, vdir: Path, last: records.Record | None, new_hits: list[str],
                 roots: list[str] | None = None) -> None:
    """A signed kbs record of vK/kbs_queries.jsonl as it is now: the page ids the previous record signed plus
    ``new_hits`` (never re-read from the file), and the corpus searched (an earlier non-bundled one sticks).
    The gate accepts the query log, and the ids under 'Evidence used:', only through this record."""
    label = corpus_label(roots)
    if last is not None and last.get("corpus", "bundled") != "bundled" and label == "bundled":
        label = last["corpus"]
    hits = (last.hits() if last is not None else []) + list(new_hits)
    records.append(rd.root, "kbs", vdir.name, files=records.files_field(vdir, [KBS_QUERIES]),
                   hits=",".join(dict.fromkeys(hits)), corpus=label)
