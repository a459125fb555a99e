"""profile: CSV -> ncu.json (build_profile), trust checks, warnings, rendering, refusals, child errors."""

from __future__ import annotations

import argparse
import csv
import io
import json

import pytest
from conftest import FIXTURES
from kernel_loop import gpustate, records
from kernel_loop.common import (
    KernelLoopError,
    MeasuredFailure,
    UsageError,
    read_json,
    sha256_file,
    write_json,
)
from kernel_loop.config import DEFAULT_NCU_SECTIONS, RunConfig
from kernel_loop.profiling import metrics
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
    return profile.build_profile(_text(raw) if raw else None, _text(details) if details else None, timing,
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
    assert p["metrics"]["duration_us"] == pytest.approx(86.016 + 20.48)
    assert p["metrics"]["sm_throughput_pct"] == pytest.approx(22.46)    # softmax_kernel is the longest
    assert p["kernels"][1]["bottleneck"] == "latency-bound"              # 35.10 / 40.20
    assert p["bottleneck"] == "memory-bound"
    by_tag = {s["tag"]: s for s in p["symptoms"]}
    assert "multi-kernel" in by_tag
    assert by_tag["small-grid"]["kernel"] == "row_max_kernel"           # grid 100 < 132 SMs
    assert by_tag["dram-near-peak"]["kernel"] == "softmax_kernel"
    text = profile.render_summary(p)
    assert "**total**" in text and "row_max_kernel" in text and "multi-kernel" in text


# --- trust checks -----------------------------------------------------------------------------
def test_no_kernel_caught_is_a_failure():
    noise = "==PROF== Connected to process 9\n==WARNING== No kernels were profiled.\n"
    with pytest.raises(MeasuredFailure, match="caught no kernel"):
        profile.build_profile(noise, noise, None, {})


def test_zero_duration_is_a_failure():
    with pytest.raises(MeasuredFailure, match="zero duration"):
        profile.build_profile(_edit_raw("gpu__time_duration.sum", "0"), None, None, {})


def test_nan_sol_is_a_failure():
    with pytest.raises(MeasuredFailure, match="sm_throughput_pct .* NaN"):
        profile.build_profile(_edit_raw("sm__throughput.avg.pct_of_peak_sustained_elapsed", "nan"), None, None, {})


def test_nan_in_other_metric_becomes_null_with_a_warning():
    p = profile.build_profile(_edit_raw("lts__t_sector_hit_rate.pct", "nan"), None, None, {})
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
    assert "measured under a different protocol than v0" in profile.render_summary(p)
    same = _build(tool=tool, baseline_protocol=dict(base, clock_control="none"))
    assert not any("different protocol" in x for x in same["warnings"])


def test_gpu_slowdown_during_timing_warns():
    state = {"before": {"available": True, "throttle_reasons": ["gpu_idle"]},
             "after": {"available": True, "throttle_reasons": ["sw_thermal_slowdown"], "sm_clock_mhz": 1500,
                       "mem_clock_mhz": 2619, "temperature_c": 85, "power_w": 690.0}}
    state["before"].update(sm_clock_mhz=345, mem_clock_mhz=2619, temperature_c=40, power_w=90.0)
    p = _build(gpu_state=state)
    assert any("sw_thermal_slowdown" in w for w in p["warnings"])
    assert "sw_thermal_slowdown" in profile.render_summary(p)


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
    files = profile.write_profile_artifacts(tmp_path, p)
    assert [f.name for f in files] == ["ncu_summary.md", "ncu_details.md", "ncu.json"]
    summary = (tmp_path / "ncu_summary.md").read_text()
    assert "**memory-bound at DRAM**" in summary
    assert "dram-near-peak" in summary and "dram_throughput_pct >= 80" in summary
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
        p = profile.build_profile(raw, _text(DETAILS), None, {"version": "v1", "kernel_file": "kernel.py",
                                                                "kernel_source": source})
        return {s["tag"] for s in p["symptoms"]}, p

    assert "tensor-cores-unused" not in tags(no_dot)[0]
    assert "tensor-cores-unused" in tags(with_dot)[0]
    got, p = tags(no_dot)
    assert p["bottleneck"] == "memory-bound" and p["bottleneck_level"] == "DRAM"
    assert "| Bottleneck | **memory-bound at DRAM** |" in profile.render_summary(p)
