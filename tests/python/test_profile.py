"""profile: CSV -> ncu.json (build_profile), trust checks, warnings, rendering, refusals, child errors."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import random

import numpy as np
import pytest
from conftest import FIXTURES
from kernel_loop import gpustate, records, timing
from kernel_loop.common import (
    KernelLoopError,
    MeasuredFailure,
    UsageError,
    read_json,
    sha256_file,
    write_json,
)
from kernel_loop.config import DEFAULT_NCU_SECTIONS, RunConfig
from kernel_loop.profiling import inventory, metrics, ncu_json
from kernel_loop.steps import profile

NCU = FIXTURES / "ncu"
RAW = "softmax_triton_detailed_raw.csv"
DETAILS = "softmax_triton_detailed_details.csv"


def _text(name: str) -> str:
    return (NCU / name).read_text(encoding="utf-8")


def _cell(name: str, metric: str) -> float:
    rows = list(csv.reader(ln for ln in _text(name).splitlines() if ln.startswith('"')))
    return float(rows[2][rows[0].index(metric)].replace(",", ""))


def _edit_raw(metric: str, value: str) -> str:
    """The softmax raw page with one kernel cell replaced."""
    rows = list(csv.reader(io.StringIO(_text(RAW))))
    rows[2][rows[0].index(metric)] = value
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _build(raw=RAW, details=DETAILS, timing=None, **ctx):
    return ncu_json.build_profile(_text(raw) if raw else None, _text(details) if details else None, timing,
                                 {"version": "v1", "kernel_file": "kernel.py", **ctx})


def _timing(median: float) -> dict:
    return {"method": "cuda_event", "warmup": 5, "trials": 3, "l2_flush": True, "samples_us": [median] * 3,
            "median": median, "p20": median, "p25": median, "p75": median, "p80": median, "mean": median,
            "min": median, "max": median, "std": 0.0, "n": 3}


# --- fixtures of real H100 profiles -------------------------------------------------------------
def test_softmax_profile_metrics_bottleneck_and_tags():
    p = _build()
    m = p["metrics"]
    assert m["duration_us"] == pytest.approx(_cell(RAW, "gpu__time_duration.sum") / 1000.0)
    sm = _cell(RAW, "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    mem = _cell(RAW, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    assert m["sm_throughput_pct"] == pytest.approx(sm) and m["memory_throughput_pct"] == pytest.approx(mem)
    assert mem >= 60 and mem - sm >= 10 and p["bottleneck"] == "memory-bound"
    assert m["dram_bytes_per_s"] == pytest.approx(_cell(RAW, "dram__bytes.sum.per_second"))
    assert m["shared_mem_per_block"] == _cell(RAW, "launch__shared_mem_per_block")
    # thread_inst_executed / inst_executed (no divergence in softmax)
    assert m["thread_inst_per_inst"] == pytest.approx(_cell(RAW, "thread_inst_executed") / _cell(RAW, "inst_executed"))
    tags = {s["tag"] for s in p["symptoms"]}
    assert "dram-near-peak" in tags                    # DRAM 85.57 % >= 80
    assert "occupancy-limited-registers" in tags       # 56.25 % theoretical, register limit 9 blocks
    assert "multi-kernel" not in tags
    assert p["gpu"] == {"name": "NVIDIA H100 80GB HBM3", "cc": "9.0", "sm_count": 132}
    assert p["kernels"][0]["name"] == "softmax_kernel" and len(p["kernels"]) == 1


def test_detailed_set_has_no_warp_state_metrics_so_they_are_null():
    p = _build()
    for r in metrics.STALL_REASONS:
        assert p["metrics"][f"stall_{r}"] is None
    assert p["metrics"]["issue_active"] is None and p["metrics"]["warp_latency_cycles"] is None
    assert p["metrics"]["sectors_per_request_ld"] is None
    assert any(n.startswith("long-scoreboard-stalls: not evaluated") for n in p["not_evaluated"])


def test_metric_sources_name_the_ncu_metric():
    p = _build()
    src = p["kernels"][0]["metric_sources"]
    assert src["duration_us"] == "gpu__time_duration.sum"
    assert src["memory_throughput_pct"] == "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
    assert src["global_excess_sectors_pct"] == "derived"


def test_vadd_details_page_alone_gives_sol_and_launch():
    p = _build(raw=None, details="vadd_cuda_sections_details.csv")
    m = p["metrics"]
    assert m["duration_us"] == pytest.approx(73.760)
    assert m["memory_throughput_pct"] == pytest.approx(77.32) and m["sm_throughput_pct"] == pytest.approx(40.76)
    assert m["grid_size"] == 65536 and m["block_size"] == 256
    assert p["bottleneck"] == "memory-bound"
    assert p["kernels"][0]["metric_sources"]["duration_us"] == "details page"
    assert p["kernels"][0]["rules"][0]["rule"] == "SOLBottleneck"


def test_metrics_only_recording_lacks_memory_sol_and_is_refused():
    # 3 metrics only: duration, SM and DRAM throughput; no gpu__compute_memory_throughput
    with pytest.raises(MeasuredFailure, match="memory_throughput_pct .* missing"):
        _build(raw="softmax_triton_metrics_raw.csv", details=None)


def test_metrics_only_recording_maps_dram_through_its_fallback_name():
    from kernel_loop.profiling import ncu_parse

    k = ncu_parse.parse(_text("softmax_triton_metrics_raw.csv"), None)[0]
    vals, src = metrics.extract(k)
    assert src["dram_throughput_pct"] == "dram__throughput.avg.pct_of_peak_sustained_elapsed"
    assert vals["dram_throughput_pct"] == pytest.approx(
        _cell("softmax_triton_metrics_raw.csv", "dram__throughput.avg.pct_of_peak_sustained_elapsed"))
    assert vals["l2_hit_rate_pct"] is None


# --- multi-kernel -----------------------------------------------------------------------------
def test_two_kernels_sum_durations_and_take_the_longest_kernels_values():
    p = _build(raw="two_kernels_detailed_raw.csv", details="two_kernels_detailed_details.csv")
    assert [k["name"] for k in p["kernels"]] == ["softmax_kernel", "row_max_kernel"]
    assert [k["label"] for k in p["kernels"]] == ["softmax_kernel", "row_max_kernel"]
    assert p["metrics"]["duration_us"] == pytest.approx(86.016 + 20.48) == p["sums"]["duration_us"]
    assert p["metrics"]["sm_throughput_pct"] == pytest.approx(22.46)    # no kernel of its own: the longest is the focus
    assert p["focus"]["label"] == "softmax_kernel" and "no kernel of its own" in p["focus"]["why"]
    assert p["kernels"][1]["bottleneck"] == "latency-bound"              # 35.10 / 40.20
    assert p["bottleneck"] == "memory-bound"
    assert p["inventory"]["source"] == "profile" and p["inventory"]["launches"] == 2
    assert p["kernels"][0]["share"] == pytest.approx(86.016 / (86.016 + 20.48))
    by_tag = {s["tag"]: s for s in p["symptoms"]}
    assert "multi-kernel" in by_tag
    assert by_tag["small-grid"]["kernel"] == "row_max_kernel"           # grid 100 < 132 SMs
    assert by_tag["dram-near-peak"]["kernel"] == "softmax_kernel"
    text = ncu_json.render_summary(p)
    assert "**all**" in text and "`row_max_kernel`" in text and "multi-kernel" in text


def test_the_versions_own_kernel_is_the_focus_however_small_its_share():
    """A call of a library kernel and the version's own: the own kernel's figures stand for the version (not the
    longest kernel's), its symptoms come first, and the duration stays the sum of both."""
    p = _build(raw="two_kernels_detailed_raw.csv", details="two_kernels_detailed_details.csv",
               defined_kernels=["row_max_kernel"])
    assert p["focus"]["label"] == "row_max_kernel" and p["focus"]["owner"] == "own"
    assert p["metrics"]["sm_throughput_pct"] == pytest.approx(35.10)
    assert p["metrics"]["duration_us"] == pytest.approx(86.016 + 20.48)
    assert p["bottleneck"] == "latency-bound"
    own_first = [s["label"] for s in p["symptoms"] if s.get("label")]
    assert own_first[0] == "row_max_kernel"
    assert {k["label"]: k["owner"] for k in p["kernels"]} == {"softmax_kernel": "library", "row_max_kernel": "own"}
    assert p["library_fallback"] is None


# --- trust checks -----------------------------------------------------------------------------
def test_no_kernel_caught_is_a_failure():
    noise = "==PROF== Connected to process 9\n==WARNING== No kernels were profiled.\n"
    with pytest.raises(MeasuredFailure, match="caught no kernel"):
        ncu_json.build_profile(noise, noise, None, {})


def test_zero_duration_is_a_failure():
    with pytest.raises(MeasuredFailure, match="zero duration"):
        ncu_json.build_profile(_edit_raw("gpu__time_duration.sum", "0"), None, None, {})


def test_nan_sol_is_a_failure():
    with pytest.raises(MeasuredFailure, match="sm_throughput_pct .* NaN"):
        ncu_json.build_profile(_edit_raw("sm__throughput.avg.pct_of_peak_sustained_elapsed", "nan"), None, None, {})


def test_nan_in_other_metric_becomes_null_with_a_warning():
    p = ncu_json.build_profile(_edit_raw("lts__t_sector_hit_rate.pct", "nan"), None, None, {})
    assert p["metrics"]["l2_hit_rate_pct"] is None
    assert any("l2_hit_rate_pct" in w and "NaN" in w for w in p["warnings"])


# --- timing and protocol warnings -------------------------------------------------------------
def test_timing_agreeing_with_ncu_gives_no_warning():
    p = _build(timing=_timing(86.016 * 1.05))
    assert p["metrics"]["event_median_us"] == pytest.approx(86.016 * 1.05)
    assert p["timing"]["median_us"] == pytest.approx(86.016 * 1.05) and p["timing"]["l2_flush"] is True
    assert p["warnings"] == []


def test_profiled_kernels_covering_too_little_of_event_time_warn():
    p = _build(timing=_timing(100.0))     # 86.0 / 100 = 86 % < 90 %
    assert any("cover only 86%" in w for w in p["warnings"])


def test_ncu_duration_far_above_event_time_warns():
    p = _build(timing=_timing(70.0))      # 86.0 vs 70 -> +23 %
    assert any("differs from the CUDA-event median" in w and "+23%" in w for w in p["warnings"])


def test_protocol_mismatch_with_v0_is_flagged():
    tool = {"set": "detailed", "sections": ["WarpStateStats"], "clock_control": "none", "cache_control": None}
    base = {"clock_control": "base", "cache_control": None, "set": "detailed", "sections": ["WarpStateStats"],
            "gpu": "NVIDIA H100 80GB HBM3"}
    p = _build(tool=tool, baseline_protocol=base)
    w = [x for x in p["warnings"] if x.startswith("measured under a different protocol than v0")]
    assert len(w) == 1 and "clock_control 'none' vs v0 'base'" in w[0]
    assert "measured under a different protocol than v0" in ncu_json.render_summary(p)
    same = _build(tool=tool, baseline_protocol=dict(base, clock_control="none"))
    assert not any("different protocol" in x for x in same["warnings"])


def test_gpu_slowdown_during_timing_warns():
    state = {"before": {"available": True, "throttle_reasons": ["gpu_idle"]},
             "after": {"available": True, "throttle_reasons": ["sw_thermal_slowdown"], "sm_clock_mhz": 1500,
                       "mem_clock_mhz": 2619, "temperature_c": 85, "power_w": 690.0}}
    state["before"].update(sm_clock_mhz=345, mem_clock_mhz=2619, temperature_c=40, power_w=90.0)
    p = _build(gpu_state=state)
    assert any("sw_thermal_slowdown" in w for w in p["warnings"])
    assert "sw_thermal_slowdown" in ncu_json.render_summary(p)


def test_decode_throttle_matches_nvml_constants():
    assert gpustate.decode_throttle(0) == []
    assert gpustate.decode_throttle(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert gpustate.decode_throttle(0x1000) == ["bit_0x1000"]
    pynvml = pytest.importorskip("pynvml")
    assert gpustate.decode_throttle(pynvml.nvmlClocksEventReasonSwPowerCap) == ["sw_power_cap"]
    assert gpustate.decode_throttle(pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown) == ["hw_power_brake_slowdown"]
    assert gpustate.decode_throttle(pynvml.nvmlClocksEventReasonAll) == list(gpustate.THROTTLE_BITS.values())


# --- rendering ----------------------------------------------------------------------------------
def test_write_profile_artifacts(tmp_path):
    p = _build(timing=_timing(90.0))
    files = ncu_json.write_profile_artifacts(tmp_path, p)
    assert [f.name for f in files] == ["ncu_summary.md", "ncu_details.md", "ncu.json"]
    summary = (tmp_path / "ncu_summary.md").read_text()
    assert "**memory-bound at DRAM**" in summary
    assert "dram-near-peak" in summary and "dram_throughput_pct >= 80" in (tmp_path / "ncu_details.md").read_text()
    assert "HighPipeUtilization" in summary and "87.3%" in summary
    assert "Not evaluated" in summary
    details = (tmp_path / "ncu_details.md").read_text()
    assert "### GPU Speed Of Light Throughput" in details and "`gpu__time_duration.sum`" in details
    assert "### Raw: dram" in details and "TheoreticalOccupancy" in details

    def no_nan(c):
        raise ValueError(c)
    data = json.loads((tmp_path / "ncu.json").read_text(), parse_constant=no_nan)   # strict JSON
    assert data["bottleneck"] == "memory-bound" and data["metrics"]["event_median_us"] == 90.0
    assert set(data["metrics"]) == set(metrics.KEYS)


# --- the CLI step without a GPU: refusals --------------------------------------------------------
def _run_dir(tmp_path, *, result="PASS", ncu=None, device="cuda:0"):
    """A run whose v0 has a signed correctness record (``result`` None: none) made on ``device``."""
    root = tmp_path / "run"
    v0 = root / "v0"
    v0.mkdir(parents=True)
    write_json(root / "run.json", {"schema": 1, "kernel": "vadd", "impl": "triton", "dims": {"N": 1024}, "gpu": 0, "warmup": 2, "trials": 3,
                                   "ncu": ncu or {"set": "detailed", "sections": [], "clock_control": "none",
                                                  "cache_control": None, "extra_args": []}})
    (root / "ref.py").write_text("def reference(x):\n    return x\n")
    kernel = v0 / "kernel.py"
    kernel.write_text("def run_kernel(x):\n    pass\n")
    records.append(root, "init", iterations="3", device="cuda:0", **records.run_hashes(root))
    write_json(v0 / "correctness.json", {"schema": 1, "version": "v0", "kernel_file": "kernel.py",
                                         "kernel_sha256": sha256_file(kernel), "result": result})
    if result is not None:  # as correctness signs it
        records.append(root, "correctness", "v0", result=result, device=device, kernel=sha256_file(kernel),
                       **records.run_hashes(root), files=records.files_field(v0, ["correctness.json"]))
    return root


def _profile_args(*argv):
    parser = argparse.ArgumentParser()
    profile.register(parser.add_subparsers())
    return parser.parse_args(["profile", *argv])


def test_refuses_when_kernel_changed_after_correctness(tmp_path):
    root = _run_dir(tmp_path)
    (root / "v0" / "kernel.py").write_text("def run_kernel(x):\n    return 1\n")
    args = _profile_args(str(root))
    with pytest.raises(UsageError, match="kernel.py changed after correctness passed: re-run correctness"):
        args.func(args)


def test_refuses_without_pass(tmp_path):
    args = _profile_args(str(_run_dir(tmp_path, result="FAIL")))
    with pytest.raises(UsageError, match="not PASS"):
        args.func(args)


def test_refuses_without_correctness(tmp_path):
    args = _profile_args(str(_run_dir(tmp_path, result=None)))
    with pytest.raises(UsageError, match="has no correctness record .*run `kernel-loop correctness .*` first"):
        args.func(args)


def test_refuses_a_cpu_mode_pass_for_a_gpu_run(tmp_path):
    args = _profile_args(str(_run_dir(tmp_path, device="cpu")))
    with pytest.raises(UsageError, match="passed correctness on cpu, but this run measures on cuda:0: a CPU-mode "
                                         "result does not count"):
        args.func(args)


def test_refuses_a_pass_whose_file_or_record_was_edited(tmp_path):
    root = _run_dir(tmp_path)
    corr = read_json(root / "v0" / "correctness.json")
    write_json(root / "v0" / "correctness.json", dict(corr, note="edited"))
    args = _profile_args(str(root))
    with pytest.raises(UsageError, match="v0/correctness.json changed after correctness wrote it"):
        args.func(args)
    log = root / "records.log"
    log.write_text(log.read_text().replace("result=PASS", "result=PASS "))
    with pytest.raises(UsageError, match="records.log:2: the signature does not verify"):
        args.func(args)


def test_clock_control_flag_must_agree_with_run_json(tmp_path):
    args = _profile_args(str(_run_dir(tmp_path)), "--clock-control", "base")
    with pytest.raises(UsageError, match="disagrees with run.json ncu.clock_control"):
        args.func(args)


def test_ncu_command_has_nvtx_filter_sections_and_protocol(tmp_path):
    cfg = RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 8},
                               "ncu": {"sections": None, "clock_control": "base"}})
    n = profile.ncu_settings(cfg, argparse.Namespace())
    assert n["set"] == "detailed" and n["sections"] == list(DEFAULT_NCU_SECTIONS) and n["cache_control"] is None
    cmd = profile.ncu_command("ncu", n, tmp_path / "profile.ncu-rep")
    assert cmd[:4] == ["ncu", "--nvtx", "--nvtx-include", "kl_measure"]  # a start/end range: no slash
    assert ["--section", "WarpStateStats"] == cmd[cmd.index("WarpStateStats") - 1:cmd.index("WarpStateStats") + 1]
    assert "--clock-control" in cmd and cmd[cmd.index("--clock-control") + 1] == "base"
    assert "--cache-control" not in cmd
    assert cmd[-3:] == ["-o", str(tmp_path / "profile"), "-f"]


@pytest.mark.parametrize("cache", [None, "all", "none"])
def test_the_census_leaves_the_l2_as_the_launches_before_left_it(tmp_path, cache):
    """Found by the level-3 sweep on the H100: GoogleNet's and ResNet18's census (ModelNew = Model), each of their
    hundreds of small launches measured after ncu flushed the caches, summed 11% and 13% above the event median
    and profile refused their honest times as work outside the caller's stream.  In the timed call a kernel finds
    in L2 what the one before it wrote: the census runs so, whatever the run's cache control; the full sections
    keep the run's."""
    cfg = RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 8},
                               "ncu": {"sections": None, "clock_control": "none", "cache_control": cache}})
    n = profile.ncu_settings(cfg, argparse.Namespace())
    cmd = profile.census_command("ncu", n, tmp_path / "census.ncu-rep")
    assert cmd[cmd.index("--cache-control") + 1] == "none" and cmd.count("--cache-control") == 1
    assert cmd[cmd.index("--clock-control") + 1] == "none" and cmd[-3:] == ["-o", str(tmp_path / "census"), "-f"]
    full = profile.ncu_command("ncu", n, tmp_path / "profile.ncu-rep")
    assert (full[full.index("--cache-control") + 1] == cache) if cache else "--cache-control" not in full


@pytest.mark.parametrize("name, base", [
    # as ncu's raw CSV printed it on the H100 (2026-12-07): the anonymous namespace as "unnamed>", its "<" lost
    ("void unnamed>::cunn_SoftMaxForwardReg<float, float, float, unnamed>::SoftMaxForwardEpilogue, long, 8>"
     "(T3 *, const T1 *, T5)", "cunn_SoftMaxForwardReg"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<8, float, float, float, at::native::"
     "(anonymous namespace)::SoftMaxForwardEpilogue, long>(T4 *, const T2 *, T3)", "cunn_SoftMaxForwardReg"),
    ("void at::native::<unnamed>::cunn_SoftMaxForward<4, float>(float *, const float *, int)", "cunn_SoftMaxForward"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>>"
     "(int, T2, T3)", "vectorized_elementwise_kernel"),
    # an anonymous type as the first template argument: the template's own "<" stays (a review's find)
    ("void unnamed>::CatArrayBatchedCopy<unnamed>::OpaqueType<4>, unsigned int, 4, 64, 64>(T1 *, int)",
     "CatArrayBatchedCopy"),
    ("void k<unnamed>::F>(int)", "k"),
    ("unnamed_kernel", "unnamed_kernel"), ("triton_poi_fused_0", "triton_poi_fused_0")])
def test_a_kernels_function_base_survives_the_anonymous_namespace_as_ncu_prints_it(name, base):
    """Found on the H100 (the side-stream cheat through the census): ncu printed PyTorch's softmax kernel with
    ``unnamed>::`` inside its template arguments; that lone ``>`` ended the template and the base came out ``8``, so
    the detailed pass's filter matched no kernel and profile failed on an honest program's library kernel."""
    from kernel_loop.profiling import inventory

    assert inventory.function_base(name) == base
    assert inventory.labels([name]) == [base]


def test_ncu_output_errors():
    with pytest.raises(UsageError, match="ERR_NVGPUCTRPERM"):
        profile.check_ncu_output(1, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    with pytest.raises(MeasuredFailure, match="profiled no kernel"):
        profile.check_ncu_output(0, "==WARNING== No kernels were profiled.")
    with pytest.raises(MeasuredFailure, match="exit 3"):
        profile.check_ncu_output(3, "==ERROR== something")
    profile.check_ncu_output(0, "==PROF== Disconnected")


def test_the_judge_reports_a_missing_ref_as_bad_input(tmp_path, worker_here):
    """The real judge, on a run dir whose ref.py is missing: an error result naming ref.py, not a crash.  (The
    judge's code in this process, klcli.run_judge_here, its worker a thread: conftest.worker_here; a child
    judge's error result reaching a step is test_correctness.py::test_gpu_run_without_cuda_is_a_usage_error.)"""
    from klcli import run_judge_here as run_judge

    (tmp_path / "run.json").write_text("{}")
    spec = {"run_root": str(tmp_path), "kernel": str(tmp_path / "kernel.py"), "device": "cpu",
            "cfg": {"kernel": "k", "impl": "triton", "dims": {"N": 8}, "warmup": 1, "trials": 1},
            "shapes": [{"N": 8}], "trials": 1}
    outcome = run_judge("correctness", spec, timeout=120)
    assert outcome.failure() is None and "ref.py" in outcome.result["error"]
    with pytest.raises(KernelLoopError, match="the profile failed: "):
        outcome.checked("the profile")


def test_tensor_cores_unused_fires_only_on_a_kernel_whose_source_does_matrix_products():
    """FMA-busy, tensor pipes idle: a tag for a GEMM on CUDA cores, not for a normalization (issue 44, 4)."""
    raw = _edit_raw("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed", "45")
    no_dot = (NCU / "softmax_triton.py").read_text(encoding="utf-8")
    with_dot = no_dot.replace("tl.store(", "tl.dot(x, x)\n    tl.store(", 1)
    assert with_dot != no_dot

    def tags(source):
        p = ncu_json.build_profile(raw, _text(DETAILS), None, {"version": "v1", "kernel_file": "kernel.py",
                                                                "kernel_source": source})
        return {s["tag"] for s in p["symptoms"]}, p

    assert "tensor-cores-unused" not in tags(no_dot)[0]
    assert "tensor-cores-unused" in tags(with_dot)[0]
    got, p = tags(no_dot)
    assert p["bottleneck"] == "memory-bound" and p["bottleneck_level"] == "DRAM"
    assert "| Bottleneck | **memory-bound at DRAM** (of `" in ncu_json.render_summary(p)


# --- programs of many kernels: ncu's census, the budget, sums per call, labels per kernel -------
def _census(launches: list[tuple[str, tuple, tuple, float, float, float]]) -> str:
    """A census page as ncu prints it (``--page raw --print-units base``): its launch columns, the three census
    metrics, thousands separators, a units row and ncu's own lines before the CSV."""
    head = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
            "Grid Size", "Device", "CC", "device__attribute_display_name", "dram__bytes_read.sum",
            "dram__bytes_write.sum", "gpu__time_duration.sum"]
    out = io.StringIO()
    out.write("==PROF== Connected to process 7 (/usr/bin/python3)\n")
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(head)
    w.writerow([""] * 12 + ["byte", "byte", "ns"])
    for i, (name, grid, block, ns, rd, wr) in enumerate(launches):
        w.writerow([str(i), "7", "python3", "127.0.0.1", name, "1", "7", str(block), str(grid), "0", "9.0",
                    "NVIDIA H200", f"{rd:,.0f}", f"{wr:,.0f}", f"{ns:,.0f}"])
    out.write("==PROF== Disconnected from process 7\n")
    return out.getvalue()


GEMM = "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<const float>>(cublasGemmSmallNParams<T1, T2, T3, T4>)"
CELL = "void elemWiseRNNcell<float, float, float, (cudnnRNNMode_t)2, (cudnnRNNBiasMode_t)2>(int, int, int, int, T3 *, T1 *)"


def _lstm_like() -> list:
    """An RNN call's shape: thousands of launches of two library kernels, a few of a third, the version's own
    small kernel."""
    rows = []
    for i in range(3000):
        rows.append((GEMM, (8, 1, 1) if i % 2 else (16, 1, 1), (128, 1, 1), 3000.0, 40_000, 8_000))
        rows.append((CELL, (4, 1, 1), (256, 1, 1), 1800.0, 20_000, 10_000))
    rows += [("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(T1::Params)",
              (32, 4, 1), (128, 1, 1), 4500.0, 900_000, 300_000)] * 96
    rows += [("my_fused_cell", (132, 1, 1), (256, 1, 1), 900.0, 5_000, 5_000)] * 10
    return rows


def test_the_census_lists_every_launch_with_its_share_label_and_owner():

    recs = inventory.launches(_census(_lstm_like()))
    assert len(recs) == 6106 and recs[0]["duration_us"] == pytest.approx(3.0) and recs[0]["grid"] == [16, 1, 1]
    inv = inventory.table(recs, ["my_fused_cell"])
    assert inv["launches"] == 6106
    assert [r["label"] for r in inv["rows"]] == ["gemmSN_TN_kernel", "elemWiseRNNcell", "Kernel", "my_fused_cell"]
    assert [r["owner"] for r in inv["rows"]] == ["library", "library", "library", "own"]
    assert inv["rows"][0]["launches"] == 3000 and len(inv["rows"][0]["configs"]) == 2
    total = 3000 * 3.0 + 3000 * 1.8 + 96 * 4.5 + 10 * 0.9
    assert inv["kernel_time_us"] == pytest.approx(total) == inv["sums"]["duration_us"]
    assert inv["rows"][0]["share"] == pytest.approx(9000.0 / total)
    assert inv["sums"]["dram_bytes_write"] == 3000 * 8_000 + 3000 * 10_000 + 96 * 300_000 + 10 * 5_000


def test_the_budget_takes_the_own_kernels_first_then_the_largest_shares():

    inv = inventory.table(inventory.launches(_census(_lstm_like())), ["my_fused_cell"])
    chosen = inventory.choose(inv, inventory.Budget())
    assert {r["label"] for r in chosen} == {"my_fused_cell", "gemmSN_TN_kernel", "elemWiseRNNcell"}  # 97% of the time
    assert inventory.detail_filter(chosen) == [
        "--kernel-name-base", "function", "--kernel-name",
        "regex:^(?:\\w+::)*(?:elemWiseRNNcell|gemmSN_TN_kernel|my_fused_cell)$",
        "--filter-mode", "per-launch-config", "--launch-count", "1"]
    def labels(budget):
        return {r["label"] for r in inventory.choose(inv, budget)}

    assert labels(inventory.Budget(kernels=2)) == {"my_fused_cell", "gemmSN_TN_kernel"}
    assert labels(inventory.Budget(share=0.5)) == {"my_fused_cell", "gemmSN_TN_kernel"}
    # a kernel of many launch configurations is left out when it would pass the budget's configurations
    assert labels(inventory.Budget(kernels=2, configs=2)) == {"my_fused_cell", "elemWiseRNNcell"}


@pytest.mark.parametrize("bad, why", [({"kernels": 0}, "kernels must be"), ({"share": 1.5}, "share must be"),
                                      ({"kernel": 3}, "unknown key"), ({"configs": 2}, "configs must be"),
                                      ({"census": 5}, "census must be")])
def test_a_bad_budget_in_run_json_is_refused_in_one_line(bad, why):
    from kernel_loop.config import NcuConfig

    with pytest.raises(UsageError, match=why):
        NcuConfig.from_json({"budget": bad})
    assert NcuConfig.from_json({}).budget == {"kernels": 8, "share": 0.9, "configs": 16, "census": 400}
    # a run.json written before the census cap existed reads with the default cap
    assert NcuConfig.from_json({"budget": {"kernels": 4}}).budget["census"] == 400


def _census_of_two_kernels(extra: int) -> str:
    """The census of a call whose detailed pass is the two-kernel fixture: softmax_kernel 4 launches,
    row_max_kernel 1, and ``extra`` small library kernels that were not profiled."""
    rows = [("softmax_kernel", (8192, 1, 1), (128, 1, 1), 86_016.0, 1e6, 1e6)] * 4
    rows += [("row_max_kernel", (100, 1, 1), (128, 1, 1), 20_480.0, 2e5, 1e3)]
    rows += [(f"void at::native::lib_kernel_{i}<float>(int, float *)", (1, 1, 1), (64, 1, 1), 100.0, 64, 64)
             for i in range(extra)]
    return _census(rows)


def test_a_census_profile_sums_every_launch_and_stays_small_to_read():
    census = _census_of_two_kernels(300)
    p = ncu_json.build_profile(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"),
                              None, {"version": "v3", "kernel_file": "kernel.py", "defined_kernels": ["row_max_kernel"],
                                     "budget": {"kernels": 8, "share": 0.9, "configs": 16}}, census)
    total = 4 * 86.016 + 20.48 + 300 * 0.1
    assert p["inventory"]["source"] == "census" and p["inventory"]["launches"] == 305
    assert p["sums"]["duration_us"] == pytest.approx(total) == p["metrics"]["duration_us"]
    assert p["sums"]["dram_bytes_read"] == pytest.approx(4e6 + 2e5 + 300 * 64)
    soft = next(k for k in p["kernels"] if k["label"] == "softmax_kernel")
    assert soft["launches"] == 4 and soft["time_us"] == pytest.approx(4 * 86.016)
    assert p["focus"]["label"] == "row_max_kernel"
    rows = {r["label"]: r for r in p["inventory"]["rows"]}
    assert len(rows) == 302 and rows["softmax_kernel"]["profiled"] and not rows["lib_kernel_0"]["profiled"]
    text = ncu_json.render_summary(p)
    assert len(text.encode()) < 8_000, len(text.encode())  # the same few KB as a one-kernel profile
    many = ncu_json.render_summary({**p, "symptoms": p["symptoms"] * 5})  # a level-3 network's (35_LSTM's ran to 14 KB)
    assert f"{len(p['symptoms']) * 5 - ncu_json.SUMMARY_SYMPTOMS} more (further down the ranking)" in many
    assert len(many.encode()) < 8_000 and "What each key means: ncu_details.md" in text
    fewer = ncu_json.build_profile(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"),
                                  None, {"version": "v3", "kernel_file": "kernel.py", "defined_kernels": ["row_max_kernel"],
                                         "budget": {"kernels": 8, "share": 0.9, "configs": 16}},
                                  _census_of_two_kernels(20))
    assert abs(len(text) - len(ncu_json.render_summary(fewer))) < 300  # 300 kernels read like 20
    assert f"| {302 - ncu_json.SUMMARY_ROWS} more |" in text and "`lib_kernel_0`" in text
    assert "(from ncu's census of every launch" in text
    details = ncu_json.render_details(p)
    assert details.count("## Kernel ") == 2 and "Raw counters: in ncu_raw.csv" in details
    assert all(f"- **{s['tag']}**" in details for s in p["symptoms"]) and "## What the metric KEYs mean" in details


def test_the_summary_stays_within_its_bytes_at_a_networks_worst():
    """Seen on the H100: 35_LSTM's ncu_summary.md was 9,482 bytes at the first rung (warp stalls, the GPU state
    table, cuDNN's rule findings, the census's warnings).  Every part a network can grow, grown at once: the summary
    takes fewer rows and shorter texts until it fits, and ncu_details.md keeps each whole."""
    p = ncu_json.build_profile(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"),
                              _timing(1000.0), {"version": "v3", "kernel_file": "kernel.py",
                                                "defined_kernels": ["row_max_kernel"],
                                                "budget": {"kernels": 8, "share": 0.9, "configs": 16}},
                              _census_of_two_kernels(300))
    state = {w: {"available": True, "throttle_reasons": ["sw_thermal_slowdown", "sw_power_cap"], "sm_clock_mhz": 1980,
                 "mem_clock_mhz": 2619, "temperature_c": 60, "power_w": 500.0} for w in ("before", "after")}
    state["ncu_sm_clock_hz"] = 1.98e9
    long = "a warning of a network's profile that goes on, " * 12 + "and ends here"
    rules = [dict(r, text=r["text"] * 4) for r in p["kernels"][0]["rules"]] * 6
    kernels = [{**k, "rules": rules} for k in p["kernels"]]
    p.update(symptoms=p["symptoms"] * 5, warnings=[long] * 5, gpu_state=state, kernels=kernels,
             metrics={**p["metrics"], **{f"stall_{r}": 3.0 + i for i, r in enumerate(
                 ("long_scoreboard", "barrier", "short_scoreboard", "mio_throttle", "wait", "math_pipe_throttle"))},
                 "warp_latency_cycles": 40.0})
    text = ncu_json.render_summary(p)
    assert len(text.encode()) <= ncu_json.SUMMARY_BYTES, len(text.encode())
    assert "Warp stalls" in text and "sw_power_cap" in text and "| **all** |" in text and "## Warnings" in text
    assert "... (whole in ncu_details.md)" in text and long not in text
    details = ncu_json.render_details(p)
    assert details.count(long) == 5 and rules[0]["text"] in details
    many = ncu_json.render_summary({**p, "warnings": [long] * 40})  # a review's: one warning per metric, say
    assert len(many.encode()) <= ncu_json.SUMMARY_BYTES and "more warnings: in ncu_details.md" in many


def test_a_census_sum_above_the_event_time_refuses_the_timing():
    """The census is ncu's count of every launch, taken outside the kernel's process: an event time well below it
    (a forged timer, or work left running after the call) is refused, whatever the detailed pass covered."""
    with pytest.raises(MeasuredFailure, match="the timing is invalid"):
        ncu_json.build_profile(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"),
                              _timing(100.0), {"version": "v3", "kernel_file": "kernel.py",
                                               "tool": {"clock_control": "none"}}, _census_of_two_kernels(300))


def test_a_call_of_more_launches_than_the_census_cap_gets_a_sample_and_unknown_sums():
    """Seen on the H100: 35_LSTM's census (one ncu pass per launch, about 90 ms each) had not ended after 77 s, past
    launch 787 of thousands.  Past the budget's cap the census reads the call's first launches only: their shares
    are shown as theirs, the call's summed duration and DRAM bytes are unknown, and the time checks keep the
    sample's sum as the lower bound it is (an event time below even that is still refused)."""
    from kernel_loop.measure.under_ncu import census_capped
    from kernel_loop.steps import benchmark

    prefix = ["ncu", "--nvtx", "--metrics", "gpu__time_duration.sum", "-o", "/tmp/census", "-f"]
    budget = inventory.Budget(census=305)
    assert census_capped(prefix, 6000, budget) == (["ncu", "--nvtx", "--metrics", "gpu__time_duration.sum",
                                                     "--launch-count", "305", "-o", "/tmp/census", "-f"], True)
    assert census_capped(prefix, 305, budget) == (prefix, False) == census_capped(prefix, None, budget)
    # the version's own kernels the sample did not reach get the detailed pass too
    inv = inventory.table(inventory.launches(_census_of_two_kernels(300)), ["row_max_kernel", "late_own", "a.b"])
    assert inventory.unseen_own(inv, ["row_max_kernel", "late_own", "a.b"]) == ["late_own"]
    assert "late_own|" in inventory.detail_filter(inv["rows"][:1], ["late_own"])[3]
    ctx = {"version": "v3", "kernel_file": "kernel.py", "defined_kernels": ["row_max_kernel"],
           "budget": budget.to_json(), "census_sample": {"launches": 305, "counted": 6000},
           "tool": {"clock_control": "none"}}
    p = ncu_json.build_profile(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"),
                              _timing(1000.0), ctx, _census_of_two_kernels(300))
    total = 4 * 86.016 + 20.48 + 300 * 0.1
    assert p["sums"]["duration_us"] is None and p["sums"]["dram_bytes_read"] is None
    assert p["metrics"]["duration_us"] is None
    assert p["sums"]["duration_at_least_us"] == pytest.approx(total)
    assert p["inventory"]["sampled_of"] == 6000 and p["inventory"]["launches"] == 305
    assert any("read the first 305 of the call's 6000 launches" in w for w in p["warnings"])
    assert not any("cover only" in w for w in p["warnings"])  # a sample's time is not the call's
    multi = next(s for s in p["symptoms"] if s["tag"] == "multi-kernel")
    assert multi["why"].startswith("6000 kernel launches (the worker's count")
    text = ncu_json.render_summary(p)
    assert "in the first 305 of the call's 6000" in text and "unknown: at least" in text, text
    assert benchmark.ncu_bound(p) == pytest.approx(total)  # the benchmark's bound: the sample's sum
    with pytest.raises(MeasuredFailure, match="the timing is invalid"):
        ncu_json.build_profile(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"),
                              _timing(100.0), ctx, _census_of_two_kernels(300))


# --- timing.summarize ------------------------------------------------------------------------------------
# timing.summarize (pure, CPU): percentiles, spread, bad input.

def test_summarize_known_values():
    s = timing.summarize([7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0])  # 1..10, shuffled
    assert s["n"] == 10
    assert s["median"] == pytest.approx(5.5)
    assert s["p25"] == pytest.approx(3.25) and s["p75"] == pytest.approx(7.75)
    assert s["p20"] == pytest.approx(2.8) and s["p80"] == pytest.approx(8.2)
    assert s["mean"] == pytest.approx(5.5)
    assert s["min"] == 1.0 and s["max"] == 10.0
    assert s["std"] == pytest.approx(math.sqrt(sum((x - 5.5) ** 2 for x in range(1, 11)) / 9))


def test_summarize_matches_numpy_on_random_samples():
    rng = random.Random(7)
    xs = [rng.lognormvariate(3.0, 0.4) for _ in range(257)]
    s = timing.summarize(xs)
    for q, key in ((20, "p20"), (25, "p25"), (50, "median"), (75, "p75"), (80, "p80")):
        assert s[key] == pytest.approx(np.percentile(xs, q))
    assert s["std"] == pytest.approx(np.std(xs, ddof=1))


def test_single_sample():
    s = timing.summarize([12.5])
    assert s["median"] == s["p20"] == s["p80"] == s["min"] == s["max"] == 12.5
    assert s["std"] == 0.0 and s["n"] == 1


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summarize_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        timing.summarize(bad)


class _FakeTorch:
    """Just enough of torch for time_callable on a machine without a GPU: counts the flush-buffer
    allocations and writes.  Times are fake; only the buffer handling is under test here."""

    int32 = "int32"

    def __init__(self):
        import contextlib
        import types

        self.allocations, self.fills = [], []
        fake = self

        class Buffer:
            def __init__(self, n):
                self.n = n

            def numel(self):
                return self.n

            def fill_(self, value):
                fake.fills.append((id(self), value))

        class Event:
            def __init__(self, enable_timing):
                self.t = None

            def record(self):
                self.t = len(fake.fills)

            def elapsed_time(self, end):
                return 0.001 * (1 + end.t)

        self.Buffer = Buffer
        self.cuda = types.SimpleNamespace(
            current_device=lambda: 0, device=lambda dev: contextlib.nullcontext(), synchronize=lambda dev=None: None,
            Event=Event, get_device_properties=lambda dev: types.SimpleNamespace(L2_cache_size=50 << 20))

    def device(self, kind, index=None):
        import types

        if index is None and ":" in kind:
            kind, index = kind.split(":")[0], int(kind.split(":")[1])
        return types.SimpleNamespace(type=kind, index=index)

    def empty(self, n, dtype, device):
        self.allocations.append((n, dtype, device.index))
        return self.Buffer(n)


def test_flush_buffer_is_allocated_once_per_device_and_written_every_call(monkeypatch):
    import sys

    fake = _FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(timing, "_FLUSH_BUFFERS", {})
    monkeypatch.setattr(timing, "_P", None)  # bind the fake's primitives
    calls = []
    timer = timing.CallTimer("cuda:0")
    for _ in range(5):  # the worker times one call at a time
        value, us, host, delay = timer.time(lambda: calls.append(1) or "v", "k")
        assert value == "v" and us >= 0 and host >= 0
    assert fake.allocations == [(2 * (50 << 20) // 4, "int32", 0)]
    assert len(fake.fills) == 5 and len({buf for buf, _ in fake.fills}) == 1 and len(calls) == 5
    other = timing.CallTimer("cuda:1")
    for _ in range(3):
        other.time(lambda: None, "k")
    assert [a[2] for a in fake.allocations] == [0, 1]  # a second device gets its own buffer
    assert [v for _, v in fake.fills[5:]] == [1, 2, 3]  # still one write per call


def test_the_delay_follows_each_callables_own_dispatch_time(monkeypatch):
    timer = timing.CallTimer("cpu")
    assert timer.delay_us("a") == timing.FIRST_DELAY_US  # before anything is known (the first call compiles)
    timer.host["a"] = [100.0, 5.0, 5.0, 5.0, 5.0, 5.0]  # the first call's compile is forgotten after five
    assert timer.delay_us("a") == 2 * 5.0 + timing.HOST_MARGIN_US
    timer.host["b"] = [1e6]
    assert timer.delay_us("b") == timing.MAX_DELAY_US


def test_the_timer_keeps_the_clock_it_bound_before_a_kernel_patched_it(monkeypatch):
    import time as time_mod

    monkeypatch.setattr(timing, "_P", None)
    timing.bind()
    frozen = time_mod.perf_counter()
    monkeypatch.setattr(time_mod, "perf_counter", lambda: frozen)  # what a cheating kernel does at import
    timer = timing.CallTimer("cpu")
    assert min(timer.time(lambda: sum(range(20000)))[1] for _ in range(3)) > 0


def test_the_budget_counts_the_template_instances_of_one_function_together():
    """ncu's filter matches a function name, so two instances of one template (x * 1.0 and y + 0.0 in PyTorch's
    elementwise kernel) are chosen, and counted, together."""

    mul = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, std::array<char *, 2>>(int, T2, T3)"
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, std::array<char *, 2>>(int, T2, T3)"
    rows = [(mul, (4096, 1, 1), (128, 1, 1), 5000.0, 0, 0)] * 20 + [(add, (4096, 1, 1), (128, 1, 1), 4000.0, 0, 0)] * 20
    rows += [("own_add", (4096, 1, 1), (128, 1, 1), 6000.0, 0, 0)]
    inv = inventory.table(inventory.launches(_census(rows)), ["own_add"])
    assert [r["label"] for r in inv["rows"]] == ["vectorized_elementwise_kernel", "vectorized_elementwise_kernel#2",
                                                 "own_add"]
    chosen = inventory.choose(inv, inventory.Budget(kernels=2))
    assert [r["label"] for r in chosen] == ["vectorized_elementwise_kernel", "vectorized_elementwise_kernel#2",
                                            "own_add"]  # the call's order: largest time first
    assert inventory.detail_filter(chosen)[3] == "regex:^(?:\\w+::)*(?:own_add|vectorized_elementwise_kernel)$"
    assert [r["label"] for r in inventory.choose(inv, inventory.Budget(kernels=1))] == ["own_add"]


def test_a_kernel_named_prediction_is_scored_on_profiles_the_profiler_built():
    """End to end on what build_profile writes (not hand-made dicts): v0 is the two-kernel call with its census,
    v1 the same call with row_max_kernel fused away.  A prediction on row_max_kernel's time scores 0 after it is
    gone (held), one on softmax_kernel's SM throughput is scored on softmax_kernel in both, and the call's
    duration is the census sum."""
    from kernel_loop import predictions

    ctx = {"version": "v0", "kernel_file": "kernel.py", "defined_kernels": ["row_max_kernel", "softmax_kernel"]}
    v0 = ncu_json.build_profile(_text("two_kernels_detailed_raw.csv"), _text("two_kernels_detailed_details.csv"),
                                None, ctx, _census_of_two_kernels(3))
    v1 = ncu_json.build_profile(_text(RAW), _text(DETAILS), None, dict(ctx, version="v1"))
    recs = predictions.kernel_records(v0)
    assert set(recs) >= {"softmax_kernel", "row_max_kernel", "lib_kernel_0"}
    preds = predictions.parse_lines(["row_max:time_us: -90%", "softmax_kernel:sm_throughput_pct: >= 20",
                                     "duration: -5%"], set(v0["metrics"]), recs)
    assert [p["kernel"] for p in preds] == ["row_max_kernel", "softmax_kernel", None]
    scored = [predictions.score_versions(p, v0, v1) for p in preds]
    assert scored[0]["status"] == "held" and scored[0]["after"] == 0
    assert scored[1]["status"] == "held" and scored[1]["after"] == pytest.approx(22.46)
    assert scored[2]["before"] == pytest.approx(4 * 86.016 + 20.48 + 3 * 0.1)
    with pytest.raises(UsageError, match="lib_kernel_0 was not profiled"):
        predictions.parse_lines(["lib_kernel_0:dram_throughput_pct: +5"], set(v0["metrics"]), recs)


@pytest.mark.parametrize("page", ["h200_transpose_v0_raw.csv", "softmax_triton_metrics_raw.csv"])
def test_the_census_reader_agrees_with_the_full_parser_on_real_pages(page):
    """inventory.launches reads only the census's columns; on real raw pages (a full H200 set, and a three-metric
    H100 run like the census) it gives the duration and DRAM bytes the full parser maps to KEYs."""
    from kernel_loop.profiling import ncu_parse

    got = inventory.launches(_text(page))
    full = [metrics.extract(k)[0] for k in ncu_parse.parse(_text(page), None)]
    assert len(got) == len(full) == 1
    assert got[0]["duration_us"] == pytest.approx(full[0]["duration_us"])
    assert got[0]["dram_bytes_read"] == full[0]["dram_bytes_read"]
    assert got[0]["grid"] and got[0]["block"] and got[0]["name"]


def test_the_report_is_kept_compressed_and_whole(tmp_path):
    """profile keeps ncu's report gzip-compressed; a compression that fails leaves the earlier file as it was."""
    import gzip

    src, dest = tmp_path / "profile.ncu-rep", tmp_path / "profile.ncu-rep.gz"
    src.write_bytes(b"ncu" * 100_000)
    profile._compress(src, dest)
    assert gzip.decompress(dest.read_bytes()) == src.read_bytes() and dest.stat().st_size < 10_000
    before = dest.read_bytes()
    with pytest.raises(FileNotFoundError):
        profile._compress(tmp_path / "missing.ncu-rep", dest)
    assert dest.read_bytes() == before and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_launch_count_keeps_torchs_profiler_warning_out_of_the_output(recwarn):
    """An agent's trial: profile printed torch's "Profiler clears events at the end of each cycle" UserWarning,
    which read as an error; the launch count (a hint) reads its one cycle without it."""
    import types
    import warnings

    from kernel_loop.timing import LaunchCount

    def events():
        warnings.warn("Warning: Profiler clears events at the end of each cycle.", UserWarning, stacklevel=2)
        return [types.SimpleNamespace(device_type="DeviceType.CUDA", name="k", device_time=2.0)]

    lc = LaunchCount("cpu")
    lc.prof = types.SimpleNamespace(events=events)
    assert lc.result() == {"launches": 1, "kernels": [["k", 1, 2.0]]}
    assert not [w for w in recwarn if "Profiler clears" in str(w.message)]


def test_the_launch_count_enters_a_fresh_profiler_each_call(recwarn, monkeypatch):
    """The second agent's trial saw that warning again: torch warns when one profiler is entered a second time (the
    timer may call the call more than once), not only when its events are read.  A fresh one each call (a CPU
    profiler here, CUDA's needs a GPU)."""
    import torch
    from kernel_loop.timing import LaunchCount
    from torch.profiler import ProfilerActivity, profile

    monkeypatch.setattr(LaunchCount, "_new", staticmethod(lambda: profile(activities=[ProfilerActivity.CPU])))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    lc = LaunchCount("cpu")
    call = lc.around(lambda: torch.ones(4).sum())
    for _ in range(3):
        assert float(call()) == 4.0
    assert not [w for w in recwarn if "Profiler clears" in str(w.message)]


def test_a_minor_kernels_tags_rank_last_and_stay_out_of_the_drafts():
    """An agent's trial (96_HuberLoss, H100): torch's reduce_kernel, 0.3% of the call, put its occupancy gap in the
    summary's five tags beside the Triton kernel's (99.6%) and its small grid and launch overhead in hypothesis.txt's
    draft.  A kernel under inventory.MINOR_SHARE of the largest kernel's time is minor: its tags come after the call's
    own (multi-kernel), are counted apart in ncu_summary.md, and are left out of the drafts."""
    from kernel_loop.kbs import evidence
    from kernel_loop.steps import hypothesis

    p = ncu_json.build_profile(_text("h100_huber_v0_raw.csv"), _text("h100_huber_v0_details.csv"), None,
                               {"version": "v0", "kernel_file": "kernel.py", "defined_kernels": ["_huber_partial"]})
    shares = {k["label"]: k["share"] for k in p["kernels"]}
    assert shares["_huber_partial"] > 0.99 and shares["reduce_kernel"] < 0.01
    tags = [(s["tag"], s.get("label"), bool(s.get("minor"))) for s in p["symptoms"]]
    small = [t for t in tags if t[2]]
    assert small and all(label in ("reduce_kernel", "vectorized_elementwise_kernel") for _, label, _ in small), tags
    assert ("achieved-occupancy-gap", "reduce_kernel", True) in tags
    first_minor = tags.index(small[0])
    assert all(not m for *_, m in tags[:first_minor]) and tags[first_minor - 1][0] == "multi-kernel", tags
    assert all(label == "_huber_partial" for t, label, _ in tags[:first_minor - 1]), tags
    text = ncu_json.render_summary(p)
    table = text.split("## Symptom tags", 1)[1].split("## ", 1)[0]
    assert "| **achieved-occupancy-gap** |" not in table and "| **dram-near-peak** |" in table
    assert "of kernels with less than 5% of the largest kernel's time, left out of the drafts: " in table
    assert "achieved-occupancy-gap" in table.split("left out of the drafts: ", 1)[1]
    drafted = hypothesis.current_evidence(p, {})["symptoms"]
    assert [s["tag"] for s in drafted] == [t for t, _, m in tags if not m]
    view = evidence.kernel_view(p)
    assert {s["tag"] for s in view["fired"]} == {t for t, _, m in tags if not m}


def test_the_two_drafts_leave_out_the_same_minor_kernels_also_when_the_own_kernel_is_minor():
    """A review: with the version's only own kernel minor (an epilogue at 3% beside a library GEMM's 97%), the KBS draft
    fell back to the own kernel's tags while hypothesis.txt's draft left them out, so the two drafts spoke of
    different kernels; and an ncu.json written before the flag was filtered by the one and not the other.  Both read
    the shares now (profiling.inventory.minor)."""
    import runfixture as rf
    from kernel_loop.kbs import evidence
    from kernel_loop.steps import hypothesis

    ncu = rf.schema2_ncu({"schema": 1}, [
        rf.kernel_spec("gemm_sm90_tn", "library", 1, 970.0, {"registers_per_thread": 168}, ["low-occupancy"],
                       "compute-bound"),
        rf.kernel_spec("my_epilogue", "own", 1, 30.0, {"registers_per_thread": 32}, ["uncoalesced-global"],
                       "memory-bound")], 1000.0)
    for s in ncu["symptoms"]:
        s.pop("minor", None)  # as a profile written before the flag
    drafted = {s["tag"] for s in hypothesis.current_evidence(ncu, {})["symptoms"]}
    kbs = {s["tag"] for s in evidence.kernel_view(ncu)["fired"]}
    assert drafted == kbs and "low-occupancy" in kbs and "uncoalesced-global" not in kbs, (drafted, kbs)


def test_the_launch_counters_profiler_says_nothing_of_its_cycles(recwarn, monkeypatch):
    """torch warns that a profiler started again 'clears events at the end of each cycle' (seen in profile's output on
    the device, and an agent asked what it meant): the worker's launch counter, which reads one call a cycle, hides it."""
    import torch.profiler as tp
    import torch.profiler.profiler as tpp
    from kernel_loop.timing import LaunchCount

    if hasattr(tpp, "_WARNINGS_SHOWN"):  # torch says it once a process: an earlier test may have had it said
        monkeypatch.setattr(tpp, "_WARNINGS_SHOWN", set())
    LaunchCount("cpu")
    p = tp.profile(activities=[tp.ProfilerActivity.CPU])
    for _ in range(2):
        with p:
            pass
    assert not [w for w in recwarn if "clears events" in str(w.message)]
