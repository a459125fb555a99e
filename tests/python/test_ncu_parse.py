"""ncu_parse on real H100 recordings (tests/fixtures/ncu/README.md says how each was made)."""

from __future__ import annotations

import csv
import math

import pytest
from conftest import FIXTURES
from kernel_loop.common import MeasuredFailure, UsageError
from kernel_loop.profiling import ncu_parse
from kernel_loop.steps.profile import build_profile

NCU = FIXTURES / "ncu"


def _text(name: str) -> str:
    return (NCU / name).read_text(encoding="utf-8")


def _raw_cell(name: str, metric: str, row: int = 2) -> tuple[str, str]:
    """(value cell, unit cell) of ``metric`` read with plain csv, skipping non-CSV lines."""
    lines = [ln for ln in _text(name).splitlines() if ln.startswith('"')]
    rows = list(csv.reader(lines))
    i = rows[0].index(metric)
    return rows[row][i], rows[1][i]


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_raw_detailed_one_kernel_with_exact_values():
    kernels = ncu_parse.parse_raw(_text("softmax_triton_detailed_raw.csv"))
    assert len(kernels) == 1
    k = kernels[0]
    assert k["name"] == "softmax_kernel"
    assert k["grid"] == [8192, 1, 1] and k["block"] == [128, 1, 1]
    assert k["cc"] == "9.0"
    for metric in ("gpu__time_duration.sum", "dram__bytes.sum.per_second", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                   "launch__grid_size"):
        cell, unit = _raw_cell("softmax_triton_detailed_raw.csv", metric)
        assert k["raw"][metric]["value"] == pytest.approx(_number(cell))
        assert k["raw"][metric]["unit"] == unit
    assert k["raw"]["gpu__time_duration.sum"]["unit"] == "ns"
    # "Kernel Name" and the NVTX columns are launch attributes, not metrics
    assert "Kernel Name" not in k["raw"] and not any(":" in name for name in k["raw"])


def test_thousands_separators_are_stripped():
    k = ncu_parse.parse_raw(_text("softmax_triton_detailed_raw.csv"))[0]
    cell, _ = _raw_cell("softmax_triton_detailed_raw.csv", "dram__bytes.sum.per_second")
    assert "," in cell
    assert k["raw"]["dram__bytes.sum.per_second"]["value"] == pytest.approx(_number(cell))
    assert isinstance(k["raw"]["launch__grid_size"]["value"], int)


def test_prof_lines_and_program_output_are_skipped():
    text = _text("softmax_triton_metrics_raw.csv")
    assert text.startswith("==PROF==") and "maxerr" in text
    kernels = ncu_parse.parse_raw(text)
    assert len(kernels) == 1
    raw = kernels[0]["raw"]
    for metric in ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                   "dram__throughput.avg.pct_of_peak_sustained_elapsed"):
        cell, unit = _raw_cell("softmax_triton_metrics_raw.csv", metric)
        assert raw[metric]["value"] == pytest.approx(_number(cell))
        assert raw[metric]["unit"] == unit


def test_details_sections_and_rules():
    kernels = ncu_parse.parse_details(_text("softmax_triton_detailed_details.csv"))
    assert len(kernels) == 1
    k = kernels[0]
    sol = {m["name"]: m for m in k["sections"]["GPU Speed Of Light Throughput"]}
    assert sol["Duration"]["unit"] == "ns" and sol["Duration"]["value"] == 86016
    assert sol["Memory Throughput"]["unit"] == "%"
    mem = {m["name"]: m for m in k["sections"]["Memory Workload Analysis"]}
    assert mem["Memory Throughput"]["value"] == pytest.approx(2867101190476.19)
    rules = {r["rule"]: r for r in k["rules"]}
    assert set(rules) == {"SOLBottleneck", "SOLFPRoofline", "HighPipeUtilization", "MemoryL2Compression",
                          "TheoreticalOccupancy"}
    assert rules["HighPipeUtilization"]["est_speedup_pct"] == pytest.approx(87.34)
    assert rules["HighPipeUtilization"]["type"] == "OPT" and rules["HighPipeUtilization"]["speedup_type"] == "local"
    assert rules["TheoreticalOccupancy"]["section"] == "Occupancy"
    assert "registers" in rules["TheoreticalOccupancy"]["text"]
    assert rules["SOLBottleneck"]["type"] == "INF" and rules["SOLBottleneck"]["est_speedup_pct"] is None


def test_vadd_cuda_sections_only_details_with_noise():
    text = _text("vadd_cuda_sections_details.csv")
    assert text.startswith("==PROF==")
    kernels = ncu_parse.parse_details(text)
    assert len(kernels) == 1
    k = kernels[0]
    assert k["name"] == "vadd(const float *, const float *, float *, int)"
    assert k["grid"] == [65536, 1, 1] and k["block"] == [256, 1, 1]
    assert set(k["sections"]) == {"GPU Speed Of Light Throughput", "Launch Statistics", "Occupancy"}
    launch = {m["name"]: m["value"] for m in k["sections"]["Launch Statistics"]}
    assert launch["Grid Size"] == 65536 and launch["Cluster Scheduling Policy"] == "PolicySpread"
    assert [r["rule"] for r in k["rules"]][0] == "SOLBottleneck"


def test_merge_joins_pages_by_kernel_id():
    merged = ncu_parse.parse(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"))
    assert [k["name"] for k in merged] == ["softmax_kernel", "row_max_kernel"]
    assert merged[1]["raw"]["gpu__time_duration.sum"]["value"] == 20480
    assert {m["name"]: m["value"] for m in merged[1]["sections"]["GPU Speed Of Light Throughput"]}["Duration"] == 20480
    assert merged[0]["raw"]["gpu__time_duration.sum"]["value"] == 86016
    assert len(merged[1]["rules"]) == len(merged[0]["rules"]) == 5


@pytest.mark.parametrize("cell,expected", [
    ("1,024", 1024), ("2,867,101,190,476.19", 2867101190476.19), ("0.95", 0.95), ("-3.5e-2", -0.035),
    ("", None), ("n/a", None), ("no data", None), ("PolicySpread", "PolicySpread"), ("(128, 1, 1)", "(128, 1, 1)"),
    ("1,2", "1,2"),
])
def test_parse_value(cell, expected):
    assert ncu_parse.parse_value(cell) == expected


def test_nan_cells_are_nan():
    assert math.isnan(ncu_parse.parse_value("nan"))
    k = ncu_parse.parse_raw(_text("softmax_triton_detailed_raw.csv"))[0]
    assert math.isnan(k["raw"]["derived_tempMetric4"]["value"])


def test_no_csv_means_no_kernels():
    text = "==PROF== Connected to process 1\n==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n"
    assert ncu_parse.parse(text, text) == []


def test_details_without_metric_columns_is_rejected():
    with pytest.raises(MeasuredFailure, match="--page details"):
        ncu_parse.parse_details('"ID","Kernel Name"\n"0","k"\n')


# --- the parser and classifier on this project's own H200 recordings (transpose v0, v1) ---------------
def _h200_profile(version: str) -> dict:
    raw = (FIXTURES / "ncu" / f"h200_transpose_{version}_raw.csv").read_text()
    details = (FIXTURES / "ncu" / f"h200_transpose_{version}_details.csv").read_text()
    return build_profile(raw, details, None, {"version": version})


def _h200_tags(profile: dict) -> set[str]:
    return {s["tag"] for s in profile["symptoms"]}


def test_naive_transpose_is_flagged_uncoalesced():
    p = _h200_profile("v0")
    assert [k["name"] for k in p["kernels"]] == ["transpose_naive(const float *, float *, int, int)"]
    assert p["gpu"]["name"] == "NVIDIA H200" and p["gpu"]["sm_count"] == 132
    assert p["bottleneck"] == "memory-bound"
    assert "uncoalesced-global" in _h200_tags(p)
    assert p["metrics"]["global_excess_sectors_pct"] > 50
    # the warp-state and scheduler sections were collected on this recording
    assert p["metrics"]["issue_active"] is not None and p["metrics"]["stall_long_scoreboard"] is not None


def test_unpadded_tile_is_flagged_for_bank_conflicts_not_coalescing():
    p = _h200_profile("v1")
    tags = _h200_tags(p)
    assert "smem-bank-conflicts" in tags and "uncoalesced-global" not in tags
    assert p["metrics"]["smem_bank_conflicts_pct"] > 50
    assert p["metrics"]["global_excess_sectors_pct"] == pytest.approx(0, abs=1)


def test_the_tile_cut_duration_and_excess_sectors():
    v0, v1 = _h200_profile("v0"), _h200_profile("v1")
    assert v1["metrics"]["duration_us"] < v0["metrics"]["duration_us"] / 2
    assert v1["metrics"]["dram_bytes_read"] == pytest.approx(v0["metrics"]["dram_bytes_read"], rel=0.15)


# --- a program of many kernels: 35_LSTM (KernelBench level 3, ModelNew = Model) profiled on the H100 80GB ---------
# Its v0 folder as the profile step wrote it (d200acf): ncu's census of the call's first 400 of 6244 launches, full
# sections for the two kernels the budget chose, and what ncu.json said of them (h100_lstm_v0_recorded.json).
def _lstm() -> tuple[dict, dict]:
    import json

    rec = json.loads((NCU / "h100_lstm_v0_recorded.json").read_text())
    context = dict(rec["context"], defined_kernels=[],  # the model's own text is KernelBench's, not kept here: any
                   kernel_source="import torch\n\nModelNew = None  # no kernel of its own\n")  # text without kernels
    stats = ("median", "p20", "p25", "p75", "p80", "mean", "min", "max", "std")  # ncu.json's timing, as measured
    timing = {(k[:-3] if k[:-3] in stats else k): v for k, v in context.pop("timing").items()}
    profile = build_profile((NCU / "h100_lstm_v0_raw.csv").read_text(), (NCU / "h100_lstm_v0_details.csv").read_text(),
                            timing, context, (NCU / "h100_lstm_v0_census.csv").read_text())
    return profile, rec["expected"]


def _round(x):
    """Floats to 9 significant digits, inside lists and dicts: sums in another order differ in the last bits."""
    if isinstance(x, float):
        return float(f"{x:.9g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return [_round(v) for v in x] if isinstance(x, list) else x


def test_the_lstm_recording_rebuilds_what_the_gpu_run_wrote():
    p, want = _lstm()
    inv = p["inventory"]
    assert _round({k: inv[k] for k in want["inventory"]}) == _round(want["inventory"])
    got = [{k: r[k] for k in ("label", "owner", "launches", "time_us", "profiled")} for r in inv["rows"]]
    assert _round(got) == _round(want["rows"])
    assert [k["name"] for k in p["kernels"]] == want["kernels"]
    assert _round(p["focus"]) == _round(want["focus"]) and _round(p["sums"]) == _round(want["sums"])
    assert (p["bottleneck"], p["bottleneck_level"]) == (want["bottleneck"], want["bottleneck_level"])
    assert [s["tag"] for s in p["symptoms"]] == want["tags"] and p["warnings"] == want["warnings"]


def test_the_lstm_census_is_a_sample_whose_sums_stay_unknown():
    p, _ = _lstm()
    inv, rows = p["inventory"], p["inventory"]["rows"]
    assert inv["source"] == "census" and inv["launches"] == 400 and inv["sampled_of"] == 6244
    assert sum(r["launches"] for r in rows) == 400 and all(r["owner"] == "library" for r in rows)
    assert [r["label"] for r in rows[:2]] == ["gemmSN_TN_kernel", "elemWiseRNNcell"]  # cuBLAS's GEMV, cuDNN's cell
    assert rows[0]["share"] == pytest.approx(0.585, abs=0.001) and sum(r["share"] for r in rows) == pytest.approx(1)
    # the first 400 launches are not the call: its summed duration is unknown, the event median stands for it
    assert p["sums"]["duration_us"] is None and p["metrics"]["duration_us"] is None
    assert p["sums"]["duration_at_least_us"] == pytest.approx(inv["kernel_time_us"])
    assert p["metrics"]["event_median_us"] > 5 * p["sums"]["duration_at_least_us"]
    assert p["focus"]["label"] == "gemmSN_TN_kernel" and "no kernel of its own" in p["focus"]["why"]


def test_the_lstm_summary_fits_its_bound_and_names_every_kernel_of_the_sample():
    from kernel_loop.profiling.ncu_json import SUMMARY_BYTES, render_details, render_summary

    p, want = _lstm()
    text = render_summary(p)
    assert len(text.encode()) <= SUMMARY_BYTES and abs(len(text.encode()) - want["summary_bytes"]) < 600
    table = text.split("## Kernels of the call", 1)[1].split("\n\n", 1)[0]
    for label in ("gemmSN_TN_kernel", "elemWiseRNNcell", "Kernel2", "distribution_elementwise_grid_stride_kernel"):
        assert f"`{label}`" in table
    assert "| 1 more |" in table and "| **all** | | **400** |" in table
    assert "first 400 of the call's 6244" in text
    # the details hold the profiled kernels only: bounded by the budget's kernel count, not by the call's launches
    assert len(render_details(p).encode()) < 80_000 * len(p["kernels"])


def test_the_budget_chooses_from_the_lstm_census_what_the_gpu_run_profiled():
    from kernel_loop.profiling import inventory

    inv = inventory.table(inventory.launches((NCU / "h100_lstm_v0_census.csv").read_text()), [])
    pick = [r["label"] for r in inventory.choose(inv, inventory.Budget())]  # the default: 8 kernels, 90% of the time
    assert pick == ["gemmSN_TN_kernel", "elemWiseRNNcell"]  # 58.5% + 38.7%: past 90% after the second
    assert [r["label"] for r in inventory.choose(inv, inventory.Budget(share=0.5))] == ["gemmSN_TN_kernel"]
    assert len(inventory.choose(inv, inventory.Budget(share=0.99))) == 3  # Kernel2's 2.2% takes it to 99.5%


def test_predictions_on_the_lstm_kernels_score_against_the_kernel_they_name():
    from kernel_loop import predictions as P

    before, _ = _lstm()
    after = {**before, "kernels": [k for k in before["kernels"] if "elemWiseRNNcell" not in k["name"]],
             "inventory": {**before["inventory"], "rows": [r for r in before["inventory"]["rows"]
                                                           if r["label"] != "elemWiseRNNcell"]}}
    recs = P.kernel_records(before)

    def scored(line: str, nxt: dict) -> dict:
        return P.score_versions(P.parse_line(line, kernels=recs), before, nxt)

    s = scored("gemmSN_TN_kernel:sm_throughput_pct: <= 11", before)  # 10.77 on the H100: the GEMV's own figure
    assert s["status"] == "held" and s["on"] == {"before": "gemmSN_TN_kernel", "after": "gemmSN_TN_kernel"}
    s = scored("elemWiseRNNcell:dram_throughput_pct: +10%", before)  # the same kernel unchanged: 0%, missed
    assert s["status"] == "missed" and s["change"] == pytest.approx(0.0)
    s = scored("elemWiseRNNcell:time_us: <= 1", after)  # fused away in the next version: its time is 0
    assert s["status"] == "held" and "not launched" in s["note"]
    with pytest.raises(UsageError, match="was not profiled"):  # Kernel2 is in the census only
        P.parse_line("Kernel2:dram_throughput_pct: -10%", kernels=recs)
    # the census's sample leaves the call's summed duration unknown: "duration" scores on the event median instead
    s = P.score_versions(P.parse_line("duration: -10%"), before, before)
    assert s["before"] == pytest.approx(before["metrics"]["event_median_us"]) and s["status"] == "missed"
