"""rundir.RunDir.kernel_file: the gate's rule for which file is vK's kernel (check 4); `next`, which makes v(K+1)."""

from __future__ import annotations

import pytest
import runfixture as rf
from kernel_loop.common import UsageError
from kernel_loop.rundir import RunDir
from kernel_loop.steps import next_version


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
