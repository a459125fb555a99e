"""``kbs evidence``: the two required queries, their log, and the kbs_evidence.md draft."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import runfixture
from conftest import FIXTURES
from kernel_loop import vocab as symptoms
from kernel_loop.kbs import corpus as kbs_corpus
from kernel_loop.kbs.evidence import EVIDENCE_HITS
from kernel_loop.prose import TODO
from test_kbs import make_corpus, run

HEADINGS = ["# KBS Evidence - v0", "## NCU Facts", "## Queries", "## Selected Evidence",
            "## Rejected / Limits", "## Decision Link"]


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for every level-1 and level-2 heading outside code blocks."""
    out: list[tuple[str, list[str]]] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,2} ", line):
            out.append((line.strip(), []))
        elif out:
            out[-1][1].append(line)
    return [(h, "\n".join(body).strip()) for h, body in out]


def queries_log(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "v0" / "kbs_queries.jsonl").read_text().splitlines()]


def assert_draft_shape(text: str) -> dict[str, str]:
    secs = sections(text)
    assert [h for h, _ in secs] == HEADINGS
    body = dict(secs)
    for heading in HEADINGS[1:3]:
        assert body[heading] and TODO not in body[heading], heading
    assert TODO in body["## Selected Evidence"]
    for heading in HEADINGS[4:]:
        assert body[heading].startswith(TODO), heading
    return body


@pytest.fixture
def measured_run(tmp_path) -> Path:
    """A run dir whose v0 holds the Triton softmax's measured ncu.json (see runfixture)."""
    out = runfixture.write_run(tmp_path / "run")
    runfixture.write_measurements(out, 0)
    return out


def test_evidence_draft_and_log(tmp_path, monkeypatch, capsys, measured_run):
    make_corpus(tmp_path, monkeypatch)
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    stdout = capsys.readouterr().out
    draft = measured_run / "v0" / "kbs_evidence.md"
    assert stdout.splitlines()[0] == str(draft)
    body = assert_draft_shape(draft.read_text())

    ncu = json.loads((measured_run / "v0" / "ncu.json").read_text())
    facts = body["## NCU Facts"]
    assert f"**{ncu['bottleneck']}**" in facts and "NVIDIA H100 80GB HBM3" in facts and "sm90" in facts
    assert f"`dram_throughput_pct` = {ncu['metrics']['dram_throughput_pct']:.2f}" in facts
    for s in ncu["symptoms"]:
        line = next(ln for ln in facts.splitlines() if ln.strip().startswith(f"- `{s['tag']}`"))
        for key, threshold in s["thresholds"].items():
            assert f"`{key}` {threshold}" in line

    log = queries_log(measured_run)
    assert [x["purpose"] for x in log] == ["kernel", "bottleneck", "precedent"]
    kernel_q, bottleneck_q, precedent_q = log
    assert precedent_q["filters"]["kind"] == "pr-note" and precedent_q["filters"]["has_claims"] is True
    assert kernel_q["query"] == "row softmax triton"
    assert kernel_q["filters"] == {"arch": "sm90", "language": "triton", "kernel_type": "softmax",
                                   "exclude_kinds": ["pr-note"]}
    tags = symptoms.by_priority([ncu["bottleneck"]] + [s["tag"] for s in ncu["symptoms"]])
    assert bottleneck_q["filters"] == {"symptoms": tags, "arch": "sm90", "language": "triton",
                                       "kernel_type": "softmax", "exclude_kinds": ["pr-note"]}
    # the three pages that list a fired tag come first; the others only share the architecture
    assert set(bottleneck_q["hits"][:3]) == {"coalesce-loads", "vector-loads", "spill-fix"}
    for q in log:
        assert q["command"] in body["## Queries"]
        for pid in q["hits"]:
            assert f"`{pid}`" in body["## Queries"] and f"- **{pid}**" in body["## Selected Evidence"]


def test_candidates_are_not_selected_until_the_agent_cites_them(tmp_path, monkeypatch, measured_run):
    """hypothesis.py reads the ids cited under Selected Evidence; the draft's candidate list cites none."""
    from kernel_loop.steps import hypothesis

    make_corpus(tmp_path, monkeypatch)
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    draft = measured_run / "v0" / "kbs_evidence.md"
    hits = hypothesis.query_hits(measured_run / "v0")
    assert len(hits) >= 3 and hypothesis.selected_ids(draft.read_text(), hits) == []
    chosen = hits[1]
    text = draft.read_text().replace(TODO, f"kbs:{chosen} explains the measured DRAM throughput", 1)
    assert hypothesis.selected_ids(text, hits) == [chosen]


def test_logged_commands_reproduce_their_hits(tmp_path, monkeypatch, capsys, measured_run):
    make_corpus(tmp_path, monkeypatch)
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    capsys.readouterr()
    for q in queries_log(measured_run):
        argv = shlex.split(q["command"])
        assert argv[0] == "kernel-loop"
        assert run(argv[1:] + ["--limit", str(EVIDENCE_HITS), "--json"], monkeypatch) == 0
        assert [h["id"] for h in json.loads(capsys.readouterr().out)] == q["hits"]


def test_draft_is_rewritten_until_filled_then_protected(tmp_path, monkeypatch, capsys, measured_run):
    make_corpus(tmp_path, monkeypatch)
    draft = measured_run / "v0" / "kbs_evidence.md"
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0  # markers left: redraft
    assert len(queries_log(measured_run)) == 6  # appended, never truncated

    filled = draft.read_text().replace(TODO, "Chosen by the agent")
    draft.write_text(filled)
    capsys.readouterr()
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 2
    assert "--force" in capsys.readouterr().err
    assert draft.read_text() == filled and len(queries_log(measured_run)) == 6

    assert run(["kbs", "evidence", str(measured_run), "--force"], monkeypatch) == 0
    assert TODO in draft.read_text()


def test_a_partly_filled_draft_is_never_redrafted(tmp_path, monkeypatch, capsys, measured_run):
    """One section written by hand, TODO markers still elsewhere: the text must survive, and no query
    is logged twice."""
    make_corpus(tmp_path, monkeypatch)
    draft = measured_run / "v0" / "kbs_evidence.md"
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    text = draft.read_text()
    assert text.count(TODO) >= 2
    partly = text.replace(TODO, "The agent's own reading of the profile.", 1)
    draft.write_text(partly)
    n = len(queries_log(measured_run))
    capsys.readouterr()
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 2
    assert "holds text you wrote" in capsys.readouterr().err
    assert draft.read_text() == partly and len(queries_log(measured_run)) == n


def test_evidence_needs_ncu_json(tmp_path, monkeypatch, capsys):
    make_corpus(tmp_path, monkeypatch)
    out = runfixture.write_run(tmp_path / "run")
    assert run(["kbs", "evidence", str(out)], monkeypatch) == 2
    assert "ncu.json does not exist" in capsys.readouterr().err
    assert not (out / "v0" / "kbs_evidence.md").exists()
    assert not (out / "v0" / "kbs_queries.jsonl").exists()


def test_evidence_on_the_real_h100_softmax_profile(tmp_path, monkeypatch, capsys):
    """ncu.json built by the profiler from the real H100 recording, queried against the bundled corpus."""
    from kernel_loop.profiling import ncu_json

    monkeypatch.delenv(kbs_corpus.ENV_PATH, raising=False)
    raw = (FIXTURES / "ncu" / "softmax_triton_detailed_raw.csv").read_text()
    details = (FIXTURES / "ncu" / "softmax_triton_detailed_details.csv").read_text()
    out = runfixture.write_run(tmp_path / "run")
    ncu = ncu_json.build_profile(raw, details, timing=None, context={"version": "v0"})
    (out / "v0" / "ncu.json").write_text(json.dumps(ncu))

    assert run(["kbs", "evidence", str(out)], monkeypatch) == 0
    printed = capsys.readouterr().out
    draft = out / "v0" / "kbs_evidence.md"
    body = assert_draft_shape(draft.read_text())
    assert ncu["bottleneck"] in body["## NCU Facts"]
    log = queries_log(out)
    assert [x["purpose"] for x in log] == ["kernel", "bottleneck", "precedent"]
    assert all(x["hits"] for x in log), log
    assert log[1]["filters"]["symptoms"] == symptoms.by_priority([ncu["bottleneck"]] + [s["tag"] for s in ncu["symptoms"]])
    assert all(x["filters"]["arch"] == "sm90" for x in log)  # the recording's cc 9.0
    assert log[0]["hits"][0] == "playbook-softmax"  # run.json says: row softmax, triton
    assert "Precedents:" in draft.read_text() and "; merged 20" in draft.read_text()  # PR notes with their numbers
    for s in ncu["symptoms"]:
        assert f"- `{s['tag']}`: measured" in body["## NCU Facts"]
    assert all(pid in printed for x in log for pid in x["hits"])

    draft.write_text(draft.read_text().replace(TODO, "The agent's own reasoning goes here."))
    filled = dict(sections(draft.read_text()))
    assert list(filled) == HEADINGS and all(filled[h] for h in HEADINGS[1:])
    assert run(["kbs", "evidence", str(out)], monkeypatch) == 2


def test_draft_when_no_page_matches(tmp_path, monkeypatch, measured_run):
    empty = tmp_path / "empty-corpus"
    empty.mkdir()
    monkeypatch.setattr(kbs_corpus, "bundled_corpus", lambda: empty)
    monkeypatch.delenv(kbs_corpus.ENV_PATH, raising=False)
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    body = assert_draft_shape((measured_run / "v0" / "kbs_evidence.md").read_text())
    assert body["## Queries"].count("No page matched this query.") == 3
    assert "No candidate page" in body["## Selected Evidence"]
    assert [x["hits"] for x in queries_log(measured_run)] == [[], [], []]


def test_candidate_from_both_queries_gives_each_reason_once(tmp_path, monkeypatch, measured_run):
    make_corpus(tmp_path, monkeypatch)
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    text = (measured_run / "v0" / "kbs_evidence.md").read_text()
    both = [ln for ln in text.splitlines() if "from the kernel and bottleneck queries" in ln]
    assert both, text
    for line in both:
        reasons = line.split("): ", 1)[1].split(" Sources:")[0].rstrip(".").split("; ")
        assert len(reasons) == len(set(reasons)), line
        assert "covers sm90" in reasons, line  # both queries filter on the architecture
    vector = next(ln for ln in both if "**vector-loads**" in ln)
    assert vector.count("covers triton") == 1 and vector.count("lists the measured symptom(s)") == 1


def test_a_run_of_type_any_ranks_by_the_family_its_kernel_name_says(tmp_path, monkeypatch, measured_run):
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache"))
    cfg = json.loads((measured_run / "run.json").read_text())
    cfg.update(kernel="fp8 per-token quant", kernel_type="any")
    (measured_run / "run.json").write_text(json.dumps(cfg))
    if run(["kbs", "evidence", str(measured_run)], monkeypatch) != 0:
        pytest.skip("the run fixture refuses an edited run.json")
    logged = queries_log(measured_run)
    assert all(q["filters"].get("family") == "quant" for q in logged)
    assert all("--family quant" in q["command"] for q in logged)


def test_a_solution_of_several_kernels_gets_a_fusion_query(tmp_path, monkeypatch, measured_run):
    """A call whose time is spread over several kernels: the fusion pages get a query of their own, since
    the pages matching the other symptoms outrank them in the bottleneck query (seen on a conv + bias +
    activation solution, where kernel-fusion and gemm-epilogue-fusion were not among its hits)."""
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache"))
    ncu_path = measured_run / "v0" / "ncu.json"
    ncu = json.loads(ncu_path.read_text())
    # more tags than the bottleneck query takes, multi-kernel among the last (as on a conv + fused-epilogue
    # solution whose cuDNN kernels fired a dozen): the fusion query still runs
    many = ["uncoalesced-global", "smem-bank-conflicts", "wgmma-unused", "compute-near-peak", "small-grid",
            "occupancy-limited-registers", "long-scoreboard-stalls", "low-issue-efficiency", "launch-overhead"]
    ncu["symptoms"] += [{"tag": t, "metrics": {}, "kernel": "k"} for t in many]
    ncu["symptoms"].append({"tag": "multi-kernel", "metrics": {"duration_us": 10.0}, "kernel": None})
    ncu_path.write_text(json.dumps(ncu))
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    bottleneck = [q for q in queries_log(measured_run) if q["purpose"] == "bottleneck"]
    assert "multi-kernel" not in bottleneck[0]["filters"]["symptoms"]  # past the limit there
    extra = [q for q in queries_log(measured_run) if q["purpose"] == "extra"]
    assert len(extra) == 1 and extra[0]["filters"]["symptoms"] == ["multi-kernel"]
    ids = [h["id"] if isinstance(h, dict) else h for h in extra[0]["hits"]]
    assert {"kernel-fusion", "gemm-epilogue-fusion"} & set(ids), ids


def test_a_solution_of_one_kernel_gets_no_fusion_query(tmp_path, monkeypatch, measured_run):
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache"))
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    assert [q["purpose"] for q in queries_log(measured_run)] == ["kernel", "bottleneck", "precedent"]


def test_the_family_of_the_ref_drives_the_queries(tmp_path, monkeypatch, capsys, measured_run):
    """A run whose ref.py is a transposed 3D convolution ranks as conv-transpose, whatever its kernel is called."""
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache"))
    ref = measured_run / "ref.py"
    ref.write_text(ref.read_text() + "\n\nclass _Up(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                   "        self.up = torch.nn.ConvTranspose3d(8, 8, 3, stride=2)\n", encoding="utf-8")
    if run(["kbs", "evidence", str(measured_run)], monkeypatch) != 0:
        pytest.skip("the run fixture refuses an edited ref.py")
    logged = queries_log(measured_run)
    assert all(q["filters"].get("family") == "conv-transpose" for q in logged)
    assert all("--family conv-transpose" in q["command"] for q in logged)
    assert "softmax" in logged[0]["query"]  # the ref's other families join the kernel query's words


def test_a_many_kernel_call_is_drafted_from_its_own_kernels_and_names_library_kernels_to_replace(
        tmp_path, monkeypatch, measured_run):
    """Schema 2 (runfixture.BLOCK_V0): attn_fwd is the version's own kernel; cuBLAS, layer norm and the element-wise
    kernels are the library's.  The bottleneck query takes attn_fwd's class and symptoms, not the layer norm's
    dram-near-peak or the GEMM's wgmma-unused; the facts name the library kernels of 10 % or more of the time."""
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache"))
    runfixture.write_schema2(measured_run, 0, runfixture.BLOCK_V0, 900.0)
    assert run(["kbs", "evidence", str(measured_run)], monkeypatch) == 0
    log = queries_log(measured_run)
    bottleneck = next(q for q in log if q["purpose"] == "bottleneck")
    assert bottleneck["filters"]["symptoms"] == symptoms.by_priority(
        ["latency-bound", "register-spills", "occupancy-limited-registers"]) + ["multi-kernel"]
    assert [q["purpose"] for q in log] == ["kernel", "bottleneck", "precedent", "extra"]
    facts = dict(sections((measured_run / "v0" / "kbs_evidence.md").read_text()))["## NCU Facts"]
    assert "- `attn_fwd`: own, 44.4%, 1 launch(es), 400.00 us; bottleneck latency-bound" in facts
    assert f"- `{runfixture.GEMM}` (33.3%)\n" in facts and "4 kernel(s) given ncu's full sections" in facts
    assert "- `vectorized_layer_norm_kernel` (11.1%): void at::native::" in facts
    assert "`vectorized_elementwise_kernel` (" not in facts  # 6.7 %: below the share worth replacing
    assert "- `register-spills` (on `attn_fwd`, own, 44.4%): measured" in facts
    assert "(on `vectorized_layer_norm_kernel`" not in facts and "`wgmma-unused`" not in facts
    assert "Key metrics (of the focus kernel `attn_fwd`; duration and DRAM bytes are the whole call's sums):" in facts


def test_extend_rewords_an_unfilled_final_decision_and_the_draft_stays_one():
    """vN extended before its Decision Link was filled: the final draft's TODO ("no next change") becomes the
    ordinary one for v(N+1), nothing is kept, and ``kbs evidence`` may still redraft it without --force."""
    from kernel_loop.kbs.evidence import final_decision_todo, is_untouched_draft, mark_draft, reopen_decision

    draft = mark_draft(f"# KBS Evidence - v3\n\n## Rejected / Limits\n\nx\n\n## Decision Link\n\n{final_decision_todo(3)}\n")
    text, kept = reopen_decision(draft, 3)
    assert not kept and is_untouched_draft(text) and "no next change" not in text
    assert text.endswith(f"## Decision Link\n\n{TODO}: state the single change this evidence supports for v4 and how "
                         "hypothesis.txt will test it.\n"), text
