"""``status <out> [--json]``: where the run stands and the exact next command.

For an agent resuming after context loss: the current version (current_iteration.txt,
or v0 before the first gate), the planned final version, which artifacts of the
current version are present, missing or stale (measured.sha256 and the kernel hash
recorded in the sidecars), whether the state has drifted, and the next step.

Every version needs correctness, profile and KBS evidence (the final gate audits vN's
kbs_evidence.md too); v0..v(N-1) also need hypothesis.txt.

The rules are the gate's, not a second copy of them: the kernel file is found by
``rundir.kernel_candidates`` (the gate's check 4), and the state and drift checks come
from one read-only run of the gate itself, ``check_iteration_gate.sh <out>/vK --structural``
(``--final`` added at the planned final version): its run-level ``[FAIL]`` lines (the
state, check 5; files beyond the recorded version, check 6) and its lines about versions
that already passed their gate are drift; its lines about the current version are that
version's open structural problems.  When vK has no files yet (the gate passed v(K-1) and
``next`` has not run), the gate re-checks v(K-1), which judges drift beyond vK.

Drift (exit 1), besides the gate's: a corrupt state file; a state naming a version past
the plan; a state naming a version that has no folder when ``next`` cannot create it (its
predecessor has no kernel); a version with several kernel files.  On drift the next step
is to stop and report it to the user: only the gate writes current_iteration.txt, and
files are not repaired by hand.

JSON: ``{"run", "planned_final", "state": {"recorded", "error"}, "current",
"artifacts": {"present", "missing", "stale": {name: reason}}, "drift": [...],
"consistent", "next": {"step", "why", "command", "then": [...]},
"gate": {"command", "exit", "fails": [...]}}`` (``current`` and ``artifacts`` are null
when the state file is corrupt; ``gate`` is null when there was no version folder to check).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import plan, provenance
from .. import sidecars as sc
from ..common import UsageError, package_dir, read_json, sha256_file
from ..prose import TODO
from ..rundir import RunDir, gate_script, kernel_candidates

MEASURED = {  # artifact -> the step that writes it
    sc.CORRECTNESS_JSON: "correctness", sc.CORRECTNESS_MD: "correctness",
    sc.NCU_JSON: "profile", sc.NCU_SUMMARY_MD: "profile", sc.NCU_DETAILS_MD: "profile",
}
KBS = sc.KBS_FILES
LOOP_ONLY = (sc.HYPOTHESIS_TXT,)  # vN needs no hypothesis
NO_KERNEL = "kernel.py / kernel.cu"
GATE_LOCK_TIMEOUT_S = "5"  # status only reads; a transition gate holds the lock for well under a second
_VERSION_LINE = re.compile(r"^v(0|[1-9][0-9]*): ")


def register(sub) -> None:
    p = sub.add_parser(
        "status",
        help="where the run stands and the next command",
        description="Show the current version, planned final version, which artifacts of the current "
        "version exist / are missing / are stale, whether the state has drifted, and the exact next "
        "command. State and drift are judged by the gate itself (a read-only --structural run).",
        epilog="Exit codes: 0 consistent (the next step is printed), 1 drift (stop and report it to the user), "
               "2 bad usage, or the gate could not run (its lock is held, or it refused its arguments).",
    )
    p.add_argument("out", help="run directory")
    p.add_argument("--json", action="store_true", help="print the same as one JSON object")
    p.set_defaults(func=run)


# --- the commands status prints ---------------------------------------------------------------
def _kloop_path() -> Path | None:
    """helpers/kloop.py next to the package (a source tree or skill folder), else None (installed)."""
    path = package_dir().parent / "kloop.py"
    return path if path.is_file() else None


def _kloop() -> str:
    """How to run this CLI here: this interpreter and kloop.py, or the installed ``kernel-loop``."""
    path = _kloop_path()
    return "kernel-loop" if path is None else f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def _gate() -> str:
    """How to run the gate here: the script of the skill folder, or ``kernel-loop gate`` when installed."""
    return "kernel-loop gate" if _kloop_path() is None else f"bash {shlex.quote(str(gate_script()))}"


# --- asking the gate --------------------------------------------------------------------------
def _ask_gate(vdir: Path, final: bool) -> dict[str, Any]:
    """One read-only gate run on ``vdir``: its command, exit code and [FAIL] lines."""
    argv = ["bash", str(gate_script()), str(vdir), "--structural", *(["--final"] if final else [])]
    env = dict(os.environ, GATE_LOCK_TIMEOUT=GATE_LOCK_TIMEOUT_S)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        raise UsageError(f"the gate did not finish on {vdir} within 120 s: run status again") from None
    fails = [line[len("[FAIL] "):] for line in proc.stdout.splitlines() if line.startswith("[FAIL] ")]
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not fails):
        why = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[0]
        raise UsageError(f"status could not ask the gate about {vdir.name} ({why}); run status again")
    return {"command": shlex.join(argv), "exit": proc.returncode, "fails": fails}


def _gate_target(rd: RunDir, k: int) -> Path | None:
    """The folder to run the gate on: vK, or v(K-1) while vK has no files yet (the moment after the
    gate passed v(K-1), when re-checking it judges drift beyond vK), or None when neither exists."""
    vdir = rd.vdir(k)
    if vdir.is_dir() and any(vdir.iterdir()):
        return vdir
    if k >= 1 and rd.vdir(k - 1).is_dir():
        return rd.vdir(k - 1)
    return vdir if vdir.is_dir() else None


def _split_fails(fails: list[str], k: int) -> tuple[list[str], list[str]]:
    """(drift, problems of vK): run-level lines and lines about other versions are drift."""
    drift, problems = [], []
    for line in fails:
        m = _VERSION_LINE.match(line)
        (problems if m and int(m.group(1)) == k else drift).append(line)
    return drift, problems


# --- artifacts ----------------------------------------------------------------------------------
def _artifacts(vdir: Path, final: bool) -> dict[str, Any]:
    names = [*MEASURED, *KBS, *(() if final else LOOP_ONLY), provenance.FILENAME]
    present = [n for n in names if (vdir / n).exists()]
    missing = [n for n in names if n not in present]
    stale: dict[str, str] = {}
    kernels = kernel_candidates(vdir)
    if len(kernels) == 1:
        present.insert(0, kernels[0].name)
        ksha = sha256_file(kernels[0])
        for side in (sc.CORRECTNESS_JSON, sc.NCU_JSON):
            if (vdir / side).exists():
                recorded = read_json(vdir / side).get("kernel_sha256")
                if recorded and recorded != ksha:
                    stale[side] = f"measured on a different {kernels[0].name}"
    else:
        missing.insert(0, NO_KERNEL)
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


def _kernel_changed(art: dict[str, Any]) -> str | None:
    """The kernel's name when it changed after correctness or profile measured it, else None."""
    kernel = next((n for n in art["present"] if Path(n).suffix in (".py", ".cu") and n not in MEASURED), None)
    if kernel is None:
        return None
    if kernel in art["stale"] or any(why.startswith("measured on a different") for why in art["stale"].values()):
        return kernel
    return None


# --- the report ---------------------------------------------------------------------------------
def _nxt(step: str, why: str, command: str | None, *then: str) -> dict[str, Any]:
    return {"step": step, "why": why, "command": command, "then": list(then)}


def collect(out: str | Path) -> dict[str, Any]:
    rd = RunDir.open(out)
    n = plan.final_version(rd)  # run.json's planned vN, or the version 'finish' made final
    o = shlex.quote(str(rd.root))
    kl = _kloop()
    info: dict[str, Any] = {"run": str(rd.root), "planned_final": f"v{n}",
                            "state": {"recorded": None, "error": None}, "current": None,
                            "artifacts": None, "drift": [], "consistent": True, "next": None, "gate": None}
    drift: list[str] = info["drift"]
    try:
        recorded = rd.recorded_version()
    except UsageError as exc:  # which version is current is unknown: nothing else can be judged
        info["state"]["error"] = str(exc)
        drift.append(str(exc))
        return _stop(info)
    info["state"]["recorded"] = None if recorded is None else f"v{recorded}"
    k = 0 if recorded is None else recorded
    info["current"] = f"v{k}"
    final = k == n
    vdir = rd.vdir(k)
    if recorded is not None and recorded > n:
        drift.append(f"the state names v{recorded}, beyond the planned final version v{n}")

    target = _gate_target(rd, k)
    problems: list[str] = []
    if target is not None:
        gate = _ask_gate(target, final=final and recorded is not None and target == vdir)
        info["gate"] = gate
        gate_drift, problems = _split_fails(gate["fails"], k)
        drift += gate_drift
    has_files = vdir.is_dir() and any(vdir.iterdir())
    if not has_files and not (k >= 1 and len(kernel_candidates(rd.vdir(k - 1))) == 1):
        drift.append(f"the state names v{k} but {vdir.name}/ is missing or empty and "
                     f"{'no earlier version' if k == 0 else f'v{k - 1}'} has a kernel to start from")
    kernels = kernel_candidates(vdir)
    if len(kernels) > 1:
        drift.append(f"v{k} holds several kernel files ({', '.join(p.name for p in kernels)}); keep one")

    art = _artifacts(vdir, final)
    info["artifacts"] = art
    if sc.NCU_JSON in art["present"]:
        info["library_fallback"] = read_json(vdir / sc.NCU_JSON).get("library_fallback")
    if drift:
        return _stop(info)

    corr = read_json(vdir / sc.CORRECTNESS_JSON) if sc.CORRECTNESS_JSON in art["present"] else {}
    changed = _kernel_changed(art)
    gate_cmd = f"{_gate()} {shlex.quote(str(vdir))}" + (" --final" if final else "")
    if not has_files:
        nxt = _nxt("next", f"the gate passed v{k - 1}; create v{k} from its kernel", f"{kl} next {o}")
    elif NO_KERNEL in art["missing"]:
        nxt = _nxt("kernel", f"put the one kernel file (kernel.py or kernel.cu) into {vdir}", None)
    elif changed:
        redo = [f"{kl} profile {o}",
                f"{kl} kbs evidence {o} --force   (then re-fill every {TODO} in {sc.KBS_EVIDENCE} "
                "against the new profile)"]
        if not final:
            redo.append(f"{kl} hypothesis {o} --force --change '...' --rationale '...' --risk '...' "
                        f"--decision-rule '...' --predict '...'   (then re-fill every {TODO} in {sc.HYPOTHESIS_TXT})")
        nxt = _nxt("correctness", f"v{k}'s {changed} changed after it was measured, so its correctness and "
                   "profile are stale: re-measure in this order: correctness, then profile, then redraft "
                   f"kbs_evidence.md{'' if final else ' and hypothesis.txt'} with --force and re-fill "
                   f"{'it' if final else 'both'}", f"{kl} correctness {o}", *redo, gate_cmd)
    elif _needs(art, "correctness"):
        nxt = _nxt("correctness", f"v{k} has no current correctness result", f"{kl} correctness {o}")
    elif corr.get("result") != "PASS":
        nxt = _nxt("fix", f"v{k} failed correctness ({corr.get('error') or 'see correctness.md'}); fix the "
                   "kernel, then check it again", f"{kl} correctness {o}")
    elif _needs(art, "profile"):
        nxt = _nxt("profile", f"v{k} has no current profile", f"{kl} profile {o}")
    elif sc.KBS_QUERIES in art["missing"] or sc.KBS_EVIDENCE in art["missing"]:
        nxt = _nxt("kbs", f"query the knowledge base for v{k} and draft kbs_evidence.md",
                   f"{kl} kbs evidence {o}")
    elif TODO in (vdir / sc.KBS_EVIDENCE).read_text(encoding="utf-8"):
        nxt = _nxt("fill-kbs", f"fill the {TODO} parts of {vdir / sc.KBS_EVIDENCE} (selected evidence, "
                   "decision link)", None, f"{kl} hypothesis {o} ..." if not final else gate_cmd)
    elif not final and (sc.HYPOTHESIS_TXT in art["missing"]
                        or TODO in (vdir / sc.HYPOTHESIS_TXT).read_text(encoding="utf-8")):
        nxt = _nxt("hypothesis", f"write v{k}'s single next change and its predictions",
                   f"{kl} hypothesis {o} --change '...' --rationale '...' --risk '...' "
                   f"--decision-rule '...' --predict 'duration: -10%'")
    elif problems:
        nxt = _nxt("fix", f"the gate's structural checks fail on v{k}: fix what each [FAIL] line names "
                   "(see 'gate' below), then run the gate", None, gate_cmd)
    elif not final:
        nxt = _nxt("gate", f"v{k} is complete; the gate checks it and advances the state to v{k + 1}",
                   gate_cmd, f"{kl} next {o}")
    elif not rd.benchmark_json.exists():
        nxt = _nxt("final-gate", f"v{k} is the final version; audit v0..v{k}, then benchmark",
                   gate_cmd, f"{kl} benchmark {o}")
    elif not rd.final_report_md.exists():
        nxt = _nxt("report", "render the final report from the sidecars", f"{kl} report {o}")
    else:
        nxt = _nxt("done", "the loop is complete: read final_report.md", None)
    info["next"] = nxt
    return info


def _stop(info: dict[str, Any]) -> dict[str, Any]:
    info["consistent"] = False
    info["next"] = _nxt("stop", "the run directory does not match the recorded state: stop and report the drift "
                        "lines to the user, and let the user decide what to do. Do not edit, move or delete files "
                        "yourself to make status pass (only the gate writes current_iteration.txt)", None)
    return info


def format_text(info: dict[str, Any]) -> str:
    lines = [f"run: {info['run']}", f"planned final version: {info['planned_final']}"]
    if info["state"]["error"]:
        lines.append("current version: unknown (the state file current_iteration.txt is corrupt; see drift)")
    elif info["state"]["recorded"] is None:
        lines.append(f"current version: {info['current']} (no current_iteration.txt yet: before the first gate)")
    else:
        lines.append(f"current version: {info['current']}")
    art = info["artifacts"]
    if art is None:
        lines.append("artifacts: not checked (the current version is unknown)")
    else:
        lines.append(f"present: {', '.join(art['present']) or 'nothing'}")
        lines.append(f"missing: {', '.join(art['missing']) or 'nothing'}")
        lines.append("stale: " + (", ".join(f"{k} ({v})" for k, v in art["stale"].items()) or "nothing"))
    if info.get("library_fallback"):
        lines.append(f"note: {info['library_fallback']}")
    lines.append("drift: " + ("none" if not info["drift"] else ""))
    lines += [f"  - {d}" for d in info["drift"]]
    gate = info["gate"]
    if gate is not None:
        lines.append(f"gate (read-only): {gate['command']}: "
                     + ("passed" if not gate["fails"] else f"{len(gate['fails'])} [FAIL] line(s)"))
        lines += [f"  [FAIL] {f}" for f in gate["fails"] if f not in info["drift"]]
        if any(f in info["drift"] for f in gate["fails"]):
            lines.append("  (its other [FAIL] lines are the drift above)")
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
