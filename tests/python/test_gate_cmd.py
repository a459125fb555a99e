"""gate: ``kernel-loop gate <out>/vK ...`` runs the packaged gate script and passes its output and exit
code through unchanged (CPU only)."""

from __future__ import annotations

import subprocess

import klcli
import runfixture as rf
from kernel_loop import cli, rundir


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
