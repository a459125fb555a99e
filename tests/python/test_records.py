"""records.log: the key, signing, the chain, what a forgery looks like to Python and to the bash gate,
and ``extend``, which is recorded there.

Adversarial review fixes: checks that could not fail, stale sidecars presented as current,
corrupt sidecars and bad paths that ended in a traceback, and spec defaults.  Each test failed
before its fix."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import stat
import subprocess
import sys

import pytest
import runfixture as rf
from conftest import REPO
from kernel_loop import compare as C
from kernel_loop import plan, predictions, provenance, records
from kernel_loop.common import UsageError, read_json, sha256_file, write_json
from kernel_loop.rundir import RunDir
from kernel_loop.steps import benchmark as B
from kernel_loop.steps import extend, hypothesis, kbs, profile


def _run(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    (root / "run.json").write_text('{"schema": 1, "kernel": "k", "impl": "triton", "dims": {"N": 8}}\n')
    (root / "ref.py").write_text("def reference(x):\n    return x\n")
    records.append(root, "init", **records.run_hashes(root))
    return root


def test_the_key_is_made_once_private_and_never_inside_a_run(tmp_path, monkeypatch):
    key = tmp_path / "cfg" / "kernel-loop" / "record.key"
    monkeypatch.delenv(records.KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert records.key_path() == key
    first = records.load_key()
    assert len(first) == 32 and records.load_key() == first  # made once, then read
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    monkeypatch.setenv(records.KEY_ENV, str(tmp_path / "run" / "k.key"))
    (tmp_path / "run").mkdir()
    with pytest.raises(UsageError, match="lies inside the run directory"):
        records.load_key(tmp_path / "run")
    (tmp_path / "bad.key").write_text("xyz\n")
    monkeypatch.setenv(records.KEY_ENV, str(tmp_path / "bad.key"))
    with pytest.raises(UsageError, match="not 64 lowercase hex characters"):
        records.load_key()


def test_the_card_init_measured_is_what_the_measuring_steps_hand_their_judge(tmp_path):
    """check_run_files gives the GPU of the run's signed init record: correctness and profile hand it to the judge,
    which refuses another card before it measures (test_judge_gpu.py); "-" (no GPU measured) refuses nothing."""
    root = _run(tmp_path)
    assert records.check_run_files(root, records.read(root)) is None
    (root / "records.log").unlink()
    records.append(root, "init", gpu="NVIDIA H200", **records.run_hashes(root))
    assert records.check_run_files(root, records.read(root)) == "NVIDIA H200"
    msg = records.another_card("NVIDIA H200", "NVIDIA H100 80GB HBM3", "cuda:0")
    assert msg.startswith("this run's GPU is the NVIDIA H200 init measured its peaks on") and "\n" not in msg
    assert "nothing was measured" in msg


def test_a_line_is_chained_and_signed_as_documented(tmp_path):
    root = _run(tmp_path)
    rec = records.append(root, "kbs", "v0", files="kbs_queries.jsonl:" + "a" * 64, hits="x,y")
    lines = (root / "records.log").read_text().splitlines()
    body, _, mac = lines[1].rpartition("\tmac=")
    key = records.load_key()
    assert mac == hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    assert rec["prev"] == hashlib.sha256(lines[0].encode()).hexdigest()
    assert [f.split("=")[0] for f in body.split("\t")][:6] == ["rec", "seq", "prev", "step", "version", "time"]
    assert rec.hits() == ["x", "y"] and records.read(root)[1].files() == {"kbs_queries.jsonl": "a" * 64}


@pytest.mark.parametrize("forgery, why", [
    (lambda ls: [ls[0], ls[1].replace("result=FAIL", "result=PASS"), *ls[2:]], "the signature does not verify"),
    (lambda ls: [ls[0], *ls[2:]], "is not record 2 of the chain"),
    (lambda ls: [ls[0], ls[2], ls[1]], "is not record 2 of the chain"),
    (lambda ls: [*ls, "step=correctness\tresult=PASS"], "is not record 4 of the chain"),
    (lambda ls: [*ls, "just text"], "is not a record"),
])
def test_python_names_every_forgery(tmp_path, forgery, why):
    root = _run(tmp_path)
    records.append(root, "correctness", "v0", result="FAIL")
    records.append(root, "profile", "v0", result="ok")
    log = root / "records.log"
    log.write_text("\n".join(forgery(log.read_text().splitlines())) + "\n")
    with pytest.raises(UsageError, match=why):
        records.read(root)


def test_a_record_signed_with_another_key_is_named(tmp_path, monkeypatch):
    root = _run(tmp_path)
    monkeypatch.setenv(records.KEY_ENV, str(tmp_path / "other.key"))
    records.load_key()
    with pytest.raises(UsageError, match="signed with key .* not yours"):
        records.read(root)


def test_the_bash_gate_verifies_what_python_signed_odd_values_included(tmp_path):
    """Python's hmac and the gate's sha256sum-only HMAC agree, on values with %, backslashes, $ and UTF-8."""
    root = rf.build_with_gate(tmp_path / "run", iterations=1)
    reason = "50% faster — naïve \\n $HOME `x` \\x41 done"
    records.append(root, "benchmark", "v1", note=reason)
    proc = rf.gate(root / "v1", "--final", "--verbose")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(records.read(root))} signed records verify" in proc.stdout


def _extend(root, m):
    return extend.run(argparse.Namespace(out=str(root), iterations=m))


def test_extend_records_the_extension_and_the_loop_goes_on(tmp_path):
    root = rf.build_with_gate(tmp_path / "run", iterations=1)
    assert rf.gate(root / "v1", "--final").returncode == 0
    (root / "benchmark.json").write_text("{}\n")
    with pytest.raises(UsageError, match="not past the run's final version v1"):
        _extend(root, 1)
    run_json = (root / "run.json").read_bytes()
    assert _extend(root, 2) == 0
    assert (root / "run.json").read_bytes() == run_json  # the extension is a record, not a config edit
    assert (root / "before-extend-v1" / "benchmark.json").is_file() and not (root / "benchmark.json").exists()
    last = records.read(root)[-1]
    assert (last["step"], last["from"], last["iterations"]) == ("extend", "1", "2")
    assert plan.final_version(rd := RunDir.open(root)) == 2 and plan.planned_final(rd) == 2
    # v1 is now an ordinary version: the final audit refuses it, its transition gate needs a hypothesis
    assert rf.gate(root / "v1", "--final").returncode == 1
    proc = rf.gate(root / "v1")
    assert proc.returncode == 1 and "hypothesis.txt is missing or empty" in proc.stdout
    evidence = root / "v1" / "kbs_evidence.md"  # its Decision Link was v1's final decision: now v2's change
    assert "TODO(kernel-loop): v1 was the final version" in evidence.read_text()
    evidence.write_text(evidence.read_text().split("## Decision Link\n")[0]
                        + "## Decision Link\nDRAM near its peak -> v2 reads each row once.\n")
    rf.write_hypothesis(root, 1)
    proc = rf.gate(root / "v1")
    assert proc.returncode == 0, proc.stdout
    assert rf.cli(None, ["next", str(root)]) == 0
    rf.write_kernel(root, 2)
    rf.write_measurements(root, 2)
    rf.write_kbs(root, 2)
    proc = rf.gate(root / "v2", "--final")
    assert proc.returncode == 0, proc.stdout
    assert "note: the run was extended: final version v1 -> v2" in proc.stdout
    with pytest.raises(UsageError, match="the run is not at its final version"):
        (root / "current_iteration.txt").write_text("v1\n")
        _extend(root, 3)


def test_extend_keeps_the_final_decision_out_of_the_next_hypothesis(tmp_path, capsys):
    """vN's Decision Link was written for a version with no next change: after extend it is kept in
    before-extend-vN/ and becomes a TODO, so hypothesis does not quote "no further change" as vN's next change."""
    root = rf.build_with_gate(tmp_path / "run", iterations=1)
    evidence = root / "v1" / "kbs_evidence.md"
    head, _, _ = evidence.read_text().partition("## Decision Link\n")
    final = head + "## Decision Link\nFinal version: DRAM near its peak -> no further single change this run.\n"
    evidence.write_text(final)
    assert _extend(root, 2) == 0
    err = capsys.readouterr().err
    assert (root / "before-extend-v1" / "kbs_evidence.md").read_text() == final
    now = evidence.read_text()
    assert now.startswith(head) and "no further single change" not in now, now
    assert "TODO(kernel-loop): v1 was the final version when this Decision Link was written" in now
    assert "before-extend-v1/kbs_evidence.md" in now and "v1/kbs_evidence.md" in err, err
    argv = ["hypothesis", str(root), "--change", "Load each row once into registers and reuse it for the sum",
            "--rationale", "DRAM is near its peak, so fewer bytes are the lever left",
            "--risk", "Register pressure may spill at the largest rows",
            "--decision-rule", "Keep if duration drops by 5% or more, else revert", "--predict", "duration: -10%"]
    assert rf.cli(hypothesis, argv) == 0
    text = (root / "v1" / "hypothesis.txt").read_text()
    assert "no further single change" not in text
    assert "TODO(kernel-loop): fill ## Decision Link in kbs_evidence.md, then re-run hypothesis" in text
    evidence.write_text(head + "## Decision Link\nDRAM near its peak -> kbs:online-softmax -> v2 reads each row once.\n")
    assert rf.cli(hypothesis, argv) == 0
    assert "v2 reads each row once" in (root / "v1" / "hypothesis.txt").read_text()


def test_extend_refuses_a_run_whose_gates_are_not_on_record(tmp_path):
    root = rf.build_complete(tmp_path / "run", iterations=1)
    log = root / "records.log"
    log.write_text("".join(ln + "\n" for ln in log.read_text().splitlines() if "\tstep=gate\t" not in ln))
    with pytest.raises(UsageError):  # the chain no longer holds once a line is cut out
        _extend(root, 2)
    assert os.path.exists(root / "run.json")


def test_a_hand_edited_query_log_is_never_signed_over(tmp_path, monkeypatch):
    root = rf.build_complete(tmp_path / "run", iterations=1)
    q = root / "v1" / "kbs_queries.jsonl"
    q.write_text(q.read_text() + '{"purpose": "bottleneck", "query": "x", "hits": ["i-made-this-up"]}\n')
    monkeypatch.chdir(tmp_path)
    import klcli

    assert klcli.main("kbs", "query", "coalesced loads", "--log", str(root)) == 2  # refused, nothing signed
    assert "i-made-this-up" not in records.latest(records.read(root), "kbs", "v1").hits()


def test_a_query_against_another_corpus_is_marked_and_the_gate_refuses_it(tmp_path):
    root = rf.build_complete(tmp_path / "run", iterations=1)
    corp = tmp_path / "corp"
    corp.mkdir()
    import klcli

    (root / "current_iteration.txt").write_text("v1\n")
    assert klcli.main("kbs", "--corpus", str(corp), "query", "coalesced loads", "--log", str(root)) == 0
    assert records.latest(records.read(root), "kbs", "v1")["corpus"].startswith("extra:")
    proc = rf.gate(root / "v1", "--final")
    assert proc.returncode == 1 and "searched a corpus other than the bundled KBS" in proc.stdout


def test_the_kernel_runs_from_its_hashed_bytes_never_a_planted_cache_nor_a_sibling(tmp_path):
    import py_compile

    from kernel_loop import loader

    d = tmp_path / "v0"
    d.mkdir()
    honest, wrong = "ANSWER = 'honest'\n", "ANSWER = 'forged'\n"  # same size: the pyc header would match
    k = d / "kernel.py"
    k.write_text(honest)
    cache = d / "__pycache__"
    cache.mkdir()
    src = tmp_path / "other.py"
    src.write_text(wrong)
    st = k.stat()
    os.utime(src, (st.st_atime, st.st_mtime))
    import importlib.util
    py_compile.compile(str(src), cfile=str(cache / importlib.util.cache_from_source(str(k)).rsplit("/", 1)[1]))
    assert loader.import_file(k, "kernel").ANSWER == "honest"
    (d / "impl.py").write_text("X = 1\n")
    k2 = d / "kernel2.py"
    k2.write_text("from impl import X\n")
    with pytest.raises(ModuleNotFoundError):
        loader.import_file(k2, "kernel")


@pytest.mark.parametrize("here, refused", [("NVIDIA H100 80GB HBM3", True), ("NVIDIA H200", False)])
def test_the_judge_refuses_a_card_other_than_inits_before_it_reads_anything(tmp_path, monkeypatch, here, refused):
    """The l1norm example's extension ran correctness and profile on an H100 for a run init measured on an H200, and
    only the final gate failed them: the judge (its spec's "card", check_run_files' answer) refuses at its start.  A
    CPU build's torch is told a CUDA device is there, so the check runs here; the GPU test runs the steps."""
    import types

    import torch
    from kernel_loop.config import RunConfig
    from kernel_loop.measure import judge

    for name, fake in (("is_available", lambda: True), ("device_count", lambda: 1), ("set_device", lambda d: None),
                       ("get_device_name", lambda i=None: here)):
        monkeypatch.setattr(torch.cuda, name, fake)
    (tmp_path / "ref.py").write_text("def reference(x):\n    return x\n")
    started = types.SimpleNamespace(deadline=0.0, tmp=None, worker_tmp=str(tmp_path), folder=tmp_path, workers={})
    spec = {"cfg": RunConfig(kernel="k", impl="triton", dims={"N": 8}).to_json(), "device": "cuda:0",
            "run_root": str(tmp_path), "card": "NVIDIA H200"}
    if refused:
        with pytest.raises(UsageError, match="this run's GPU is the NVIDIA H200 init measured its peaks on, and "
                                             "cuda:0 here is an NVIDIA H100 80GB HBM3"):
            judge.Judge(spec, started)
    else:
        assert judge.Judge(spec, started).ref is not None  # the run's card: on to ref.py


# --- adversarial review fixes ---
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
