"""Drive kernel-loop through a whole example run from a written plan, as an agent following SKILL.md would.

    python3 examples/drive_loop.py examples/<name>/loop.json --out DIR [--key FILE]
    python3 examples/drive_loop.py examples/<name>/loop.json --out DIR --resume   # DIR: the example's unpacked run

With --resume, DIR holds the run as the plan last finished it (its final gate passed at the plan's "extend_at", or
at the last of a list of them: a run extended more than once): the driver goes on from there (extend, that version's
hypothesis and gate, the versions after it), as drive from scratch would, without measuring the earlier versions
again.  From scratch, each point of the list is a final gate, then `extend` to the next point (the last to
"iterations").

The plan (loop.json; its "files" hold the kernels and ref.py it names) holds what an agent writes: the init flags, each
version's kernel file (the single change), the text of kbs_evidence.md's Selected Evidence,
Rejected / Limits and Decision Link sections, the extra KBS queries it runs, and the hypothesis
flags.  Everything measured comes from the helpers: this script only runs the CLI in the order of
SKILL.md (correctness, profile, kbs evidence, fill the evidence, hypothesis, gate, next; extend when
the plan says so; the final gate, benchmark, report) and stops at the first refusal or failure.

The texts were written for the plan before the loop ran (for the kernels added on 2026-12-01, from a
scratch timing screen of the candidates), so they cannot react to this run's numbers; the report's
scorecard shows which predictions held here.  Page ids an evidence text or hypothesis cites must be
among the hits of the version's logged queries: an id that is not is looked up with one more logged
query, and dropped (said on stderr) when that query does not return it either.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KL = [sys.executable, str(REPO / "helpers" / "kloop.py")]
TODO = "TODO(kernel-loop)"
SECTIONS = ("Selected Evidence", "Rejected / Limits", "Decision Link")


def say(msg: str) -> None:
    print(f"[drive] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def kl(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    say("kernel-loop " + " ".join(shlex.quote(a) for a in args))
    proc = subprocess.run([*KL, *args], text=True, capture_output=True)
    sys.stderr.write(proc.stderr)
    sys.stdout.write(proc.stdout)
    if proc.returncode not in ok:
        raise SystemExit(f"[drive] stopped: kernel-loop {args[0]} exited {proc.returncode}")
    return proc


def hits(vdir: Path) -> list[str]:
    out: list[str] = []
    for line in (vdir / "kbs_queries.jsonl").read_text().splitlines():
        for h in json.loads(line).get("hits") or []:
            if h not in out:
                out.append(h)
    return out


def fill_evidence(path: Path, texts: dict[str, str]) -> None:
    """Replace the TODO marker under each named section of the draft with the plan's text."""
    lines, out, cur = path.read_text().splitlines(), [], None
    for line in lines:
        if line.startswith("## "):
            cur = line[3:].strip()
        if TODO in line and cur in texts:
            out.append(texts[cur].rstrip())
            continue
        out.append(line)
    text = "\n".join(out) + "\n"
    if TODO in text:
        raise SystemExit(f"[drive] {path} still has {TODO} outside the sections the plan fills")
    path.write_text(text)


def need_ids(out: Path, vdir: Path, ids: list[str]) -> list[str]:
    """The cited ids, each returned by a logged query of this version (one lookup query if needed)."""
    kept = []
    for pid in ids:
        if pid not in hits(vdir):
            kl("kbs", "query", pid.replace("-", " "), "--log", str(out))
        if pid in hits(vdir):
            kept.append(pid)
        else:
            say(f"warning: {pid} is not among {vdir.name}'s hits: dropped from the citation")
    return kept


def version(out: Path, plan_dir: Path, k: int, v: dict, final: bool) -> None:
    vdir = out / f"v{k}"
    if k > 0:
        kl("next", str(out))
        made = next(p for p in vdir.iterdir() if p.suffix in (".py", ".cu"))
        shutil.copyfile(plan_dir / v["kernel"], made)  # the single change
    kl("correctness", str(out))
    kl("profile", str(out))
    kl("kbs", "evidence", str(out))
    for q in v.get("queries", []):
        kl("kbs", "query", *q, "--log", str(out))
    texts = dict(v["evidence"])
    fill_evidence(vdir / "kbs_evidence.md", texts)
    if not final:
        hypothesis_and_gate(out, k, v)


def hypothesis_and_gate(out: Path, k: int, v: dict) -> None:
    """vK's hypothesis from the plan's fields, then its transition gate."""
    vdir = out / f"v{k}"
    h = v["hypothesis"]
    args = ["hypothesis", str(out), "--change", h["change"], "--rationale", h["rationale"], "--risk", h["risk"],
            "--decision-rule", h["decision_rule"]]
    for p in h["predict"]:
        args += ["--predict", p]
    for pid in need_ids(out, vdir, h["evidence"]):
        args += ["--evidence", pid]
    kl(*args)
    if TODO in (vdir / "hypothesis.txt").read_text():
        raise SystemExit(f"[drive] {vdir}/hypothesis.txt still has {TODO}")
    kl("gate", str(vdir))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("plan")
    ap.add_argument("--out", required=True)
    ap.add_argument("--key", help="the record key to sign with (KERNEL_LOOP_RECORD_KEY)")
    ap.add_argument("--skip-benchmark", action="store_true")
    ap.add_argument("--resume", action="store_true", help="--out holds the run as finished at the plan's extend_at")
    a = ap.parse_args()
    plan = json.loads(Path(a.plan).read_text())
    out = Path(a.out).resolve()
    plan_dir = Path(tempfile.mkdtemp(prefix="kl-plan-"))  # the plan's kernels and ref.py, as files
    for rel, text in plan.get("files", {}).items():
        (plan_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (plan_dir / rel).write_text(text)
    key = Path(a.key).resolve() if a.key else None
    if key is None and plan.get("record_key"):  # the example's own key (not secret), outside the run folder
        key = plan_dir / "record.key"
        key.write_text(plan["record_key"] + "\n")
        key.chmod(0o600)
    if key is not None:
        os.environ["KERNEL_LOOP_RECORD_KEY"] = str(key)
    n = plan["iterations"]
    points = plan.get("extend_at")
    points = [] if points is None else points if isinstance(points, list) else [points]
    extend_at = points[-1] if points else None  # the run as --resume finds it
    if a.resume and (extend_at is None or not (out / f"v{extend_at}").is_dir() or (out / f"v{extend_at + 1}").exists()):
        raise SystemExit(f"[drive] --resume needs the run as first finished in {out}: the plan's extend_at version's "
                         "folder, and none after it (a run already extended: unpack the recorded one again)")
    if not a.resume:
        init = [str(plan_dir / x) if x.startswith("./") else x.replace("{repo}", str(REPO)) for x in plan["init"]]
        kl("init", str(out), *init)
    for k, v in enumerate(plan["versions"]):
        is_final = k == len(plan["versions"]) - 1
        at_planned_end = k in points
        if a.resume and k < extend_at:
            continue  # measured when the run was first driven
        if not (a.resume and at_planned_end):
            version(out, plan_dir, k, v, final=is_final or at_planned_end)
        if at_planned_end:
            kl("gate", str(out / f"v{k}"), "--final")  # the run as first planned is finished
            kl("extend", str(out), "--iterations", str(next((p for p in points if p > k), n)))
            # extend left a TODO for v(K+1)'s change where vK's final decision was: the plan's text names it
            fill_evidence(out / f"v{k}" / "kbs_evidence.md", {"Decision Link": v["evidence"]["Decision Link"]})
            hypothesis_and_gate(out, k, v)  # after an extension vK is an ordinary version
    kl("gate", str(out / f"v{n}"), "--final")
    if not a.skip_benchmark:
        kl("benchmark", str(out), *plan.get("benchmark", []))
        kl("report", str(out))
    say(f"done: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
