"""The manifests between a kernel's process and the checker (file transport, CPU): round trips and refusals."""

from __future__ import annotations

import json

import pytest
from kernel_loop import handoff

torch = pytest.importorskip("torch")


def test_tensors_round_trip_by_file_with_their_dtype_shape_and_values(tmp_path):
    outs = {"y": torch.randn(3, 5), "b": torch.rand(4) > 0.5, "h": torch.randn(2, 3).to(torch.bfloat16).t()}
    ins = {"x": torch.arange(12, dtype=torch.int64).reshape(3, 4)}
    handoff.publish(tmp_path, 0, "0:0", outputs={**outs, "scalar": 3}, inputs=ins)
    doc = handoff.wait_manifest(tmp_path, 0, 1.0)
    assert doc["tag"] == "0:0" and doc["values"] == {"scalar": 3}
    for name, t in outs.items():
        got = handoff.open_tensor(tmp_path, doc["outputs"][name])
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t)
    assert torch.equal(handoff.open_tensor(tmp_path, doc["inputs"]["x"]), ins["x"])
    assert doc["outputs"]["y"]["range"][1] == 60  # the storage's bytes, for the alias check


def test_a_manifest_is_plain_json_and_its_file_names_stay_in_the_folder(tmp_path):
    handoff.publish(tmp_path, 0, "t", outputs={"y": torch.ones(2)})
    doc = json.loads((tmp_path / "0.json").read_text())  # JSON, never a pickle
    doc["outputs"]["y"]["file"] = "../../etc/passwd"
    with pytest.raises(ValueError, match="passwd, which is not a file"):  # looked up inside the folder only
        handoff.open_tensor(tmp_path, doc["outputs"]["y"])
    with pytest.raises(ValueError, match="unknown dtype"):
        handoff.open_tensor(tmp_path, dict(doc["outputs"]["y"], dtype="os.system"))


def test_the_checker_stops_waiting_when_the_kernel_process_is_done(tmp_path):
    handoff.mark_done(tmp_path)
    with pytest.raises(handoff.KernelEnded):
        handoff.wait_manifest(tmp_path, 0, 5.0)
    with pytest.raises(RuntimeError, match="never read check 3"):
        handoff.wait_ack(tmp_path, 3, 5.0, alive=lambda: False)


class _FakeChild:
    """A child whose process sleeps ``seconds`` and then 'writes' ``result``."""

    def __init__(self, seconds: float, result: dict | None):
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
        self.result, self.killed = result, False

    def kill(self):
        self.killed = True
        self.proc.kill()
        self.proc.wait()

    def wait(self, timeout):
        from kernel_loop.runner import ChildOutcome

        rc = self.proc.wait(timeout)
        return ChildOutcome(None if self.killed else self.result, rc, False, 0.0, "")


def _fake_pair(monkeypatch, kernel_s, checker_s, checker_result):
    from kernel_loop import runner

    made = {}

    def start(mode, spec, prefix=None, env=None):
        made[mode] = _FakeChild(checker_s, checker_result) if mode == "check" else _FakeChild(kernel_s, {"ok": True})
        return made[mode]

    monkeypatch.setattr(runner, "start_child", start)
    return made


def test_a_checker_that_judged_everything_does_not_stop_a_kernel_still_timing(monkeypatch):
    """The checker ends after the last check; the kernel's process then times its A/B runs: it must finish."""
    from kernel_loop import runner

    made = _fake_pair(monkeypatch, kernel_s=1.5, checker_s=0.0, checker_result={"verdicts": {}, "error": None})
    both = runner.run_checked("benchmark", {}, [], 30)
    assert not made["benchmark"].killed and both.kernel.result == {"ok": True} and both.checker_failure() is None
    assert both.stopped_by is None


def test_a_checker_that_failed_stops_the_kernel_and_is_named(monkeypatch):
    from kernel_loop import runner

    made = _fake_pair(monkeypatch, kernel_s=30, checker_s=0.0, checker_result={"error": "reference crashed"})
    both = runner.run_checked("benchmark", {}, [], 60)
    assert made["benchmark"].killed and both.checker_failure() == "the checker failed: reference crashed"
    assert both.stopped_by == "checker" and both.kernel_failure() == "the checker failed: reference crashed"
    from kernel_loop.common import MeasuredFailure

    with pytest.raises(MeasuredFailure, match="the benchmark child was stopped: the checker failed: reference crashed"):
        both.checked_kernel("the benchmark child")
