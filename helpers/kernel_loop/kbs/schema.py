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
OPTIONAL_KEYS = ("tags", "perf_claims", "related", "repo", "pr", "merged", "merge_sha", "merge_sha_why",
                 "inferred_tags")
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
    "inferred_tags": "list of the page's architecture and symptom tags that its sources do not show (they stay "
    "in 'architectures' / 'symptoms' too). A PR note's other tags are the source's: each architecture is named "
    "by a GPU or architecture name in the note (the GPUs the source measured on), each symptom by the note's "
    "account of the source's profile or stated bottleneck; 'kbs check' refuses a tag that is neither",
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
        "tag_provenance": TAG_RULE,
        "vocabularies": {
            "kind": list(vocab.KBS_KINDS),
            "architectures": list(vocab.ARCHITECTURES),
            "languages": list(vocab.LANGUAGES),
            "kernel_types": list(vocab.KERNEL_TYPES),
            "confidence": list(vocab.CONFIDENCE),
            "symptoms": list(symptom_tags()),
        },
    }


# --- where a PR note's tags come from --------------------------------------------------------
# A PR note's architecture tags are the GPUs its source measured on, and its symptom tags the bottlenecks
# its source shows (a profile, a stated bottleneck).  The note's text, written from that source (title, body,
# the perf claims' GPU and the sources' 'supports'), must name them: a GPU model or an architecture name for
# each architecture tag, words of the symptom for each symptom tag.  A tag the source does not show is listed
# under ``inferred_tags`` as well (it stays in ``architectures`` / ``symptoms`` for ranking); ``kbs check``
# refuses a tag that is neither named nor listed there, and counts the sourced and the inferred ones.  Text in
# a sentence the note marks ``[inferred: ...]`` or ``[unverified: ...]`` names nothing: it is the note's own
# reading, not the source's.
TAG_KEYS = ("architectures", "symptoms")
TAG_RULE = ("a PR note's architecture tags are the GPUs its source measured on and its symptom tags what the source "
            "shows; the note's text names each (a GPU or architecture name; words of the symptom), else the tag is "
            "listed under inferred_tags too; a performance figure in a PR note's body is one of its perf_claims, "
            "or its sentence says the source reports it, or it carries a claim marker")
_B = r"(?<![A-Za-z0-9])"   # a word boundary that treats '-' and '_' as boundaries too
_E = r"(?![A-Za-z0-9])"
GPU_NAMES: dict[str, str] = {
    "sm70": r"v100|gv100|titan v|volta|sm_?70",
    "sm75": r"t4|turing|quadro rtx \d{4}|rtx 20[5-8]0(?: ti| super)?|titan rtx|sm_?75",
    "sm80": r"a100|a800|a30|ga100|ampere|sm_?80",
    "sm86": r"a10g?|a40|a16|a2|rtx a[2-6]000|a6000|rtx 30[5-9]0(?: ti)?|jetson orin|orin|ampere|sm_?8[67]",
    "sm89": r"l4|l40s?|l20|rtx 40[5-9]0(?: ti)?(?: super)?|rtx 6000 ada|ada(?: lovelace)?|sm_?89",
    "sm90": r"h100|h200|h800|h20|gh200|hopper|sm_?90a?",
    "sm100": r"b100|b200|gb200|b300|gb300|blackwell|sm_?10[03][af]?",
    "sm120": r"rtx 50[6-9]0|rtx pro 6000|dgx spark|gb10|blackwell|sm_?12[01][af]?",
}
_GPU_RES = {arch: re.compile(_B + "(?:" + pat + ")" + _E, re.I) for arch, pat in GPU_NAMES.items()}
# words that state each symptom (a profile's metric or the source's own account of the bottleneck)
SYMPTOM_WORDS: dict[str, str] = {
    "memory-bound": r"memory[- ]bound|bandwidth|dram|hbm|gb/s|tb/s|bytes|memory traffic|loads? and stores?|"
                    r"reads? (?:and|or) writes?|round trips?|streams?|memory-heavy|global memory",
    "compute-bound": r"compute[- ]bound|math[- ]bound|compute-heavy|arithmetic intensity|tflops|tflop/s|flops|"
                     r"% of (?:the )?peak|sm throughput",
    "latency-bound": r"latency|latency[- ]bound|batch(?: size)? (?:of )?1|bs ?=? ?1|small batch|decode|"
                     r"microseconds?|\d+(?:\.\d+)? ?(?:us|µs)|short|tiny|small (?:shapes?|inputs?|problems?|sizes?|m)",
    "balanced": r"balanced|both compute and memory",
    "uncoalesced-global": r"coalesc\w*|strided|strides?|gather\w*|scatter\w*|sectors?|transpos\w*|"
                          r"non-contiguous|contiguous",
    "smem-bank-conflicts": r"bank[- ]conflicts?|banks?|padding|swizzl\w*",
    "register-spills": r"spill\w*|local memory|stack frame",
    "occupancy-limited-registers": r"registers?|occupancy|setmaxnreg|maxnreg|launch_bounds",
    "occupancy-limited-smem": r"shared memory|smem|occupancy|stages?",
    "occupancy-limited-blocksize": r"block size|threads per block|num_warps|warps per|occupancy",
    "achieved-occupancy-gap": r"occupancy|resident|warps per sm|active warps",
    "long-scoreboard-stalls": r"latency|scoreboard|stall\w*|prefetch\w*|pipelin\w*|in flight|overlap\w*|waits?|"
                              r"async\w*|cp\.async|tma|double[- ]buffer\w*",
    "short-scoreboard-stalls": r"scoreboard|stall\w*|shared memory|smem|mufu|sfu|dependent|dependency|chain|ilp",
    "barrier-stalls": r"barriers?|__syncthreads|syncthreads|sync\w*|mbarrier",
    "mio-throttle-stalls": r"mio|shared memory|smem|ldmatrix|shuffles?|shfl|stall\w*",
    "lg-throttle-stalls": r"vector\w*|wide|128-bit|16-byte|float4|lsu|memory instructions|ld\.global|loads? per|"
                          r"fewer loads|per-element loads",
    "math-pipe-throttle": r"pipes?|exp2?|exponential|mufu|sfu|fma|alu|fp64|double[- ]precision|math|"
                          r"instructions?|transcendental|rsqrt|division|divides?",
    "low-issue-efficiency": r"issue\w*|instructions?|eligible|stall\w*|ilp|scheduler|overhead|index(?:ing)? math|"
                            r"integer|address(?:ing)? (?:math|arithmetic)|cycles?",
    "tail-effect": r"waves?|tail|quantiz\w* of|remainder|leftover|partial|idle sms?|load[- ]balanc\w*|imbalance|"
                   r"persistent|stream-k|split",
    "small-grid": r"grid|ctas?|thread ?blocks?|blocks?|sms?|parallelism|split\w*|occupy|underutili[sz]\w*|idle",
    "compute-near-peak": r"peak|% of|tflops|sol|speed[- ]of[- ]light|roofline",
    "dram-near-peak": r"peak|% of|bandwidth|roofline|speed[- ]of[- ]light|sol|tb/s|gb/s",
    "low-l2-hit-rate": r"l2|cache|hit rate|reuse|rasteri[sz]\w*|swizzl\w*",
    "warp-divergence": r"diverg\w*|branch\w*|predicat\w*|uniform control flow|warp-uniform",
    "tensor-cores-unused": r"tensor[- ]cores?|mma|wgmma|tcgen05|hmma|tl\.dot|wmma",
    "wgmma-unused": r"wgmma|warpgroup|warp-group|tcgen05|umma|hopper mma|sm90 mma",
    "launch-overhead": r"launch\w*|cuda graphs?|graph capture|host|cpu|dispatch|python overhead|overhead",
    "multi-kernel": r"fus\w*|launch\w*|kernels|one kernel|single kernel|single pass|one pass|separate|"
                    r"round trips?|intermediate|combined?|merg\w*|in-kernel|epilogue",
    "block-size-not-multiple-32": r"multiple of 32|block size|partial warps?",
}
_SYMPTOM_RES = {tag: re.compile(_B + "(?:" + pat + ")" + _E, re.I) for tag, pat in SYMPTOM_WORDS.items()}
_MARKED_SENTENCE_RE = re.compile(r"[^.!?\n]*\[(?:inferred|unverified):[^\]]*\][^.!?\n]*[.!?]?", re.I)


def sourced_text(front: dict[str, Any], body: str) -> str:
    """The text of a page that speaks for its sources: title, body less the sentences marked inferred or
    unverified, the perf claims (GPU, metric, value, baseline, shape) and what each source supports."""
    parts = [str(front.get("title") or ""), _MARKED_SENTENCE_RE.sub(" ", body)]
    for claim in front.get("perf_claims") or []:
        if isinstance(claim, dict):
            parts += [str(claim.get(k) or "") for k in ("gpu", "metric", "value", "baseline", "shape")]
    for src in front.get("sources") or []:
        if isinstance(src, dict):
            parts.append(str(src.get("supports") or ""))
    return "\n".join(parts)


def named_architectures(text: str) -> set[str]:
    """The architectures a text names, by a GPU model (A100, H20, RTX 4090 ...) or an architecture name."""
    return {arch for arch, rx in _GPU_RES.items() if rx.search(text)}


def symptom_stated(tag: str, text: str) -> bool:
    """Whether a text states a symptom: words of it (a tag with no words listed is never stated)."""
    rx = _SYMPTOM_RES.get(tag)
    return bool(rx and rx.search(text))


def tag_provenance(front: dict[str, Any], body: str) -> dict[str, dict[str, list[str]]]:
    """For each tag key (architectures, symptoms): {"sourced": tags the note's text names and does not list
    as inferred, "inferred": tags listed under inferred_tags, "unbacked": tags neither named nor listed}."""
    text = sourced_text(front, body)
    inferred = set(as_list(front.get("inferred_tags")))
    archs = named_architectures(text)
    out: dict[str, dict[str, list[str]]] = {}
    for key in TAG_KEYS:
        got: dict[str, list[str]] = {"sourced": [], "inferred": [], "unbacked": []}
        for tag in as_list(front.get(key)):
            named = tag in archs if key == "architectures" else symptom_stated(tag, text)
            got["inferred" if tag in inferred else "sourced" if named else "unbacked"].append(tag)
        out[key] = got
    return out


# A performance figure (a speedup, a share, a throughput, a time) in a PR note's body is the source's: it is one
# of the note's perf claims, or its sentence says where it comes from (the PR reports, the thread's table, the
# README ...), or the sentence carries a claim marker saying it is the note's own ([inferred: ...]).
PERF_FIGURE_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?(?:x|×|%|tflops|tflop/s|tops|gb/s|tb/s|us|µs|ms)(?![A-Za-z0-9])",
                            re.I)
ATTRIBUTION_RE = re.compile(
    r"\b(?:reports?|reported|reporting|measur\w*|the pr\b|pr's|the author|authors?'?s?|thread|description|readme|"
    r"table|benchmark\w*|quot\w*|posts?|posted|profil\w*|according to|the paper|the blog|the commit|review\w*|"
    r"maintainers?|shows?|showed|shown|gives?|gave|states?|stated|cites?|cited|the docs|documentation|tutorial)\b",
    re.I)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")


def unsourced_figures(front: dict[str, Any], body: str) -> list[str]:
    """The performance figures of a body that are not marked as the source's (see PERF_FIGURE_RE above)."""
    claims = " ".join(str(c.get(k) or "") for c in front.get("perf_claims") or [] if isinstance(c, dict)
                      for k in ("value", "metric", "baseline", "shape", "gpu"))
    out = []
    for sentence in _SENTENCE_SPLIT_RE.split(" ".join(body.split())):
        if ATTRIBUTION_RE.search(sentence) or claim_marks(sentence):
            continue
        out += [m.group(0) for m in PERF_FIGURE_RE.finditer(sentence) if m.group(1) not in claims]
    return out
