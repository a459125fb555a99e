"""The ``vK/kbs_evidence.md`` draft: the two required queries from ncu.json, and the template.

``draft_evidence`` reads the current version's ncu.json and run.json, runs

* the ``kernel`` query: the kernel's name, type and language as terms, filtered on the
  architecture, language and kernel type;
* the ``bottleneck`` query: the bottleneck class and the fired symptom tags (in diagnostic
  order, ``vocab.by_priority``) as terms and as symptom filters, with the same filters;

every query weighs the kernel family with the symptoms (``family.py``): the op family of the run's
ref.py when its main op has one (its module types and torch ops: ``nn.ConvTranspose3d`` is conv-transpose,
``nn.LSTM`` rnn, ``nn.MaxPool3d`` pooling), else the op family the kernel's name says, else the run's kernel
type, or, for a run recorded as ``any``, the family its kernel's name says, else the ref's main kernel
family (``torch.cumsum`` is scan) (``--family``), so the family's playbook, pattern
pages and PR notes rank next to the symptom's pattern pages; the ref's other families join the kernel
query's terms, and a family the corpus has no page for is said in one line (``gap``);

a third, optional ``precedent`` query (the same symptoms over PR notes with claimed numbers), and,
when ``multi-kernel`` fired, an ``extra`` query for the fusion pages (which pages matching the other
symptoms outrank in the bottleneck query),
logs them to ``vK/kbs_queries.jsonl`` and renders ``kbs_evidence.md.j2`` with the measured
facts, the queries and their candidate pages, leaving ``TODO`` markers for the agent.  The
markers say what to do with the drafted candidate list (it is a draft to replace with the
selection), and on the final version the decision link asks why the run ends there and names
what comes next (the final gate, benchmark, report), since vN gets no hypothesis.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import plan, predictions, provenance, vocab
from ..common import UsageError, atomic_write_text, read_json, sha256_text, warn
from ..profiling.inventory import minor_labels
from ..prose import TODO
from ..rundir import RunDir
from ..sidecars import KBS_EVIDENCE, NCU_JSON
from ..templating import fmt, render
from . import family as kfamily
from .index import open_index
from .search import (
    coverage_gap,
    filters_of,
    log_query,
    query_command,
    search_filtered,
    sign_queries,
    signed_log,
)

KEY_METRICS = ("duration_us", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct",
               "l1_hit_rate_pct", "l2_hit_rate_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct",
               "registers_per_thread", "block_size", "grid_size", "waves_per_sm", "issue_active",
               "sectors_per_request_ld", "sectors_per_request_st", "local_spill_requests",
               "tensor_pipe_pct", "fma_pipe_pct")
MAX_BOTTLENECK_TAGS = 6
LIBRARY_SHARE = 0.10  # a library kernel with at least this share of the call's kernel time is named to replace or fuse
EVIDENCE_HITS = 5
PRECEDENT_HITS = 3  # merged PRs that made a change for the fired symptoms, with their claimed numbers


def arch_of_cc(cc: Any) -> str | None:
    """Compute capability "9.0" -> sm90; an unlisted minor falls back to the family's listed arch."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(cc or ""))
    if not m:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    same_family = [a for a in vocab.ARCHITECTURES
                   if a.startswith(f"sm{major}") and len(a) == len(f"sm{major}") + 1]
    exact = f"sm{major}{minor}"
    if exact in vocab.ARCHITECTURES:
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
    if hit.get("family_slot"):
        reasons.append(f"kept in the first five as {hit['family_slot']}")
    return reasons or ["matches the query text"]


def claim_line(c: dict[str, Any]) -> str:
    """One claimed number as the PR reports it: value, metric, GPU, dtype, shape, against what."""
    extra = [str(c[k]) for k in ("dtype", "shape") if c.get(k)]
    against = f", vs {c['baseline']}" if c.get("baseline") else ""
    return f"{c.get('value')} ({c.get('metric')}; {c.get('gpu')}{'; ' + '; '.join(extra) if extra else ''}{against})"


def _dedupe_words(text: str) -> str:
    return " ".join(dict.fromkeys(text.split()))


def kernel_view(ncu: dict[str, Any]) -> dict[str, Any] | None:
    """A call whose kernels have owners (ncu.json schema 2): its own kernels by share of the call's kernel time
    (each with its bottleneck and symptoms), the symptoms to draft the evidence from (the own kernels', ranked
    by share, those of minor kernels left out; every kernel's but the minor ones, by share, when the version has no
    own kernel that is not minor; the whole call's, such as
    ``multi-kernel``), and the library kernels with a large share, to replace or fuse.  None for a profile
    whose kernels have no owner (schema 1), or a call of one kernel, which are drafted from ``symptoms`` as before."""
    recs = predictions.kernel_records(ncu)
    if len(recs) < 2 or not any(r.get("owner") in ("own", "library") for r in recs.values()):
        return None  # one kernel: drafted as before
    own = [r for r in recs.values() if r.get("owner") == "own"]
    small = minor_labels(recs.values())  # a minor kernel's tags stay out of the draft
    major = [r for r in recs.values() if r["label"] not in small]
    source = [r for r in own if r in major] or major  # (as out of hypothesis.txt's: steps/hypothesis.py)
    fired = [dict(sym, kernel=r["label"], owner=r.get("owner"), share=r.get("share"))
             for r in source for sym in r.get("symptoms") or []]
    fired += [dict(sym, kernel=None, owner=None, share=None) for sym in ncu.get("symptoms") or []
              if isinstance(sym, dict) and sym.get("tag") and not sym.get("kernel")]
    replace = [r for r in recs.values() if r.get("owner") == "library" and _share(r) >= LIBRARY_SHARE]
    inv = ncu.get("inventory") if isinstance(ncu.get("inventory"), dict) else {}
    return {"own": own, "source": source, "fired": fired, "replace": replace,
            "launches": inv.get("launches"), "kernels": len(recs)}


def _share(rec: dict[str, Any]) -> float:
    s = rec.get("share")
    return float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else 0.0


def _tags(ncu: dict[str, Any], view: dict[str, Any] | None) -> list[str]:
    """The bottleneck query's tags: with owners, the own kernels' bottleneck and symptoms kernel by kernel,
    largest share first (each kernel's in diagnostic order), then the whole call's; without, the profile's
    bottleneck class and fired symptoms in diagnostic order."""
    if view is None:
        fired = [s for s in ncu.get("symptoms") or [] if isinstance(s, dict) and s.get("tag")]
        tags = [t for t in [ncu.get("bottleneck")] + [s["tag"] for s in fired] if t and vocab.is_known(t)]
        return vocab.by_priority(tags)[:MAX_BOTTLENECK_TAGS]
    tags: list[str] = []
    for rec in [*view["source"], None]:
        label = rec["label"] if rec else None
        mine = [s["tag"] for s in view["fired"] if s["kernel"] == label]
        if rec and rec.get("bottleneck"):
            mine.insert(0, rec["bottleneck"])
        tags += [t for t in dict.fromkeys(vocab.by_priority([t for t in mine if vocab.is_known(t)])) if t not in tags]
    return tags[:MAX_BOTTLENECK_TAGS]


def _run_queries(rd: RunDir, ncu: dict[str, Any], cfg: Any, arch: str | None,
                 corpus: list[str]) -> list[dict[str, Any]]:
    """The kernel and bottleneck queries, each logged; their terms, filters, command and hits."""
    ktype = cfg.kernel_type if cfg.kernel_type in vocab.KERNEL_TYPES else None
    ref_fams = kfamily.of_ref(rd.ref_py)
    named_ops, _ = kfamily.op_families_in(str(cfg.kernel or ""))
    # an op family (the ref's main op, else the kernel name's) is finer than any kernel type; else the run's
    # kernel type or the family its name says; else the ref's main kernel family
    ops = [f for f in ref_fams[:1] + named_ops if f in kfamily.OP_FAMILIES]
    fam = ops[0] if ops else kfamily.of_run(ktype, cfg.kernel) or (ref_fams[0] if ref_fams else None)
    fam = fam if fam != ktype else None  # a kernel type already names the family
    impl = cfg.impl if cfg.impl in vocab.LANGUAGES else None
    view = kernel_view(ncu)
    fired = view["fired"] if view else [s for s in ncu.get("symptoms") or [] if isinstance(s, dict) and s.get("tag")]
    tags = _tags(ncu, view)

    conn = open_index(corpus)
    queries = []
    no_notes = ("pr-note",)  # the pattern queries; PR notes answer the precedent query
    specs = [
        ("kernel", _dedupe_words(" ".join([str(getattr(cfg, key) or "") for key in ("kernel", "kernel_type", "impl")]
                                          + ref_fams[1:3])),
         filters_of(arch=arch, language=impl, kernel_type=ktype, exclude_kinds=no_notes, family=fam)),
        ("bottleneck", " ".join(tags), filters_of(symptoms=tags, arch=arch, language=impl, kernel_type=ktype,
                                                  exclude_kinds=no_notes, family=fam)),
        ("precedent", " ".join(tags), filters_of(symptoms=tags, arch=arch, language=impl, kernel_type=ktype,
                                                 kind="pr-note", has_claims=True, family=fam)),
    ]
    if any(s["tag"] == "multi-kernel" for s in fired) or (view and view["replace"]):
        # the time spread over several kernels, or library kernels holding much of it: the fusion pages,
        # which the other symptoms' pages outrank (or the tag fell past the bottleneck query's limit)
        specs.append(("extra", "multi-kernel kernel fusion epilogue",
                      filters_of(symptoms=["multi-kernel"], arch=arch, language=impl, exclude_kinds=no_notes)))
    for purpose, terms, filters in specs:
        limit = PRECEDENT_HITS if purpose == "precedent" else EVIDENCE_HITS
        hits = search_filtered(conn, terms, filters, limit) if (terms or filters.get("symptoms")) else []
        command = query_command(terms, filters, corpus)
        log_query(rd, purpose, terms, filters, hits, command, sign=False)
        gap = coverage_gap(conn, terms, kernel_type=filters.get("kernel_type"), family=filters.get("family"))
        queries.append({"purpose": purpose, "terms": terms, "filters": filters, "command": command,
                        "hits": hits, "gap": gap})
    return queries


def _candidates(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every page the pattern queries returned, once, with the reasons and the queries that found it."""
    candidates: dict[str, dict[str, Any]] = {}
    for q in queries:
        if q["purpose"] == "precedent":
            continue
        for h in q["hits"]:
            c = candidates.setdefault(h["id"], {**h, "why": [], "queries": []})
            c["queries"].append(q["purpose"])
            c["why"].extend(_why(h, q["filters"]))
    for c in candidates.values():
        c["why"] = "; ".join(dict.fromkeys(c["why"]))  # a reason both queries give is said once
        c["urls"] = [s.get("url") for s in c["sources"] if s.get("url")]
    return list(candidates.values())


def draft_evidence(rd: RunDir, *, corpus: list[str], force: bool = False) -> tuple[Path, list[dict]]:
    """Run the kernel and bottleneck queries, log them, write vK/kbs_evidence.md; returns (path, queries)."""
    k = rd.current_version()
    vdir = rd.vdir(k)
    ncu_path = vdir / NCU_JSON
    if not ncu_path.is_file() and rd.config().device == "cpu":
        raise UsageError("this run uses the cpu test mode (run.json device cpu): kbs evidence needs a GPU run's "
                         "profile (vK/ncu.json: bottleneck and symptoms), which profile makes only on a GPU run "
                         "(init a new run without --device cpu where a CUDA GPU is)")
    if not ncu_path.is_file():
        raise UsageError(f"{ncu_path} does not exist: run 'kernel-loop profile {rd.root}' first")
    target = vdir / KBS_EVIDENCE
    if target.exists() and not force and not is_untouched_draft(target.read_text(encoding="utf-8")):
        raise UsageError(f"{target} holds text you wrote (it differs from the helper's draft); refusing to "
                         "redraft it and lose that text. Keep it, or pass --force to redraft from the current "
                         "profile (the required queries are then logged again)")
    ncu, cfg = read_json(ncu_path), rd.config()
    if ncu.get("kernel_sha256") is not None:
        provenance.require_same_kernel(ncu_path, ncu, rd.kernel_file(k), "profile")
    gpu = ncu.get("gpu") or {}
    arch = arch_of_cc(gpu.get("cc"))
    if arch is None:
        warn(f"ncu.json gives compute capability {gpu.get('cc')!r}, which maps to no known architecture; "
             "queries run without --arch")
    last = signed_log(rd, vdir)  # a hand-edited log is refused before anything is appended to it
    queries = _run_queries(rd, ncu, cfg, arch, corpus)
    sign_queries(rd, vdir, last, [h["id"] for q in queries for h in q["hits"]], corpus)
    view = kernel_view(ncu)
    fired = view["fired"] if view else [s for s in ncu.get("symptoms") or [] if isinstance(s, dict) and s.get("tag")]

    metrics = ncu.get("metrics") or {}
    key_metrics = [(m, fmt(metrics[m])) for m in KEY_METRICS if metrics.get(m) is not None]
    timing = ncu.get("timing") or {}
    if timing.get("median_us") is not None:
        key_metrics.insert(0, (f"timing.median_us ({timing.get('method', 'timed')})",
                               fmt(timing["median_us"])))
    fired_view = [{
        "tag": s["tag"], "kernel": s.get("kernel") if view else None,
        "owner": s.get("owner"), "share_pct": s["share"] * 100 if s.get("share") is not None else None,
        "measured": ", ".join(f"`{m}` = {fmt(v)}" for m, v in (s.get("metrics") or {}).items()),
        "thresholds": ", ".join(f"`{m}` {t}" for m, t in (s.get("thresholds") or {}).items()),
        "why": s.get("why") or vocab.SYMPTOMS.get(s["tag"], {}).get("summary", ""),
    } for s in fired]

    text = render(
        "kbs_evidence.md.j2", k=k, todo=TODO, gpu=gpu, arch=arch, cfg=cfg, bottleneck=ncu.get("bottleneck"),
        bottleneck_why=vocab.BOTTLENECK_CLASSES.get(ncu.get("bottleneck") or "", ""),
        n_kernels=len(ncu.get("kernels") or []), key_metrics=key_metrics, fired=fired_view, view=view, LIBRARY_SHARE=LIBRARY_SHARE,
        focus=(predictions.focus_record(ncu) or {}).get("label") if view else None,
        queries=queries, candidates=_candidates(queries),
        precedents=[dict(h, claims=[claim_line(c) for c in h.get("perf_claims") or []])
                    for q in queries if q["purpose"] == "precedent" for h in q["hits"]],
    )
    text = _reword_todos(text, k, final=k >= plan.final_version(rd))
    atomic_write_text(target, mark_draft(text))
    return target, queries


def selection_todo() -> str:
    return (f"{TODO}: the list above is the helper's draft of candidates, not your selection: replace it with the "
            "pages that explain the measured facts above, each cited as kbs:ID with the measured value it explains "
            "and its source URL, and move the others to Rejected / Limits.")


def final_decision_todo(k: int) -> str:
    return (f"{TODO}: v{k} is the final version, so there is no next change and no hypothesis.txt. Say what this "
            f"evidence shows about where v{k} stands (the bottleneck left, how close it is to the measured peak) and "
            "why the run ends here; next come the final gate (--final), benchmark and report.")


def extended_decision_todo(k: int, kept: bool) -> str:
    """The ``## Decision Link`` of vK once ``extend`` made it an ordinary version (``kept``: the final decision
    written there is in before-extend-vK/)."""
    if not kept:
        return (f"{TODO}: state the single change this evidence supports for v{k + 1} and how hypothesis.txt will "
                "test it.")
    return (f"{TODO}: v{k} was the final version when this Decision Link was written (it is kept in "
            f"before-extend-v{k}/kbs_evidence.md); the run was extended, so state the single change this evidence "
            f"supports for v{k + 1} and how hypothesis.txt will test it.")


def reopen_decision(text: str, k: int) -> tuple[str, bool]:
    """vK's kbs_evidence.md after ``extend``: its ``## Decision Link`` body, written for a final version (the
    agent's decision that no change follows, or the final draft's TODO), replaced by a TODO for v(K+1)'s
    change, so that ``hypothesis`` does not quote the final decision as the next change.  Returns the text and
    whether the old body was a decision to keep; an untouched draft stays one (marked again)."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip().lower() == "## decision link"), None)
    if start is None:
        return text, False
    end = next((j for j in range(start + 1, len(lines)) if re.match(r"^#{1,2}\s", lines[j])), len(lines))
    decided = "\n".join(lines[start + 1:end]).strip()
    kept = bool(decided) and TODO not in decided
    draft = is_untouched_draft(text)
    blank = next((j for j in range(start + 1, end) if lines[j].strip()), end) - start - 1  # kept as they were
    lines[start + 1:end] = [*[""] * blank, extended_decision_todo(k, kept), ""]
    new = "\n".join(lines)
    if draft:
        new = mark_draft(_DRAFT_RE.sub("", new, count=1))
    return new, kept


def _reword_todos(text: str, k: int, *, final: bool) -> str:
    """The template's TODO lines under ``## Selected Evidence`` and (on the final version) ``## Decision
    Link`` replaced by the wording above; every other line as rendered."""
    lines = text.split("\n")
    section = ""
    for i, line in enumerate(lines):
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith(f"{TODO}:"):
            if section == "Selected Evidence":
                lines[i] = selection_todo()
            elif section == "Decision Link" and final:
                lines[i] = final_decision_todo(k)
    return "\n".join(lines)


DRAFT_MARK = "<!-- kernel-loop draft {} -->"
_DRAFT_RE = re.compile(r"^<!-- kernel-loop draft ([0-9a-f]{64}) -->\n", re.M)


def mark_draft(text: str) -> str:
    """The draft with a comment under its title holding the hash of the whole draft (title included):
    ``is_untouched_draft`` can then tell a draft nobody edited (safe to redraft) from one holding the
    agent's text."""
    title, _, rest = text.partition("\n")
    return f"{title}\n{DRAFT_MARK.format(sha256_text(text))}\n{rest}"


def is_untouched_draft(text: str) -> bool:
    m = _DRAFT_RE.search(text)
    if not m:
        return False
    unmarked = text[:m.start()] + text[m.end():]
    return sha256_text(unmarked) == m.group(1) and unmarked.startswith("# KBS Evidence")
