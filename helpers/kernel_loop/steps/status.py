"""``status <out> [--json]``: where the run stands and the exact next command.

For an agent resuming after context loss: the current version (current_iteration.txt,
or v0 before the first gate), the planned final version, which artifacts of the
current version are present, missing or stale (measured.sha256 and the kernel hash
recorded in the sidecars), whether the state has drifted, and the next step.

Every version needs correctness, profile and KBS evidence (the final gate audits vN's
kbs_evidence.md too); v0..v(N-1) also need hypothesis.txt.

Drift (exit 1): a state file holding garbage or naming a version past the plan;
files in versions beyond the current one; a state naming a version that has no
folder when ``next`` cannot create it (its predecessor has no kernel); a version
with several kernel files.  A state naming v(K+1) whose folder does not exist yet
(or is empty) is the normal moment after the gate passed vK: the next step is ``next``.

JSON: ``{"run", "planned_final", "state": {"recorded", "error"}, "current",
"artifacts": {"present", "missing", "stale": {name: reason}}, "drift": [...],
"consistent", "next": {"step", "why", "command", "then": [...]}}``.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from .. import provenance
from ..common import UsageError, package_dir, read_json, sha256_file, skill_root
from ..prose import TODO
from ..rundir import RunDir

MEASURED = {  # artifact -> the step that writes it
    "correctness.json": "correctness", "correctness.md": "correctness",
    "ncu.json": "profile", "ncu_summary.md": "profile", "ncu_details.md": "profile",
}
KBS = ("kbs_queries.jsonl", "kbs_evidence.md")
LOOP_ONLY = ("hypothesis.txt",)  # vN needs no hypothesis


def register(sub) -> None:
    p = sub.add_parser(
        "status",
        help="where the run stands and the next command",
        description="Show the current version, planned final version, which artifacts of the current "
        "version exist / are missing / are stale, whether the state has drifted, and the exact next "
        "command. Exit 0 when consistent, 1 on drift.",
    )
    p.add_argument("out", help="run directory")
    p.add_argument("--json", action="store_true", help="print the same as one JSON object")
    p.set_defaults(func=run)


def _kloop() -> str:
    return f"python3 {shlex.quote(str(package_dir().parent / 'kloop.py'))}"


def _gate() -> str:
    return f"bash {shlex.quote(str(skill_root() / 'scripts' / 'check_iteration_gate.sh'))}"


def _has_files(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _kernels(vdir: Path) -> list[Path]:
    if not vdir.is_dir():
        return []
    return [p for p in sorted(vdir.iterdir()) if p.suffix in (".py", ".cu") and p.is_file()]


def _artifacts(vdir: Path, final: bool) -> dict[str, Any]:
    names = [*MEASURED, *KBS, *(() if final else LOOP_ONLY), provenance.FILENAME]
    present = [n for n in names if (vdir / n).exists()]
    missing = [n for n in names if n not in present]
    stale: dict[str, str] = {}
    kernels = _kernels(vdir)
    if len(kernels) == 1:
        present.insert(0, kernels[0].name)
        ksha = sha256_file(kernels[0])
        for side in ("correctness.json", "ncu.json"):
            if (vdir / side).exists():
                recorded = read_json(vdir / side).get("kernel_sha256")
                if recorded and recorded != ksha:
                    stale[side] = f"measured on a different {kernels[0].name}"
    else:
        missing.insert(0, "kernel.py / kernel.cu")
    recorded = provenance.read(vdir)
    for rel, why in provenance.stale(vdir).items():
        stale[rel] = why
    for name in MEASURED:
        if name in present and name not in recorded and name not in stale:
            stale[name] = f"not recorded in {provenance.FILENAME}"
    return {"present": present, "missing": missing, "stale": stale}


def _needs(art: dict[str, Any], step: str) -> bool:
    """True when an artifact of ``step`` is missing or stale (a changed kernel or run.json stales all)."""
    names = [n for n, s in MEASURED.items() if s == step]
    if any(n in art["missing"] for n in names) or any(n in art["stale"] for n in names):
        return True
    return any(not n.endswith((".json", ".md")) for n in art["stale"]) or "../run.json" in art["stale"]


def collect(out: str | Path) -> dict[str, Any]:
    rd = RunDir.open(out)
    cfg = rd.config()
    n = cfg.iterations
    o = shlex.quote(str(rd.root))
    kl = _kloop()
    info: dict[str, Any] = {"run": str(rd.root), "planned_final": f"v{n}",
                            "state": {"recorded": None, "error": None}, "current": None,
                            "artifacts": None, "drift": [], "consistent": True, "next": None}
    drift: list[str] = info["drift"]
    try:
        recorded = rd.recorded_version()
    except UsageError as exc:
        info["state"]["error"] = str(exc)
        drift.append(str(exc))
        recorded = None
    info["state"]["recorded"] = None if recorded is None else f"v{recorded}"
    k = 0 if recorded is None else recorded
    info["current"] = f"v{k}"
    if recorded is not None and recorded > n:
        drift.append(f"the state names v{recorded}, beyond the planned final version v{n}")
    for j in rd.versions():
        if j > k and _has_files(rd.vdir(j)):
            drift.append(f"v{j} holds files but the state is at v{k}: work ran ahead of the gate")
    vdir = rd.vdir(k)
    if not _has_files(vdir) and not (k >= 1 and len(_kernels(rd.vdir(k - 1))) == 1):
        drift.append(f"the state names v{k} but {vdir.name}/ is missing or empty and "
                     f"{'no earlier version' if k == 0 else f'v{k - 1}'} has a kernel to start from")
    if len(_kernels(vdir)) > 1:
        drift.append(f"v{k} holds several kernel files ({', '.join(p.name for p in _kernels(vdir))}); keep one")

    final = k == n
    art = _artifacts(vdir, final)
    info["artifacts"] = art
    if drift:
        info["consistent"] = False
        info["next"] = {"step": "repair", "command": None, "then": [],
                        "why": "the run directory does not match the recorded state; look at the drift "
                        "lines, restore or remove the stray files (only the gate writes current_iteration.txt)"}
        return info

    def nxt(step: str, why: str, command: str | None, *then: str) -> dict[str, Any]:
        return {"step": step, "why": why, "command": command, "then": list(then)}

    corr = read_json(vdir / "correctness.json") if "correctness.json" in art["present"] else {}
    if not _has_files(vdir):
        info["next"] = nxt("next", f"the gate passed v{k - 1}; create v{k} from its kernel", f"{kl} next {o}")
    elif "kernel.py / kernel.cu" in art["missing"]:
        info["next"] = nxt("kernel", f"put the one kernel file (kernel.py or kernel.cu) into {vdir}", None)
    elif _needs(art, "correctness"):
        info["next"] = nxt("correctness", f"v{k} has no current correctness result", f"{kl} correctness {o}")
    elif corr.get("result") != "PASS":
        info["next"] = nxt("fix", f"v{k} failed correctness ({corr.get('error') or 'see correctness.md'}); fix the "
                           "kernel, then check it again", f"{kl} correctness {o}")
    elif _needs(art, "profile"):
        info["next"] = nxt("profile", f"v{k} has no current profile", f"{kl} profile {o}")
    elif "kbs_queries.jsonl" in art["missing"] or "kbs_evidence.md" in art["missing"]:
        info["next"] = nxt("kbs", f"query the knowledge base for v{k} and draft kbs_evidence.md",
                           f"{kl} kbs evidence {o}")
    elif TODO in (vdir / "kbs_evidence.md").read_text(encoding="utf-8"):
        info["next"] = nxt("fill-kbs", f"fill the {TODO} parts of {vdir / 'kbs_evidence.md'} (selected evidence, "
                           "decision link)", None, f"{kl} hypothesis {o} ..." if not final else
                           f"{_gate()} {shlex.quote(str(vdir))} --final")
    elif not final and ("hypothesis.txt" in art["missing"]
                        or TODO in (vdir / "hypothesis.txt").read_text(encoding="utf-8")):
        info["next"] = nxt("hypothesis", f"write v{k}'s single next change and its predictions",
                           f"{kl} hypothesis {o} --change '...' --rationale '...' --risk '...' "
                           f"--decision-rule '...' --predict 'duration: -10%'")
    elif not final:
        info["next"] = nxt("gate", f"v{k} is complete; the gate checks it and advances the state to v{k + 1}",
                           f"{_gate()} {shlex.quote(str(vdir))}", f"{kl} next {o}")
    elif not (rd.root / "benchmark.json").exists():
        info["next"] = nxt("final-gate", f"v{k} is the final version; audit v0..v{k}, then benchmark",
                           f"{_gate()} {shlex.quote(str(vdir))} --final", f"{kl} benchmark {o}")
    elif not (rd.root / "final_report.md").exists():
        info["next"] = nxt("report", "render the final report from the sidecars", f"{kl} report {o}")
    else:
        info["next"] = nxt("done", "the loop is complete: read final_report.md", None)
    return info


def format_text(info: dict[str, Any]) -> str:
    lines = [f"run: {info['run']}", f"planned final version: {info['planned_final']}"]
    rec = info["state"]["recorded"]
    lines.append(f"current version: {info['current']}" + ("" if rec else " (no current_iteration.txt yet: before "
                                                            "the first gate)"))
    art = info["artifacts"]
    lines.append(f"present: {', '.join(art['present']) or 'nothing'}")
    lines.append(f"missing: {', '.join(art['missing']) or 'nothing'}")
    lines.append("stale: " + (", ".join(f"{k} ({v})" for k, v in art["stale"].items()) or "nothing"))
    lines.append("drift: " + ("none" if not info["drift"] else ""))
    lines += [f"  - {d}" for d in info["drift"]]
    nxt = info["next"]
    lines.append(f"next step ({nxt['step']}): {nxt['why']}")
    if nxt["command"]:
        lines.append(f"  {nxt['command']}")
    lines += [f"  then: {t}" for t in nxt["then"]]
    return "\n".join(lines)


def run(args) -> int:
    info = collect(args.out)
    print(json.dumps(info, indent=2) if args.json else format_text(info))
    return 0 if info["consistent"] else 1
