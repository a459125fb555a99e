"""status: current version, artifacts, staleness, drift and the next command at every loop stage."""

from __future__ import annotations

import json

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
    assert info["next"]["command"].startswith("python3 /")
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
    assert not info["consistent"] and "v1 holds files" in info["drift"][0]
    assert info["next"]["step"] == "repair"
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
