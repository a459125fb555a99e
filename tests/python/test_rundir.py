"""rundir.RunDir.kernel_file: the gate's rule for which file is vK's kernel (check 4)."""

from __future__ import annotations

import pytest
import runfixture as rf
from kernel_loop.common import UsageError
from kernel_loop.rundir import RunDir


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
