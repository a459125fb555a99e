"""hypothesis: renders vK/hypothesis.txt in the gate's order from the sidecars, with sidecar and refusals."""

from __future__ import annotations

import json

import pytest
import runfixture as rf
from kernel_loop import prose
from kernel_loop.common import read_json
from kernel_loop.steps import hypothesis


@pytest.fixture
def run0(tmp_path):
    """v0 measured, KBS filled, state v0 (the gate has not passed v0 yet)."""
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.set_state(root, 0)
    return root


def full_args(root, *extra):
    h = rf.HYPOTHESES[0]
    argv = ["hypothesis", str(root), "--change", h["change"], "--rationale", h["rationale"], "--risk", h["risk"],
            "--decision-rule", h["decision_rule"]]
    for p in h["predict"]:
        argv += ["--predict", p]
    return argv + list(extra)


def headings_in_order(text):
    lines = text.splitlines()
    idx = [lines.index(h) for _, h in prose.HEADINGS]
    return idx == sorted(idx)


def test_complete_hypothesis_follows_the_gate_order(run0, capsys):
    assert rf.cli(hypothesis, full_args(run0)) == 0
    path = run0 / "v0" / "hypothesis.txt"
    assert capsys.readouterr().out.strip() == str(path)
    text = path.read_text()
    assert headings_in_order(text)
    assert hypothesis.TODO not in text
    sections = prose.parse_hypothesis_text(text)
    assert all(sections[f] for f, _ in prose.HEADINGS)
    assert sections["version"].startswith("v0: kernel.py (sha256 ")
    cur = sections["current_evidence"]
    assert "memory-bound" in cur and "dram-near-peak: dram_throughput_pct=85.57" in cur
    assert "Event-timed median: 84.90 us; ncu duration: 86.02 us" in cur
    assert "Correctness: PASS" in cur and "3.725e-09" in cur
    # the relative L2 error, not an element-wise max relative error (502 near zero on a passing BatchNorm)
    assert "rel L2 err" in cur and "max rel err" not in cur
    assert sections["expected"].splitlines() == rf.HYPOTHESES[0]["predict"]
    assert "The profile says" in sections["decision_link"]
    assert sections["evidence_used"].splitlines() == ["- occupancy-register-pressure", "- softmax-row-per-program"]


def test_sidecar_holds_the_parsed_predictions_and_fields(run0):
    rf.cli(hypothesis, full_args(run0))
    side = read_json(run0 / "v0" / "hypothesis.json")
    assert side["version"] == "v0" and side["todo"] == []
    assert side["single_change"] == rf.HYPOTHESES[0]["change"]
    assert [(p["metric"], p["op"], p["value"]) for p in side["predictions"]] == [
        ("duration", "rel", -2.0), ("achieved_occupancy_pct", ">=", 70.0), ("registers_per_thread", "<=", 48.0)]
    assert side["current"]["bottleneck"] == "memory-bound"
    assert side["current"]["event_median_us"] == pytest.approx(84.896)
    assert prose.load_hypothesis(run0 / "v0") == side


def test_missing_fields_stay_todo_and_are_listed(run0, capsys):
    rf.write_kbs(run0, 0, filled=False)
    assert rf.cli(hypothesis, ["hypothesis", str(run0)]) == 0
    text = (run0 / "v0" / "hypothesis.txt").read_text()
    assert headings_in_order(text)
    sections = prose.parse_hypothesis_text(text)
    for f in ("decision_link", "single_change", "rationale", "expected", "risk", "evidence_used", "decision_rule"):
        assert hypothesis.TODO in sections[f], f
    assert hypothesis.TODO not in sections["version"] + sections["current_evidence"]
    err = capsys.readouterr().err
    assert "still TODO" in err and "--change" in err and "--predict" in err
    assert len(read_json(run0 / "v0" / "hypothesis.json")["todo"]) == 7


def test_refill_keeps_given_fields_and_force_guards_a_complete_file(run0):
    assert rf.cli(hypothesis, ["hypothesis", str(run0), "--change", "Use 8 warps."]) == 0
    assert rf.cli(hypothesis, ["hypothesis", str(run0), "--rationale", "More warps hide latency.", "--risk",
                               "Longer reductions.", "--decision-rule", "Keep if faster.",
                               "--predict", "duration: -2%"]) == 0
    sections = prose.parse_hypothesis_text((run0 / "v0" / "hypothesis.txt").read_text())
    assert sections["single_change"] == "Use 8 warps."
    assert hypothesis.TODO not in (run0 / "v0" / "hypothesis.txt").read_text()
    before = (run0 / "v0" / "hypothesis.txt").read_text()
    assert rf.cli(hypothesis, ["hypothesis", str(run0), "--change", "other"]) == 2
    assert (run0 / "v0" / "hypothesis.txt").read_text() == before
    assert rf.cli(hypothesis, ["hypothesis", str(run0), "--change", "other", "--force"]) == 0
    assert prose.parse_hypothesis_text((run0 / "v0" / "hypothesis.txt").read_text())["single_change"] == "other"


def test_evidence_ids_must_come_from_the_query_hits(run0):
    md = (run0 / "v0" / "kbs_evidence.md").read_text()
    md = md.replace("## Rejected / Limits", "- `vectorized-global-access` and kbs:invented-page\n\n## Rejected / Limits")
    (run0 / "v0" / "kbs_evidence.md").write_text(md)
    rf.cli(hypothesis, full_args(run0))
    ev = read_json(run0 / "v0" / "hypothesis.json")["evidence"]
    assert ev == ["occupancy-register-pressure", "softmax-row-per-program", "vectorized-global-access"]


def test_an_evidence_id_no_query_returned_is_refused(run0, capsys):
    assert rf.cli(hypothesis, full_args(run0, "--evidence", "dram-bound-streaming", "--evidence", "not-a-hit")) == 2
    assert "'not-a-hit': not among the hits" in capsys.readouterr().err
    assert not (run0 / "v0" / "hypothesis.json").exists()


@pytest.mark.parametrize("bad, msg", [("sm_efficiency: +5%", "unknown metric"), ("duration: faster", "allowed forms")])
def test_bad_predictions_exit_2_and_write_nothing(run0, capsys, bad, msg):
    assert rf.cli(hypothesis, ["hypothesis", str(run0), "--predict", bad]) == 2
    assert msg in capsys.readouterr().err
    assert not (run0 / "v0" / "hypothesis.txt").exists()


def test_final_version_needs_no_hypothesis(tmp_path, capsys):
    root = rf.build_complete(tmp_path / "run")
    assert rf.cli(hypothesis, ["hypothesis", str(root), "--change", "x"]) == 2
    assert "vN needs no hypothesis" in capsys.readouterr().err


def test_needs_the_measurements(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    assert rf.cli(hypothesis, ["hypothesis", str(root)]) == 2
    assert f"run `kernel-loop correctness {root}` first (on v0)" in capsys.readouterr().err


def test_load_rereads_a_hand_edited_text(run0):
    rf.cli(hypothesis, full_args(run0))
    path = run0 / "v0" / "hypothesis.txt"
    text = path.read_text().replace("registers_per_thread: <= 48", "registers_per_thread: <= 44\nnot a prediction")
    path.write_text(text.replace(rf.HYPOTHESES[0]["change"], "Hand-edited change."))
    data = prose.load_hypothesis(run0 / "v0")
    assert data["source"] == "hypothesis.txt"
    assert data["single_change"] == "Hand-edited change."
    assert [p["text"] for p in data["predictions"]][-1] == "registers_per_thread: <= 44"
    assert data["evidence"] == ["occupancy-register-pressure", "softmax-row-per-program"]


def test_query_hits_rejects_a_broken_jsonl(run0):
    with open(run0 / "v0" / "kbs_queries.jsonl", "a") as fh:
        fh.write("{broken\n")
    assert rf.cli(hypothesis, full_args(run0)) == 2
    json.loads((run0 / "v0" / "kbs_queries.jsonl").read_text().splitlines()[0])  # earlier lines untouched


def test_with_several_kernels_each_symptom_names_the_kernel_that_fired_it():
    """A conv + bias-add + Triton epilogue solution: the tags come from three kernels, and the evidence
    must not read as if one kernel had them all."""
    conv = "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize256x64x8_cudnn"
    add = "void at::elementwise_kernel<128, 2, void at::gpu_kernel_impl_nocast<at::CUDAFunctor_add<float>>>(int, T3)"
    ncu = {"bottleneck": "compute-bound", "kernels": [{"name": conv}, {"name": add}, {"name": "_relu_hardswish"}],
           "symptoms": [{"tag": "tensor-cores-unused", "kernel": conv}, {"tag": "long-scoreboard-stalls", "kernel": add},
                        {"tag": "dram-near-peak", "kernel": "_relu_hardswish"}, {"tag": "multi-kernel", "kernel": None}],
           "metrics": {"duration_us": 1309.9}}
    ev = hypothesis.current_evidence(ncu, {"result": "PASS"})
    # by the labels a prediction names them with (inventory.labels of ncu's names)
    assert [s["kernel"] for s in ev["symptoms"]] == [conv, "elementwise_kernel", "_relu_hardswish", None]
    one = dict(ncu, kernels=[{"name": "_relu_hardswish"}],
               symptoms=[{"tag": "dram-near-peak", "kernel": "_relu_hardswish"}])
    assert hypothesis.current_evidence(one, {"result": "PASS"})["symptoms"][0]["kernel"] is None


@pytest.mark.parametrize("flag, value", [("--change", "TBD"), ("--rationale", "n/a"), ("--risk", "none"),
                                         ("--decision-rule", "todo"), ("--risk", "- same as above")])
def test_a_placeholder_field_is_refused_at_once(run0, capsys, flag, value):
    """The gate fails a heading whose words are filler; hypothesis refuses it before writing (issue 44, 13)."""
    argv = full_args(run0)
    argv[argv.index(flag) + 1] = value
    assert rf.cli(hypothesis, argv) == 2
    err = capsys.readouterr().err
    assert f"{flag} {value!r}" in err and "placeholder" in err and len(err.strip().splitlines()) == 1
    assert not (run0 / "v0" / "hypothesis.txt").exists()


def test_the_filler_words_are_the_gates():
    """One rule on both sides: prose.FILLER is the list the gate's check 9 reads."""
    from conftest import REPO

    gate = (REPO / "scripts" / "check_iteration_gate.sh").read_text()
    words = gate.split('nf = split("', 1)[1].split('"', 1)[0].split()
    assert set(words) == set(prose.FILLER)
    assert not prose.has_real_text("TBD, n/a - none") and prose.has_real_text("Use 8 warps.")


def test_predictions_that_cannot_be_compared_are_warned(run0, capsys):
    """Per-instruction stalls, and a metric the next version may not have (issue 44, 7)."""
    argv = full_args(run0, "--predict", "stall_long_scoreboard: -20%", "--predict", "smem_bank_conflicts_pct: <= 1")
    assert rf.cli(hypothesis, argv) == 0
    err = capsys.readouterr().err
    assert "stall_long_scoreboard is per issued instruction" in err
    assert "smem_bank_conflicts_pct" in err and "matters only if the change leaves v(K+1) with no shared memory" in err
    assert rf.cli(hypothesis, full_args(run0, "--force")) == 0
    assert "per issued instruction" not in capsys.readouterr().err
    # an agent's trial wrote '-2' for "falls by at most 2" on its bottleneck metric: said what it means
    argv = full_args(run0, "--force", "--predict", "dram_throughput_pct: -2", "--predict", "duration: -5%")
    assert rf.cli(hypothesis, argv) == 0
    err = capsys.readouterr().err
    assert "falls by at least 2 points" in err and "'dram_throughput_pct: >= N'" in err
    argv = full_args(run0, "--force", "--predict", "dram_throughput_pct: >= 80", "--predict", "duration: -5%")
    assert rf.cli(hypothesis, argv) == 0 and "falls by at least" not in capsys.readouterr().err


def test_predictions_name_kernels_of_a_many_kernel_call(run0, capsys):
    """Schema 2: a kernel is named by its label or a unique part of it; the sidecar stores the label and the
    demangled name, the text lists the kernels with their shares, and the duration prediction must be the call's."""
    rf.write_schema2(run0, 0, rf.BLOCK_V0, 900.0)
    argv = full_args(run0)[:full_args(run0).index("--predict")]
    preds = ["duration: -5%", "attn:registers_per_thread: <= 128", "vectorized_elementwise_kernel:time_us: -50%",
             "achieved_occupancy_pct: >= 20"]
    assert rf.cli(hypothesis, [*argv, *(x for p in preds for x in ("--predict", p))]) == 0
    err = capsys.readouterr().err
    assert ("--predict 'achieved_occupancy_pct: >= 20' is on the focus kernel attn_fwd (ncu.json focus): write "
            "'attn_fwd:achieved_occupancy_pct: >= 20' to say so") in err
    side = read_json(run0 / "v0" / "hypothesis.json")
    assert [(p["kernel"], p.get("kernel_name")) for p in side["predictions"]] == [
        (None, None), ("attn_fwd", "attn_fwd"), ("vectorized_elementwise_kernel", rf.ADD), (None, None)]
    sections = prose.parse_hypothesis_text((run0 / "v0" / "hypothesis.txt").read_text())
    assert sections["expected"].splitlines()[1:3] == ["attn_fwd:registers_per_thread: <= 128",
                                                      "vectorized_elementwise_kernel:time_us: -50%"]
    cur = sections["current_evidence"]
    assert "- attn_fwd: own, 44.4%, focus (metrics without a kernel are its)" in cur
    assert "- vectorized_elementwise_kernel#2: library, 4.4%, not profiled" in cur
    assert "register-spills (on attn_fwd)" in cur and "ncu duration: 900.00 us (sum over the call's kernels)" in cur
    # the text parsed back (no sidecar) gives the same predictions, less the demangled names
    (run0 / "v0" / "hypothesis.json").unlink()
    again = prose.load_hypothesis(run0 / "v0")["predictions"]
    assert [(p["kernel"], p["metric"], p["value"]) for p in again] == [
        (p["kernel"], p["metric"], p["value"]) for p in side["predictions"]]


@pytest.mark.parametrize("bad, msg", [
    ("vectorized:time_us: -5%", "matches 3 labels"),
    ("flash:time_us: -5%", "matches no kernel label of this version: use one of attn_fwd"),
    ("vectorized_elementwise_kernel#2:dram_throughput_pct: <= 5", "was not profiled (outside the ncu budget)"),
])
def test_a_kernel_name_that_does_not_resolve_is_refused_before_anything_is_written(run0, capsys, bad, msg):
    rf.write_schema2(run0, 0, rf.BLOCK_V0, 900.0)
    assert rf.cli(hypothesis, ["hypothesis", str(run0), "--predict", "duration: -5%", "--predict", bad]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
    assert not (run0 / "v0" / "hypothesis.txt").exists()


def test_a_kernel_time_is_not_the_duration_prediction(run0, capsys):
    rf.write_schema2(run0, 0, rf.BLOCK_V0, 900.0)
    assert rf.cli(hypothesis, ["hypothesis", str(run0), "--predict", "attn_fwd:duration: -10%"]) == 2
    assert "no --predict is on duration" in capsys.readouterr().err


@pytest.mark.parametrize("bad, msg", [
    ("duration: >= 0", "cannot fail: duration is never negative"),
    ("duration: <= -5", "cannot hold: duration is never negative"),
    ("dram_throughput_pct: +1e3", "more than 100 points"),
    ("duration: < 99999999", "more than 10x above this version's measured duration of 84.896 us"),
])
def test_a_prediction_that_cannot_fail_or_cannot_hold_is_refused(run0, capsys, bad, msg):
    argv = ["hypothesis", str(run0), "--predict", bad]
    assert rf.cli(hypothesis, argv if bad.startswith("duration") else argv + ["--predict", "duration: -5%"]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
    assert not (run0 / "v0" / "hypothesis.txt").exists()
