"""Adversarial review fixes: checks that could not fail, stale sidecars presented as current,
corrupt sidecars and bad paths that ended in a traceback, and spec defaults.  Each test failed
before its fix."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import runfixture as rf
from conftest import REPO
from kernel_loop import compare as C
from kernel_loop import predictions, provenance
from kernel_loop.common import UsageError, read_json, sha256_file, write_json
from kernel_loop.steps import benchmark as B
from kernel_loop.steps import hypothesis, kbs, profile

KLOOP = [sys.executable, str(REPO / "helpers" / "kloop.py")]


def kloop(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KLOOP, *argv], capture_output=True, text=True, timeout=120)


# --- corrupt sidecars and bad paths: exit 2 with one clear line, no traceback ----------------------
def test_read_json_refuses_a_sidecar_that_is_not_an_object(tmp_path):
    (tmp_path / "ncu.json").write_text("[1, 2]\n")
    with pytest.raises(UsageError, match="not an object"):
        read_json(tmp_path / "ncu.json")


def test_status_on_a_non_object_sidecar_is_a_clean_usage_error(tmp_path):
    root = rf.build_complete(tmp_path / "run with space")
    (root / "v3" / "ncu.json").write_text("[]\n")
    proc = kloop("status", str(root))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "not an object" in proc.stderr


def test_report_refuses_an_incomplete_benchmark_json(tmp_path):
    root = rf.build_complete(tmp_path / "run")
    write_json(root / "benchmark.json", {"schema": 1})
    proc = kloop("report", str(root))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "benchmark.json is incomplete or corrupt" in proc.stderr and "version" in proc.stderr
    assert not (root / "final_report.md").exists()


def test_init_on_an_existing_file_is_a_usage_error(tmp_path):
    root = rf.write_run(tmp_path / "src")
    target = tmp_path / "a file"
    target.write_text("not a run\n")
    proc = kloop("init", str(target), "--kernel", "softmax", "--ref", str(root / "ref.py"), "--impl", "triton",
                 "--baseline", str(root / "v0" / "kernel.py"), "--dims", "M=64,N=128", "--skip-env")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "is a regular file: give a new folder or an existing run directory" in proc.stderr
    assert target.read_text() == "not a run\n"


# --- correctness: a reference that never wrote its output cannot make the check pass ----------------
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_a_reference_output_that_is_still_poison_fails(dtype):
    import torch
    from kernel_loop.tensors import poison_tensor

    exp = torch.empty(4, 5, dtype=getattr(torch, dtype))
    poison_tensor(exp)  # what the reference leaves when it does not write its output
    got = exp.clone()  # and a kernel that does not write either
    rows, _ = C.compare_outputs({"y": got}, {"y": exp}, {"atol": 1e-5, "rtol": 1e-5}, None)
    assert rows[0]["passed"] is False and "poison" in rows[0]["note"]


def test_a_written_reference_output_still_passes():
    import torch

    exp = torch.randn(4, 5, generator=torch.Generator().manual_seed(3))
    exp[0, 0] = float("nan")  # a NaN the reference really computed is matched, not flagged
    rows, _ = C.compare_outputs({"y": exp.clone()}, {"y": exp}, {"atol": 1e-5, "rtol": 1e-5}, None)
    assert rows[0]["passed"] is True and "note" not in rows[0]


# --- stale measurements are never rendered as the current version's ----------------------------------
def _v0_run(tmp_path):
    root = rf.write_run(tmp_path / "run dir")
    rf.write_measurements(root, 0)
    rf.set_state(root, 0)
    return root


def _edit_kernel(root):
    kernel = root / "v0" / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n# edited after it was measured\n")


def test_hypothesis_refuses_measurements_of_another_kernel(tmp_path):
    root = _v0_run(tmp_path)
    rf.write_kbs(root, 0)
    _edit_kernel(root)
    args = argparse.Namespace(out=str(root), change="x", rationale=None, risk=None, decision_rule=None,
                              predict=[], evidence=None, force=False)
    with pytest.raises(UsageError, match="correctness.json was measured on a different kernel.py"):
        hypothesis.run(args)
    assert not (root / "v0" / "hypothesis.txt").exists()


def test_kbs_evidence_refuses_a_profile_of_another_kernel(tmp_path):
    root = _v0_run(tmp_path)
    _edit_kernel(root)
    with pytest.raises(UsageError, match="ncu.json was measured on a different kernel.py"):
        kbs.draft_evidence(kbs.RunDir.open(root), corpus=[])
    assert not (root / "v0" / "kbs_evidence.md").exists()
    assert not (root / "v0" / "kbs_queries.jsonl").exists()


def _profile(root):
    parser = argparse.ArgumentParser()
    profile.register(parser.add_subparsers())
    args = parser.parse_args(["profile", str(root)])
    return args.func(args)


@pytest.mark.parametrize("edit", ["correctness.json", "run.json"])
def test_profile_refuses_a_pass_that_correctness_did_not_write(tmp_path, edit):
    root = _v0_run(tmp_path)
    if edit == "correctness.json":  # a FAIL turned into PASS by hand
        corr = read_json(root / "v0" / "correctness.json")
        write_json(root / "v0" / "correctness.json", dict(corr, result="PASS", error=None, note="edited"))
    else:  # the fixed configuration changed after the check
        cfg = read_json(root / "run.json")
        write_json(root / "run.json", dict(cfg, dims={"M": 16, "N": 16}))
    assert provenance.matches(root / "v0", "kernel.py")
    why = "v0/correctness.json changed after correctness wrote it" if edit == "correctness.json" else \
        "run.json changed after init recorded it"
    with pytest.raises(UsageError, match=why):
        _profile(root)


# --- spec defaults and prediction round trips ---------------------------------------------------------
def test_benchmark_default_baselines_are_eager_and_compile():
    parser = argparse.ArgumentParser()
    B.register(parser.add_subparsers())
    args = parser.parse_args(["benchmark", "out"])
    assert B.parse_baselines(args.baselines) == ["pytorch-eager", "torch-compile"]


def test_minus_zero_prediction_round_trips_and_means_not_up():
    p = predictions.parse_line("duration: -0%")
    assert predictions.parse_line(p["text"]) == p and p["text"] == "duration: -0%"
    up = predictions.score(p, {"duration_us": 10.0}, {"duration_us": 11.0})
    down = predictions.score(p, {"duration_us": 10.0}, {"duration_us": 9.0})
    assert (up["status"], down["status"]) == ("missed", "held")


def test_kernel_hash_helper_names_the_step(tmp_path):
    k = tmp_path / "kernel.py"
    k.write_text("a = 1\n")
    side = tmp_path / "ncu.json"
    provenance.require_same_kernel(side, {"kernel_sha256": sha256_file(k)}, k, "profile")
    with pytest.raises(UsageError, match="run 'profile'"):
        provenance.require_same_kernel(side, {"kernel_sha256": "0" * 64}, k, "profile")
