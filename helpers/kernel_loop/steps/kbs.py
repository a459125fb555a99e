"""``kernel-loop kbs``: the command line of the knowledge base (KBS).

The knowledge base itself is the support package ``kernel_loop.kbs``: the page schema
(``kbs.schema``), corpus folders, the pages of a file and the check rules (``kbs.corpus``), the
SQLite FTS5 index (``kbs.index``), ranking and the query log (``kbs.search``) and the
kbs_evidence.md draft (``kbs.evidence``).  This step only parses arguments and prints.

Subcommands: ``query`` (ranked search, optionally logged to vK/kbs_queries.jsonl), ``get`` (one
page, with the file and line it lives at), ``stats``, ``check`` (validate every page; CI runs
it), ``schema`` (the page schema and vocabularies) and ``evidence`` (the two queries the gate
requires, kernel and bottleneck, a third precedent query of PR notes, and the vK/kbs_evidence.md draft).
"""

from __future__ import annotations

import difflib
import json
import os
from typing import Any

from .. import vocab
from ..common import Parser, UsageError, progress
from ..kbs import corpus, index, schema, search
from ..kbs import family as kfamily
from ..kbs.corpus import ENV_PATH
from ..kbs.evidence import claim_line, draft_evidence
from ..prose import TODO
from ..rundir import RunDir


def _check_choice(value: str | None, allowed, what: str) -> None:
    if value is not None and value not in allowed:
        raise UsageError(f"unknown {what} '{value}'{corpus.suggest(value, allowed)}; "
                         f"known: {', '.join(sorted(allowed))}")


def _corpus_args(args) -> list[str]:
    return list(args.corpus or []) + list(getattr(args, "corpus_sub", None) or [])


def _print_hit(i: int, h: dict[str, Any]) -> None:
    print(f"{i}. {h['id']}  score {h['score']}  [{h['confidence']}]  {h['title']}")
    if h.get("family_slot"):
        print(f"   kept in the first five as {h['family_slot']}")
    if h["symptoms"]:
        matched = f"  (matched: {', '.join(h['matched_symptoms'])})" if h["matched_symptoms"] else ""
        print(f"   symptoms: {', '.join(h['symptoms'])}{matched}")
    if h["excerpt"]:
        print(f"   {h['excerpt']}")
    for s in h["sources"]:
        print(f"   source: {s.get('url')}")
    for c in h.get("perf_claims") or []:
        print(f"   claim: {claim_line(c)}")


def cmd_query(args) -> int:
    for s in args.symptom or []:
        _check_choice(s, vocab.all_tags(), "symptom")
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    terms = " ".join(args.terms).strip()
    roots = _corpus_args(args)
    rd = RunDir.open(args.log) if args.log else None
    conn = index.open_index(roots)
    if args.repo:
        repos = sorted({str(p.get("repo")) for p in index.all_pages(conn) if p.get("repo")})
        if args.repo.lower() not in {r.lower() for r in repos}:
            close = difflib.get_close_matches(args.repo, repos, n=3, cutoff=0.4)
            raise UsageError(f"--repo {args.repo}: no PR note names that repository"
                             + (f" (did you mean {', '.join(close)}?)" if close else f"; {len(repos)} do: "
                                f"{', '.join(repos[:8])}{' ...' if len(repos) > 8 else ''}"))
    filters = search.filters_of(args.symptom or [], args.arch, args.language, args.kernel_type, args.kind,
                                args.tag or [], exclude_kinds=args.exclude_kind or [], repo=args.repo,
                                confidence=args.confidence, has_claims=args.has_claims, family=args.family)
    hits = search.search_filtered(conn, terms, filters, args.limit)
    gap = search.coverage_gap(conn, terms, kernel_type=args.kernel_type, family=args.family)
    if gap:
        (progress if args.json else print)(gap)
    if rd is not None:
        path = search.log_query(rd, args.purpose, terms, filters, hits,
                                search.query_command(terms, filters, roots), roots=roots)
        _logged(path, hits)
    if args.json:
        print(json.dumps(hits, indent=2, default=str))
    elif not hits:
        print("no matching pages")
    else:
        for i, h in enumerate(hits, 1):
            _print_hit(i, h)
    return 0


def _logged(path, hits: list[dict]) -> None:
    """Where a logged query went, and that a kbs_evidence.md drafted before it lists it only once you add it."""
    progress(f"query logged to {path}")
    evidence = path.parent / "kbs_evidence.md"
    if evidence.is_file():
        ids = ", ".join(h["id"] for h in hits) or "no page"
        progress(f"{evidence.name} was drafted before this query: add it to its ## Queries (it returned {ids}); "
                 "its pages may be cited in hypothesis.txt's Evidence used")


def cmd_get(args) -> int:
    roots = _corpus_args(args)
    page = search.get(args.id, roots)
    if page is None:
        known = index.page_ids(index.open_index(roots))
        close = difflib.get_close_matches(args.id, known, n=5, cutoff=0.5)
        raise UsageError(f"no page with id '{args.id}'" + (f"; close matches: {', '.join(close)}" if close else ""))
    if args.log:  # a page reached through another's links (related, a playbook's list) is cited like a query's hit
        path = search.log_query(RunDir.open(args.log), "extra", "", {"page": page["id"]}, [page],
                                f"kernel-loop kbs get {page['id']}", roots=roots)
        _logged(path, [page])
    if args.json:
        print(json.dumps({**page, "claim_marks": schema.claim_marks(page["body"].strip())}, indent=2, default=str))
        return 0
    print(f"# {page.get('title')}  ({page['id']})")
    print(f"path: {page['path']}:{page['line']}")
    for key in ("kind", "repo", "pr", "merged", "merge_sha", "merge_sha_why", "confidence", "symptoms",
                "architectures", "languages", "kernel_types", "inferred_tags", "tags", "related"):
        value = page.get(key)
        if value:
            print(f"{key}: {', '.join(map(str, value)) if isinstance(value, list) else value}")
    print("sources:")
    for s in page.get("sources") or []:
        print(f"  - {s.get('url')}  ({s.get('supports')})" if isinstance(s, dict) else f"  - {s}")
    claims = page.get("perf_claims") or []
    if claims:
        print("perf claims (as the source reports them):")
    for c in claims:
        print(f"  - {claim_line(c)}  [{c.get('source')}]" if isinstance(c, dict) else f"  - {c}")
    print()
    print(page["body"].strip())
    marks = schema.claim_marks(page["body"].strip())
    if marks:  # where the page goes beyond its sources, said once more at the end
        print()
        print("claims marked beyond the sources (body line: level: why):")
        for m in marks:
            print(f"  - line {m['line']}: {m['level']}: {m['why']}")
    return 0


def cmd_stats(args) -> int:
    stats = search.corpus_stats(index.all_pages(index.open_index(_corpus_args(args))))
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"pages: {stats['pages']} ({stats['with_perf_claims']} quote measured numbers)")
    for key, counts in stats.items():
        if isinstance(counts, dict):
            print(f"{key}: " + (", ".join(f"{k} {n}" for k, n in counts.items()) or "-"))
    return 0


def tags_line(tags: dict[str, dict[str, int]]) -> str:
    """'PR note tags: N sourced, M inferred (architectures a/b, symptoms c/d)' from check_corpus's counts."""
    total = {how: sum(t[how] for t in tags.values()) for how in ("sourced", "inferred")}
    parts = ", ".join(f"{key} {t['sourced']} sourced / {t['inferred']} inferred" for key, t in tags.items())
    return f"PR note tags: {total['sourced']} sourced, {total['inferred']} inferred ({parts})"


def cmd_check(args) -> int:
    roots = corpus.corpus_roots(_corpus_args(args))
    problems, n, shas = corpus.check_corpus(roots)
    for where, msg in problems:
        print(f"{where}: {msg}")
    if problems:
        progress(tags_line(shas["tags"]))
        progress(f"kbs check: {len(problems)} problem(s) in {n} page(s)")
        return 1
    if shas["unavailable"]:
        print(f"PR notes: {shas['found']} with their merge commit, {sum(shas['unavailable'].values())} without "
              "(history not read: " + ", ".join(f"{r} {k}" for r, k in shas["unavailable"].items()) + ")")
    print(tags_line(shas["tags"]))
    print(f"kbs check: OK, {n} pages in {len(roots)} corpus folder(s)")
    return 0


SCHEMA_LABELS = {"kind": "kinds", "architectures": "architectures", "languages": "languages",
                 "kernel_types": "kernel types", "confidence": "confidence", "symptoms": "symptom tags"}


def cmd_schema(args) -> int:
    data = {**schema.describe(), "layout": corpus.SEPARATOR_RULE}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    width = max(map(len, data["keys"])) + 2
    print("KBS page: YAML front matter between two '---' lines, then a markdown body of at least "
          f"{data['min_body_chars']} characters.")
    for label, keys in (("required keys", data["required_keys"]), ("optional keys", data["optional_keys"])):
        print(f"\n{label}:")
        for key in keys:
            print(f"  {key:<{width}}{data['keys'][key]}")
    print("\nvocabularies:")
    for key, values in data["vocabularies"].items():
        print(f"  {SCHEMA_LABELS.get(key, key)}: {', '.join(values)}")
    print(f"\nfiles: {data['layout']}")
    print(f"\ntag provenance: {data['tag_provenance']}")
    print(f"\nclaim markers: a body sentence that goes beyond the page's sources is followed by "
          f"[LEVEL: why], LEVEL one of {', '.join(data['claim_marker_levels'])} ('kbs get' lists them)")
    return 0


def cmd_evidence(args) -> int:
    path, queries = draft_evidence(RunDir.open(args.out), corpus=_corpus_args(args), force=args.force)
    print(path)
    for q in queries:
        print(f"{q['purpose']}: {q['command']}")
        if q.get("gap"):
            print(f"  {q['gap']}")
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
        epilog="Exit codes: 0 done, 1 'kbs check' found problems, 2 bad usage (an unknown id, symptom or "
               "option value, a missing corpus folder, no ncu.json for 'evidence', a hand-edited draft "
               "without --force).",
    )
    p.add_argument("--corpus", action="append", metavar="DIR",
                   help="another folder of pages with the same schema (repeatable)")
    sub = p.add_subparsers(dest="kbs_command", metavar="<kbs command>", required=True)
    common = Parser(add_help=False)
    common.add_argument("--corpus", dest="corpus_sub", action="append", metavar="DIR",
                        help="another folder of pages (repeatable; same as the group option)")

    q = sub.add_parser(
        "query", parents=[common], help="ranked search by text and measured symptoms",
        description="Rank pages by bm25 text match (title weighs most, then tags and symptoms, then body) "
        "plus soft boosts for every matching --symptom (rarer symptoms weigh more), --arch, --language, "
        "--kernel-type and --tag: a page matching more of them ranks higher, one matching none can still "
        "rank on its text. The kernel family (--family, else --kernel-type, else the family the words name) "
        "weighs too: its pages get a boost, and its playbook and best PR note are kept in the first five. "
        "--kind is a hard filter. Terms may be empty when a filter is given.",
        epilog="Exit codes: 0 done (also when nothing matches), 2 bad usage.",
    )
    q.add_argument("terms", nargs="*", help="search words (any punctuation is ignored)")
    q.add_argument("--symptom", action="append", metavar="S", help="a measured symptom or bottleneck class (repeatable)")
    q.add_argument("--arch", choices=vocab.ARCHITECTURES, help="favour pages for this GPU architecture (soft)")
    q.add_argument("--language", choices=vocab.LANGUAGES, help="favour pages for this implementation (soft)")
    q.add_argument("--kernel-type", choices=vocab.KERNEL_TYPES, help="favour pages for this kernel family (soft)")
    q.add_argument("--family", choices=kfamily.FAMILIES, metavar="FAMILY",
                   help="rank as for a kernel of this family (soft; default: --kernel-type, else the family "
                   "the search words name, e.g. softmax, decode, moe, rmsnorm, cumsum, quant, or an op family: "
                   f"{', '.join(kfamily.OP_FAMILIES)})")
    q.add_argument("--kind", choices=vocab.KBS_KINDS, help="only pages of this kind (hard filter)")
    q.add_argument("--tag", action="append", metavar="T", help="a free keyword the page lists (repeatable)")
    q.add_argument("--exclude-kind", action="append", choices=vocab.KBS_KINDS, metavar="KIND",
                   help="leave out pages of this kind (hard filter, repeatable)")
    q.add_argument("--repo", metavar="OWNER/NAME", help="only PR notes on this repository (hard filter)")
    q.add_argument("--confidence", choices=vocab.CONFIDENCE, help="only pages of this confidence (hard filter)")
    q.add_argument("--has-claims", action="store_true", help="only pages that quote a measured number (perf_claims)")
    q.add_argument("--limit", type=int, default=10, help="how many hits to print (default 10)")
    q.add_argument("--json", action="store_true", help="print the hits as a JSON list")
    q.add_argument("--log", metavar="OUT", help="append the query to OUT/vK/kbs_queries.jsonl (current version)")
    q.add_argument("--purpose", choices=search.PURPOSES, default="extra", help="purpose recorded with --log")
    q.set_defaults(func=cmd_query)

    g = sub.add_parser("get", parents=[common], help="show one page", description="Show one page with "
                       "the file and line it starts at, its front matter and sources; an unknown id exits 2 "
                       "and suggests close ids.")
    g.add_argument("id")
    g.add_argument("--json", action="store_true")
    g.add_argument("--log", metavar="OUT", help="log the page to OUT/vK/kbs_queries.jsonl (current version) as an "
                   "extra query's one hit, so that hypothesis.txt may cite a page reached through another's links")
    g.set_defaults(func=cmd_get)

    s = sub.add_parser("stats", parents=[common], help="page counts by kind, symptom, architecture, ...")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_stats)

    c = sub.add_parser(
        "check", parents=[common], help="validate every corpus page (CI runs it)",
        description="Validate the corpus: YAML front matter, required keys, controlled vocabularies, "
        "kebab-case ids unique across every file and folder (a file holding one page is named after its "
        "id; the pages of a file named after a kind are of that kind), sources with http(s) urls and "
        "'supports', internal links (related and [text](kbs:id)) that resolve, a body of at least "
        f"{schema.MIN_BODY_CHARS} characters with every code fence closed; PR notes (kind pr-note) with repo, pr, "
        "merged and merge_sha (the merge commit, 40 hex, one note per commit; or 'unavailable' with "
        "merge_sha_why), the PR's own link as first source, one note per PR, and perf claims whose fields are "
        "complete and whose value holds a number, whose architecture and symptom tags are named by their text or listed "
        "under inferred_tags, and whose body's performance figures are marked as the source's. Prints the count of "
        "sourced and inferred PR note tags and 'where: problem' lines "
        "(the file, or file:line (id) for a page of a multi-page file) and exits 1 if there is any.",
    )
    c.set_defaults(func=cmd_check)

    sc = sub.add_parser("schema", help="the page schema and the controlled vocabularies",
                        description="Print the front-matter keys a page must and may have, the vocabularies "
                        "its list keys take (kinds, architectures, languages, kernel types, confidence, "
                        "symptom tags) and how a file holds its pages.")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_schema)

    e = sub.add_parser(
        "evidence", parents=[common],
        help="run the two required queries (kernel, bottleneck), a precedent query (and a fusion query when "
        "multi-kernel fired); draft vK/kbs_evidence.md",
        description="For the current version K: read vK/ncu.json and run.json, run the two queries the gate "
        "requires, 'kernel' (kernel name, type, language) and 'bottleneck' (bottleneck class and fired symptoms), "
        "over the pattern pages, a third, 'precedent' (the same symptoms over PR notes with claimed numbers), "
        "and, when multi-kernel fired, an 'extra' query for the fusion pages, "
        f"append them to vK/kbs_queries.jsonl and draft vK/kbs_evidence.md with {TODO} markers for the "
        "agent. A kbs_evidence.md that differs from the helper's own draft (it holds your text) is never "
        "overwritten without --force.",
        epilog="Exit codes: 0 drafted, 2 refused (no current ncu.json, or a draft with your text and no --force).",
    )
    e.add_argument("out", help="the run directory")
    e.add_argument("--force", action="store_true",
                   help="redraft even a kbs_evidence.md that holds your text (that text is lost)")
    e.set_defaults(func=cmd_evidence)
