"""The KBS page schema: the front-matter keys a page has and the vocabularies they take.

Every page starts with YAML front matter between two ``---`` lines.  The required keys must be
present and non-empty (``symptoms`` may be an explicit empty list, for overview pages that match
no measured symptom); the optional keys may be left out.  List keys take names from the shared
vocabularies of ``vocab.py``; ``tags`` and ``related`` are free (``related`` must name pages).
``kbs check`` enforces all of it; ``kernel-loop kbs schema`` prints it.
"""

from __future__ import annotations

import re
from typing import Any

from .. import vocab

REQUIRED_KEYS = ("id", "title", "kind", "symptoms", "architectures", "languages", "kernel_types",
                 "confidence", "sources")
OPTIONAL_KEYS = ("tags", "perf_claims", "related", "repo", "pr", "merged", "merge_sha", "merge_sha_why")
# a PR note (kind pr-note) records the merged pull request it describes: these keys are required
# for it, its first source is the PR's own link, and no two notes describe the same PR
PR_KEYS = ("repo", "pr", "merged", "merge_sha")
# the merge commit as found in the repository's history (scripts/kbs_check_shas.py re-checks it against a
# fetched copy); MERGE_SHA_UNAVAILABLE, with merge_sha_why saying why, where that history could not be read
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
MERGE_SHA_UNAVAILABLE = "unavailable"
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

# A sentence that goes beyond the page's sources carries a marker right after it, so a reader knows where
# the sources stop: ``[inferred: why]`` (reasoned from the sources, which do not say it) or
# ``[unverified: why]`` (no source shows it: a metric name, a number, a date).  ``kbs check`` refuses a
# marker with another level or an empty reason; ``kbs get`` lists the page's markers after its body.
CLAIM_LEVELS = ("inferred", "unverified")
CLAIM_MARK_RE = re.compile(r"\[(?P<level>[A-Za-z][A-Za-z-]*):\s*(?P<why>[^\]]*)\]")
# words that can only mean a confidence marker, so that a misspelt or wrong level is refused, not ignored
MARKER_WORDS = (*CLAIM_LEVELS, *vocab.CONFIDENCE, "confidence", "unsure", "unknown", "unverifed", "infered")


def claim_marks(body: str) -> list[dict[str, Any]]:
    """The claim markers of a page body: [{"level", "why", "line"}] (line 1 = the body's first), those
    whose level is a confidence word only (other bracketed text is not a marker)."""
    out = []
    for m in CLAIM_MARK_RE.finditer(body):
        if m.group("level").lower() in MARKER_WORDS:
            out.append({"level": m.group("level"), "why": " ".join(m.group("why").split()),
                        "line": body.count("\n", 0, m.start()) + 1})
    return out


# what each key holds, as ``kbs schema`` prints it
KEY_HELP: dict[str, str] = {
    "id": "kebab-case page id, unique across every corpus folder; a file holding one page is "
    "named <id>.md",
    "title": "one-line title",
    "kind": "one of the kinds",
    "symptoms": "list of symptom tags or bottleneck classes the page helps with, the main ones "
    "first ([] for an overview page)",
    "architectures": "list of GPU architectures the advice holds on",
    "languages": "list of implementation languages the advice holds for",
    "kernel_types": "list of kernel families ('any' for advice that holds for every family)",
    "confidence": "one of the confidence levels",
    "sources": "list of {url: http(s) address, supports: what the source backs up}",
    "tags": "list of free keywords",
    "perf_claims": "list of {gpu, metric, value, source} and optional dtype, shape, baseline: "
    "measured numbers the page quotes (a PR note: the numbers the PR itself reports)",
    "related": "list of ids of related pages",
    "repo": "pr-note only (required): the repository, owner/name",
    "pr": "pr-note only (required): the pull request's number",
    "merged": "pr-note only (required): the date it was merged, YYYY-MM-DD",
    "merge_sha": "pr-note only (required): the merge commit's SHA, 40 lowercase hex, as found in the "
    "repository's history; 'unavailable' where that history could not be read, with merge_sha_why",
    "merge_sha_why": "pr-note only, with merge_sha: unavailable: why the history could not be read",
}

# list-valued keys and the vocabulary each must come from (None: free words)
LIST_VOCABS: dict[str, tuple[str, ...] | None] = {
    "symptoms": None,  # the symptom tags of vocab.py, filled in by ``list_vocabs``
    "architectures": vocab.ARCHITECTURES,
    "languages": vocab.LANGUAGES,
    "kernel_types": vocab.KERNEL_TYPES,
    "tags": None,
    "related": None,
}

ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
LINK_RE = re.compile(r"\]\(kbs:([^)\s]*)\)")
URL_RE = re.compile(r"^https?://\S+$")
MIN_BODY_CHARS = 200
CLAIM_KEYS = ("gpu", "metric", "value", "source")
CLAIM_OPTIONAL_KEYS = ("dtype", "shape", "baseline")


def symptom_tags() -> tuple[str, ...]:
    """Every name a page may list under ``symptoms``: bottleneck classes, then symptom tags."""
    return (*vocab.BOTTLENECK_CLASSES, *vocab.SYMPTOMS)


def list_vocabs() -> dict[str, tuple[str, ...] | None]:
    """LIST_VOCABS with the symptom vocabulary filled in (sorted, for close-match suggestions)."""
    return {**LIST_VOCABS, "symptoms": tuple(sorted(vocab.all_tags()))}


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def body_links(body: str) -> list[str]:
    """The page ids a body links to as ``[text](kbs:id)``."""
    return LINK_RE.findall(body)


def describe() -> dict[str, Any]:
    """The schema and its vocabularies as data (``kbs schema --json``)."""
    return {
        "required_keys": list(REQUIRED_KEYS),
        "optional_keys": list(OPTIONAL_KEYS),
        "keys": dict(KEY_HELP),
        "min_body_chars": MIN_BODY_CHARS,
        "pr_note_keys": list(PR_KEYS),
        "claim_keys": list(CLAIM_KEYS),
        "claim_optional_keys": list(CLAIM_OPTIONAL_KEYS),
        "claim_marker_levels": list(CLAIM_LEVELS),
        "vocabularies": {
            "kind": list(vocab.KBS_KINDS),
            "architectures": list(vocab.ARCHITECTURES),
            "languages": list(vocab.LANGUAGES),
            "kernel_types": list(vocab.KERNEL_TYPES),
            "confidence": list(vocab.CONFIDENCE),
            "symptoms": list(symptom_tags()),
        },
    }
