"""The bundled example runs stay valid: the final gate audit and status pass on each (no GPU)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

EXAMPLES = sorted(p.parent for p in (REPO / "examples").glob("*/run/run.json"))


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.parent.name)
def example_copy(request, tmp_path):
    dst = tmp_path / request.param.parent.name
    shutil.copytree(request.param, dst)
    return dst


def test_there_are_examples():
    assert len(EXAMPLES) >= 2


def test_final_gate_passes(example_copy):
    n = json.loads((example_copy / "run.json").read_text())["iterations"]
    gate = REPO / "scripts" / "check_iteration_gate.sh"
    proc = subprocess.run(["bash", str(gate), str(example_copy / f"v{n}"), "--final"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed (final audit" in proc.stdout


def test_status_is_consistent(example_copy, helpers_env):
    proc = subprocess.run([sys.executable, str(REPO / "helpers" / "kloop.py"), "status", str(example_copy), "--json"],
                          capture_output=True, text=True, env=helpers_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads(proc.stdout)
    assert status["consistent"] is True and status["drift"] == [], status
    assert status["artifacts"]["missing"] == [] and status["artifacts"]["stale"] == {}
    assert status["next"]["step"] == "done"


def test_report_renders_from_sidecars(example_copy, helpers_env):
    before = (example_copy / "final_report.md").read_text()
    (example_copy / "final_report.md").unlink()
    proc = subprocess.run([sys.executable, str(REPO / "helpers" / "kloop.py"), "report", str(example_copy)],
                          capture_output=True, text=True, env=helpers_env)
    assert proc.returncode == 0, proc.stderr
    after = (example_copy / "final_report.md").read_text()
    # the measured tables are rebuilt identically from the sidecars
    table = before.split("## 3. Versions")[1].split("## 4.")[0]
    assert table in after
