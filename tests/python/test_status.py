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
    assert rf.gate(root / "v0").returncode == 0  # the gate passed v0 and signed it
    assert step(root)["step"] == "next"
    rf.write_kernel(root, 1)
    info = status.collect(root)
    assert info["consistent"] and info["next"]["step"] == "correctness" and info["current"] == "v1"


def test_final_version_then_benchmark_report_done(tmp_path):
    root = rf.build_complete(tmp_path / "run")
    nxt = step(root)  # the final audit passes (status ran it), so the next step is benchmark
    assert nxt["step"] == "benchmark" and nxt["command"].endswith(f"benchmark {root}")
    assert "final audit of v0..v3 passes" in nxt["why"] and nxt["then"][0].endswith(f"report {root}")
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
    rf.set_state(root2, 9)  # no gate has passed: a hand-written state, rebuilt from the records
    info = status.collect(root2)
    assert any("beyond the planned final" in d for d in info["drift"]) and info["next"]["step"] == "restore-state"
    root3 = rf.build_with_gate(tmp_path / "run3", iterations=2)
    rf.set_state(root3, 2)
    for f in (root3 / "v1").iterdir():  # v1 passed its gate, then lost its files
        f.unlink()
    (root3 / "v2").rename(tmp_path / "v2-elsewhere")
    info = status.collect(root3)
    assert not info["consistent"] and info["next"]["step"] == "stop"
    assert any("missing or empty" in d for d in info["drift"])
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
    assert data["consistent"] is True and data["next"]["step"] == "benchmark"
    assert "kernel.py" in data["artifacts"]["present"] and data["artifacts"]["missing"] == []
    assert data == status.collect(root)


def test_agrees_with_the_real_gate(tmp_path):
    try:
        rundir.gate_script()
    except UsageError:
        pytest.skip("scripts/check_iteration_gate.sh is not there yet")
    root = rf.build_with_gate(tmp_path / "run")
    info = status.collect(root)
    assert info["consistent"] and info["state"]["recorded"] == "v3" and info["next"]["step"] == "benchmark"
    assert info["gate"]["command"].endswith("/v3 --dry-run --final") and info["gate"]["exit"] == 0
    assert rf.gate(root / "v3", "--final").returncode == 0


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
    assert len(calls) == 1 and calls[0][-2:] == ["--dry-run", "--final"]
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
    assert info["drift"] == ["state drift: v2 holds notes.txt but current_iteration.txt is at v1, where the signed "
                             "gate records put the run: v2 was started before v1 passed its gate; stop and report "
                             "it to the user, who decides what happens to those files"]
    assert "move" not in info["drift"][0] and "in order" not in info["drift"][0]
    assert info["gate"]["command"].endswith(f"{root / 'v0'} --dry-run")  # re-checks the passed v0


def test_structural_problems_of_the_current_version_come_from_the_gate(tmp_path):
    root = rf.write_run(tmp_path / "run")
    _v0_ready_for_gate(root)
    kbs = root / "v0" / "kbs_evidence.md"
    kbs.write_text(kbs.read_text().replace("## Rejected / Limits", "## Rejected"))
    info = status.collect(root)
    assert info["consistent"]  # work in progress, not drift
    assert info["next"]["step"] == "fix" and "the gate fails on v0" in info["next"]["why"]
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
    assert info["current"] is None and info["state"]["error"] and info["next"]["step"] == "restore-state"
    assert info["next"]["command"].endswith(f"status {root} --restore-state")


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


# --- status judges with every check of the gate, and names a command this run accepts ------------------
def _benchmarked(root: Path) -> Path:
    (root / "benchmark.json").write_text("{}")
    (root / "final_report.md").write_text("# report\n")
    return root


def test_never_complete_while_the_final_gate_fails(tmp_path, monkeypatch):
    root = _benchmarked(rf.build_with_gate(tmp_path / "run"))
    assert step(root)["step"] == "done"
    kbs = root / "v3" / "kbs_evidence.md"
    kbs.write_text(kbs.read_text().replace("## Decision Link\n", "## Decision Link\nTBD\n\n## Notes\n", 1)
                   .replace("Final version: DRAM is near its peak, so fewer bytes are the only remaining lever.", ""))
    nxt = step(root)  # a content check (9) the structural checks never ran
    assert nxt["step"] == "fix" and "complete" not in nxt["why"]
    assert any("empty section" in f for f in status.collect(root)["gate"]["fails"])
    for case in ("hypothesis", "key"):
        other = _benchmarked(rf.build_with_gate(tmp_path / case))
        if case == "hypothesis":  # a passed version's frozen decision changed: drift
            with open(other / "v1" / "hypothesis.txt", "a") as fh:
                fh.write("one more line\n")
        else:
            monkeypatch.setenv("KERNEL_LOOP_RECORD_KEY", str(tmp_path / "absent.key"))
        info = status.collect(other)
        assert info["next"]["step"] not in ("done", "benchmark", "report") and not info["consistent"], info
        assert rf.gate(other / "v3", "--final").returncode == 1
        monkeypatch.undo()


def test_a_version_that_fails_check_14_is_not_called_ready_for_its_gate(tmp_path):
    root = rf.write_run(tmp_path / "run")
    _v0_ready_for_gate(root)
    hyp = root / "v0" / "hypothesis.txt"
    hyp.write_text(hyp.read_text().replace("- softmax-row-per-program", "- no-such-page"))
    nxt = step(root)
    assert nxt["step"] == "fix" and nxt["command"] is None
    assert any("no-such-page, which no query logged for v0 returned" in f for f in status.collect(root)["gate"]["fails"])


def test_a_missing_key_is_its_own_step_and_names_the_key(tmp_path, monkeypatch):
    root = rf.build_with_gate(tmp_path / "run")
    monkeypatch.setenv("KERNEL_LOOP_RECORD_KEY", str(tmp_path / "absent.key"))
    info = status.collect(root)
    assert info["next"]["step"] == "key" and info["next"]["command"] is None and not info["consistent"]
    assert "KERNEL_LOOP_RECORD_KEY" in info["next"]["why"] and "new key" in info["next"]["why"]
    fails = info["gate"]["fails"]
    assert len(fails) == 1 and fails[0].startswith(f"no record key at {tmp_path / 'absent.key'}: point "
                                                   "KERNEL_LOOP_RECORD_KEY at the key file this run was made with")
    assert "a new key cannot sign an existing run's records" in fails[0] and "create it" not in fails[0]
    assert not (tmp_path / "absent.key").exists()  # status never makes a key


def test_a_deleted_state_is_restored_from_the_signed_gate_records(tmp_path, capsys):
    root = rf.build_with_gate(tmp_path / "run")
    (root / "current_iteration.txt").unlink()
    info = status.collect(root)
    assert info["next"]["step"] == "restore-state" and not info["consistent"]
    assert info["state"]["signed"] == "v3" and info["next"]["command"].endswith(f"status {root} --restore-state")
    assert "move" not in json.dumps(info["next"]) and "in order" not in json.dumps(info["next"])
    assert rf.cli(status, ["status", str(root)]) == 1
    assert "current version: unknown (current_iteration.txt is missing; the signed gate records say v3)" in \
        capsys.readouterr().out
    proc = rf.gate(root / "v0")  # the gate never writes a state behind the signed gate records
    assert proc.returncode == 1 and not (root / "current_iteration.txt").exists()
    assert "--restore-state" in proc.stdout
    assert rf.cli(status, ["status", str(root), "--restore-state"]) == 0
    out, err = capsys.readouterr()
    assert "current_iteration.txt restored to v3 from the signed gate record of v2" in err and "(it was missing)" in err
    assert (root / "current_iteration.txt").read_text() == "v3\n" and "next step (benchmark)" in out
    assert rf.cli(status, ["status", str(root), "--restore-state"]) == 0
    assert "already names v3" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["v1\n", "banana\n"])
def test_a_damaged_state_is_restored_and_a_run_without_records_is_refused(tmp_path, capsys, text):
    root = rf.build_with_gate(tmp_path / "run", iterations=2)
    (root / "current_iteration.txt").write_text(text)
    assert step(root)["step"] == "restore-state"
    assert rf.cli(status, ["status", str(root), "--restore-state"]) == 0
    assert (root / "current_iteration.txt").read_text() == "v2\n"
    assert f"(it held {text.strip()!r})" in capsys.readouterr().err
    (root / "records.log").unlink()
    assert rf.cli(status, ["status", str(root), "--restore-state"]) == 2
    assert "records.log does not exist: without signed gate records" in capsys.readouterr().err


def test_restore_state_verifies_the_records_first(tmp_path, monkeypatch, capsys):
    root = rf.build_with_gate(tmp_path / "run", iterations=1)
    (root / "current_iteration.txt").unlink()
    monkeypatch.setenv("KERNEL_LOOP_RECORD_KEY", str(tmp_path / "absent.key"))
    assert rf.cli(status, ["status", str(root), "--restore-state"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("kernel-loop: error:")]
    assert len(err) == 1 and "no record key at" in err[0] and "point KERNEL_LOOP_RECORD_KEY at the key file this run " \
        "was made with" in err[0] and "a new key cannot sign an existing run's records" in err[0]
    assert "on 'kernel-loop init'" not in err[0]
    assert not (root / "current_iteration.txt").exists()


def test_before_the_first_gate_restore_writes_nothing_or_v0(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    assert rf.cli(status, ["status", str(root), "--restore-state"]) == 0
    assert "nothing to restore" in capsys.readouterr().err and not (root / "current_iteration.txt").exists()
    rf.set_state(root, 2)  # no gate has passed: a hand-written state
    assert step(root)["step"] == "restore-state"
    assert rf.cli(status, ["status", str(root), "--restore-state"]) == 0
    assert (root / "current_iteration.txt").read_text() == "v0\n"


def _cpu_run(root: Path) -> Path:
    """A run in the CPU test mode (run.json device cpu), init's record signed over that run.json."""
    from kernel_loop import records

    rf.write_run(root)
    cfg = json.loads((root / "run.json").read_text())
    write_json(root / "run.json", dict(cfg, device="cpu"))
    (root / "records.log").unlink()
    records.append(root, "init", iterations="3", device="cpu", gpu="-", **records.run_hashes(root), files="")
    return root


def test_a_cpu_run_is_never_sent_to_profile(tmp_path):
    root = _cpu_run(tmp_path / "run")
    assert step(root)["step"] == "correctness"
    rf.write_measurements(root, 0)
    nxt = step(root)
    assert nxt["step"] == "cpu-mode" and nxt["command"] is None and "profile" not in (nxt["command"] or "")
    assert "GPU run" in nxt["why"] and status.collect(root)["consistent"]


@pytest.mark.parametrize("argv", [["kbs", "evidence", "{}"], ["hypothesis", "{}"],
                                  ["finish", "{}", "--reason", "stopping here for a test"], ["report", "{}"]],
                         ids=["kbs-evidence", "hypothesis", "finish", "report"])
def test_the_steps_after_correctness_name_the_cpu_mode_not_profile(tmp_path, capsys, argv):
    root = _cpu_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    for name in ("ncu.json", "ncu_summary.md", "ncu_details.md"):
        (root / "v0" / name).unlink(missing_ok=True)
    assert rf.cli(status, [a.format(root) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cpu test mode (run.json device cpu)" in err[0] and "GPU run" in err[0], err
    assert "profile first" not in err[0]


def test_a_failed_step_is_not_recommended_again_on_the_same_kernel(tmp_path):
    from kernel_loop import records
    from kernel_loop.common import sha256_file

    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    corr = json.loads((root / "v0" / "correctness.json").read_text())
    write_json(root / "v0" / "correctness.json", dict(corr, result="FAIL", error="out: 12 of 4096 outside tolerance"))
    from kernel_loop import provenance

    provenance.record(root / "v0", ["correctness.json"])
    nxt = step(root)
    assert nxt["step"] == "fix" and nxt["command"] is None and nxt["then"][0].endswith(f"correctness {root}")
    # the profile of a kernel whose correctness passed failed after timing: no "run profile" again
    root = rf.write_run(tmp_path / "run2")
    rf.write_measurements(root, 0)
    for name in ("ncu.json", "ncu_summary.md", "ncu_details.md"):
        (root / "v0" / name).unlink()
    assert step(root)["step"] == "profile"
    records.append(root, "profile", "v0", result="FAIL", device="cuda:0", gpu="NVIDIA H100 80GB HBM3",
                   kernel=sha256_file(root / "v0" / "kernel.py"), **records.run_hashes(root),
                   error="the kernel is wrong with fresh inputs after the timed calls")
    nxt = step(root)
    assert nxt["step"] == "fix" and nxt["command"] is None and "fresh inputs after the timed calls" in nxt["why"]
    assert "report it to the user" in nxt["why"]
    with open(root / "v0" / "kernel.py", "a") as fh:  # a changed kernel may be profiled again
        fh.write("\nEXTRA = 1\n")
    assert step(root)["step"] == "correctness"


def test_a_cpu_result_on_a_gpu_run_and_a_machine_without_a_gpu(tmp_path, monkeypatch):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    corr = json.loads((root / "v0" / "correctness.json").read_text())
    write_json(root / "v0" / "correctness.json", dict(corr, device="cpu"))
    from kernel_loop import provenance

    provenance.record(root / "v0", ["correctness.json"])
    nxt = step(root)
    assert nxt["step"] == "correctness" and "ran on cpu, but this run measures on cuda:0" in nxt["why"]
    assert "without KERNEL_LOOP_DEVICE=cpu" in nxt["why"]
    monkeypatch.setattr(status.gpustate, "gpu_visible", lambda: False)
    (note,) = status.collect(root)["notes"]
    assert "no NVIDIA GPU is visible" in note and "NVIDIA H100 80GB HBM3" in note and "never counts" in note
    monkeypatch.setattr(status.gpustate, "gpu_visible", lambda: True)
    assert status.collect(root)["notes"] == []


# --- issue 44: what status says right after next, with one TODO left, and a traceback ---------------
def _v1_after_next(tmp_path):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.set_state(root, 0)
    rf.write_hypothesis(root, 0)
    assert rf.gate(root / "v0").returncode == 0
    (root / "v1").mkdir()
    (root / "v1" / "kernel.py").write_bytes((root / "v0" / "kernel.py").read_bytes())  # what next does
    return root


def test_right_after_next_the_step_is_the_change_not_correctness(tmp_path):
    root = _v1_after_next(tmp_path)
    nxt = step(root)
    assert nxt["step"] == "change" and nxt["command"] is None
    assert "v0/hypothesis.txt" in nxt["why"] and rf.HYPOTHESES[0]["change"] in nxt["why"]
    assert nxt["then"][0].endswith(f"correctness {root}")
    rf.write_kernel(root, 1)  # the change made: now correctness
    assert step(root)["step"] == "correctness"


def test_one_todo_left_in_the_hypothesis_names_that_heading_alone(tmp_path):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.set_state(root, 0)
    h = rf.HYPOTHESES[0]
    from kernel_loop.steps import hypothesis

    assert rf.cli(hypothesis, ["hypothesis", str(root), "--change", h["change"], "--rationale", h["rationale"],
                               "--decision-rule", h["decision_rule"], "--predict", "duration: -2%"]) == 0
    nxt = step(root)
    assert nxt["step"] == "hypothesis" and "Risk:" in nxt["why"]
    assert nxt["command"].endswith(f"hypothesis {root} --risk '...'")
    assert "--change" not in nxt["command"] and "--predict" not in nxt["command"]


def test_a_traceback_stays_out_of_the_one_line_next_step(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    trace = ("Traceback (most recent call last):\n  File \"kernel.py\", line 9, in run_kernel\n    y = f(x)\n"
             "  File \"kernel.py\", line 4, in f\n    return x[9]\n  File \"torch/_tensor.py\", line 1, in x\n"
             "    ...\nIndexError: index 9 is out of bounds for dimension 0 with size 4")
    corr = json.loads((root / "v0" / "correctness.json").read_text())
    write_json(root / "v0" / "correctness.json", dict(corr, result="FAIL", error=trace))
    from kernel_loop import provenance

    provenance.record(root / "v0", ["correctness.json"])
    nxt = step(root)
    assert nxt["step"] == "fix" and "\n" not in nxt["why"]
    assert "IndexError: index 9 is out of bounds" in nxt["why"] and "correctness.md" in nxt["why"]
    assert "Traceback" not in nxt["why"]


def test_gpu_side_commands_are_printed_in_skill_md_form(tmp_path, monkeypatch, capsys):
    """The run moved to a GPU machine as an archive: its commands there use $KL and the relative run path."""
    monkeypatch.chdir(tmp_path)
    root = rf.write_run(tmp_path / "my run")
    info = status.collect(root)
    assert info["next"]["gpu_commands"] == ["$KL correctness 'my run'"]
    assert rf.cli(status, ["status", str(root)]) == 0
    out = capsys.readouterr().out
    assert "\n  on the GPU machine: $KL correctness 'my run'\n" in out
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    assert "gpu_commands" not in step(root) or not step(root)["gpu_commands"]  # kbs needs no GPU
