"""finish: a recorded early end of the run, and the steps that then treat that version as final; and gate:
``kernel-loop gate <out>/vK ...`` runs the packaged gate script and passes its output and exit code through
unchanged (CPU only)."""

from __future__ import annotations

import subprocess

import klcli
import pytest
import runfixture as rf
from kernel_loop import cli, plan, rundir
from kernel_loop.common import UsageError, read_json
from kernel_loop.rundir import RunDir
from kernel_loop.steps import benchmark as B
from kernel_loop.steps import finish, next_version


def _at_v1(tmp_path, *, filled=True):
    """A 3-iteration run whose v0 passed its gate and whose v1 is measured (state at v1)."""
    root = rf.write_run(tmp_path / "run", iterations=3)
    for k in (0, 1):
        rf.write_kernel(root, k)
        rf.write_measurements(root, k)
        rf.write_kbs(root, k, filled=filled or k == 0)
    rf.set_state(root, 0)
    rf.write_hypothesis(root, 0)
    rf.sign_gate(root, 0)
    rf.set_state(root, 1)
    return root


def test_finish_records_the_version_and_every_step_follows(tmp_path, capsys):
    root = _at_v1(tmp_path)
    assert rf.cli(finish, ["finish", str(root), "--reason", "v1 reaches 97% of the copy peak"]) == 0
    rec = read_json(root / "finish.json")
    assert rec["version"] == "v1" and rec["planned_final"] == "v3" and "copy peak" in rec["reason"]
    rd = RunDir.open(root)
    assert plan.final_version(rd) == 1
    assert rf.cli(finish, ["next", str(root)]) == 2
    assert "finished at v1" in capsys.readouterr().err
    assert rf.cli(finish, ["hypothesis", str(root), "--change", "x"]) == 2
    assert "is the final version" in capsys.readouterr().err
    # finish.json is written once
    assert rf.cli(finish, ["finish", str(root), "--reason", "a second reason for stopping"]) == 2
    assert "already finished at v1" in capsys.readouterr().err


def test_benchmark_audits_the_finished_version(tmp_path, monkeypatch):
    root = _at_v1(tmp_path)
    assert rf.cli(finish, ["finish", str(root), "--reason", "the user asked to stop here"]) == 0
    seen = {}
    monkeypatch.setattr(B, "check_final_gate", lambda rd, n: seen.setdefault("n", n))
    rf.fake_benchmark_children(monkeypatch, B, rf.synthetic_child_result(versions=2))
    assert rf.cli(B, ["benchmark", str(root)]) == 0
    assert seen["n"] == 1


@pytest.mark.parametrize("problem, message", [
    ("no-reason", "--reason needs a real sentence"),
    ("todo", "still has TODO(kernel-loop)"),
    ("stale", "kernel.py changed after correctness passed"),
    ("final", "already the planned final version"),
])
def test_finish_refuses_an_unfinished_or_final_version(tmp_path, capsys, problem, message):
    root = _at_v1(tmp_path, filled=problem != "todo")
    reason = "ok" if problem == "no-reason" else "the kernel is at its roofline"
    if problem == "stale":
        (root / "v1" / "kernel.py").write_text((root / "v1" / "kernel.py").read_text() + "# edited\n")
    if problem == "final":
        rf.set_state(root, 3)
    assert rf.cli(finish, ["finish", str(root), "--reason", reason]) == 2
    assert message in capsys.readouterr().err
    assert not (root / "finish.json").exists()


def test_a_corrupt_finish_file_is_refused(tmp_path):
    root = _at_v1(tmp_path)
    (root / "finish.json").write_text('{"version": "v9"}\n')
    with pytest.raises(UsageError, match="not before the planned final version"):
        plan.final_version(RunDir.open(root))


def test_status_treats_the_finished_version_as_final(tmp_path):
    from kernel_loop.steps import status

    root = _at_v1(tmp_path)
    assert rf.cli(finish, ["finish", str(root), "--reason", "the kernel is at its roofline"]) == 0
    info = status.collect(root)
    assert info["planned_final"] == "v1" and info["consistent"], info
    nxt = str(info["next"])  # the final audit runs on v1 now (this synthetic run is not signed, so it fails)
    assert "/v1 --final" in nxt and info["next"]["step"] in ("fix", "benchmark"), info["next"]


def test_finish_refuses_a_profile_file_edited_or_removed_after_profile(tmp_path, capsys):
    """The signed profile record must hold: an edited or a deleted ncu_summary.md is named."""
    for edit in ("edit", "remove"):
        root = rf.build_with_gate(tmp_path / edit)
        summary = root / "v1" / "ncu_summary.md"
        (rf.set_state(root, 1))
        if edit == "edit":
            summary.write_text(summary.read_text() + "edited\n")
        else:
            summary.unlink()
        assert rf.cli(finish, ["finish", str(root), "--reason", "the kernel reached its roofline here"]) == 2
        assert "v1/ncu_summary.md changed after profile wrote it" in capsys.readouterr().err


# --- gate: the packaged gate script through the CLI --------------------------------------------------
def direct(*args: str) -> subprocess.CompletedProcess:
    """The gate script itself, for comparison."""
    return subprocess.run(["bash", str(rundir.gate_script()), *map(str, args)], capture_output=True, text=True)


def same(a: subprocess.CompletedProcess, b: subprocess.CompletedProcess) -> None:
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


def test_gate_is_a_step():
    assert "gate" in cli.STEPS
    proc = klcli.run("--help")
    assert proc.returncode == 0 and "gate" in proc.stdout


def test_help_shows_the_options_and_the_gates_checks():
    proc = klcli.run("gate", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: kernel-loop gate")
    for flag in ("--final", "--structural", "--verbose"):
        assert flag in proc.stdout
    gate_help = direct("--help").stdout
    assert gate_help and proc.stdout.endswith(gate_help)  # the checks 1-12 and exit codes, verbatim


def test_usage_errors_pass_through_with_exit_2(tmp_path):
    missing = tmp_path / "run" / "v0"
    proc = klcli.run("gate", missing)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "is not a directory" in proc.stderr and "kernel-loop: error" not in proc.stderr
    same(proc, direct(missing))
    bad_name = tmp_path / "run" / "v01"
    bad_name.mkdir(parents=True)
    proc = klcli.run("gate", bad_name, "--structural")
    assert proc.returncode == 2 and "not a version directory name" in proc.stderr
    same(proc, direct(bad_name, "--structural"))


def test_a_real_run_passes_output_and_exit_code_through(tmp_path):
    root = rf.write_run(tmp_path / "run dir")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.set_state(root, 0)
    rf.write_hypothesis(root, 0)
    state = root / "current_iteration.txt"
    state.unlink()

    proc = klcli.run("gate", root / "v0", "--structural")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "gate: v0 passed (structural checks, transition); current_iteration.txt not written\n"
    assert not state.exists()

    proc = klcli.run("gate", root / "v0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ("note: created current_iteration.txt with v0\n"
                           "gate: v0 passed (transition); current_iteration.txt -> v1\n")
    assert state.read_text() == "v1\n"

    proc = klcli.run("gate", root / "v0", "--verbose")  # a re-run of a passed gate writes nothing
    same(proc, direct(root / "v0", "--verbose"))
    assert proc.returncode == 0 and "[PASS] v0: the signed correctness (PASS) and profile records match v0 as it is now" in proc.stdout

    (root / "v0" / "ncu_details.md").unlink()
    proc = klcli.run("gate", root / "v0")
    assert proc.returncode == 1 and "[FAIL] v0: missing or empty: ncu_details.md" in proc.stdout
    same(proc, direct(root / "v0"))
    assert state.read_text() == "v1\n"


def test_in_process_call_returns_the_gates_exit_code(tmp_path, capfd):
    root = rf.write_run(tmp_path / "run")
    assert klcli.main("gate", root / "v0", "--structural") == 1  # v0 has only its kernel
    out = capfd.readouterr().out
    assert "[FAIL] v0: missing or empty: correctness.md" in out and out.endswith("gate: v0 FAILED: 2 checks\n")


# --- the run directory: which file is vK's kernel, next --------------------------------------------------
# rundir.RunDir.kernel_file: the gate's rule for which file is vK's kernel (check 4); `next`, which makes v(K+1).

def test_kernel_file_picks_the_single_kernel(tmp_path):
    root = rf.write_run(tmp_path / "run")
    rd = RunDir.open(root)
    assert rd.kernel_file(0) == root / "v0" / "kernel.py"
    (root / "v0" / "kernel.py").rename(root / "v0" / "softmax.py")
    assert rd.kernel_file(0) == root / "v0" / "softmax.py"  # one other .py besides ref.py


def test_kernel_file_refuses_both_kernel_py_and_kernel_cu(tmp_path):
    root = rf.write_run(tmp_path / "run")
    (root / "v0" / "kernel.cu").write_text('extern "C" void solve() {}\n')
    with pytest.raises(UsageError, match=r"both kernel\.py and kernel\.cu"):
        RunDir.open(root).kernel_file(0)
    try:
        proc = rf.gate(root / "v0")
    except UsageError:
        return  # scripts/check_iteration_gate.sh is not there
    assert proc.returncode != 0 and "holds both kernel.py and kernel.cu" in proc.stdout + proc.stderr


def test_installed_package_carries_the_gate(repo):
    """pip installs helpers/kernel_loop/data/check_iteration_gate.sh, a link to scripts/ in the source tree."""
    packaged = repo / "helpers" / "kernel_loop" / "data" / "check_iteration_gate.sh"
    assert packaged.resolve() == (repo / "scripts" / "check_iteration_gate.sh").resolve()


# --- next: creates v(K+1) from vK's kernel only after the gate advanced the state; never overwrites

def passed_v0(tmp_path):
    """v0 complete with a hypothesis, and the state advanced to v1 as the gate does."""
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.set_state(root, 0)
    rf.write_hypothesis(root, 0)
    rf.set_state(root, 1)
    return root


def test_creates_the_next_version_from_the_kernel(tmp_path, capsys):
    root = passed_v0(tmp_path)
    capsys.readouterr()
    assert rf.cli(next_version, ["next", str(root)]) == 0
    out, err = capsys.readouterr()
    new = root / "v1" / "kernel.py"
    assert out.strip() == str(new)
    assert new.read_bytes() == (root / "v0" / "kernel.py").read_bytes()
    assert sorted(p.name for p in (root / "v1").iterdir()) == ["kernel.py"]
    assert "exactly one change" in err and rf.HYPOTHESES[0]["change"] in err


def test_an_empty_folder_left_by_the_gate_is_fine(tmp_path):
    root = passed_v0(tmp_path)
    (root / "v1").mkdir()
    assert rf.cli(next_version, ["next", str(root)]) == 0


def test_refuses_before_the_first_gate(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    assert rf.cli(next_version, ["next", str(root)]) == 2
    assert "run the gate on v0 first" in capsys.readouterr().err
    rf.set_state(root, 0)
    assert rf.cli(next_version, ["next", str(root)]) == 2
    assert "not passed v0" in capsys.readouterr().err
    assert not (root / "v1").exists()


def test_refuses_when_the_next_version_holds_anything(tmp_path, capsys):
    root = passed_v0(tmp_path)
    (root / "v1").mkdir()
    (root / "v1" / "notes.txt").write_text("mine")
    assert rf.cli(next_version, ["next", str(root)]) == 2
    assert "already holds files (notes.txt)" in capsys.readouterr().err
    assert not (root / "v1" / "kernel.py").exists()
    assert (root / "v1" / "notes.txt").read_text() == "mine"


def test_refuses_past_the_final_version_and_without_a_predecessor_kernel(tmp_path, capsys):
    root = passed_v0(tmp_path)
    rf.set_state(root, 4)  # iterations = 3
    assert rf.cli(next_version, ["next", str(root)]) == 2
    assert "beyond the planned final version v3" in capsys.readouterr().err
    rf.set_state(root, 3)  # v2 does not exist
    assert rf.cli(next_version, ["next", str(root)]) == 2
    assert "v2 has no kernel" in capsys.readouterr().err
    (root / "current_iteration.txt").write_text("banana\n")
    assert rf.cli(next_version, ["next", str(root)]) == 2
    assert "corrupt" in capsys.readouterr().err
