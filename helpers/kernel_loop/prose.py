"""The parts of a run the agent writes in prose: the TODO marker, markdown sections and the
hypothesis.txt headings, and ``load_hypothesis`` (a version's hypothesis as data).

The gate checks the same headings in the same order (scripts/check_iteration_gate.sh); the
hypothesis step renders them; report, status and next read them back through this module.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from . import predictions
from .common import UsageError, read_json, sha256_file
from .sidecars import HYPOTHESIS_JSON, HYPOTHESIS_TXT

TODO = "TODO(kernel-loop)"

# (field, heading) of hypothesis.txt, in the order the gate requires.
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
# How each heading the agent fills gets its content: a flag of the hypothesis command, or kbs_evidence.md.
TODO_HINTS = {"Decision link:": "fill ## Decision Link in kbs_evidence.md", "Single change:": "--change",
              "Rationale:": "--rationale", "Expected metric movement:": "--predict", "Risk:": "--risk",
              "Evidence used:": "--evidence, or cite ids under ## Selected Evidence", "Decision rule:": "--decision-rule"}

# Words that are no content (the gate's check 9 reads the same list: scripts/check_iteration_gate.sh).
FILLER = ("tbd", "tba", "todo", "n/a", "na", "none", "nothing", "fixme", "xxx", "placeholder", "same", "above",
          "idem", "etc")


def has_real_text(text: str) -> bool:
    """Whether a heading's body counts for the gate's check 9: its words, FILLER aside, hold at least 4 letters."""
    words = re.split(r"[^a-z0-9/]+", text.lower())
    return sum(len(re.sub(r"[^a-z]", "", w)) for w in words if w not in FILLER) >= 4


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


def todo_headings(text: str) -> list[str]:
    """The headings of a hypothesis.txt whose body still holds the TODO marker, in the gate's order."""
    body = parse_hypothesis_text(text)
    return [h for f, h in HEADINGS if TODO in (body.get(f) or "")]


def parse_hypothesis_text(text: str) -> dict[str, str]:
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


def load_hypothesis(vdir: Path) -> dict[str, Any] | None:
    """vK's hypothesis as data: the sidecar while hypothesis.txt is unchanged, else the text parsed.

    Text fields holding TODO become None; prediction lines that do not parse are skipped.
    """
    vdir = Path(vdir)
    txt, side = vdir / HYPOTHESIS_TXT, vdir / HYPOTHESIS_JSON
    if side.exists() and (not txt.exists() or sha256_file(txt) == read_json(side).get("hypothesis_sha256")):
        return read_json(side)
    if not txt.exists():
        return None
    sections = parse_hypothesis_text(txt.read_text(encoding="utf-8"))
    data: dict[str, Any] = {"version": vdir.name, "source": HYPOTHESIS_TXT}
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
