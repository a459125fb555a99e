"""Where KBS pages come from, how a markdown file splits into pages, and the ``kbs check`` rules.

Corpus folders: the bundled ``kbs_corpus/``, then every ``--corpus DIR``, then the folders of
``$KERNEL_LOOP_KBS_PATH`` (os.pathsep-separated).  Every ``*.md`` file of a folder except a
README holds one page or several.

Pages of a file (the separator rule).  A page is YAML front matter between two ``---`` lines,
then its markdown body.  The first page starts on the file's first line.  Each later page starts
at a line that is exactly ``---`` (surrounding blanks allowed) *and* is directly followed by a
line beginning with ``id:``, provided that ``---`` line lies in a body and outside a fenced code
block (```` ``` ```` or ``~~~``).  So a body may use ``---`` as a horizontal rule, and may show
front matter inside a code fence, without starting a page; a new page's front matter must begin
with its ``id`` key.  A body that leaves a code fence open would hide the pages after it, so
``kbs check`` reports an unclosed fence.

The bundled corpus keeps one file per kind (``pattern.md``, ``pitfall.md``, ...); a team's
folder may hold one page per file, several pages per file, or both.  A file holding one page is
named after its id (``<id>.md``); the pages of a file named after a kind are of that kind.
Ids are unique across every file and folder.
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import vocab
from ..common import UsageError, package_dir, warn
from .schema import (
    CLAIM_KEYS,
    CLAIM_LEVELS,
    CLAIM_OPTIONAL_KEYS,
    DATE_RE,
    ID_RE,
    MERGE_SHA_UNAVAILABLE,
    MIN_BODY_CHARS,
    OPTIONAL_KEYS,
    PR_KEYS,
    REPO_RE,
    REQUIRED_KEYS,
    SHA_RE,
    TAG_KEYS,
    URL_RE,
    as_list,
    body_links,
    claim_marks,
    list_vocabs,
    tag_provenance,
    unsourced_figures,
)

ENV_PATH = "KERNEL_LOOP_KBS_PATH"
# the separator rule of the module docstring, in one sentence (``kbs schema`` prints it)
SEPARATOR_RULE = ("a file holds one page or several; the first starts on the file's first line, each "
                  "later one at a '---' line directly followed by an 'id:' line, outside code fences "
                  "and after the previous page's front matter; a file holding one page is named <id>.md")
PAGE_START_RE = re.compile(r"^id:(\s|$)")
FENCE_RE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")


def bundled_corpus() -> Path:
    return package_dir() / "kbs_corpus"


# --- corpus folders and files ----------------------------------------------------------------
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


# --- pages of a file -------------------------------------------------------------------------
@dataclass(frozen=True)
class PageText:
    """The raw text of one page and where it lives."""

    path: Path
    line: int  # 1-based line of the page's opening '---' in its file
    text: str
    in_file: int  # how many pages its file holds

    @property
    def multi(self) -> bool:
        return self.in_file > 1

    def where(self, pid: Any = None) -> str:
        """The file alone for a one-page file; file:line and the id for a page of a multi-page file."""
        if not self.multi:
            return str(self.path)
        return f"{self.path}:{self.line}" + (f" ({pid})" if isinstance(pid, str) and pid else "")


def _fence(open_mark: str | None, line: str) -> str | None:
    """The fence mark open after ``line`` (None outside a fenced code block)."""
    m = FENCE_RE.match(line)
    if not m:
        return open_mark
    mark, rest = m.group(1), m.group(2)
    if open_mark is None:
        return None if mark[0] == "`" and "`" in rest else mark  # ```x``` is inline code
    if mark[0] == open_mark[0] and len(mark) >= len(open_mark) and not rest.strip():
        return None
    return open_mark


def unclosed_fence(body: str) -> int | None:
    """0-based line (in ``body``) of a code fence that is never closed, or None."""
    mark, opened = None, None
    for i, line in enumerate(body.splitlines()):
        new = _fence(mark, line)
        if mark is None and new is not None:
            opened = i
        mark = new
    return opened if mark is not None else None


def split_file(text: str) -> list[tuple[int, str]]:
    """(1-based first line, text) of every page of a file, by the rule of the module docstring."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    in_front = bool(lines) and lines[0].strip() == "---"
    fence: str | None = None
    for i in range(1, len(lines)):
        line = lines[i]
        if in_front:
            in_front = line.strip() != "---"
            continue
        if (fence is None and line.strip() == "---" and i + 1 < len(lines)
                and PAGE_START_RE.match(lines[i + 1])):
            starts.append(i)
            in_front = True
            continue
        fence = _fence(fence, line)
    ends = starts[1:] + [len(lines)]
    return [(s + 1, "".join(lines[s:e])) for s, e in zip(starts, ends, strict=True)]


def file_pages(path: Path, text: str) -> list[PageText]:
    parts = split_file(text)
    return [PageText(path, line, part, len(parts)) for line, part in parts]


def read_pages(files: list[Path]) -> list[PageText]:
    """Every page of every file, in file order."""
    out: list[PageText] = []
    for path in files:
        out += file_pages(path, path.read_text(encoding="utf-8", errors="replace"))
    return out


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


def body_offset(text: str) -> int:
    """How many lines of a page come before its body (the front matter and its two '---' lines)."""
    lines = text.splitlines()
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return i + 1
    return 0


# --- check -----------------------------------------------------------------------------------
def suggest(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def pr_link(repo: str, number: int) -> str:
    return f"https://github.com/{repo}/pull/{number}"


@dataclass
class PrLedger:
    """What the PR notes checked so far hold: where each (repo, pr) has its note, which note each merge
    commit belongs to, and how many notes of each repository could not name their merge commit."""

    notes: dict[tuple[str, int], str] = field(default_factory=dict)
    shas: dict[str, str] = field(default_factory=dict)
    unavailable: Counter = field(default_factory=Counter)
    tags: Counter = field(default_factory=Counter)  # (tag key, "sourced" | "inferred") -> how many tags


def _pr_problems(front: dict[str, Any], prs: PrLedger, where: str) -> list[str]:
    """The problems of a PR note's own keys; records the note in ``prs``."""
    out: list[str] = []
    if front.get("kind") != "pr-note":
        present = [k for k in (*PR_KEYS, "merge_sha_why") if k in front]
        return [f"'{k}' belongs to PR notes (kind pr-note) only" for k in present]
    repo, number, merged = front.get("repo"), front.get("pr"), front.get("merged")
    out += _sha_problems(front, prs)
    if not isinstance(repo, str) or not REPO_RE.match(repo):
        out.append("'repo' must be owner/name")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        out.append("'pr' must be the pull request's number")
    if not DATE_RE.match(str(merged or "")):
        out.append("'merged' must be a date, YYYY-MM-DD")
    if out:
        return out
    sources = front.get("sources")
    first = sources[0].get("url") if isinstance(sources, list) and sources and isinstance(sources[0], dict) else None
    link = pr_link(repo, number)
    if str(first or "").rstrip("/") != link:
        out.append(f"the first source must be the PR's own link, {link}")
    key = (repo.lower(), number)
    if key in prs.notes:
        out.append(f"{repo}#{number} already has a note (in {prs.notes[key]})")
    else:
        prs.notes[key] = where
    return out


def _sha_problems(front: dict[str, Any], prs: PrLedger) -> list[str]:
    """A PR note's merge commit: 40 hex found in the history, one note per commit; or 'unavailable' with why."""
    sha, why = front.get("merge_sha"), str(front.get("merge_sha_why") or "").strip()
    if sha is None:
        return ["lacks 'merge_sha': the merge commit's SHA (40 hex) as found in the repository's history, or "
                f"'{MERGE_SHA_UNAVAILABLE}' with 'merge_sha_why' where that history cannot be read"]
    if sha == MERGE_SHA_UNAVAILABLE:
        prs.unavailable[str(front.get("repo"))] += 1
        return [] if why else [f"'merge_sha: {MERGE_SHA_UNAVAILABLE}' needs 'merge_sha_why'"]
    out = [] if not why else ["'merge_sha_why' belongs with 'merge_sha: unavailable' only"]
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        quote = "" if isinstance(sha, str) else " (YAML read it as a number: put it in quotes)"
        return out + [f"'merge_sha' must be 40 lowercase hex (the merge commit), not {str(sha)[:50]!r}{quote}"]
    if sha in prs.shas:
        out.append(f"merge_sha {sha[:12]} is already the commit of {prs.shas[sha]}")
    else:
        prs.shas[sha] = f"{front.get('repo')}#{front.get('pr')}"
    return out


def _provenance_problems(front: dict[str, Any], body: str, prs: PrLedger) -> list[str]:
    """Where a page's tags and numbers come from: ``inferred_tags`` names tags the page has; a PR note's other
    architecture and symptom tags are named by its text, its perf claims cite its sources, and every
    performance figure of its body is the source's (schema.py says how).  Counts a PR note's tags in ``prs``."""
    listed = front.get("inferred_tags")
    if listed is None:
        listed = []
    elif not isinstance(listed, list):
        return ["'inferred_tags' must be a list"]
    own = {t for key in TAG_KEYS for t in as_list(front.get(key))}
    out = [f"inferred_tags: '{t}' is none of the page's {' or '.join(TAG_KEYS)}" for t in map(str, listed)
           if t not in own]
    if front.get("kind") != "pr-note":
        return out
    prov = tag_provenance(front, body)
    for key, got in prov.items():
        prs.tags[key, "sourced"] += len(got["sourced"])
        prs.tags[key, "inferred"] += len(got["inferred"])
    if prov["architectures"]["unbacked"]:
        named = prov["architectures"]["sourced"]
        why = ("the note names no GPU its source measured on" if not named and not prov["architectures"]["inferred"]
               else "the note names no GPU of that architecture")
        out.append(f"architecture tag(s) {', '.join(prov['architectures']['unbacked'])}: {why}; name the GPU as "
                   "the source does, or list the tag under inferred_tags")
    if prov["symptoms"]["unbacked"]:
        out.append(f"symptom tag(s) {', '.join(prov['symptoms']['unbacked'])}: the note does not say the source "
                   "shows it (a profile, a stated bottleneck); say so, or list the tag under inferred_tags")
    urls = {str(s.get("url")) for s in front.get("sources") or [] if isinstance(s, dict)}
    for i, claim in enumerate(front.get("perf_claims") or [], 1):
        if isinstance(claim, dict) and claim.get("source") and str(claim["source"]) not in urls:
            out.append(f"perf claim {i}: its source is none of the note's sources")
    figures = unsourced_figures(front, body)
    if figures:
        out.append(f"the body quotes {', '.join(dict.fromkeys(figures))} without marking it as the source's: make "
                   "it a perf claim, say the source reports it, or mark the sentence [inferred: why]")
    return out


def _claim_problems(claims: Any, pr_note: bool) -> list[str]:
    if claims is None:
        return []
    if not isinstance(claims, list):
        return ["'perf_claims' must be a list"]
    out: list[str] = []
    for i, claim in enumerate(claims, 1):
        if not isinstance(claim, dict):
            out.append(f"perf claim {i} is not a mapping")
            continue
        missing = [k for k in CLAIM_KEYS if not str(claim.get(k) or "").strip()]
        if missing:
            out.append(f"perf claim {i} lacks {', '.join(missing)}")
        unknown = sorted(set(claim) - set(CLAIM_KEYS) - set(CLAIM_OPTIONAL_KEYS))
        if unknown:
            out.append(f"perf claim {i} has unknown key(s) {', '.join(unknown)}")
        if pr_note and claim.get("source") and not URL_RE.match(str(claim["source"])):
            out.append(f"perf claim {i}: the source must be a link")
        if not any(ch.isdigit() for ch in str(claim.get("value") or "")):
            out.append(f"perf claim {i}: the value holds no number")
    return out


def _page_problems(page: PageText, front: dict[str, Any], body: str, ids: dict[str, str],
                   prs: PrLedger | None = None) -> list[str]:
    """The problems of one parsed page; records its id in ``ids`` (id -> where it was first seen)
    and a PR note in ``prs``."""
    out: list[str] = []
    for key in REQUIRED_KEYS:
        # an overview page may match no symptom, but it says so: ``symptoms: []``
        if key not in front or front[key] in (None, "") or (front[key] == [] and key != "symptoms"):
            out.append(f"required key '{key}' is missing or empty")
    for key in sorted(set(front) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS)):
        out.append(f"unknown key '{key}'")
    pid = front.get("id")
    if isinstance(pid, str) and pid:
        if not ID_RE.match(pid):
            out.append(f"id '{pid}' is not kebab-case")
        if not page.multi and pid != page.path.stem:
            out.append(f"id '{pid}' differs from the file name '{page.path.stem}'")
        if pid in ids:
            out.append(f"duplicate id '{pid}' (also in {ids[pid]})")
        else:
            ids[pid] = page.where(pid)
    elif pid is not None:
        out.append("id is not a string")
    kind = front.get("kind")
    for key, allowed in (("kind", vocab.KBS_KINDS), ("confidence", vocab.CONFIDENCE)):
        if front.get(key) is not None and front.get(key) not in allowed:
            out.append(f"{key} '{front.get(key)}' is not one of {', '.join(allowed)}")
    if page.multi and page.path.stem in vocab.KBS_KINDS and kind in vocab.KBS_KINDS and kind != page.path.stem:
        out.append(f"kind '{kind}' differs from the kind the file is named after ('{page.path.stem}')")
    for key, allowed in list_vocabs().items():
        value = front.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            out.append(f"'{key}' must be a list")
            continue
        for v in value:
            if allowed is not None and v not in allowed:
                out.append(f"{key}: '{v}' is not a known name{suggest(str(v), allowed)}")
    sources = front.get("sources")
    if isinstance(sources, list):
        for i, src in enumerate(sources, 1):
            if not isinstance(src, dict):
                out.append(f"source {i} is not a mapping with url and supports")
                continue
            if not URL_RE.match(str(src.get("url", ""))):
                out.append(f"source {i} has no http(s) url")
            if not str(src.get("supports") or "").strip():
                out.append(f"source {i} has an empty 'supports'")
    elif sources is not None:
        out.append("'sources' must be a list")
    out += _claim_problems(front.get("perf_claims"), kind == "pr-note")
    prs = PrLedger() if prs is None else prs
    out += _pr_problems(front, prs, page.where(pid))
    out += _provenance_problems(front, body, prs)
    if len(body.strip()) < MIN_BODY_CHARS:
        out.append(f"the body has {len(body.strip())} characters; at least {MIN_BODY_CHARS} are needed")
    for mark in claim_marks(body):
        if mark["level"] not in CLAIM_LEVELS:
            out.append(f"claim marker '[{mark['level']}: ...]' on body line {mark['line']}: the level is one of "
                       f"{', '.join(CLAIM_LEVELS)}")
        elif not mark["why"]:
            out.append(f"claim marker '[{mark['level']}: ]' on body line {mark['line']} gives no reason")
    fence = unclosed_fence(body)
    if fence is not None:
        out.append(f"the code fence on line {page.line + body_offset(page.text) + fence} is never closed")
    return out


def check_corpus(roots: list[Path]) -> tuple[list[tuple[str, str]], int, dict[str, Any]]:
    """Every problem of every page as (where, problem), the number of pages read, and the PR notes' ledger:
    {"found": notes with a merge commit, "unavailable": {repository: notes marked unavailable}, "tags":
    {"architectures" | "symptoms": {"sourced": n, "inferred": n}}} (the PR notes' tags; see schema.py).

    ``where`` is the file for a one-page file, ``file:line (id)`` for a page of a multi-page file.
    """
    files = corpus_files(roots)
    problems: list[tuple[str, str]] = []
    ids: dict[str, str] = {}
    prs = PrLedger()
    links: list[tuple[str, str, str]] = []
    if not files:
        problems.append((str(roots[0]), "no pages (*.md) found in any corpus folder"))
    pages = read_pages(files)
    for page in pages:
        front, body, problem = split_page(page.text)
        if problem:
            problems.append((page.where(), problem))
            continue
        pid = front.get("id")
        where = page.where(pid)
        problems += [(where, msg) for msg in _page_problems(page, front, body, ids, prs)]
        related = front.get("related")
        for target in as_list(related) if isinstance(related, list) else []:
            links.append((where, target, "related"))
        for target in body_links(body):
            links.append((where, target, "body link"))
    for where, target, kind in links:
        if target not in ids:
            problems.append((where, f"{kind} 'kbs:{target}' names no page{suggest(target, ids)}"))
    tags = {key: {how: prs.tags[key, how] for how in ("sourced", "inferred")} for key in TAG_KEYS}
    return problems, len(pages), {"found": len(prs.shas), "unavailable": dict(prs.unavailable.most_common()),
                                  "tags": tags}
