"""``status <out> [--json]``: where the run stands and the exact next command.

For an agent resuming after context loss: the current version (current_iteration.txt,
or v0 before the first gate), the planned final version, which artifacts of the
current version are present, missing or stale (measured.sha256 and the kernel hash
recorded in the sidecars), whether the state has drifted, and the next step.

Every version needs correctness, profile and KBS evidence (the final gate audits vN's
kbs_evidence.md too); v0..v(N-1) also need hypothesis.txt.

The rules are the gate's, not a second copy of them: the kernel file is found by
``rundir.kernel_candidates`` (the gate's check 4), and every other judgement comes from one
read-only run of the gate itself with all its checks, ``check_iteration_gate.sh <out>/vK
--dry-run`` (``--final`` added at the final version): its run-level ``[FAIL]`` lines (the
records and the key, check 13; the state, check 5; files beyond the recorded version, check 6)
and its lines about versions that already passed their gate are drift; its lines about the
current version are that version's open problems.  So status calls a version ready for its
gate, or the run complete, only when the gate itself passes it.  When vK has no files yet (the
gate passed v(K-1) and ``next`` has not run), the gate re-checks v(K-1), which judges drift
beyond vK.

Drift (exit 1), besides the gate's: a corrupt state file; a state naming a version past
the plan; a state naming a version that has no folder when ``next`` cannot create it (its
predecessor has no kernel); a version with several kernel files.  On drift the next step
is to stop and report it to the user: files are not repaired by hand.  Two kinds of drift
have a command instead: a record key that is missing or not the run's (step ``key``: point
$KERNEL_LOOP_RECORD_KEY at the run's key; any step run before that would sign with a new key),
and a current_iteration.txt that is missing, corrupt or not where the signed gate records put
the run (step ``restore-state``: ``status <out> --restore-state`` writes back what those
records say, under the gate's lock, and nothing else).

The next command is always one this run accepts: never ``profile`` on a run in the CPU test
mode (step ``cpu-mode``), never a re-run of a step whose last attempt failed on the kernel as it
is now (step ``fix``, the command in ``then``), and, when no NVIDIA GPU is visible on this
machine for a GPU run, a note that the command must run where the run's GPU is (never with
KERNEL_LOOP_DEVICE=cpu: a CPU result does not count for a GPU run).  Right after ``next`` (vK's kernel still
v(K-1)'s bytes) the step is ``change``: make the change v(K-1)/hypothesis.txt names.  The commands that need
the run's GPU are also given as SKILL.md writes them for the GPU machine (``gpu_commands``: ``$KL <step>``
and the run directory relative to here), since the run directory may move there as an archive.

JSON: ``{"run", "planned_final", "state": {"recorded", "error", "signed"}, "current",
"artifacts": {"present", "missing", "stale": {name: reason}}, "drift": [...],
"consistent", "next": {"step", "why", "command", "then": [...], "gpu_commands": [...]}, "notes": [...],
"gate": {"command", "exit", "fails": [...]}}`` (``state.signed`` is the version the signed
gate records put the run at, null before the first gate; ``current`` and ``artifacts`` are
null when the state file is corrupt; ``gate`` is null when there was no version folder to check).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import gpustate, plan, provenance, records
from .. import sidecars as sc
from ..common import UsageError, atomic_write_text, package_dir, progress, read_json, sha256_file
from ..prose import TODO, TODO_HINTS, load_hypothesis, todo_headings
from ..rundir import RunDir, gate_script, kernel_candidates, parse_version

MEASURED = {  # artifact -> the step that writes it
    sc.CORRECTNESS_JSON: "correctness", sc.CORRECTNESS_MD: "correctness",
    sc.NCU_JSON: "profile", sc.NCU_SUMMARY_MD: "profile", sc.NCU_DETAILS_MD: "profile",
}
KBS = sc.KBS_FILES
LOOP_ONLY = (sc.HYPOTHESIS_TXT,)  # vN needs no hypothesis
NO_KERNEL = "kernel.py / kernel.cu"
GATE_LOCK_TIMEOUT_S = "5"  # status only reads; a transition gate holds the lock for well under a second
_VERSION_LINE = re.compile(r"^v(0|[1-9][0-9]*): ")
# the gate's check-13 lines about the record key itself (not about a record)
_KEY_LINE = re.compile(r"^(no record key at |the record key |records\.log line [0-9]+ was signed with another key)")
_RECORDS_LINES = ("records.log", "ref.py changed after", "run configuration changed")  # check 13 on the records
GPU_STEPS = ("correctness", "profile", "benchmark")  # the steps whose command needs the run's GPU


def register(sub) -> None:
    p = sub.add_parser(
        "status",
        help="where the run stands and the next command",
        description="Show the current version, planned final version, which artifacts of the current "
        "version exist / are missing / are stale, whether the state has drifted, and the exact next "
        "command. Everything but the artifacts is judged by the gate itself (a read-only --dry-run with "
        "all its checks), so status calls a version ready, or the run complete, only when the gate passes it.",
        epilog="Exit codes: 0 consistent (the next step is printed), 1 drift (stop and report it to the user; "
               "for a missing or damaged current_iteration.txt the next step is --restore-state), 2 bad usage, "
               "or the gate could not run (its lock is held, or it refused its arguments).",
    )
    p.add_argument("out", help="run directory")
    p.add_argument("--json", action="store_true", help="print the same as one JSON object")
    p.add_argument("--restore-state", action="store_true",
                   help="first rebuild a missing, corrupt or hand-edited current_iteration.txt from the signed gate "
                        "records in records.log (the version after the last gate record; v0 before the first gate), "
                        "then report as usual. Verifies every record with the record key; writes nothing else")
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
    """One read-only gate run with every check on ``vdir``: its command, exit code and [FAIL] lines."""
    argv = ["bash", str(gate_script()), str(vdir), "--dry-run", *(["--final"] if final else [])]
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


# --- the signed records ------------------------------------------------------------------------
def _records(rd: RunDir) -> list[records.Record]:
    """records.log as it reads (not verified: the gate verifies); [] when it cannot be read."""
    try:
        return records.read(rd.root, verify=False)
    except UsageError:
        return []  # a broken chain: the gate's check 13 names the line


def _signed_state(recs: list[records.Record]) -> tuple[int | None, records.Record | None]:
    """The version the signed gate records put the run at (one past the last gate record) and that record;
    (None, None) before the first gate."""
    gate = records.latest(recs, "gate")
    if gate is None:
        return None, None
    return parse_version(gate["version"]) + 1, gate


def _failed(recs: list[records.Record], step: str, k: int, kernel_sha: str | None) -> records.Record | None:
    """The last ``step`` record of vK when it failed on the kernel as it is now, else None."""
    rec = records.latest(recs, step, f"v{k}")
    if rec is None or kernel_sha is None or rec.get("kernel") != kernel_sha:
        return None
    return None if rec.get("result") in ("ok", "PASS") else rec


def restore_state(rd: RunDir) -> str:
    """Rebuild current_iteration.txt from the signed gate records (every record verified with the key):
    the version after the last gate record, or v0 when a damaged file exists before the first gate.
    Under the gate's lock; writes that one file or nothing.  Returns what it did."""
    if not (rd.root / records.FILENAME).is_file():
        raise UsageError(f"{rd.root / records.FILENAME} does not exist: without signed gate records the state "
                         "cannot be rebuilt; report it to the user")
    with open(rd.root / records.LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a gate never runs while the state is rewritten
        recs = records.read(rd.root)  # verified: a missing or wrong key, or a forged line, stops here
        if not recs or recs[0].get("step") != "init":
            raise UsageError(f"{rd.root / records.FILENAME} does not start with init's record: the state cannot be "
                             "rebuilt from it; report it to the user")
        want, gate = _signed_state(recs)
        path = rd.state_file
        old = path.read_text(encoding="utf-8", errors="replace").strip() if path.is_file() else None
        if path.exists() and not path.is_file():
            raise UsageError(f"{path} is not a regular file: move it away, then run --restore-state again")
        where = (f"the signed gate record of v{want - 1}, records.log line {gate.line}" if gate
                 else "records.log holds no gate record yet")
        if want is None and old is None:
            return f"current_iteration.txt is absent and no gate has passed yet ({where}): nothing to restore"
        target = f"v{0 if want is None else want}"
        if old == target:
            return f"current_iteration.txt already names {target} ({where}): nothing written"
        atomic_write_text(path, target + "\n")
    was = "was missing" if old is None else f"held {old[:40]!r}"
    return f"current_iteration.txt restored to {target} from {where} (it {was})"


# --- the report ---------------------------------------------------------------------------------
def _nxt(step: str, why: str, command: str | None, *then: str) -> dict[str, Any]:
    return {"step": step, "why": why, "command": command, "then": list(then)}


FLAG_VALUES = {"--predict": "'duration: -10%'", "--evidence": "ID"}  # the placeholder of each flag's value
QUOTED_DOTS = "'...'"


def _one_line(text: str) -> str:
    """A message for a one-line next step: its last non-blank line (a traceback's exception), cut to 240 characters."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= 240 else last[:237] + "..."


def _copied(rd: RunDir, k: int, kernel: Path) -> bool:
    """Whether vK's kernel is still byte-identical to v(K-1)'s (as next copied it: the change is not made yet)."""
    prev = kernel_candidates(rd.vdir(k - 1))
    return len(prev) == 1 and prev[0].name == kernel.name and sha256_file(prev[0]) == sha256_file(kernel)


def _gpu_side(rd: RunDir, nxt: dict[str, Any], kl: str) -> list[str]:
    """The next step's commands that need the run's GPU, as SKILL.md writes them for the machine where the GPU is:
    ``$KL <step> <run>``, the run directory relative to here (where the archive is unpacked alike)."""
    rel = os.path.relpath(rd.root)
    rel = rd.root.name if rel.startswith("..") else rel
    steps = [c[len(kl) + 1:].split(" ", 1)[0] for c in [nxt["command"] or "", *nxt["then"]] if c.startswith(kl + " ")]
    return [f"$KL {s} {shlex.quote(rel)}" for s in dict.fromkeys(steps) if s in GPU_STEPS]


def collect(out: str | Path) -> dict[str, Any]:
    rd = RunDir.open(out)
    n = plan.final_version(rd)  # run.json's planned vN, or the version 'finish' made final
    cfg = rd.config()
    o = shlex.quote(str(rd.root))
    kl = _kloop()
    restore_cmd = f"{kl} status {o} --restore-state"
    recs = _records(rd)
    want, _gate_rec = _signed_state(recs)
    info: dict[str, Any] = {"run": str(rd.root), "planned_final": f"v{n}",
                            "state": {"recorded": None, "error": None, "signed": None if want is None else f"v{want}"},
                            "current": None, "artifacts": None, "drift": [], "consistent": True, "next": None,
                            "notes": [], "gate": None}
    drift: list[str] = info["drift"]
    try:
        recorded, corrupt = rd.recorded_version(), None
    except UsageError as exc:  # which version is current is unknown: only the records can say
        recorded, corrupt = None, str(exc)
        info["state"]["error"] = corrupt
        drift.append(corrupt)
    info["state"]["recorded"] = None if recorded is None else f"v{recorded}"
    k = (want or 0) if corrupt else (0 if recorded is None else recorded)
    final = k == n
    vdir = rd.vdir(k)
    if recorded is not None and recorded > n:
        drift.append(f"the state names v{recorded}, beyond the planned final version v{n}")

    target = _gate_target(rd, k)
    problems: list[str] = []
    if target is not None:
        gate = _ask_gate(target, final=final and target == vdir)
        info["gate"] = gate
        gate_drift, problems = _split_fails(gate["fails"], k)
        drift += [line for line in gate_drift if line not in drift]
    key = [line for line in drift if _KEY_LINE.match(line)]
    if key:
        info["consistent"] = False
        info["next"] = _nxt("key", f"the gate cannot verify records.log with the record key ({key[0]}). Point "
                            "KERNEL_LOOP_RECORD_KEY at the key file this run was signed with (the one KERNEL_LOOP_RECORD_KEY "
                            "named at init, else the ~/.config/kernel-loop/record.key of the user who ran init), "
                            "then run status again; tell the user if it is lost. "
                            "Run no other step first: it would sign its record with a new key, which the gate rejects",
                            None)
        return info
    records_broken = any(line.startswith(_RECORDS_LINES) for line in drift)
    off_state = corrupt is not None or (recorded not in (None, 0) if want is None else recorded != want)
    if recs and not records_broken and off_state:
        return _restore(info, restore_cmd, f"v{want or 0}")
    if corrupt:
        return _stop(info)
    info["current"] = f"v{k}"
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
    ksha = sha256_file(kernels[0]) if len(kernels) == 1 else None
    run_device = "cpu" if cfg.device == "cpu" else f"cuda:{cfg.gpu}"
    changed = _kernel_changed(art)
    gate_cmd = f"{_gate()} {shlex.quote(str(vdir))}" + (" --final" if final else "")
    profile_failed = _failed(recs, "profile", k, ksha)
    if not has_files:
        nxt = _nxt("next", f"the gate passed v{k - 1}; create v{k} from its kernel", f"{kl} next {o}")
    elif NO_KERNEL in art["missing"]:
        nxt = _nxt("kernel", f"put the one kernel file (kernel.py or kernel.cu) into {vdir}", None)
    elif k >= 1 and _copied(rd, k, kernels[0]):
        change = (load_hypothesis(rd.vdir(k - 1)) or {}).get("single_change")
        nxt = _nxt("change", f"v{k}/{kernels[0].name} is still v{k - 1}'s, as next copied it: make the change that "
                   f"v{k - 1}/hypothesis.txt names{f' ({_one_line(change)})' if change else ''}, nothing else, "
                   "then check it", None, f"{kl} correctness {o}")
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
    elif corr.get("device") and corr["device"] != run_device:
        nxt = _nxt("correctness", f"v{k}'s correctness ran on {corr['device']}, but this run measures on {run_device}: "
                   "that result never counts; check it again on the run's device, without KERNEL_LOOP_DEVICE=cpu",
                   f"{kl} correctness {o}")
    elif corr.get("result") != "PASS":
        err = corr.get("error")
        said = f"{_one_line(err)}; the whole message is in v{k}/correctness.md" if err else "see correctness.md"
        nxt = _nxt("fix", f"v{k} failed correctness ({said}); checking the same "
                   "kernel again fails the same way: fix the kernel first, then check it again", None,
                   f"{kl} correctness {o}")
    elif cfg.device == "cpu":
        nxt = _nxt("cpu-mode", f"v{k} passed correctness in the CPU test mode (run.json device cpu), which is all "
                   "such a run measures: profile, the gate and benchmark need a GPU run (init it without "
                   "--device cpu, on a machine with a CUDA GPU)", None)
    elif profile_failed is not None and _needs(art, "profile"):
        reason = _one_line(profile_failed.get("error") or profile_failed.get("reason")
                           or f"result {profile_failed.get('result')}")
        nxt = _nxt("fix", f"the last profile of v{k} failed on the kernel as it is now (records.log line "
                   f"{profile_failed.line}: {reason}); profiling the same bytes again fails the same way. Fix the "
                   "kernel, then re-measure it; if correctness passed on these bytes and the message is about the "
                   "harness rather than the kernel, stop and report it to the user", None,
                   f"{kl} correctness {o}", f"{kl} profile {o}")
    elif _needs(art, "profile"):
        nxt = _nxt("profile", f"v{k} has no current profile", f"{kl} profile {o}")
    elif sc.KBS_QUERIES in art["missing"] or sc.KBS_EVIDENCE in art["missing"]:
        nxt = _nxt("kbs", f"query the knowledge base for v{k} and draft kbs_evidence.md",
                   f"{kl} kbs evidence {o}")
    elif TODO in (vdir / sc.KBS_EVIDENCE).read_text(encoding="utf-8"):
        nxt = _nxt("fill-kbs", f"fill the {TODO} parts of {vdir / sc.KBS_EVIDENCE} (selected evidence, "
                   f"{'limits, why the run ends here' if final else 'decision link'})", None,
                   f"{kl} hypothesis {o} ..." if not final else f"{kl} benchmark {o}")
    elif not final and sc.HYPOTHESIS_TXT in art["missing"]:
        nxt = _nxt("hypothesis", f"write v{k}'s single next change and its predictions",
                   f"{kl} hypothesis {o} --change '...' --rationale '...' --risk '...' "
                   f"--decision-rule '...' --predict 'duration: -10%'")
    elif not final and TODO in (text := (vdir / sc.HYPOTHESIS_TXT).read_text(encoding="utf-8")):
        left = todo_headings(text)  # only the headings still to fill, each with the flag that fills it
        hints = {h: TODO_HINTS.get(h, "redraft it with hypothesis --force") for h in left}
        flags = [hint.split(",")[0] for hint in hints.values() if hint.startswith("--")]
        args = " ".join(f"{f} {FLAG_VALUES.get(f, QUOTED_DOTS)}" for f in flags)
        where = (" under " + ", ".join(f"{h} ({hint})" for h, hint in hints.items()) if left
                 else " outside its headings: remove it")
        nxt = _nxt("hypothesis", f"v{k}/hypothesis.txt still has {TODO}{where}",
                   f"{kl} hypothesis {o} {args}" if flags else None)
    elif problems:
        nxt = _nxt("fix", f"the gate fails on v{k} (status ran it read-only): fix what each [FAIL] line names "
                   "(see 'gate' below), then run the gate", None, gate_cmd)
    elif not final:
        nxt = _nxt("gate", f"v{k} passes every check of the gate (status ran it read-only); run it to record the "
                   f"pass and advance the state to v{k + 1}", gate_cmd, f"{kl} next {o}")
    elif not rd.benchmark_json.exists():
        nxt = _nxt("benchmark", f"v{k} is the final version and the final audit of v0..v{k} passes (status ran "
                   "it read-only; benchmark runs it again before it measures): benchmark the best version "
                   "against the baselines, then render the report", f"{kl} benchmark {o}", f"{kl} report {o}")
    elif not rd.final_report_md.exists():
        nxt = _nxt("report", "render the final report from the sidecars", f"{kl} report {o}")
    else:
        nxt = _nxt("done", "the loop is complete and its final audit passes: read final_report.md", None)
    info["next"] = nxt
    if cfg.device != "cpu":
        nxt["gpu_commands"] = _gpu_side(rd, nxt, kl)
    if cfg.device != "cpu" and nxt["step"] in GPU_STEPS + ("fix",) and gpustate.gpu_visible() is False:
        gpu = (recs[0].get("gpu") if recs and recs[0].get("step") == "init" else None) or "the GPU init measured"
        info["notes"].append(f"no NVIDIA GPU is visible on this machine, and this run measures on {run_device} "
                             f"({gpu}): run the commands where the run's GPU is. KERNEL_LOOP_DEVICE=cpu is no way "
                             "around it: a CPU result never counts for a GPU run")
    return info


def _restore(info: dict[str, Any], command: str, want: str) -> dict[str, Any]:
    info["consistent"] = False
    rec = info["state"]["recorded"]
    have = ("missing" if rec is None and not info["state"]["error"] else
            "corrupt" if info["state"]["error"] else f"at {rec}")
    info["next"] = _nxt("restore-state", f"current_iteration.txt is {have}, but the signed gate records in "
                        f"records.log put the run at {want}: rebuild it with this command (it verifies the records "
                        "and writes only what they say), tell the user it happened, then run status again. Never "
                        "write the file by hand, and never gate v0 again", command)
    return info


def _stop(info: dict[str, Any]) -> dict[str, Any]:
    info["consistent"] = False
    info["next"] = _nxt("stop", "the run directory does not match the recorded state: stop and report the drift "
                        "lines to the user, and let the user decide what to do. Do not edit, move or delete files "
                        "yourself to make status pass (only the gate moves current_iteration.txt forward)", None)
    return info


def format_text(info: dict[str, Any]) -> str:
    lines = [f"run: {info['run']}", f"planned final version: {info['planned_final']}"]
    signed = info["state"].get("signed") or "v0"
    if info["state"]["error"]:
        lines.append("current version: unknown (the state file current_iteration.txt is corrupt; see drift)")
    elif info["current"] is None and info["state"]["recorded"] is None:
        lines.append(f"current version: unknown (current_iteration.txt is missing; the signed gate records say {signed})")
    elif info["current"] is None:
        lines.append(f"current version: unknown (current_iteration.txt names {info['state']['recorded']}; the signed "
                     f"gate records say {signed})")
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
    lines += [f"note: {note}" for note in info.get("notes") or []]
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
    lines += [f"  on the GPU machine: {c}" for c in nxt.get("gpu_commands") or []]
    return "\n".join(lines)


def run(args) -> int:
    if args.restore_state:
        progress(restore_state(RunDir.open(args.out)))
    info = collect(args.out)
    print(json.dumps(info, indent=2) if args.json else format_text(info))
    return 0 if info["consistent"] else 1
