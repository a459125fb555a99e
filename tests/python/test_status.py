"""status: current version, artifacts, staleness, drift and the next command at every loop stage."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import runfixture as rf
from kernel_loop import rundir
from kernel_loop.common import UsageError, write_json
from kernel_loop.steps import status


def step(root):
    return status.collect(root)["next"]


def test_walks_the_loop_stage_by_stage(tmp_path):
    root = rf.write_run(tmp_path / "run")
    info = status.collect(root)
    assert info["current"] == "v0" and info["state"]["recorded"] is None and info["planned_final"] == "v3"
    assert info["next"]["step"] == "correctness"
    assert info["next"]["command"].endswith(f"helpers/kloop.py correctness {root}")
    assert info["next"]["command"].startswith(f"{shlex.quote(sys.executable)} /")
    rf.write_measurements(root, 0)
    assert step(root)["step"] == "kbs"
    rf.write_kbs(root, 0, filled=False)
    assert step(root)["step"] == "fill-kbs"
    rf.write_kbs(root, 0)
    assert step(root)["step"] == "hypothesis"
    rf.set_state(root, 0)
    rf.write_hypothesis(root, 0)
    nxt = step(root)
    assert nxt["step"] == "gate"
    assert "scripts/check_iteration_gate.sh" in nxt["command"] and nxt["command"].endswith("/v0")
    assert "next" in nxt["then"][0]
    rf.set_state(root, 1)  # the gate passed v0
    assert step(root)["step"] == "next"
    rf.write_kernel(root, 1)
    info = status.collect(root)
    assert info["consistent"] and info["next"]["step"] == "correctness" and info["current"] == "v1"


def test_final_version_then_benchmark_report_done(tmp_path):
    root = rf.build_complete(tmp_path / "run")
    nxt = step(root)
    assert nxt["step"] == "final-gate" and nxt["command"].endswith("/v3 --final")
    assert "benchmark" in nxt["then"][0]
    (root / "benchmark.json").write_text("{}")
    assert step(root)["step"] == "report"
    (root / "final_report.md").write_text("# report\n")
    assert step(root)["step"] == "done"


def test_stale_and_failed_measurements(tmp_path):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    with open(root / "v0" / "kernel.py", "a") as fh:
        fh.write("# tweak\n")
    info = status.collect(root)
    assert "kernel.py" in info["artifacts"]["stale"]
    assert "ncu.json" in info["artifacts"]["stale"]  # measured on a different kernel.py
    assert info["next"]["step"] == "correctness" and info["consistent"]
    rf.write_measurements(root, 0)
    (root / "v0" / "ncu_summary.md").write_text("edited\n")
    assert step(root)["step"] == "profile"
    rf.write_measurements(root, 0)
    corr = json.loads((root / "v0" / "correctness.json").read_text())
    corr.update(result="FAIL", error="max abs err 0.5 above atol")
    write_json(root / "v0" / "correctness.json", corr)
    from kernel_loop import provenance

    provenance.record(root / "v0", ["correctness.json"])
    nxt = step(root)
    assert nxt["step"] == "fix" and "0.5" in nxt["why"]


def test_drift_cases_exit_1(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    rf.write_kernel(root, 1)  # work ran ahead of the gate
    info = status.collect(root)
    assert not info["consistent"] and "state drift: v1 holds kernel.py" in info["drift"][0]
    assert info["next"]["step"] == "stop"
    assert rf.cli(status, ["status", str(root)]) == 1
    assert "drift:" in capsys.readouterr().out

    root2 = rf.write_run(tmp_path / "run2")
    (root2 / "current_iteration.txt").write_text("garbage\n")
    assert "corrupt" in status.collect(root2)["drift"][0]
    rf.set_state(root2, 9)
    assert any("beyond the planned final" in d for d in status.collect(root2)["drift"])
    rf.set_state(root2, 2)  # v2 has no folder and v1 no kernel for next to copy
    assert any("missing or empty" in d for d in status.collect(root2)["drift"])
    (root2 / "v0" / "kernel.cu").write_text("// second kernel\n")
    rf.set_state(root2, 0)
    assert any("several kernel files" in d for d in status.collect(root2)["drift"])


def test_text_and_json_output(tmp_path, capsys):
    root = rf.build_complete(tmp_path / "run")
    assert rf.cli(status, ["status", str(root)]) == 0
    out = capsys.readouterr().out
    assert "current version: v3" in out and "planned final version: v3" in out and "drift: none" in out
    assert "--final" in out
    assert rf.cli(status, ["status", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["consistent"] is True and data["next"]["step"] == "final-gate"
    assert "kernel.py" in data["artifacts"]["present"] and data["artifacts"]["missing"] == []
    assert data == status.collect(root)


def test_agrees_with_the_real_gate(tmp_path):
    try:
        rundir.gate_script()
    except UsageError:
        pytest.skip("scripts/check_iteration_gate.sh is not there yet")
    root = rf.build_with_gate(tmp_path / "run")
    info = status.collect(root)
    assert info["consistent"] and info["state"]["recorded"] == "v3" and info["next"]["step"] == "final-gate"
    cmd = info["next"]["command"].split()
    assert rf.gate(root / "v3", "--final").returncode == 0 and cmd[-1] == "--final"


# --- the gate's rules, asked of the gate -------------------------------------------------------
def _v0_ready_for_gate(root: Path) -> None:
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.set_state(root, 0)
    rf.write_hypothesis(root, 0)


def test_kernel_rule_is_the_gates(tmp_path):
    root = rf.write_run(tmp_path / "run")
    (root / "v0" / "ref.py").write_text("def reference(x):\n    return x\n")  # never a kernel
    (root / "v0" / "helper.py").write_text("ROWS = 4\n")  # kernel.py wins over other .py files
    info = status.collect(root)
    assert info["consistent"], info["drift"]
    assert info["artifacts"]["present"][0] == "kernel.py" and info["next"]["step"] == "correctness"
    (root / "v0" / "kernel.cu").write_text("// a second kernel\n")
    info = status.collect(root)
    assert not info["consistent"]
    assert any("several kernel files (kernel.py, kernel.cu)" in d for d in info["drift"])
    assert any("holds both kernel.py and kernel.cu" in f for f in info["gate"]["fails"])  # the gate agrees


def test_one_read_only_gate_call(tmp_path, monkeypatch):
    root = rf.build_with_gate(tmp_path / "run")
    calls = []
    real_run = subprocess.run

    def counting_run(argv, *a, **kw):
        calls.append(argv)
        return real_run(argv, *a, **kw)

    monkeypatch.setattr(status.subprocess, "run", counting_run)
    before = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))
    info = status.collect(root)
    assert len(calls) == 1 and calls[0][-2:] == ["--structural", "--final"]
    assert calls[0][1] == str(rundir.gate_script()) and calls[0][2] == str(root / "v3")
    assert info["gate"] == {"command": shlex.join(calls[0]), "exit": 0, "fails": []}
    assert sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*")) == before


def test_status_before_the_first_gate_creates_nothing(tmp_path):
    root = rf.write_run(tmp_path / "run")
    _v0_ready_for_gate(root)
    (root / "current_iteration.txt").unlink()
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    info = status.collect(root)
    assert info["consistent"] and info["next"]["step"] == "gate" and info["gate"]["exit"] == 0
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # no state, no lock file


def test_a_passed_version_that_broke_later_is_drift(tmp_path):
    root = rf.build_with_gate(tmp_path / "run")
    (root / "v1" / "ncu_summary.md").unlink()
    info = status.collect(root)
    assert not info["consistent"] and info["next"]["step"] == "stop"
    assert any(d.startswith("v1: missing or empty: ncu_summary.md") for d in info["drift"])
    assert rf.cli(status, ["status", str(root)]) == 1


def test_drift_is_judged_beyond_the_next_version_while_it_is_empty(tmp_path):
    root = rf.write_run(tmp_path / "run")
    _v0_ready_for_gate(root)
    assert rf.gate(root / "v0").returncode == 0  # the state now names v1; v1/ does not exist yet
    assert step(root)["step"] == "next"
    (root / "v1").mkdir()
    assert step(root)["step"] == "next"  # an empty folder is fine
    (root / "v2").mkdir()
    (root / "v2" / "notes.txt").write_text("plans\n")
    info = status.collect(root)
    assert not info["consistent"]
    assert info["drift"] == ["state drift: v2 holds notes.txt but current_iteration.txt is at v1: "
                             "gate the versions in order, or move v2's files aside"]
    assert info["gate"]["command"].endswith(f"{root / 'v0'} --structural")  # re-checks the passed v0


def test_structural_problems_of_the_current_version_come_from_the_gate(tmp_path):
    root = rf.write_run(tmp_path / "run")
    _v0_ready_for_gate(root)
    kbs = root / "v0" / "kbs_evidence.md"
    kbs.write_text(kbs.read_text().replace("## Rejected / Limits", "## Rejected"))
    info = status.collect(root)
    assert info["consistent"]  # work in progress, not drift
    assert info["next"]["step"] == "fix" and "structural" in info["next"]["why"]
    assert info["next"]["then"] == [f"bash {shlex.quote(str(rundir.gate_script()))} {shlex.quote(str(root / 'v0'))}"]
    assert len(info["gate"]["fails"]) == 1 and "kbs_evidence.md lacks '## Rejected / Limits'" in info["gate"]["fails"][0]


def test_a_gate_holding_the_lock_is_a_clean_usage_error(tmp_path, monkeypatch):
    import fcntl

    root = rf.write_run(tmp_path / "run")
    monkeypatch.setattr(status, "GATE_LOCK_TIMEOUT_S", "0")
    with open(root / ".gate.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with pytest.raises(UsageError, match="could not ask the gate.*another gate holds"):
            status.collect(root)


# --- what status tells the agent --------------------------------------------------------------
def test_commands_work_when_installed_without_kloop(tmp_path, monkeypatch):
    root = rf.write_run(tmp_path / "run")
    _v0_ready_for_gate(root)
    nxt = step(root)
    kloop = Path(status.__file__).parents[2] / "kloop.py"
    assert nxt["command"] == f"bash {shlex.quote(str(rundir.gate_script()))} {shlex.quote(str(root / 'v0'))}"
    assert nxt["then"] == [f"{shlex.quote(sys.executable)} {shlex.quote(str(kloop))} next {shlex.quote(str(root))}"]
    monkeypatch.setattr(status, "_kloop_path", lambda: None)
    nxt = step(root)
    assert nxt["command"] == f"kernel-loop gate {shlex.quote(str(root / 'v0'))}"
    assert nxt["then"] == [f"kernel-loop next {shlex.quote(str(root))}"]
    assert "python3" not in json.dumps(status.collect(root))


def test_corrupt_state_is_named_in_the_text(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    (root / "current_iteration.txt").write_text("banana\n")
    assert rf.cli(status, ["status", str(root)]) == 1
    out = capsys.readouterr().out
    assert "no current_iteration.txt yet" not in out
    assert "current version: unknown (the state file current_iteration.txt is corrupt; see drift)" in out
    info = status.collect(root)
    assert info["current"] is None and info["state"]["error"] and info["next"]["step"] == "stop"


def test_drift_says_stop_and_report_never_repair_by_hand(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    rf.write_kernel(root, 1)
    nxt = step(root)
    assert nxt["step"] == "stop" and nxt["command"] is None
    assert "stop and report the drift" in nxt["why"] and "to the user" in nxt["why"]
    assert "restore or remove" not in nxt["why"]
    rf.cli(status, ["status", str(root)])
    assert "stop and report the drift" in capsys.readouterr().out


def test_a_kernel_edited_after_measuring_names_the_whole_redo_sequence(tmp_path):
    root = rf.write_run(tmp_path / "run")
    _v0_ready_for_gate(root)
    with open(root / "v0" / "kernel.py", "a") as fh:
        fh.write("\nEXTRA = 1\n")
    nxt = step(root)
    kl = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(status.__file__).parents[2] / 'kloop.py'))}"
    o = shlex.quote(str(root))
    assert nxt["step"] == "correctness" and nxt["command"] == f"{kl} correctness {o}"
    assert "correctness, then profile" in nxt["why"]
    assert [t.split("   (")[0] for t in nxt["then"][:3]] == [
        f"{kl} profile {o}", f"{kl} kbs evidence {o} --force",
        f"{kl} hypothesis {o} --force --change '...' --rationale '...' --risk '...' "
        "--decision-rule '...' --predict '...'"]
    assert "re-fill" in nxt["then"][1] and "re-fill" in nxt["then"][2]
    assert nxt["then"][3].endswith(shlex.quote(str(root / "v0")))  # then the gate

    final = rf.build_complete(tmp_path / "final")
    with open(final / "v3" / "kernel.py", "a") as fh:
        fh.write("\nEXTRA = 1\n")
    nxt = step(final)
    assert nxt["step"] == "correctness" and len(nxt["then"]) == 3
    assert "kbs evidence" in nxt["then"][1] and "--force" in nxt["then"][1] and nxt["then"][2].endswith("--final")
