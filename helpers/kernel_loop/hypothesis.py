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
"predictions": [{"metric", "op", "value", "text"}], "evidence": [ids],
"current": {"bottleneck", "symptoms", "event_median_us", "duration_us", "correctness",
"max_abs_err", "max_rel_err"}, "todo": [unfilled headings], "hypothesis_sha256", "created"}``.
``hypothesis_sha256`` is the hash of hypothesis.txt as written: ``load`` trusts the
sidecar only while the text is unchanged and otherwise re-reads the text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import predictions, provenance
from .common import (
    UsageError,
    atomic_write_text,
    now_iso,
    progress,
    read_json,
    sha256_file,
    sha256_text,
    warn,
    write_json,
)
from .rundir import RunDir
from .templating import render

TODO = "TODO(kernel-loop)"

# (field, heading) in the order the gate requires.
HEADINGS: list[tuple[str, str]] = [
    ("version", "Version:"),
    ("current_evidence", "Current evidence:"),
    ("decision_link", "Decision link:"),
    ("single_change", "Single change:"),
    ("rationale", "Rationale:"),
    ("expected", "Expected metric movement:"),
    ("risk", "Risk:"),
    ("evidence_used", "Evidence used:"),
    ("decision_rule", "Decision rule:"),
]
TEXT_FIELDS = ("single_change", "rationale", "risk", "decision_rule")
TEXT_FLAGS = {"single_change": "--change", "rationale": "--rationale", "risk": "--risk",
              "decision_rule": "--decision-rule"}


def register(sub) -> None:
    p = sub.add_parser(
        "hypothesis",
        help="draft vK/hypothesis.txt from the measurements",
        description="Render vK/hypothesis.txt (K = current version) in the gate's heading order, filled "
        "from ncu.json, correctness.json and kbs_evidence.md, plus the single change, rationale, risk, "
        "decision rule and falsifiable predictions you give. Unfilled fields stay TODO(kernel-loop), "
        "which the gate rejects. Also writes vK/hypothesis.json.",
        epilog=predictions.FORMS_HELP,
    )
    p.add_argument("out", help="run directory")
    p.add_argument("--change", help="the single change the next version makes")
    p.add_argument("--rationale", help="why the measurements point to this change")
    p.add_argument("--risk", help="what could go wrong (correctness, other metrics)")
    p.add_argument("--decision-rule", dest="decision_rule",
                   help="how the next measurement decides keep / revert")
    p.add_argument("--predict", action="append", default=[], metavar="'METRIC: OP VALUE'",
                   help="a falsifiable prediction, e.g. 'duration: -15%%' or 'registers_per_thread: <= 64' "
                   "(repeatable)")
    p.add_argument("--evidence", nargs="+", action="extend", default=None, metavar="ID",
                   help="KBS page ids used (repeatable; default: ids cited under ## Selected Evidence)")
    p.add_argument("--force", action="store_true", help="overwrite a hypothesis.txt that has no TODO left")
    p.set_defaults(func=run)


# --- reading the inputs -------------------------------------------------------------------
def markdown_section(text: str, heading: str) -> str | None:
    """Body of ``## heading`` up to the next heading of level 1 or 2 (None if absent)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().lower() == f"## {heading}".lower():
            body = []
            for nxt in lines[i + 1:]:
                if re.match(r"^#{1,2}\s", nxt):
                    break
                body.append(nxt)
            return "\n".join(body).strip()
    return None


def query_hits(vdir: Path) -> list[str]:
    """Every page id that kbs_queries.jsonl's queries returned, in order, without repeats."""
    path = vdir / "kbs_queries.jsonl"
    hits: list[str] = []
    if not path.exists():
        return hits
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{n} is not valid JSON: {exc}") from None
        for h in rec.get("hits") or []:
            hid = h.get("id") if isinstance(h, dict) else h
            if isinstance(hid, str) and hid not in hits:
                hits.append(hid)
    return hits


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
    abs_errs, rel_errs = [], []
    for shape in corr.get("shapes") or []:
        for trial in shape.get("trials") or []:
            for o in trial.get("outputs") or []:
                if o.get("max_abs_err") is not None:
                    abs_errs.append(o["max_abs_err"])
                if o.get("max_rel_err") is not None:
                    rel_errs.append(o["max_rel_err"])
    return (max(abs_errs) if abs_errs else None, max(rel_errs) if rel_errs else None)


def event_median(ncu: dict[str, Any]) -> float | None:
    timing = ncu.get("timing") or {}
    if timing.get("median_us") is not None:
        return timing["median_us"]
    return (ncu.get("metrics") or {}).get("event_median_us")


def current_evidence(ncu: dict[str, Any], corr: dict[str, Any]) -> dict[str, Any]:
    mabs, mrel = max_errors(corr)
    metrics = ncu.get("metrics") or {}
    return {
        "bottleneck": ncu.get("bottleneck"),
        "symptoms": [{"tag": s.get("tag"), "metrics": s.get("metrics") or {}} for s in ncu.get("symptoms") or []],
        "event_median_us": event_median(ncu),
        "duration_us": metrics.get("duration_us"),
        "correctness": corr.get("result"),
        "max_abs_err": mabs,
        "max_rel_err": mrel,
    }


# --- reading a written hypothesis back --------------------------------------------------------
def parse_text(text: str) -> dict[str, str]:
    """{field: body} of a hypothesis.txt, split on the gate's headings."""
    names = {h: f for f, h in HEADINGS}
    out: dict[str, str] = {}
    cur: str | None = None
    for line in text.splitlines():
        if line.strip() in names:
            cur = names[line.strip()]
            out[cur] = ""
        elif cur is not None:
            out[cur] += line + "\n"
    return {k: v.strip() for k, v in out.items()}


def load(vdir: Path) -> dict[str, Any] | None:
    """vK's hypothesis as data: the sidecar while hypothesis.txt is unchanged, else the text parsed.

    Text fields holding TODO become None; prediction lines that do not parse are skipped.
    """
    vdir = Path(vdir)
    txt, side = vdir / "hypothesis.txt", vdir / "hypothesis.json"
    if side.exists() and (not txt.exists() or sha256_file(txt) == read_json(side).get("hypothesis_sha256")):
        return read_json(side)
    if not txt.exists():
        return None
    sections = parse_text(txt.read_text(encoding="utf-8"))
    data: dict[str, Any] = {"version": vdir.name, "source": "hypothesis.txt"}
    for f in (*TEXT_FIELDS, "decision_link"):
        body = sections.get(f)
        data[f] = body if body and TODO not in body else None
    preds = []
    for line in (sections.get("expected") or "").splitlines():
        try:
            preds.append(predictions.parse_line(line))
        except UsageError:
            continue
    data["predictions"] = preds
    data["evidence"] = [ln.lstrip("-* ").split()[0] for ln in (sections.get("evidence_used") or "").splitlines()
                        if ln.strip() and TODO not in ln]
    return data


# --- the command ------------------------------------------------------------------------------
def run(args) -> int:
    rd = RunDir.open(args.out)
    cfg = rd.config()
    k = rd.current_version()
    n = int(cfg.get("iterations", 0))
    if k >= n:
        raise UsageError(f"v{k} is the final version (run.json iterations = {n}): vN needs no hypothesis; "
                         "run the final gate, then benchmark")
    vdir = rd.vdir(k)
    kernel = rd.kernel_file(k)
    corr = _need_json(vdir / "correctness.json", "correctness")
    ncu = _need_json(vdir / "ncu.json", "profile")
    ksha = sha256_file(kernel)
    for name, data, step in (("correctness.json", corr, "correctness"), ("ncu.json", ncu, "profile")):
        provenance.require_same_kernel(vdir / name, data, kernel, step)

    allowed = set((ncu.get("metrics") or {}).keys())
    preds = predictions.parse_lines(args.predict, allowed)

    txt_path = vdir / "hypothesis.txt"
    previous = load(vdir) if txt_path.exists() else None
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
        for pid in evidence:
            if pid not in hits:
                warn(f"evidence id '{pid}' is not among the hits in {vdir.name}/kbs_queries.jsonl")
    else:
        evidence = selected_ids(evidence_md, hits)
    link = decision_link(evidence_md)

    ctx = {
        "version": f"v{k}", "kernel_file": kernel.name, "kernel_sha256": ksha,
        "current": current_evidence(ncu, corr), "decision_link": link, "predictions": preds,
        "evidence": evidence, "todo": TODO, **fields,
    }
    text = render("hypothesis.txt.j2", **ctx)
    todo = [h for f, h in HEADINGS if TODO in (parse_text(text).get(f) or "")]
    atomic_write_text(txt_path, text)
    side = {
        "schema": 1, "version": f"v{k}", "kernel_file": kernel.name, "kernel_sha256": ksha,
        **fields, "decision_link": link, "predictions": preds, "evidence": evidence,
        "current": ctx["current"], "todo": todo, "hypothesis_sha256": sha256_text(text), "created": now_iso(),
    }
    write_json(vdir / "hypothesis.json", side)
    print(txt_path)
    if todo:
        hints = {h: TEXT_FLAGS.get(f, "") for f, h in HEADINGS}
        hints["Expected metric movement:"] = "--predict"
        hints["Decision link:"] = "fill ## Decision Link in kbs_evidence.md"
        hints["Evidence used:"] = "--evidence, or cite ids under ## Selected Evidence"
        progress("still TODO (the gate rejects them): " + "; ".join(f"{h} ({hints[h]})" for h in todo))
    else:
        progress(f"v{k}/hypothesis.txt is complete; next: run the gate on v{k}")
    return 0


def _need_json(path: Path, step: str) -> dict[str, Any]:
    if not path.exists():
        raise UsageError(f"{path} does not exist: run '{step}' on {path.parent.name} first")
    return read_json(path)
