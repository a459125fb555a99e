"""``hypothesis <out>``: draft vK/hypothesis.txt (and its sidecar vK/hypothesis.json).

The text follows the gate's heading order (HEADINGS).  ``Version:`` and
``Current evidence:`` come from correctness.json and ncu.json; ``Decision link:``
quotes kbs_evidence.md's ``## Decision Link`` section (the agent's prose has no
sidecar); ``Evidence used:`` lists KBS page ids (``--evidence``, else the ids
that kbs_evidence.md's ``## Selected Evidence`` cites and kbs_queries.jsonl
returned).  The agent's own fields come from flags; a field not given keeps its
value from an existing draft, or stays ``TODO(kernel-loop)`` so the gate rejects it.

hypothesis.json: ``{"schema": 1, "version", "kernel_file", "kernel_sha256",
"single_change", "rationale", "risk", "decision_rule", "decision_link" (null = TODO),
"predictions": [{"metric", "op", "value", "text", "kernel" (label or null), "kernel_name"
(the named kernel's demangled name, when one is named)}], "evidence": [ids],
"current": {"bottleneck", "symptoms", "kernels" (a many-kernel call's largest, with owner and
share), "kernels_more", "focus", "event_median_us", "duration_us", "correctness",
"max_abs_err", "rel_l2_err"}, "todo": [unfilled headings], "hypothesis_sha256", "created"}``.
``hypothesis_sha256`` is the hash of hypothesis.txt as written: ``load`` trusts the
sidecar only while the text is unchanged and otherwise re-reads the text.
"""

from __future__ import annotations

import re
from typing import Any

from .. import plan, predictions, provenance
from ..common import (
    UsageError,
    atomic_write_text,
    now_iso,
    progress,
    sha256_file,
    sha256_text,
    warn,
    write_json,
)
from ..profiling.inventory import minor_labels
from ..profiling.kernel_names import short_name
from ..prose import (
    TEXT_FIELDS,
    TODO,
    TODO_HINTS,
    has_real_text,
    load_hypothesis,
    markdown_section,
    todo_headings,
)
from ..rundir import RunDir
from ..sidecars import event_median, query_hits, require
from ..templating import render

TEXT_FLAGS = {"single_change": "--change", "rationale": "--rationale", "risk": "--risk",
              "decision_rule": "--decision-rule"}
DURATION_METRICS = ("duration", "event_median_us")  # the gate's check 14 needs one prediction on these


def register(sub) -> None:
    p = sub.add_parser(
        "hypothesis",
        help="draft vK/hypothesis.txt from the measurements",
        description="Render vK/hypothesis.txt (K = current version) in the gate's heading order, filled "
        "from ncu.json, correctness.json and kbs_evidence.md, plus the single change, rationale, risk, "
        "decision rule and falsifiable predictions you give. Unfilled fields stay TODO(kernel-loop), "
        "which the gate rejects. Also writes vK/hypothesis.json.",
        epilog=predictions.FORMS_HELP + ". Exit codes: 0 written (the progress line says whether TODO is "
        "left), 2 refused (vN, stale or missing measurements, a complete hypothesis.txt without --force, an --evidence "
        "id that no logged query returned, predictions none of which is on duration, a prediction that cannot "
        "fail or cannot hold (a bound every value, or none, satisfies; a duration bound over 10x off the "
        "measured one), bad input); a refusal writes nothing.",
    )
    p.add_argument("out", help="run directory")
    p.add_argument("--change", help="the single change the next version makes")
    p.add_argument("--rationale", help="why the measurements point to this change")
    p.add_argument("--risk", help="what could go wrong (correctness, other metrics)")
    p.add_argument("--decision-rule", dest="decision_rule",
                   help="how the next measurement decides keep / revert")
    p.add_argument("--predict", action="append", default=[], metavar="'[KERNEL:]METRIC: OP VALUE'",
                   help="a falsifiable prediction, e.g. 'duration: -15%%' or 'registers_per_thread: <= 64' (the "
                   "focus kernel's); in a call of several kernels name one by its label in ncu.json (or a unique "
                   "part of it), e.g. 'attn_fwd:dram_throughput_pct: +10%%' (repeatable)")
    p.add_argument("--evidence", action="append", default=None, metavar="ID",
                   help="a KBS page id used, which one of vK's logged queries must have returned (the gate "
                        "checks it; others are refused); one id per flag, repeat the flag for several "
                        "(default: the ids cited under ## Selected Evidence that a query returned)")
    p.add_argument("--force", action="store_true", help="overwrite a hypothesis.txt that has no TODO left: a text option not "
                   "passed keeps its earlier text; --predict lines, when any is passed, replace all the earlier ones")
    p.set_defaults(func=run, needs=("jinja2",))  # checked before it writes anything


# --- reading the inputs -------------------------------------------------------------------
_ID_RE = re.compile(r"kbs:([A-Za-z0-9][\w.\-/]*[\w])|`(?:kbs:)?([^`\s]+)`")


def selected_ids(evidence_md: str, hits: list[str]) -> list[str]:
    """Ids cited under ``## Selected Evidence`` (as ``kbs:<id>`` or `` `id` ``) that a query returned."""
    body = markdown_section(evidence_md, "Selected Evidence") or ""
    out: list[str] = []
    for m in _ID_RE.finditer(body):
        pid = m.group(1) or m.group(2)
        if pid in hits and pid not in out:
            out.append(pid)
    return out


def decision_link(evidence_md: str) -> str | None:
    body = markdown_section(evidence_md, "Decision Link")
    if not body or TODO in body:
        return None
    return body


def max_errors(corr: dict[str, Any]) -> tuple[float | None, float | None]:
    """The worst max abs error and the worst relative L2 error of any output (an element-wise max relative error
    reads as alarm where the reference is near zero: an agent's trial saw 502 on a passing BatchNorm)."""
    abs_errs, l2_errs = [], []
    for shape in corr.get("shapes") or []:
        for trial in shape.get("trials") or []:
            for o in trial.get("outputs") or []:
                if o.get("max_abs_err") is not None:
                    abs_errs.append(o["max_abs_err"])
                if o.get("rel_l2_err") is not None:
                    l2_errs.append(o["rel_l2_err"])
    return (max(abs_errs) if abs_errs else None, max(l2_errs) if l2_errs else None)


KERNELS_SHOWN = 8  # hypothesis.txt lists this many kernels of a many-kernel call, largest first


def current_evidence(ncu: dict[str, Any], corr: dict[str, Any]) -> dict[str, Any]:
    mabs, ml2 = max_errors(corr)
    recs = predictions.kernel_records(ncu)
    label_of = {r["name"]: r["label"] for r in recs.values()}
    small = minor_labels(recs.values())  # a minor kernel's tags are not drafted (as in the KBS evidence's draft)
    fired = [s for s in ncu.get("symptoms") or [] if (s.get("label") or label_of.get(s.get("kernel"))) not in small]
    # with several kernels in the call, each symptom says which one fired it (the whole call's have none)
    several = len({s.get("kernel") for s in fired if s.get("kernel")}) > 1 or len(recs) > 1
    focus = predictions.focus_record(ncu, recs) if len(recs) > 1 else None
    return {
        "bottleneck": ncu.get("bottleneck"),
        "symptoms": [{"tag": s.get("tag"), "metrics": s.get("metrics") or {},
                      "kernel": (s.get("label") or label_of.get(s["kernel"]) or short_name(s["kernel"]))
                      if several and s.get("kernel") else None} for s in fired],
        "kernels": [{"label": r["label"], "owner": r["owner"], "share": r["share"], "profiled": r["profiled"]}
                    for r in list(recs.values())[:KERNELS_SHOWN]] if len(recs) > 1 else [],
        "kernels_more": max(0, len(recs) - KERNELS_SHOWN),
        "focus": focus["label"] if focus else None,
        "event_median_us": event_median(ncu),
        "duration_us": predictions.solution_sums(ncu).get("duration_us"),
        "correctness": corr.get("result"),
        "max_abs_err": mabs,
        "rel_l2_err": ml2,
    }


# --- the command ------------------------------------------------------------------------------
def run(args) -> int:
    rd = RunDir.open(args.out)
    k = rd.current_version()
    n = plan.final_version(rd)
    if k >= n:
        raise UsageError(f"v{k} is the final version (run.json iterations, or finish): vN needs no hypothesis; "
                         "run the final gate, then benchmark")
    vdir = rd.vdir(k)
    kernel = rd.kernel_file(k)
    if not (vdir / "ncu.json").is_file() and rd.config().device == "cpu":
        raise UsageError("this run uses the cpu test mode (run.json device cpu): hypothesis needs a GPU run's "
                         "profile (vK/ncu.json: the measurements it predicts from), which profile makes only on a "
                         "GPU run (init a new run without --device cpu where a CUDA GPU is)")
    corr = require(vdir / "correctness.json", "correctness")
    ncu = require(vdir / "ncu.json", "profile")
    ksha = sha256_file(kernel)
    for name, data, step in (("correctness.json", corr, "correctness"), ("ncu.json", ncu, "profile")):
        provenance.require_same_kernel(vdir / name, data, kernel, step)

    for f, flag in TEXT_FLAGS.items():
        given = getattr(args, "change" if f == "single_change" else f)
        if given is not None and not has_real_text(given):
            raise UsageError(f"{flag} {given!r} is a placeholder: the gate (check 9) counts only real words (TBD, "
                             "n/a, none, todo or a word or two do not); say what you mean; nothing was written")
    allowed = set((ncu.get("metrics") or {}).keys())
    recs = predictions.kernel_records(ncu)
    preds = predictions.parse_lines(args.predict, allowed, recs)
    if preds and not any(pr["metric"] in DURATION_METRICS and not pr.get("kernel") for pr in preds):
        raise UsageError("no --predict is on duration: the gate (check 14) needs one prediction on the CUDA-event "
                         "time without a kernel, e.g. --predict 'duration: -10%' (duration or event_median_us); "
                         "nothing was written")
    for pr in preds:
        measured = predictions.solution_value(ncu, pr["metric"]) if predictions.on_solution(pr) else None
        why = predictions.senseless(pr, measured)
        if why:
            raise UsageError(f"--predict '{pr['text']}' {why}; nothing was written")
    focus = predictions.focus_record(ncu, recs)
    for pr in preds:
        for why in (predictions.caveat(pr), predictions.signed_drop(pr)):
            if why:
                warn(f"--predict '{pr['text']}': {why}")
        if len(recs) > 1 and focus and not pr.get("kernel") and not predictions.on_solution(pr):
            warn(f"--predict '{pr['text']}' is on the focus kernel {focus['label']} (ncu.json focus): write "
                 f"'{focus['label']}:{pr['text']}' to say so, or name the kernel the change targets")

    txt_path = vdir / "hypothesis.txt"
    previous = load_hypothesis(vdir) if txt_path.exists() else None
    if txt_path.exists() and TODO not in txt_path.read_text(encoding="utf-8") and not args.force:
        raise UsageError(f"{txt_path} is complete (no {TODO} left); pass --force to overwrite it")

    fields = {f: getattr(args, "change" if f == "single_change" else f) for f in TEXT_FIELDS}
    for f in TEXT_FIELDS:
        if not fields[f] and previous and previous.get(f):
            fields[f] = previous[f]
    if not preds and previous:
        preds = previous.get("predictions") or []

    evidence_md = (vdir / "kbs_evidence.md").read_text(encoding="utf-8") if (vdir / "kbs_evidence.md").exists() else ""
    hits = query_hits(vdir)
    if args.evidence:
        evidence = list(dict.fromkeys(args.evidence))
        unknown = [pid for pid in evidence if pid not in hits]
        if unknown:
            shown = ", ".join(hits[:8]) + (" ..." if len(hits) > 8 else "")
            raise UsageError(
                f"--evidence {', '.join(repr(u) for u in unknown)}: not among the hits of the queries logged for v{k} "
                f"({vdir.name}/kbs_queries.jsonl returned {len(hits)} page(s){': ' + shown if hits else ''}); the gate "
                "accepts only pages a logged query returned: cite one of those, or first log a query that finds the "
                f"page (kbs query \"...\" --log {args.out}); nothing was written")
    else:
        evidence = selected_ids(evidence_md, hits)
    link = decision_link(evidence_md)

    ctx = {
        "version": f"v{k}", "kernel_file": kernel.name, "kernel_sha256": ksha,
        "current": current_evidence(ncu, corr), "decision_link": link, "predictions": preds,
        "evidence": evidence, "todo": TODO, **fields,
    }
    text = render("hypothesis.txt.j2", **ctx)
    todo = todo_headings(text)
    atomic_write_text(txt_path, text)
    side = {
        "schema": 1, "version": f"v{k}", "kernel_file": kernel.name, "kernel_sha256": ksha,
        **fields, "decision_link": link, "predictions": preds, "evidence": evidence,
        "current": ctx["current"], "todo": todo, "hypothesis_sha256": sha256_text(text), "created": now_iso(),
    }
    write_json(vdir / "hypothesis.json", side)
    print(txt_path)
    if todo:
        progress("still TODO (the gate rejects them): " + "; ".join(f"{h} ({TODO_HINTS[h]})" for h in todo))
    else:
        progress(f"v{k}/hypothesis.txt is complete; next: run the gate on v{k}")
    return 0
