"""report: renders final_report.md (and the chart) from the sidecars only; N/A vs unknown; refusals.
benchmark.json here comes from a SYNTHETIC child result (runfixture.synthetic_child_result)."""

from __future__ import annotations

import sys

import pytest
import runfixture as rf
from kernel_loop.common import read_json, write_json
from kernel_loop.steps import benchmark, hypothesis, report


def finished_run(tmp_path):
    root = rf.build_complete(tmp_path / "run")
    res = rf.synthetic_child_result()
    bench = benchmark.finish(res, version="v3", selection="best",
                             timing={"method": "cuda_event", "warmup": 10, "trials": 40, "discard_first": 0,
                                     "l2_flush": True, "order": "rounds"},
                             tolerance={"atol": 1e-5, "rtol": 1e-5}, env=read_json(root / "env.json"))
    benchmark.write_outputs(root, bench)
    return root


def render(root):
    assert rf.cli(report, ["report", str(root)]) == 0
    return (root / "final_report.md").read_text()


def test_refuses_before_benchmark(tmp_path, capsys):
    root = rf.build_complete(tmp_path / "run")
    assert rf.cli(report, ["report", str(root)]) == 2
    assert f"run `kernel-loop benchmark {root}` first" in capsys.readouterr().err
    assert not (root / "final_report.md").exists()


def test_full_report(tmp_path):
    root = finished_run(tmp_path)
    md = render(root)
    heads = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert heads == ["## 1. Summary", "## 2. Environment and fixed configuration", "## 3. Versions",
                     "## 4. Transitions", "## 5. KBS evidence used", "## 6. Benchmark",
                     "## 7. Remaining opportunities", "## 8. Discussion"]
    bench = read_json(root / "benchmark.json")
    assert f"Speedup over pytorch-eager: **{bench['speedups']['pytorch-eager']:.2f}x**" in md
    assert "| GPU | NVIDIA H100 80GB HBM3 |" in md and "| Dims | M=8192, N=4096 |" in md
    assert "| v0 | 84.90 | 1.000 | 85.57 | 22.46 | 53.03 | 55 | memory-bound | PASS |" in md
    assert "| v3 | 82.40 | 1.030 |" in md
    # scorecards: v0 -> v1 all held, v1 -> v2 one of three
    assert "| `duration: -2%` | 84.90 | 83.05 | -2.17% | held |" in md
    assert "| `dram_throughput_pct: >= 95` | 87.31 | 86.75 | N/A | missed |" in md
    assert "Predictions held: 3 of 3." in md and "Predictions held: 1 of 3." in md
    assert md.count("**faster**") == 2 and md.count("**slower**") == 1
    assert "Single change: Raise num_warps from 8 to 16." in md
    assert "- v2: `l2-eviction-hints`; `dram-bound-streaming`" in md
    assert "`dram-near-peak`: DRAM bandwidth is close to its peak" in md
    assert "of the measured copy bandwidth" in md
    assert "![Time per version with baselines](final_report.png)" in md
    assert (root / "final_report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "TODO(kernel-loop)" in md.split("## 8. Discussion")[1]


def test_tolerance_row_shows_the_applied_dtype_default(tmp_path):
    from kernel_loop.compare import resolve_tolerance

    root = finished_run(tmp_path)
    assert "| Tolerance | atol 1.0e-05, rtol 1.0e-05 (source cli) |" in render(root)  # no per-output record
    tol = {"atol": None, "rtol": None, "by": {"atol": None, "rtol": None}, "source": "dtype-default"}
    write_json(root / "run.json", dict(read_json(root / "run.json"), tolerance=tol))
    bench = read_json(root / "benchmark.json")
    bench["tolerance_applied"] = {"y": resolve_tolerance(tol, None, None, "float32")}
    write_json(root / "benchmark.json", bench)
    _signed_as_benchmark(root)
    assert "| Tolerance | atol 1e-4, rtol 1e-3, rel L2 <= 1e-5 (dtype default for float32) |" in render(root)


def test_null_metrics_are_na_and_missing_files_unknown(tmp_path):
    root = finished_run(tmp_path)
    ncu = read_json(root / "v1" / "ncu.json")
    ncu["metrics"].update(achieved_occupancy_pct=None, registers_per_thread=None)
    write_json(root / "v1" / "ncu.json", ncu)
    (root / "v2" / "ncu.json").unlink()
    (root / "env.json").unlink()
    md = render(root)
    assert "| v1 | 83.05 | 1.022 | 87.31 | 22.92 | N/A | N/A | memory-bound | PASS |" in md
    assert "| v2 | unknown | unknown | unknown | unknown | unknown | unknown | unknown | PASS |" in md
    assert "| `achieved_occupancy_pct: >= 70` | 53.03 | N/A | N/A | unknown (no measured value for the next version) |" in md
    assert "| GPU | unknown |" in md


def test_falls_back_to_the_hypothesis_text(tmp_path):
    root = finished_run(tmp_path)
    (root / "v0" / "hypothesis.json").unlink()
    (root / "v1" / "hypothesis.json").unlink()
    (root / "v1" / "hypothesis.txt").unlink()
    md = render(root)
    assert "| `registers_per_thread: <= 48` | 55 | 40 | N/A | held |" in md
    assert "Hypothesis: unknown (v1 has no hypothesis.txt or hypothesis.json)" in md


def test_chart_skipped_without_matplotlib(tmp_path, monkeypatch):
    root = finished_run(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    md = render(root)
    assert "the chart was skipped because matplotlib is not installed" in md
    assert not (root / "final_report.png").exists()


def test_a_skipped_chart_leaves_no_earlier_chart_behind(tmp_path, monkeypatch, capsys):
    """The earlier report's chart showed the earlier numbers: it goes, and nothing names it as this report's."""
    root = finished_run(tmp_path)
    (root / "final_report.png").write_bytes(b"\x89PNG an earlier chart")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    md = render(root)
    out, err = capsys.readouterr()
    assert "chart was skipped" in md and "final_report.png)" not in md
    assert not (root / "final_report.png").exists()
    assert "removed the earlier final_report.png" in err and "final_report.png" not in out


def test_a_chart_drawn_from_the_same_numbers_is_kept_without_matplotlib(tmp_path, monkeypatch, capsys):
    """Drawn on the GPU machine, the report re-rendered where matplotlib is missing: the chart shows these very
    numbers, so it stays; a chart drawn from other numbers goes."""
    pytest.importorskip("matplotlib")
    root = finished_run(tmp_path)
    render(root)
    png = root / "final_report.png"
    drawn = png.read_bytes()
    from kernel_loop.steps import report

    assert report.png_description(png).startswith(report.CHART_TAG)
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "matplotlib", None)
        md = render(root)
        assert png.read_bytes() == drawn and "final_report.png)" in md and "chart was skipped" not in md
        assert "kept final_report.png" in capsys.readouterr().err
        tag = report.png_description(png).encode("latin-1")  # a chart of other numbers: another digest
        png.write_bytes(drawn.replace(tag, tag[:-32] + b"0" * 32))
        md = render(root)
        assert not png.exists() and "chart was skipped" in md


def test_kbs_titles_come_from_the_kbs_module(tmp_path, monkeypatch):
    from kernel_loop.kbs import search

    root = finished_run(tmp_path)
    asked: list[str] = []

    def fake_get(pid):
        asked.append(pid)
        return {"title": rf.KBS_TITLES[pid]} if pid != "dram-bound-streaming" else None

    monkeypatch.setattr(search, "get", fake_get)
    md = render(root)
    assert "l2-eviction-hints" in asked
    assert "`l2-eviction-hints` (L2 eviction-priority hints); `dram-bound-streaming`\n" in md


def test_a_filled_discussion_survives_a_re_render(tmp_path):
    root = finished_run(tmp_path)
    md = render(root)
    md = md.split("## 8. Discussion")[0] + "## 8. Discussion\nMore warps helped until 16.\n"
    (root / "final_report.md").write_text(md)
    again = render(root)
    assert again.rstrip().endswith("More warps helped until 16.")
    assert "TODO(kernel-loop)" not in again.split("## 8. Discussion")[1]


def _signed_as_benchmark(root):
    """Sign the edited benchmark.json as a benchmark run would have written it (the test stands in for one)."""
    from kernel_loop import records

    records.append(root, "benchmark", "v3", files=records.files_field(root, ["benchmark.json", "benchmark.md"]))


def test_a_benchmark_json_edited_after_the_benchmark_is_refused(tmp_path, capsys):
    root = finished_run(tmp_path)
    bench = read_json(root / "benchmark.json")
    bench["speedups"] = {k: v * 10 for k, v in bench["speedups"].items()}
    write_json(root / "benchmark.json", bench)
    assert rf.cli(report, ["report", str(root)]) == 2
    assert "benchmark.json changed after kernel-loop benchmark wrote it" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["benchmark_rows", "ab"])
def test_missing_benchmark_parts(tmp_path, missing):
    root = finished_run(tmp_path)
    bench = read_json(root / "benchmark.json")
    if missing == "ab":
        bench["ab"] = []
    else:
        bench["rows"] = [r for r in bench["rows"] if r["name"] != "solution"]
        bench["speedups"] = {}
    write_json(root / "benchmark.json", bench)
    _signed_as_benchmark(root)
    md = render(root)
    if missing == "ab":
        assert md.count("Same-run A/B: N/A (not in benchmark.json)") == 3
    else:
        assert "median N/A us" in md and "No baseline was available and correct" in md


def test_report_warns_when_a_measured_kernel_changed_afterwards(tmp_path, capsys):
    """A kernel edited after it was measured: the report says so at the top instead of passing its numbers off as current."""


    run_dir = tmp_path / "run"
    from kernel_loop.steps.demo import unpack_example

    unpack_example("transpose-cuda", run_dir)
    kernel = run_dir / "v2" / "kernel.cu"
    kernel.write_text(kernel.read_text() + "\n// edited after measuring\n")
    assert rf.cli(report, ["report", str(run_dir)]) == 0
    assert "v2/kernel.cu (changed after it was measured)" in capsys.readouterr().err
    summary = (run_dir / "final_report.md").read_text().split("## 2.")[0]
    assert "Warning: measured files changed after they were measured" in summary
    assert "v2/kernel.cu (changed after it was measured)" in summary


def test_each_table_says_which_measurement_it_shows_and_booleans_read_yes_no(tmp_path):
    md = render(finished_run(tmp_path))
    assert "Times here are the loop's own measurement" in md
    assert "Medians from one `benchmark` run" in md and "read from the same rounds" in md
    assert "| yes / yes |" in md and "True" not in md


def test_the_benchmark_sentence_of_an_older_benchmark_keeps_apart_from_the_next(tmp_path):
    """A benchmark.json without rounds (an older run, as the bundled l1norm example's): its sentence ran into the
    sandbox's ("...imports no kernel.The kernels' worker ..."), seen re-rendering that example."""
    root = rf.build_complete(tmp_path / "run")
    bench = benchmark.finish(rf.synthetic_child_result(), version="v3", selection="best",
                             timing={"method": "cuda_event", "warmup": 10, "trials": 40, "discard_first": 0,
                                     "l2_flush": True}, tolerance=None, env=read_json(root / "env.json"))
    benchmark.write_outputs(root, bench)
    md = render(root)
    assert "imports no kernel.\nThe kernels' worker" in md and "kernel.The" not in md


def test_speedups_over_the_baselines_come_first_and_a_slow_v0_is_flagged():
    from kernel_loop.steps.report import ordered_speedups

    assert [n for n, _ in ordered_speedups({"torch-compile": 1.1, "zeta": 2.0, "pytorch-eager": 1.3})] == \
        ["pytorch-eager", "torch-compile", "zeta"]
    rows = {"v0": {"stats_us": {"median": 300.0}}, "pytorch-eager": {"stats_us": {"median": 100.0}}}
    assert "v0 is 3.0x slower than PyTorch eager" in benchmark.slow_v0(rows)
    rows["v0"]["stats_us"]["median"] = 150.0
    assert benchmark.slow_v0(rows) is None


def test_an_ncu_rule_names_its_kernel_short(tmp_path):
    """A CUTLASS kernel's name is a page of template arguments: the rule's line names the function only."""
    root = finished_run(tmp_path)
    last = root / "v3" / "ncu.json"
    ncu = read_json(last)
    long_name = ("void device_kernel<GemmUniversal<tuple<int, int, int, int>, CollectiveMma<MainloopSm90TmaGmma"
                 "WarpSpecialized<4, tuple<C<1>, C<1>, C<1>>, KernelTmaWarpSpecializedCooperative>>>>(Params)")
    ncu["kernels"][0]["name"] = long_name
    ncu["kernels"][0]["rules"] = [{"section": "MemoryWorkloadAnalysis", "rule": "MemoryL2Compression", "type": "OPT",
                                   "text": "...", "est_speedup_pct": 19.8}]
    write_json(last, ncu)
    rf.provenance.record(root / "v3", ["ncu.json"])
    md = render(root)
    assert "- ncu rule MemoryL2Compression (device_kernel): estimated speedup 19.8 %" in md
    assert "CollectiveMma" not in md.split("## 7. Remaining opportunities")[1]


def _flags(text, head):
    """The bullet lines of a markdown section (or of the report's 'Flag for review' lines)."""
    if head is None:
        return [ln.removeprefix("- Flag for review: ") for ln in text.splitlines()
                if ln.startswith("- Flag for review: ")]
    body = text.split(head)[1].split("\n## ")[0]
    return [ln[2:] for ln in body.splitlines() if ln.startswith("- ") and ln != "- none"]


def test_the_report_flags_what_benchmark_md_flags(tmp_path):
    """A v0 slower than eager was flagged in the report and not in benchmark.md (issue 44, 3)."""
    root = rf.build_complete(tmp_path / "run")
    res = rf.synthetic_child_result()
    v0 = next(it for it in res["items"] if it["name"] == "v0")
    v0["samples_us"] = [x * 3 for x in v0["samples_us"]]
    bench = benchmark.finish(res, version="v3", selection="explicit", timing={"method": "cuda_event", "warmup": 10,
                             "trials": 40, "discard_first": 0, "l2_flush": True}, tolerance=None,
                             env=read_json(root / "env.json"))
    benchmark.write_outputs(root, bench)
    md = render(root)
    flags = _flags((root / "benchmark.md").read_text(), "## Flags")
    assert any("slower than PyTorch eager" in f for f in flags)
    assert _flags(md, None) == flags


def test_remaining_opportunities_speak_of_the_version_the_report_names(tmp_path):
    """The best version is v1: its profile's symptoms and rules, not the final version's (issue 44, 2)."""
    root = rf.build_complete(tmp_path / "run")
    bench = benchmark.finish(rf.synthetic_child_result(), version="v1", selection="explicit",
                             timing={"method": "cuda_event", "warmup": 10, "trials": 40, "discard_first": 0,
                                     "l2_flush": True}, tolerance=None, env=read_json(root / "env.json"))
    benchmark.write_outputs(root, bench)
    ncu = read_json(root / "v3" / "ncu.json")
    ncu["kernels"][0]["rules"] = [{"section": "S", "rule": "OnlyInV3", "type": "OPT", "text": ".", "est_speedup_pct": 9.0}]
    write_json(root / "v3" / "ncu.json", ncu)
    rf.provenance.record(root / "v3", ["ncu.json"])
    section = render(root).split("## 7. Remaining opportunities")[1].split("## 8.")[0]
    v1 = rf.version_metrics(1)["dram_throughput_pct"]
    v3 = rf.version_metrics(3)["dram_throughput_pct"]
    assert v1 != v3 and f"dram_throughput_pct {v1:.2f}" in section and f"{v3:.2f}" not in section
    assert "v1" in section.splitlines()[1] and "OnlyInV3" not in section


def test_a_missing_requirement_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """report removed the earlier chart, then refused for jinja2 (issue 44, 12): now it refuses first."""
    root = finished_run(tmp_path)
    (root / "final_report.png").write_bytes(b"\x89PNG an earlier chart")
    (root / "final_report.md").write_text("# an earlier report\n")
    monkeypatch.setitem(sys.modules, "jinja2", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert rf.cli(report, ["report", str(root)]) == 2
    err = capsys.readouterr().err
    assert "'jinja2' is not installed" in err and "pip install jinja2" in err
    assert (root / "final_report.png").read_bytes() == b"\x89PNG an earlier chart"
    assert (root / "final_report.md").read_text() == "# an earlier report\n"


def test_the_chart_drawn_where_benchmark_ran_is_kept_by_a_report_without_matplotlib(tmp_path, monkeypatch, capsys):
    """The report rendered on a machine without matplotlib keeps the chart benchmark drew (issue 44, 11)."""
    pytest.importorskip("matplotlib")
    root = rf.build_complete(tmp_path / "run")
    monkeypatch.setattr(benchmark, "check_final_gate", lambda rd, n: None)
    rf.fake_benchmark_children(monkeypatch, benchmark, rf.synthetic_child_result())
    assert rf.cli(benchmark, ["benchmark", str(root)]) == 0
    png = root / "final_report.png"
    assert report.png_description(png).startswith(report.CHART_TAG)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    md = render(root)
    assert "![Time per version with baselines](final_report.png)" in md and "chart was skipped" not in md
    assert "kept final_report.png" in capsys.readouterr().err


def test_the_versions_table_names_the_memory_level_that_binds(tmp_path):
    root = finished_run(tmp_path)
    ncu = read_json(root / "v2" / "ncu.json")
    write_json(root / "v2" / "ncu.json", dict(ncu, bottleneck_level="L1/shared"))
    rf.provenance.record(root / "v2", ["ncu.json"])
    md = render(root)
    assert "| memory-bound at L1/shared | PASS |" in md and "| memory-bound | PASS |" in md  # v0 has no level


def many_kernel_run(tmp_path):
    """Two versions of a transformer block (ncu.json schema 2, runfixture.BLOCK_V0/V1): v1 fused the add into
    attn_fwd; v0's predictions name kernels."""
    root = rf.write_run(tmp_path / "run", iterations=1)
    for k, (block, median) in enumerate(((rf.BLOCK_V0, 900.0), (rf.BLOCK_V1, 850.0))):
        rf.write_kernel(root, k)
        rf.write_measurements(root, k)
        rf.write_schema2(root, k, block, median)
        rf.write_kbs(root, k)
    rf.set_state(root, 0)
    h = rf.HYPOTHESES[0]
    argv = ["hypothesis", str(root), "--change", "Fuse the bias add into attn_fwd's epilogue.", "--rationale",
            h["rationale"], "--risk", h["risk"], "--decision-rule", h["decision_rule"]]
    for p in ("duration: -5%", "dram_bytes_write: -10%", "attn:registers_per_thread: <= 128",
              "vectorized_elementwise_kernel:time_us: -50%", "vectorized_elementwise_kernel:dram_throughput_pct: <= 10",
              "registers_per_thread: <= 128", "vectorized_elementwise_kernel#2:time_us: <= 40"):
        argv += ["--predict", p]
    assert rf.cli(hypothesis, argv) == 0
    rf.sign_gate(root, 0)
    rf.set_state(root, 1)
    bench = benchmark.finish(rf.synthetic_child_result(versions=2), version="v1", selection="best",
                             timing={"method": "cuda_event", "warmup": 10, "trials": 40, "discard_first": 0,
                                     "l2_flush": True},
                             tolerance={"atol": 1e-5, "rtol": 1e-5}, env=read_json(root / "env.json"))
    benchmark.write_outputs(root, bench)
    return root


def test_a_many_kernel_run_shows_the_call_sums_and_the_kernel_each_change_targeted(tmp_path):
    root = many_kernel_run(tmp_path)
    md = render(root)
    versions = md.split("## 3. Versions")[1].split("## 4.")[0]
    # the whole call: event median, ncu's sums over every kernel, launches
    assert "| v0 | 900.00 | 1.000 | 900.00 | 22.00 | 10.00 | 6 | PASS |" in versions
    assert "| v1 | 850.00 | 1.059 | 820.00 | 18.00 | 8.00 | 5 | PASS |" in versions
    # per version the kernel the change targeted, each figure that kernel's: v0's focus; in v1 the kernels v0's
    # predictions named, the fused add among them
    assert "| v0 | `attn_fwd` | focus | own | 44.4 | 400.00 | 60.00 | 40.00 | 12.50 | 168 | latency-bound |" in versions
    assert ("| v1 | `attn_fwd` | named by v0's predictions | own | 46.3 | 380.00 | 60.00 | 40.00 | 25.00 | 128 | "
            "memory-bound |") in versions
    assert ("| v1 | `vectorized_elementwise_kernel` | named by v0's predictions | not launched | 0.0 | 0.00 | N/A | N/A "
            "| N/A | N/A | N/A |") in versions
    card = md.split("### v0 -> v1")[1].split("Predictions held")[0]
    assert "| `duration: -5%` | whole call (sums) | 900.00 | 850.00 | -5.56% | held |" in card
    assert "| `dram_bytes_write: -10%` | whole call (sums) |" in card and "-20.00% | held |" in card
    assert "| `attn_fwd:registers_per_thread: <= 128` | attn_fwd | 168 | 128 | N/A | held |" in card
    assert ("| `vectorized_elementwise_kernel:time_us: -50%` | vectorized_elementwise_kernel -> not launched | 60.00 | "
            "0.00 | -100.00% | held (vectorized_elementwise_kernel is not launched in v1 (removed or fused): its time_us "
            "is 0) |") in card
    assert ("| `vectorized_elementwise_kernel:dram_throughput_pct: <= 10` | vectorized_elementwise_kernel -> not "
            "launched | 88.00 | N/A | N/A | unknown (vectorized_elementwise_kernel is not launched in v1 (removed or "
            "fused): it has no dram_throughput_pct) |") in card
    assert "| `registers_per_thread: <= 128` | attn_fwd | 168 | 128 | N/A | held |" in card
    # the GELU was vectorized_elementwise_kernel#2 in v0 and takes the fused add's label in v1: found by its name
    assert ("| v1 | `vectorized_elementwise_kernel` | named by v0's predictions as vectorized_elementwise_kernel#2 | "
            "library | 4.9 | 40.00 | not profiled |") in versions
    assert ("| `vectorized_elementwise_kernel#2:time_us: <= 40` | vectorized_elementwise_kernel#2 -> "
            "vectorized_elementwise_kernel | 40.00 | 40.00 | N/A | held (vectorized_elementwise_kernel#2 of v0 is "
            "vectorized_elementwise_kernel in v1 (same kernel name)) |") in card
    assert "Predictions held: 6 of 7." in md
    # remaining opportunities name the kernel each symptom fired on
    assert "- `dram-near-peak` (on `vectorized_layer_norm_kernel`): " in md


def test_a_schema1_run_of_several_kernels_names_them_too(tmp_path):
    """A schema-1 profile with two kernels (the longest one's metrics): the per-kernel layout, from labels of the
    names, so no figure of one kernel sits in a row of another."""
    root = finished_run(tmp_path)
    ncu = read_json(root / "v3" / "ncu.json")
    side = dict(ncu["kernels"][0], name="bias_add", metrics=dict(ncu["kernels"][0]["metrics"], duration_us=5.0,
                                                                 registers_per_thread=18))
    write_json(root / "v3" / "ncu.json", dict(ncu, kernels=[*ncu["kernels"], side]))
    rf.provenance.record(root / "v3", ["ncu.json"])
    md = render(root)
    versions = md.split("## 3. Versions")[1].split("## 4.")[0]
    assert "| v3 | `softmax_kernel` | focus | not recorded |" in versions and "| 40 | memory-bound |" in versions
    assert "| `l2_hit_rate_pct: < 52` | softmax_kernel |" in md


@pytest.mark.parametrize("keep, words", [
    (None, "None: each transition has a version that failed in this benchmark"),
    ({"solution", "v0"}, "None: the run has one version."),
    ({"solution"}, "Not run: a version named in a run of more than 8 versions is timed alone"),
])
def test_benchmark_md_says_why_no_transition_was_read(tmp_path, keep, words):
    """The A/B section without a row said 'more than 8 versions' whatever the cause: a run of one version, or
    transitions whose versions failed, read the same."""
    root = rf.build_complete(tmp_path / "run")
    res = rf.synthetic_child_result()
    res["ab"] = []
    res["items"] = [it for it in res["items"] if keep is None or it["name"] in keep or it["name"][:1] not in "sv"]
    bench = benchmark.finish(res, version="v0", selection="explicit", timing={"method": "cuda_event", "warmup": 10,
                             "trials": 40, "discard_first": 0, "l2_flush": True}, tolerance=None,
                             env=read_json(root / "env.json"))
    benchmark.write_outputs(root, bench)
    section = (root / "benchmark.md").read_text().split("## Same-run A/B")[1].split("## Flags")[0]
    assert words in section and section.count("\n") < 5, section


def test_ncu_rule_estimates_are_weighed_by_their_kernels_share_of_the_call(tmp_path):
    """An agent's trial: "estimated speedup 100.0 %" on a 2.66 us kernel (0.8 % of the call) topped the remaining
    opportunities.  An estimate is its kernel's: weighed by the kernel's share, the largest for the call comes first,
    and one under 1 % of the call is counted, not listed."""
    root = many_kernel_run(tmp_path)
    ncu = read_json(root / "v1" / "ncu.json")
    by_name = {k["name"]: k for k in ncu["kernels"]}
    small = min(by_name.values(), key=lambda k: k["share"])
    big = by_name["attn_fwd"]
    small["rules"] = [{"section": "S", "rule": "HighPipeUtilization", "type": "OPT", "text": ".", "est_speedup_pct": 100.0}]
    big["rules"] = [{"section": "S", "rule": "UncoalescedGlobalAccess", "type": "OPT", "text": ".", "est_speedup_pct": 20.0}]
    if small["share"] * 100 >= 1:  # the fixture's smallest kernel is large: make the rule's share tiny
        small["rules"][0]["est_speedup_pct"] = 0.9 / small["share"]
    write_json(root / "v1" / "ncu.json", ncu)
    rf.provenance.record(root / "v1", ["ncu.json"])
    opp = render(root).split("## 7. Remaining opportunities")[1].split("## 8.")[0]
    share = big["share"] * 100
    assert (f"- ncu rule UncoalescedGlobalAccess (attn_fwd): estimated speedup 20.0 % of the kernel, about "
            f"{20 * big['share']:.1f} % of the call (the kernel is {share:.1f} % of its kernel time)") in opp
    assert "HighPipeUtilization" not in opp and "1 more ncu rule estimate(s) on kernels too small" in opp
