"""Kernels that cheat, and the checks that must refuse them (CPU; the GPU-only ones are in *_gpu.py).

Each cheat here is a real kernel (tests/python/kernels/adversarial.txt) run through the real
correctness step in the CPU mode, or a real profile/benchmark computation on recorded numbers.
Every cheat must FAIL with a message that names it; the honest kernels beside them must PASS.
"""

from __future__ import annotations

import json
import random
import types

import klcli
import pytest
from conftest import FIXTURES
from kernel_loop import static_check, timecheck
from kernel_loop.common import MeasuredFailure
from kernel_loop.measure import judge as judge_mod
from kernel_loop.steps import benchmark as B
from klcli import KERNELS


@pytest.fixture(autouse=True)
def cpu_mode(monkeypatch, judge_here):
    """The cpu mode, with the judge in this process (conftest.judge_here): what is under test here is the
    judge's verdict on each kernel; the judge as the CLI's child process is what test_correctness.py and
    test_judge.py run.  The tests that take ``worker_here`` run the kernel's worker as a thread of this
    process too (the real worker code; conftest.worker_here); the kernels that act on their process (patch
    the comparison or the clock, read the record key) keep a real worker process."""
    monkeypatch.setenv("KERNEL_LOOP_DEVICE", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _correctness(tmp_path, ref, kernel, dims, *extra):
    out = tmp_path / "run"
    assert klcli.init_run(out, ref, kernel, "triton", dims, *extra) == 0
    rc = klcli.main("correctness", out)
    data = json.loads((out / "v0" / "correctness.json").read_text())
    return rc, data, (out / "v0" / "correctness.md").read_text()


def _rows(data):
    return [o for s in data["shapes"] for t in s["trials"] for o in t["outputs"]]


# --- small outputs cannot hide wrong values ------------------------------------------------------
def test_constant_softmax_fails_the_normwise_bound(tmp_path, worker_here):
    rc, data, md = _correctness(tmp_path, "ref_softmax_rand.py", "cheat_softmax_const.py", "M=16,N=8192")
    assert rc == 1 and data["result"] == "FAIL"
    rows = [o for s in data["shapes"] for t in s["trials"] for o in t["outputs"] if t["condition"] == "plain"]
    assert all(r["mismatches"] == 0 for r in rows)  # the hole: on the problem's inputs every element is within atol
    assert all("relative L2 error" in r["note"] and r["rel_l2_err"] > 0.1 for r in rows)
    assert "Rel L2 limit" in md and "relative L2 error" in data["error"]


def test_an_honest_reordered_softmax_passes_the_normwise_bound(tmp_path, worker_here):
    rc, data, _md = _correctness(tmp_path, "ref_softmax_rand.py", "honest_softmax_reordered.py", "M=16,N=8192")
    assert rc == 0, data["error"]
    assert all(r["rel_l2_err"] < r["tolerance"]["rel_l2"] / 10 for r in _rows(data))


def test_the_normwise_limit_is_overridable_and_recorded(tmp_path, worker_here):
    scaled = tmp_path / "scaled.py"
    scaled.write_text("import torch\n\n\ndef run_kernel(x, M, N):\n    return 1.3 * torch.softmax(x, dim=-1)\n")
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "scaled", "--ref", KERNELS / "ref_softmax_rand.py", "--impl", "triton",
                      "--baseline", scaled, "--dims", "M=16,N=8192", "--skip-env", "--rel-l2", "0.5",
                      "--rtol", "0.5") == 0  # rtol too: at inputs scaled up the outputs reach 1, far above atol
    rc = klcli.main("correctness", out)
    data = json.loads((out / "v0" / "correctness.json").read_text())
    md = (out / "v0" / "correctness.md").read_text()
    assert rc == 0  # the user explicitly allowed 50 % (this one is 30 % off): recorded, and shown in correctness.md
    assert all(r["tolerance"]["rel_l2"] == 0.5 and r["tolerance"]["rel_l2_source"] == "cli" for r in _rows(data))
    assert "| 0.500000 |" in md


# --- state between calls ------------------------------------------------------------------------
def test_a_kernel_right_only_on_odd_calls_fails(tmp_path, worker_here):
    rc, data, _md = _correctness(tmp_path, "ref_softmax_rand.py", "cheat_softmax_every_other.py", "M=16,N=8192")
    assert rc == 1
    passed = [t["passed"] for s in data["shapes"] for t in s["trials"]]
    assert passed == [i % 2 == 0 for i in range(len(passed))]  # the same module instance served every trial


def test_a_modelnew_that_replays_its_first_result_fails(tmp_path, worker_here):
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "softmax", "--ref", klcli.KERNELS / "kb_ref_softmax.py", "--impl",
                      "triton", "--baseline", klcli.KERNELS / "kb_cheat_cache_first.py", "--dims",
                      "batch_size=16,dim=8192", "--skip-env") == 0
    assert klcli.main("correctness", out) == 1
    data = json.loads((out / "v0" / "correctness.json").read_text())
    trials = [t for s in data["shapes"] for t in s["trials"]]
    assert not any(t["passed"] for t in trials[1:])
    # the first result was right when returned and it never changed (the kernel keeps it, as a compile cache may);
    # every later call returned it again, a wrong answer
    assert [o["passed"] for o in trials[0]["outputs"]] == [True]


# --- inputs stay untouched -----------------------------------------------------------------------
def test_a_kernel_that_zeroes_its_input_fails_naming_the_input(tmp_path, worker_here):
    rc, data, _md = _correctness(tmp_path, "ref_vadd.py", "cheat_vadd_zero_input.py", "N=1000")
    assert rc == 1
    bad = [r for r in _rows(data) if not r["passed"]]
    assert bad and all(r["name"] == "input x" and "changed its input 'x'" in r["note"] for r in bad)
    assert "changed its input 'x'" in data["error"]


# --- work outside the timed window ---------------------------------------------------------------
def _profile(timing_median, clock_control, event_clock_mhz=None):
    """build_profile on the recorded H100 softmax (86.0 us under ncu) with a chosen event median."""
    from kernel_loop.profiling import ncu_json

    raw = (FIXTURES / "ncu" / "softmax_triton_detailed_raw.csv").read_text()
    details = (FIXTURES / "ncu" / "softmax_triton_detailed_details.csv").read_text()
    t = {"method": "cuda_event", "warmup": 1, "trials": 1, "l2_flush": True, "samples_us": [timing_median],
         "median": timing_median, "p20": timing_median, "p25": timing_median, "p75": timing_median,
         "p80": timing_median, "mean": timing_median, "min": timing_median, "max": timing_median, "std": 0.0, "n": 1}
    ctx = {"tool": {"clock_control": clock_control}, "gpu_state": {"sm_clock_mhz": event_clock_mhz}}
    return ncu_json.build_profile(raw, details, t, ctx)


def test_ncu_duration_above_the_event_median_makes_the_timing_invalid():
    # the recorded softmax ran 86.0 us under ncu; an event median of 30 us cannot be honest
    with pytest.raises(MeasuredFailure, match="work not joined to the caller's stream"):
        _profile(30.0, "none")
    _profile(86.016 * 1.02, "none")  # honest: the event window holds the kernel and its launch


def test_locked_ncu_clocks_are_scaled_before_judging():
    # ncu locked the SM clock (the recording ran at 1598 MHz); the timing ran at 1980 MHz
    p = _profile(72.0, None, event_clock_mhz=1980.0)  # 86.0 * 1598 / 1980 = 69.4 <= 72 * 1.1: not invalid
    assert p["metrics"]["event_median_us"] == 72.0
    with pytest.raises(MeasuredFailure, match="scaled by its locked SM clock"):
        _profile(40.0, None, event_clock_mhz=1980.0)
    # without the timing run's clock the check cannot decide and stays a warning
    p = _profile(40.0, None)
    assert any("differs from the CUDA-event median" in w for w in p["warnings"])


@pytest.mark.parametrize("ncu_us, event_us, clock, ncu_hz, event_mhz, invalid", [
    (100.0, 100.0, "none", None, None, False),
    (111.0, 100.0, "none", None, None, True),
    (109.0, 100.0, "none", None, None, False),
    (130.0, 100.0, "base", 1.40e9, 1980.0, False),
    (200.0, 100.0, "base", 1.40e9, 1980.0, True),
    (500.0, 100.0, "base", None, 1980.0, False),
])
def test_timing_invalid_rule(ncu_us, event_us, clock, ncu_hz, event_mhz, invalid):
    assert bool(timecheck.timing_invalid(ncu_us, event_us, clock, ncu_hz, event_mhz)) is invalid


# --- impossible numbers --------------------------------------------------------------------------
ENV = {"peaks": {"copy_bandwidth_gbps": 4000.0, "bf16_matmul_tflops": 790.0, "fp32_matmul_tflops": 50.0}}


def test_bandwidth_above_the_copy_peak_is_impossible():
    nbytes = 8e9
    assert B.impossible(None, nbytes, 2000.0, "float32", ENV) is None            # 4.0 TB/s: at the peak
    assert B.impossible(None, nbytes, 1800.0, "float32", ENV) is None            # 4.4 TB/s: within the slack
    why = B.impossible(None, nbytes, 1000.0, "float32", ENV)                     # 8 TB/s
    assert why and "above the measured copy peak" in why


def test_flop_rate_above_the_matmul_peak_is_impossible():
    flops = 2 * 8192 ** 3
    assert B.impossible(flops, None, 1500.0, "bfloat16", ENV) is None           # 733 TFLOP/s
    assert "above the measured bf16 matmul peak" in B.impossible(flops, None, 1000.0, "bfloat16", ENV)


def test_an_impossible_solution_row_is_invalid_and_has_no_speedups():
    import runfixture as rf

    res = rf.synthetic_child_result()
    res["bytes_moved"] = 1e12  # 1 TB in ~82 us
    env = {"peaks": {"copy_bandwidth_gbps": 3300.0}}
    bench = B.finish(res, version="v3", selection="best", timing={}, tolerance=None, env=env)
    sol = next(r for r in bench["rows"] if r["name"] == "solution")
    assert "above the measured copy peak" in sol["invalid"]
    assert bench["speedups"] == {} and any("solution is invalid" in f for f in bench["flags"])


def test_a_speedup_above_ten_times_v0_is_flagged():
    import runfixture as rf

    res = rf.synthetic_child_result()
    v0 = next(it for it in res["items"] if it["name"] == "v0")
    v0["samples_us"] = [x * 20 for x in v0["samples_us"]]
    bench = B.finish(res, version="v3", selection="best", timing={}, tolerance=None, env=None)
    assert any("over v0 is above 10x" in f for f in bench["flags"])


# --- found by an adversarial review -----------------------------------------------------------------
def test_a_reference_that_returns_its_output_buffer_still_has_its_own_expected_values(tmp_path, worker_here):
    rc, data, _md = _correctness(tmp_path, "ref_double_returns_buffer.py", "cheat_fill_42.py", "N=4096")
    assert rc == 1 and not any(r["passed"] for r in _rows(data))


def test_an_output_that_is_a_view_of_an_input_fails(tmp_path, worker_here):
    rc, data, _md = _correctness(tmp_path, "ref_transpose.py", "cheat_transpose_view.py", "N=64")
    assert rc == 1
    assert all("shares memory with the input 'x'" in r["note"] for r in _rows(data))


def test_an_output_that_views_an_input_at_an_offset_fails(tmp_path, worker_here):
    rc, data, _md = _correctness(tmp_path, "ref_drop_first_row.py", "cheat_drop_first_row_view.py", "N=64")
    assert rc == 1
    assert all("shares memory with the input 'x'" in r["note"] for r in _rows(data))


def test_unwritten_elements_fail_even_where_the_reference_is_nan(tmp_path, worker_here):
    rc, data, _md = _correctness(tmp_path, "ref_sqrt_into.py", "cheat_sqrt_skip_negative.py", "N=4096")
    assert rc == 1
    trials = [t for s in data["shapes"] for t in s["trials"]]
    # the finite poison of odd calls shows the gaps (inputs shifted up have no negative value, so no gap)
    assert not [t for t in trials[1::2] if t["passed"] and not t["condition"].startswith("range:shift")]


def test_an_explicit_default_rtol_does_not_loosen_the_normwise_bound():
    from kernel_loop.compare import resolve_tolerance

    same = resolve_tolerance({"atol": 1e-4, "rtol": 1e-3, "by": {"atol": "ref.py", "rtol": "ref.py"}}, None, None,
                             "float32")
    looser = resolve_tolerance({"atol": None, "rtol": 1e-2, "by": {"rtol": "cli"}}, None, None, "float32")
    assert same["rel_l2"] == 1e-5 and looser["rel_l2"] == pytest.approx(1e-4)


def test_the_input_fingerprint_has_no_short_period():
    import torch
    from kernel_loop import tensors

    x = torch.randn(200_000)
    y = x.clone()
    y[[0, 65521]] = y[[65521, 0]]  # a swap that a weight repeating every 65521 positions would not see
    assert tensors.fingerprint(y) != tensors.fingerprint(x)


# --- isolation: the verdict and the clock live where the kernel's code never ran -------------------
def test_a_kernel_that_patches_the_comparison_at_import_still_fails(tmp_path, monkeypatch):
    """The static check refuses it first (exit 2); behind it, the judge never ran its code."""
    out = tmp_path / "refused"
    assert klcli.init_run(out, "ref_softmax_rand.py", "cheat_patch_comparator.py", "triton", "M=16,N=256") == 0
    assert klcli.main("correctness", out) == 2 and not (out / "v0" / "correctness.json").exists()
    monkeypatch.setattr(static_check, "check_kernel_source", lambda path: None)
    rc, data, _md = _correctness(tmp_path, "ref_softmax_rand.py", "cheat_patch_comparator.py", "M=16,N=256")
    assert rc == 1 and data["result"] == "FAIL"
    assert _rows(data) and not any(r["passed"] for r in _rows(data))


def test_a_kernel_that_patches_the_clock_and_torch_at_import_changes_no_timing(tmp_path, monkeypatch):
    monkeypatch.setattr(static_check, "check_kernel_source", lambda path: None)  # the defence behind it
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_softmax_rand.py", "cheat_patch_clock.py", "triton", "M=16,N=256") == 0
    assert klcli.main("correctness", out) == 0  # its outputs are right: only its timing tricks are under test
    from kernel_loop.config import RunConfig

    cfg = RunConfig.from_json(json.loads((out / "run.json").read_text()))
    spec = {"run_root": str(out), "cfg": cfg.to_json(), "device": "cpu", "tolerance": cfg.tolerance,
            "solution": {"version": "v0", "kernel": str(out / "v0" / "kernel.py")}, "versions": [], "ab": [],
            "baselines": ["pytorch-eager"], "method": "host_time", "warmup": 1, "trials": 5, "discard_first": 0}
    res = B.measure_all(spec, cfg, 120.0)
    items = {it["name"]: it for it in res["items"]}
    sol, eager = items["solution"], items["pytorch-eager"]
    assert sol["correct"] and sol["correct_after"]
    assert min(sol["samples_us"]) > 0  # the frozen perf_counter did not reach the timer
    assert max(eager["samples_us"]) < 100_000  # the 200 ms slowed-down torch.softmax never reached the baselines


# --- library fallbacks are visible --------------------------------------------------------------------
def test_kernel_names_are_read_from_every_kind_of_source():
    from kernel_loop.profiling.kernel_names import defined_kernels

    cu = "template <int B>\n__global__ void __launch_bounds__(256) transpose_tile(const float* x) {}\n" \
         "__global__ static void k2(int n) {}\n"
    py = ("import triton\n@triton.autotune(configs=[], key=['N'])\n@triton.jit\ndef softmax_kernel(x, N):\n    pass\n"
          "@cute.kernel\ndef gemm_k(a):\n    pass\n@staticmethod\ndef helper():\n    pass\n"
          "src = '''__global__ void relu_kernel(float* x) {}'''\n")
    assert defined_kernels(cu) == ["transpose_tile", "k2"]
    assert defined_kernels(py) == ["relu_kernel", "softmax_kernel", "gemm_k"]


def test_a_version_that_runs_only_library_kernels_is_noted_not_failed():
    from kernel_loop.profiling.kernel_names import library_note

    torch_only = ["void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, ...)"]
    note = library_note(torch_only, ["softmax_kernel"], "kernel.py")
    assert note and note.startswith("library fallback") and "softmax_kernel" in note and "cunn_SoftMaxForward" in note
    assert library_note(["softmax_kernel_0d1d2d"], ["softmax_kernel"], "kernel.py") is None  # Triton's suffix
    assert library_note(["softmax_kernel_fast"], ["softmax_kernel"], "kernel.py") is not None  # another kernel
    assert library_note(["softmax_kernel"], ["softmax_kernel"], "kernel.py") is None
    assert library_note(["void transpose_tile<32>(float const*)"], ["transpose_tile"], "kernel.cu") is None
    assert "defines no kernel of its own" in library_note(torch_only, [], "kernel.py")
    # CuTe DSL's compiled name, as ncu showed it on the H200 (nvidia-cutlass-dsl 4.2.1)
    dsl = "kernel_cutlass__add_kernel_tensorptrf32gmemalign16o167772161_tensorptrf32gmemali"
    assert library_note([dsl], ["_add_kernel"], "kernel.py") is None
    assert library_note(["kernel_cutlass__add_kernel2_tensorptr"], ["_add_kernel"], "kernel.py") is not None
    assert library_note(["kernel_cutlass_add_kernel"], ["add_kernel"], "kernel.py") is None
    note = library_note(torch_only, ["softmax_kernel"], "kernel.py")
    assert "none of the kernels kernel.py defines (softmax_kernel)" in note and "not from none" not in note



# Section names as nvcc 13.0 embeds them in a .so built for sm_90a from a CUTLASS 3 GEMM (no __global__ in the
# file) and from CUTLASS 2's sm80 GEMM (seen in the libraries built on 2026-12-03; names cut inside the template):
# each kernel has its code (.text.) and its attributes (.nv.info.); a device function or host code has no .nv.info.
_M3 = b"_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEEEEEvNT_6ParamsE"
_M2 = b"_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock13MmaMultistageEEEEEvNT_6ParamsE"
LIBRARY = (b"\x7fELF host code .text.unlikely\0.text._ZN7cutlass4gemm6device6helperEv\0" + b"\0.text." + _M3 + b"\0.nv.info." + _M3
           + b"\0.nv.info." + _M2 + b"\0.text." + _M2 + b"\0.text.vadd_kernel\0.nv.info.vadd_kernel\0")
# ncu's names for those kernels on the H200 (2026-12-03): no namespaces
NCU_CUTLASS3 = ("void device_kernel<GemmUniversal<tuple<int, int, int, int>, CollectiveMma<MainloopSm90TmaGmma"
                "WarpSpecialized<4, tuple<C<1>, C<1>, C<1>>, KernelTmaWarpSpecializedCooperative>, tuple<C<128>, C<256>, C<64>>>>>(Params)")


def test_the_kernels_of_a_cu_file_include_the_templates_its_library_instantiates(tmp_path):
    from kernel_loop.profiling.kernel_names import _qualified, library_kernels, library_note
    from kernel_loop.steps.profile import kernels_of

    assert _qualified(_M3.decode()) == "cutlass::device_kernel<GemmUniversal"
    assert _qualified(_M2.decode()) == "cutlass::Kernel<Gemm"
    assert _qualified("_Z6my_addPfi") == "my_add" and _qualified("vadd_kernel") == "vadd_kernel"
    assert _qualified("_ZN3foo3bar3bazEv") == "foo::bar::baz" and _qualified("_Z99short") is None
    found = library_kernels(LIBRARY)
    assert found == ["cutlass::device_kernel<GemmUniversal", "cutlass::Kernel<Gemm", "vadd_kernel"]  # no host names
    assert library_note([NCU_CUTLASS3], found, "kernel.cu") is None
    assert library_note(["void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<x>>(T1::Params)"], found,
                        "kernel.cu") is None
    assert library_note(["void Kernel<Gemm<x>>(Params)"], found, "kernel.cu") is None
    # a library's kernels built from other CUTLASS templates, or cuBLAS's own, are not the version's
    for other in ("void device_kernel<cutlass3x_sm90_tensorop_gemm_bf16>(Params)", "void Kernel<cutlass_75_tensorop>(Params)",
                  "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1",
                  "void other_device_kernel<GemmUniversal<x>>(Params)"):
        assert library_note([other], found, "kernel.cu").startswith("library fallback"), other
    # the profile step reads the library that this version's correctness built from the same bytes
    vdir, lib = tmp_path / "v1", tmp_path / "kernel.so"
    vdir.mkdir()
    kernel = vdir / "kernel.cu"
    kernel.write_text('#include <cutlass/gemm/device/gemm_universal_adapter.h>\nextern "C" void solve(float* y) {}\n')
    lib.write_bytes(LIBRARY)
    (vdir / "correctness.json").write_text(json.dumps({"kernel_sha256": "abc", "build": {"library": str(lib)}}))
    assert "cutlass::device_kernel<GemmUniversal" in kernels_of(kernel, "abc", vdir)
    assert kernels_of(kernel, "another sha", vdir) == []  # a build of other bytes says nothing of these
    lib.unlink()
    assert kernels_of(kernel, "abc", vdir) == []  # the library is gone: the source alone
    for damaged in ("not json", json.dumps({"kernel_sha256": "abc", "build": {"library": 7}}), json.dumps([1])):
        (vdir / "correctness.json").write_text(damaged)
        assert kernels_of(kernel, "abc", vdir) == []

# --- the worker's sandbox: the record key and the run directory are out of its reach -----------------------
REACHER = '''import os

import torch

KEY = {key!r}
RECORDS = {records!r}


def _reached():
    got = []
    for path, mode in ((KEY, "r"), (RECORDS, "r"), (RECORDS, "a")):
        try:
            with open(path, mode) as fh:
                got.append(fh.read(1) if mode == "r" else fh.write(""))
        except OSError:
            pass
    return got


def run_kernel(x, y, out, N):
    torch.add(x, y, out=out)
    if _reached():  # a kernel that could read the key could re-sign any record: it shows it by a wrong answer
        out.add_(1.0)
'''


@pytest.mark.skipif(__import__("kernel_loop.measure.sandbox", fromlist=["abi"]).abi() < 1,
                    reason="this kernel has no Landlock")
def test_a_kernel_cannot_read_the_record_key_or_the_records(tmp_path, monkeypatch):
    """The attack: read the record key (to re-sign records) and records.log from inside the kernel. The static
    check refuses such source first; it is off here, so what is tested is the sandbox behind it. The same
    kernel with the sandbox switched off reaches both and fails, so the sandbox is what stops it."""
    from kernel_loop import records

    monkeypatch.setattr(static_check, "check_kernel_source", lambda path: None)
    outcomes = {}
    for mode in ("on", "off"):
        out = tmp_path / mode
        kernel = tmp_path / f"reacher_{mode}.py"
        kernel.write_text(REACHER.format(key=str(records.key_path()), records=str(out / "records.log")))
        assert klcli.main("init", out, "--kernel", "reacher", "--ref", KERNELS / "ref_vadd.py", "--impl", "triton",
                          "--baseline", kernel, "--dims", "N=4096", "--skip-env", "--trials", "1") == 0
        monkeypatch.setenv("KERNEL_LOOP_SANDBOX", mode)
        rc = klcli.main("correctness", out)
        outcomes[mode] = (rc, json.loads((out / "v0" / "correctness.json").read_text()))
    rc, data = outcomes["on"]
    assert rc == 0 and data["result"] == "PASS", data["error"]
    assert data["worker_isolated"] is True and "Landlock" in data["isolation_why"]
    assert "Worker sandbox | yes" in (tmp_path / "on" / "v0" / "correctness.md").read_text()
    rc, data = outcomes["off"]
    assert rc == 1 and data["result"] == "FAIL" and data["worker_isolated"] is False


# --- correct where a user calls it ---------------------------------------------------------------
def _failed(data):
    """The conditions of the calls that failed, and the notes of their failing rows."""
    bad = [t for s in data["shapes"] for t in s["trials"] if not t["passed"]]
    return {t["condition"] for t in bad}, [o.get("note") or "" for t in bad for o in t["outputs"] if not o["passed"]]


@pytest.mark.parametrize("ref, kernel, dims", [("ref_vadd.py", "cheat_vadd_only_when_poisoned.py", "N=1000"),
                                               ("ref_rmsnorm.py", "cheat_rmsnorm_rows_when_poisoned.py", "M=8,N=64")])
def test_a_kernel_that_computes_only_on_poisoned_outputs_fails(tmp_path, worker_here, ref, kernel, dims):
    """Every plain call hands a poisoned output, so 'poisoned' meant 'checked': the kernel read its output and
    left a user's zeros or empty buffer as it was.  The outputs it is handed now also hold zeros, random values
    and the right answer of other inputs."""
    rc, data, md = _correctness(tmp_path, ref, kernel, dims)
    assert rc == 1, md
    conds, _ = _failed(data)
    assert conds and conds <= {"pre:zeros", "pre:random", "pre:stale"}, conds  # every poisoned call passed
    assert {"pre:zeros", "pre:random"} <= conds
    assert "held zeros before the call" in md or "held random values before the call" in data["error"]


@pytest.mark.parametrize("kernel", ["cheat_softmax_reused_buffer.py", "cheat_softmax_two_buffers.py"])
def test_a_kernel_that_returns_a_buffer_it_reuses_fails(tmp_path, worker_here, kernel):
    """Every call's result is held, as a caller would hold it: a later result stored in its memory, or its bytes
    changed after the calls that followed, fails the call that returned it (two buffers in turn too)."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert rc == 1, md
    _, notes = _failed(data)
    assert any("returns a buffer it reuses" in n for n in notes), notes
    # read back where the caller kept it; where call 1 let go of its result at once (held.LET_GO), found held by the
    # kernel and changed
    assert any("returned by call 1" in n and "changed when the kernel was called again" in n for n in notes), notes
    first = data["shapes"][0]["trials"][0]["outputs"]
    assert first[0]["passed"] and not first[-1]["passed"]  # right when returned; overwritten later


@pytest.fixture
def no_static_check(monkeypatch):
    """The first filter off (it refuses these kernels' subclass and mode protocols by name): the judge behind it
    is what is tested."""
    monkeypatch.setattr(static_check, "check_kernel_source", lambda path: None)


@pytest.mark.parametrize("kernel, what", [("cheat_softmax_lazy.py", "torch.lazy._Later (a torch.Tensor subclass)"),
                                          ("cheat_softmax_lazy_dict.py", "_LaterDict (a dict subclass)")])
def test_a_result_that_computes_when_read_is_refused_naming_its_type(tmp_path, worker_here, no_static_check, kernel,
                                                                     what):
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert rc == 1 and what in data["error"] and "plain torch.Tensor" in data["error"], data["error"]
    assert len(data["error"].splitlines()) == 1


def _same_model(tmp_path, ref, kernel):
    """``kernel``, or where it says "ModelNew = Model", a file of ref.py's text with that line added."""
    if kernel != "ModelNew = Model":
        return kernel
    path = tmp_path / "model_new.py"
    path.write_text((KERNELS / ref).read_text() + "\n\nModelNew = Model\n")
    return path


def _kb(tmp_path, ref, kernel, dims, *extra):
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "k", "--ref", KERNELS / ref, "--impl", "triton", "--baseline",
                      KERNELS / kernel, "--dims", dims, "--skip-env", *extra) == 0
    rc = klcli.main("correctness", out)
    return rc, json.loads((out / "v0" / "correctness.json").read_text()), (out / "v0" / "correctness.md").read_text()


@pytest.mark.parametrize("ref, kernel, dims, passes", [
    ("kb_ref_linear_relu.py", "kb_cheat_weights_from_init.py", "batch_size=32,features=64", False),
    ("kb_ref_layernorm.py", "kb_cheat_layernorm_no_affine.py", "batch_size=16,features=64", False),
    ("kb_ref_layernorm.py", "kb_new_layernorm.py", "batch_size=16,features=64", True),
    ("kb_ref_linear_relu.py", "kb_new_linear_cached_weight_t.py", "batch_size=32,features=64", True),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_cache_shared_by_instances.py", "batch_size=32,features=64", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_group_before_forward.py", "batch_size=32,features=64", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_memo_by_content.py", "batch_size=32,features=64", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_cache_fresh_on_repeats.py", "batch_size=32,features=64", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_shared_cache_fresh_on_repeats.py", "batch_size=32,features=64", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_shared_cache_in_inference_mode.py", "batch_size=32,features=64", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_shared_cache_in_training_mode.py", "batch_size=32,features=64", False)])
def test_a_modelnew_gets_trained_weights_not_its_initial_ones(tmp_path, worker_here, ref, kernel, dims, passes):
    """Found by a red team: the weights were always the ones Model is built with, so a ModelNew that kept a copy made
    in __init__ and a LayerNorm without its affine transform (weight 1, bias 0 at init) passed.  Model's learnable
    parameters are now moved from their initial values; a layout cached on the first call still passes.  A ninth red
    team's cache shared by every instance (keyed on shape and _version) passed while one instance was ever built: a
    second, with other weights, is called in place of the first once a shape."""
    rc, data, md = _kb(tmp_path, ref, kernel, dims)
    assert (rc == 0) is passes, data["error"]
    if "training_mode" in kernel:  # an eleventh red team's: shared in training mode alone, while twins ran in eval()
        assert "training mode, autograd off; right after a second instance" in data["error"], data["error"]


class _EveryCoinAt(random.Random):
    """The judge's draws from a seed, every coin at ``at`` (choices, samples and shuffles from the seed: with random()
    alone overridden, Random draws indices from it too, and a sample of distinct calls never ends)."""

    def __init__(self, at: float):
        super().__init__(5)
        self.at = at

    def random(self) -> float:
        return self.at

    def getrandbits(self, k: int) -> int:
        return super().getrandbits(k)


@pytest.mark.parametrize("kernel, coin, noted", [("kb_cheat_linear_detaches_nonleaf_input.py", 0.0, True),
                                                 ("kb_cheat_linear_detaches_nonleaf_input.py", 0.99, False),
                                                 ("kb_new_linear_cached_weight_t.py", 0.0, False)])
def test_a_model_whose_backward_skips_a_nonleaf_input_is_seen(tmp_path, worker_here, monkeypatch, kernel, coin, noted):
    """Found by a tenth red team: the inputs of a call with autograd on were always leaves, so a ModelNew that detached
    a non-leaf input (a layer inside a network gets one: the layers before it never train) had its input's gradient
    "compared" and right.  One such call in two now hands its inputs as tensors autograd made (coin 0.99: leaves), and
    the gradient a user's backward() would not get is said, as for a kernel without a backward (a forward kernel
    passes: the verdict is on the outputs)."""
    monkeypatch.setattr(judge_mod.random, "SystemRandom", lambda: _EveryCoinAt(coin))
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", kernel, "batch_size=32,features=64")
    notes = [n for s in data["shapes"] for n in s.get("notes") or []]
    assert rc == 0, data["error"]
    assert any("input 'arg0': not compared: ModelNew's output does not reach it" in n for n in notes) is noted, notes


class _TwinLastAfterAnUpdate(random.Random):
    """The judge's draws from a seed, each shuffle of a shape's conditions ending with weights:updated, weights:twin
    (the order 4 seeds of 3000 drew)."""

    def shuffle(self, x) -> None:
        super().shuffle(x)
        if "weights:twin" in x:
            x[:] = [c for c in x if not c.startswith("weights:")] + ["weights:updated", "weights:twin"]


def test_a_cache_shared_by_instances_fails_whatever_the_order_of_the_conditions(tmp_path, worker_here, monkeypatch):
    """Found in 3000 seeded runs of the shared-cache cheat above: where the twin came last, right after the updated
    weights were put back (a new _version), it cached its own weights under a key no later call read, and passed.
    The first instance is now called right after its twin, at the twin's _version."""
    monkeypatch.setattr(judge_mod.random, "SystemRandom", lambda: _TwinLastAfterAnUpdate(738))
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", "kb_cheat_linear_cache_shared_by_instances.py",
                       "batch_size=32,features=64")
    conds = [t["condition"] for t in data["shapes"][0]["trials"]]
    assert rc == 1 and conds.index("weights:twin") < len(conds) - 1, conds
    assert conds[conds.index("weights:twin") + 1] != "weights:updated", conds


class _FirstCallUnderInference(_EveryCoinAt):
    """The judge's draws from a seed, every coin at 0: a model's first call under inference_mode (and every call but
    a shape's last letting go of its results)."""

    def __init__(self, seed: int = 5):
        super().__init__(0.0)


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_linear_cache_made_in_any_mode.py", False),
                                            ("kb_new_linear_cached_weight_t.py", True)])
def test_a_cache_made_in_a_first_call_under_inference_mode_is_left_as_made(tmp_path, worker_here, monkeypatch, kernel,
                                                                           passes):
    """Found by a sixth red team: each shape's first call was plain, and after an inference-mode call the judge made
    every inference tensor on the model normal, so a cache made in whatever mode the call ran in (a user who
    evaluates first, then trains, meets "Inference tensors cannot be saved for backward") passed.  A model's first
    call is now under inference_mode in some shapes, and only Model's own state is made normal."""
    monkeypatch.setattr(judge_mod.random, "SystemRandom", lambda: _FirstCallUnderInference(5))
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", kernel, "batch_size=32,features=64")
    assert (rc == 0) is passes, data["error"]
    assert data["shapes"][0]["trials"][0]["condition"] == "mode:inference"
    if not passes:
        assert "Inference tensors cannot be saved for backward" in data["error"], data["error"]


def test_a_plain_number_among_get_inputs_reaches_modelnew(tmp_path, worker_here):
    """Found by a CPU sweep of KernelBench (level 1, 5_Matrix_scalar_multiplication): get_inputs() returning a plain
    float made the judge fail (KeyError) before the first call, whatever the kernel."""
    rc, data, md = _kb(tmp_path, "kb_ref_scalar_mul.py", "kb_new_scalar_mul.py", "M=64,N=32")
    assert rc == 0, data["error"]


def test_batchnorm_gradients_are_compared(tmp_path, worker_here):
    """Found by a CPU sweep of KernelBench: the worker put the running statistics back right after the forward pass,
    before the backward, which broke BatchNorm's (it saved them), so its gradients were never compared in any of
    the 12 BatchNorm problems ("backward() raised").  They go back after the backward now."""
    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", "kb_new_batchnorm_module.py", "batch_size=32,features=16")
    assert rc == 0, data["error"]
    assert "backward() raised" not in md
    names = {o["name"] for s in data["shapes"] for t in s["trials"] for o in t["outputs"]}
    assert {"gradient of parameter 'bn.weight'", "gradient of input 'arg0'"} <= names, names


def test_modelnew_is_not_built_under_the_runs_own_seed(tmp_path, worker_here):
    """Found by a red team: ModelNew was built under the run's seed (torch.initial_seed() in __init__ told it), from
    which every correctness trial's inputs are drawn.  It is built under a seed derived from it by a one-way hash."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", "kb_probe_run_seed.py", "batch_size=32,features=64")
    assert rc == 0, data["error"]


def test_a_modelnew_whose_weights_change_between_calls_must_follow_them(tmp_path, worker_here):
    """Found by a red team: the weights never changed between calls, so a ModelNew that copied them on its first call
    (keeping autograd on the live ones) passed, while a user's training step changed nothing it computed.  One call
    comes after an in-place change of the parameters, as an optimizer step makes it; a layout cached until the
    parameter's _version moves on still passes (test_a_modelnew_gets_trained_weights_not_its_initial_ones)."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", "kb_cheat_weights_cached_for_good.py", "batch_size=32,features=64")
    assert rc == 1 and "weights:updated" in _failed(data)[0], data["error"]
    assert "changed in place before the call" in data["error"] or "a second instance" in data["error"], data["error"]


def test_a_more_exact_modelnew_passes_the_gradient_comparison(tmp_path, worker_here):
    """Found by a CPU sweep (a ModelNew computing in float64, on all of KernelBench levels 1 and 2: 8 of 200 rejected
    on their gradients): a gradient that is exactly zero, or cancels, carries Model's float32 rounding noise beyond
    the elementwise tolerance.  A gradient that fails against Model's float32 one is held to Model's float64 one
    with twice Model's own float32 error as slack."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_bn_scaled.py", "kb_new_linear_bn_float64.py", "batch_size=512,features=256")
    assert rc == 0, data["error"]  # (without the float64 gradients: "the gradient of parameter 'fc.weight' ... differs")


def test_a_modelnew_right_only_in_eval_without_autograd_fails(tmp_path, worker_here):
    rc, data, md = _kb(tmp_path, "kb_ref_softmax.py", "kb_cheat_eval_only.py", "batch_size=8,dim=512")
    assert rc == 1, md
    conds, _ = _failed(data)
    assert conds == {"mode:train+grad", "mode:train", "mode:grad"}, conds
    assert "training mode" in data["error"] or "autograd on" in data["error"]


def test_the_judge_synchronizes_after_its_last_write_into_a_shared_buffer_before_each_request(tmp_path, monkeypatch,
                                                                                              worker_here):
    """On the H100 an honest BatchNorm model failed 1 call in 81 (41_Gemm_BatchNorm_GELU_ReLU at 20480 rows, its
    running_mean wholly off; 11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm in eval() likewise): the judge
    copied a call's running statistics into the shared buffers after its synchronize, so the copy could still be
    queued behind the judge's reference when the worker read them.  On the CPU a copy is done when it returns: this
    test follows the order instead: every judge write into a shared buffer has a synchronize after it before the
    worker's next request (the bind's parameters too)."""
    import threading

    import torch
    from kernel_loop.measure import judge as judge_mod
    from kernel_loop.measure import launch

    events: list[str] = []
    copy, sync, request = torch.Tensor.copy_, judge_mod.Judge.sync, launch.WorkerProc.request

    def copy_(self, *a, **kw):
        if threading.current_thread() is threading.main_thread() and self.is_shared():
            events.append("write")
        return copy(self, *a, **kw)

    def synced(self):
        events.append("sync")
        return sync(self)

    def requested(self, msg):
        events.append(f"request:{msg.get('op')}")
        return request(self, msg)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    monkeypatch.setattr(judge_mod.Judge, "sync", synced)
    monkeypatch.setattr(launch.WorkerProc, "request", requested)
    rc, data, _ = _kb(tmp_path, "kb_ref_batchnorm.py", "kb_new_batchnorm.py", "batch_size=32,features=16")
    assert rc == 0, data["error"]
    assert events.count("write") > 20 and "request:bind" in events and "request:call" in events
    unsynced = []
    for i, e in enumerate(events):
        if e.startswith("request:") and "write" in events[:i]:
            last_write = max(j for j in range(i) if events[j] == "write")
            if "sync" not in events[last_write:i]:
                unsynced.append((i, e))
    assert not unsynced, unsynced[:5]


def test_a_dropout_whose_output_shows_none_may_draw_in_a_second_instances_training_call(tmp_path, worker_here):
    """Found by a CPU sweep of KernelBench level 2: 83_Conv3d_GroupNorm_Min_Clamp_Dropout (ModelNew = Model) failed its
    second instance's training-mode call as one that changed the caller's random numbers: its output is never random,
    so that call is compared, and only a training call of the first instance had noted that Model draws there."""
    rc, data, md = _kb(tmp_path, "kb_ref_dropout_unseen.py", _same_model(tmp_path, "kb_ref_dropout_unseen.py",
                                                                      "ModelNew = Model"), "batch_size=32,features=16")
    assert rc == 0, data["error"]
    assert "weights:twin:train" in [t["condition"] for s in data["shapes"] for t in s["trials"]]


def test_a_modelnew_whose_output_depends_on_the_mode_is_compared_in_the_same_mode(tmp_path, worker_here):
    """BatchNorm: training mode normalises with the batch's statistics; ModelNew is held to Model in training
    mode there (and its running statistics are restored after, so the next eval() call starts from the
    judge's).  Dropout: Model's training-mode output is random, so training mode is not compared, and
    correctness.md says so."""
    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", "kb_new_batchnorm.py", "batch_size=32,features=16")
    assert rc == 0, data["error"]
    conds = [t["condition"] for t in data["shapes"][0]["trials"]]
    assert {"mode:train+grad", "mode:train", "mode:grad"} <= set(conds)
    wrong = KERNELS / "kb_new_batchnorm.py"
    (tmp_path / "bn_eval_only.py").write_text(wrong.read_text().replace("if self.bn.training:", "if False:"))
    out = tmp_path / "eval_only"
    assert klcli.main("init", out, "--kernel", "k", "--ref", KERNELS / "kb_ref_batchnorm.py", "--impl", "triton",
                      "--baseline", tmp_path / "bn_eval_only.py", "--dims", "batch_size=32,features=16",
                      "--skip-env") == 0
    assert klcli.main("correctness", out) == 1  # running statistics in training mode: wrong there
    rc, data, md = _kb(tmp_path / "d", "kb_ref_dropout.py", "kb_new_dropout.py", "batch_size=16,features=32")
    assert rc == 0, data["error"]
    assert "changes from call to call (dropout, say)" in md


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_bn_top_level_training.py", False),
                                            ("kb_new_bn_own_flag.py", True), ("ModelNew = Model", True)])
def test_a_batchnorm_frozen_inside_a_model_in_training_mode_keeps_its_statistics(tmp_path, worker_here, kernel, passes):
    """The fourteenth session's red team: a functional BatchNorm that read the top module's .training passed, the judge
    switching the whole model only; a user fine-tuning with frozen BatchNorm (model.train(); model.bn.eval()) got the
    batch's statistics and drifting buffers.  One call of a model with norm layers now has them in eval() inside the
    model in training mode; a kernel that reads each layer's own .training passes."""
    kernel = _same_model(tmp_path, "kb_ref_batchnorm.py", kernel)
    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", kernel, "batch_size=32,features=16")
    conds = [t["condition"] for s in data["shapes"] for t in s["trials"]]
    assert "mode:train:frozen" in conds and (rc == 0) is passes, data["error"]
    if not passes:
        assert "its norm layers in eval()" in data["error"] and "own .training" in data["error"], data["error"]


def test_a_softmax_without_the_max_subtraction_fails_at_large_inputs(tmp_path, worker_here):
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_no_max.py", "M=8,N=64")
    assert rc == 1, md
    conds, _ = _failed(data)
    # exact on the problem's own inputs; overflows scaled up, and underflows (0/0) shifted 500 RMS down (rows too)
    assert {"range:up", "range:up:lo", "range:up:hi", "range:sink:lo"} <= conds <= {
        "range:up", "range:up:lo", "range:up:hi", "range:sink:lo", "range:sink", "range:rows"}, conds
    assert "(inputs s" in data["error"] and "; this draw " in data["error"]


def test_a_condition_whose_copies_do_not_fit_in_memory_is_noted_and_the_call_is_plain(monkeypatch):
    """The float64 check and the training-mode copy of a model take memory beyond the call's own; where they do
    not fit, the condition is not checked and the notes say why, rather than the honest kernel failing."""
    import torch
    from kernel_loop.measure import conditions

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")

    monkeypatch.setattr(conditions, "range_why", oom)

    class Prob:
        seen = {"model64": object()}

        def draw(self, seed, vary=None, start=None):
            return "varied"

    notes, plain = [], types.SimpleNamespace(start=None)
    cond, said, ds = conditions.condition(None, Prob(), "first", plain, "range:up", None, 1, notes)
    assert said == "plain" and ds is plain and cond.pre == "poison"
    assert notes and "did not fit in memory" in notes[0] and "inputs scaled up" in notes[0]
    monkeypatch.setattr(conditions, "range_why", lambda *a: (_ for _ in ()).throw(ValueError("outside its domain")))
    notes = []
    assert conditions.condition(None, Prob(), "first", plain, "range:up", None, 1, notes)[1] == "plain"
    assert "the reference cannot run there (ValueError: outside its domain)" in notes[0]


def test_a_range_where_the_reference_itself_is_off_is_still_called(monkeypatch):
    """A red team's one-pass variance and zeros on rows shifted far passed where the float32 reference is itself off:
    such a range was left unchecked (the call made plain).  It is called on the moved inputs now, held to float64
    (exact.LOOSE); the other reasons (no float64, not finite) still make the call plain."""
    from kernel_loop.measure import conditions

    varied = types.SimpleNamespace(vary="rows: each row by +-2 to 500 RMS", expected={})

    class Prob:
        seen: dict = {}

        def draw(self, seed, vary=None, start=None):
            return varied

    first, plain = types.SimpleNamespace(expected={}), types.SimpleNamespace(start=None)
    off = "the reference itself is off by 3.1 of the tolerance there (against float64), 0.02 on the problem's inputs"
    monkeypatch.setattr(conditions, "range_why", lambda *a: (off, True))
    notes: list[str] = []
    cond, said, ds = conditions.condition(None, Prob(), first, plain, "range:rows", None, 1, notes)
    assert said == "range:rows" and ds is varied, (said, notes)
    assert notes == [f"{conditions.CONDITION_WORDS['range:rows']}: held to the reference in float64, within 16 times "
                     f"the float32 reference's own error there: {off}"]
    monkeypatch.setattr(conditions, "range_why", lambda *a: ("the reference cannot run in float64 there", False))
    notes = []
    assert conditions.condition(None, Prob(), first, plain, "range:rows", None, 1, notes)[1:] == ("plain", plain)
    assert "not checked: the reference cannot run in float64 there" in notes[0]


def test_the_reference_of_a_channels_last_call_holds_its_weights_as_the_kernels_model_does(tmp_path, worker_here):
    """Seen on the H100: ModelNew = Model failed layout:weights on 17_SqueezeNetFireModule and 73_Conv2d_BatchNorm_Scaling,
    cuDNN convolving channels_last weights and contiguous inputs another way than contiguous both, which the reference
    was.  The reference of a layout call moves Model's weights as the kernel's model has them (a Model whose output
    shows its weight's order stands in for cuDNN's choice here)."""
    rc, data, _ = _kb(tmp_path, "kb_ref_conv_by_weight_layout.py", _same_model(tmp_path, "kb_ref_conv_by_weight_layout.py",
                                                                         "ModelNew = Model"), "batch_size=2")
    assert rc == 0, data["error"]
    conds = {t["condition"] for s in data["shapes"] for t in s["trials"]}
    assert {"layout:weights", "layout:permuted"} <= conds, conds


@pytest.mark.parametrize("ref, kernel, dims, note", [
    ("ref_bce.py", "honest_bce.py", "M=8,N=64", "the reference cannot run there"),
    ("ref_fp8_dequant.py", "honest_fp8_dequant.py", "M=8,N=64", None),
    ("kb_ref_triu.py", "kb_new_triu.py", "N=64", None),
    ("kb_ref_batchnorm.py", "kb_new_batchnorm.py", "batch_size=1,features=16", "Expected more than 1 value"),
])
def test_honest_kernels_whose_reference_has_a_domain_pass(tmp_path, worker_here, ref, kernel, dims, note):
    """Found by a red team (2026-12-04), false rejections: a reference that raises on moved inputs (binary
    cross-entropy outside [0, 1]), fp8 inputs (no unique() for them), a Model that raises in training mode
    (BatchNorm on a batch of 1) crashed the judge, so every kernel failed; shifted inputs filled the zero lower
    triangles of a triangular product, failing a kernel that reads only the upper ones.  Now the condition is
    noted as not checked and the call is plain, and a shift keeps zeros."""
    if ref.startswith("kb_"):
        rc, data, md = _kb(tmp_path, ref, kernel, dims)
    else:
        rc, data, md = _correctness(tmp_path, ref, kernel, dims)
    assert rc == 0, data["error"]
    if note:
        assert note in md, md[:3000]


@pytest.mark.parametrize("kernel, when", [("cheat_softmax_dispatch_mode.py", "left active at import"),
                                          ("cheat_softmax_function_mode_in_call.py", "the call left active a torch function mode")])
def test_a_torch_mode_left_active_is_refused(tmp_path, no_static_check, kernel, when):
    """Found by a red team (2026-12-04): a TorchDispatchMode or TorchFunctionMode left active runs inside the
    worker's own torch calls after the kernel's, computing the result in the hand-over (outside the timed call)
    and answering the kept-results check from snapshots; both passed correctness.  The worker refuses any mode
    still active after the import and after each call (a real worker process: the mode is the process's)."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert rc == 1 and when in data["error"] and "leave every mode before returning" in data["error"], data["error"]
    for name in ("cheat_softmax_dispatch_mode.py", "cheat_softmax_function_mode_in_call.py", "cheat_softmax_lazy.py"):
        assert static_check.findings(KERNELS / name)  # and the first filter names them too


def test_a_modelnew_that_rewrites_its_own_weights_fails(tmp_path, worker_here):
    """Found by a red team (2026-12-04): a ModelNew that stores its weights in another layout in its own
    parameters, and compensates, gave right outputs and passed; a user's model is left with other weights.  The
    worker's parameters and buffers are compared with the judge's after the calls of each shape."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", "kb_cheat_rewrites_weights.py", "batch_size=32,features=64")
    assert rc == 1, md
    _, notes = _failed(data)  # (its gradients, of the weight it keeps transposed, are wrong too)
    assert any("the kernel changed 2 of its model's 2 parameters and buffers" in n for n in notes), notes


@pytest.mark.parametrize("ref, kernel, dims, passes, note", [
    ("ref_accumulate.py", "honest_accumulate.py", "M=8,N=16,K=32", True, None),
    ("ref_accumulate.py", "cheat_accumulate_overwrites.py", "M=8,N=16,K=32", False, "held random values"),
    ("ref_two_outputs.py", "cheat_two_outputs_one_tensor.py", "M=8,N=64", False, "shares memory with the output"),
])
def test_accumulated_and_aliased_outputs(tmp_path, worker_here, ref, kernel, dims, passes, note):
    """Found by a red team (2026-12-04): an output ref.py declares accumulated always started at setup()'s zeros, so a
    kernel that overwrote it passed; two outputs returned as one tensor passed where the reference's are two.  An
    accumulated output now also starts from random values (the reference's too), and outputs of one call that share
    memory fail where the reference's do not."""
    rc, data, md = _correctness(tmp_path, ref, kernel, dims)
    assert (rc == 0) is passes, data["error"]
    if note:
        assert note in data["error"], data["error"]


def test_a_modelnew_wrong_under_inference_mode_fails(tmp_path, worker_here):
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", "kb_cheat_inference_mode.py", "batch_size=32,features=64")
    assert rc == 1 and "torch.inference_mode()" in data["error"], data["error"]


# --- the red team's second round (issue 42): what a user's call reads, keeps and varies --------------------
@pytest.mark.parametrize("kernel, passes", [("kb_cheat_bn_stats_frozen.py", False), ("kb_new_batchnorm.py", True),
                                            ("kb_new_batchnorm_module.py", True)])
def test_running_statistics_after_a_training_call_are_compared_with_models(tmp_path, worker_here, kernel, passes):
    """Found by a red team: the worker restored a ModelNew's buffers after a training-mode call without reading
    them, so one that never updated its running statistics passed.  They are now compared with the buffers
    Model leaves after the same call, from running statistics set at random beforehand (a trained model's)."""
    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", kernel, "batch_size=32,features=16")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert "buffer 'bn.running_mean'" in data["error"] and "in training mode" in data["error"], data["error"]
        assert len(data["error"].splitlines()) == 1


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_bn_eval_unit_stats.py", False),
                                            ("kb_new_batchnorm_module.py", True)])
def test_eval_mode_starts_from_a_trained_models_running_statistics(tmp_path, worker_here, kernel, passes):
    """Found by a red team: eval() always ran with the statistics a model is built with (mean 0, variance 1), so a
    ModelNew that ignored its running statistics in eval() passed.  Every mode's call now starts from running
    statistics drawn at random (a trained model's), and Model in the same state gives the expected outputs."""
    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", kernel, "batch_size=32,features=16")
    assert (rc == 0) is passes, data["error"]
    if not passes:  # (or first at a second instance, whose running means differ: a thirteenth red team's; or where a
        # running mean alone changed: a fourteenth's)
        assert any(w in data["error"] for w in ("eval()", "a second instance", "a norm's running mean")) and len(
            data["error"].splitlines()) == 1, data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_bn_fold_kept_past_training.py", False),
                                            ("kb_cheat_bn_fold_at_first_step.py", False),
                                            ("kb_cheat_bn_stats_at_first_step_only.py", False),
                                            ("kb_cheat_bn_stats_frozen_after_three_batches.py", False),
                                            ("kb_cheat_bn_fold_in_inference_mode_stale.py", False),
                                            ("kb_cheat_bn_fold_stale_after_autograd_steps.py", False),
                                            ("kb_new_batchnorm_module.py", True), ("kb_new_batchnorm.py", True)])
def test_eval_right_after_a_training_call_starts_from_the_statistics_it_left(tmp_path, worker_here, kernel, passes):
    """Found by an eleventh red team: the worker put back every training call's statistics (copy_, a new _version)
    before the next call, so a ModelNew that wrote them at their _version and kept a fold made in eval() passed.  A
    training call now leaves them, after a call in eval(), and the eval() call right after it starts from them.  Two
    or three such steps in a row, one with autograd on, then eval() with and without inference_mode: the same red
    team's fold made at the first step, statistics updated at the first step only, a fold kept in inference_mode
    alone and writes at the same _version in autograd's steps alone passed one step without autograd.  And
    statistics that stopped at a count of three batches: every call starts from a trained model's count."""
    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", kernel, "batch_size=32,features=16")
    conds = [t["condition"] for t in data["shapes"][0]["trials"]]
    assert (rc == 0) is passes, data["error"]
    if passes:
        kinds = set()
        for at in [i for i, c in enumerate(conds) if c == "mode:after-train"]:
            steps = conds[at - 3:at] if conds[at - 3].startswith("mode:train-step") else conds[at - 2:at]
            assert len(set(steps)) == 1 and steps[0].startswith("mode:train-step"), conds
            assert conds[at - len(steps) - 2:at - len(steps)] == ["plain", "mode:inference:held"], conds
            assert conds[at + 1] == "mode:after-train:inference", conds
            kinds.add(steps[0])
        assert kinds == {"mode:train-step", "mode:train-step+grad"}, conds
    else:
        assert ("after training-mode call" in data["error"] or "right after that training-mode call" in data["error"]
                or "buffer 'bn.running_" in data["error"] or "a norm's running mean" in data["error"]), data["error"]


def test_a_gradient_zero_by_the_math_is_compared_within_its_rounding(tmp_path, worker_here):
    """Seen on the H100: an honest BatchNorm written out failed on the gradient of the Linear's bias before it, zero
    by the math (the normalisation removes any shift), where its float32 rounding exceeded atol and twice Model's own
    (cuDNN's more exact sum).  Such a gradient may now hold rounding up to ZERO_GRAD of the call's largest gradient;
    a batch summed row after row failed here two runs in three before."""
    for run in range(2):
        rc, data, md = _kb(tmp_path / str(run), "kb_ref_batchnorm.py", "kb_new_batchnorm_sequential.py",
                           "batch_size=1024,features=32")
        assert rc == 0, data["error"]
        names = {o["name"] for s in data["shapes"] for t in s["trials"] for o in t["outputs"]}
        assert "gradient of parameter 'fc.bias'" in names, names


@pytest.mark.parametrize("kernel, features, passes", [("kb_cheat_scale_grad_bf16.py", 4096, False),
                                                      ("kb_cheat_scale_grad_bf16.py", 512, False),
                                                      ("kb_new_scale_grad_exact.py", 4096, True),
                                                      ("kb_new_scale_grad_exact.py", 512, True)])
def test_a_gradient_is_allowed_the_models_own_error_only_near_where_it_is(tmp_path, worker_here, kernel, features,
                                                                          passes):
    """Found by a review: a gradient that failed the comparison with Model's was held to float64 with twice Model's
    worst float32 error added to every element, so one element where Model's own gradient is far off (sums that
    cancel, at one feature) let a backward round the whole gradient to bfloat16.  The allowance is now local, as an
    output's (compare.LOCAL), and narrower in a gradient of 1024 elements or fewer (a review's: one block there): the
    honest backward, more exact than Model at that feature, still passes."""
    rc, data, md = _kb(tmp_path, "kb_ref_shifted_scale.py", kernel, f"batch_size=64,features={features}")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert "gradient of parameter 'w'" in data["error"], data["error"]
        assert "twice Model's own float32 error near it" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_noise_grad_clean_input.py", False),
                                            ("kb_new_noise_grad_custom_backward.py", True)])
def test_a_model_that_draws_gets_no_float64_allowance_for_its_gradients(tmp_path, kernel, passes):
    """Found by a thirteenth red team: Model's float64 gradients were made by running it again in float64, where its
    random draws are other numbers, so its "own error" was as large as the gradient and a backward 10% off (or all
    zeros) passed.  A Model that draws in that run has no float64 gradients: Model's float32 ones, made from the same
    draws as the kernel's call, are the comparison.  (A real worker process: the generators are compared.)"""
    rc, data, md = _kb(tmp_path, "kb_ref_noise_in_forward.py", kernel, "batch_size=32,features=64")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert "gradient of parameter 'fc.weight'" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes, said", [
    ("kb_cheat_linear_relu_train_detached.py", False, "where it did while"),  # (frozen or data: whichever is first)
    ("kb_cheat_linear_relu_train_mask_with_input_grad.py", False, "differs from Model's"),
    ("kb_new_linear_relu_grads_as_asked.py", True, None),
    ("kb_new_linear_relu_eval_without_autograd.py", True, "carries no gradient")])
def test_a_training_step_on_plain_data_gets_the_models_gradients(tmp_path, worker_here, kernel, passes, said):
    """Found by a thirteenth red team: the calls with plain-data inputs, frozen parameters or a bias alone were all in
    eval(), so a backward that skipped ReLU's mask where the input asks no gradient, or gave the weights none, in
    training mode alone passed: wrong in a user's training step (model.train(), a batch, loss.backward()).  Those
    calls come in training mode too, after both modes' calls with everything training.  An eval() path without
    autograd (an inference kernel) is still noted, not failed."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", kernel, "batch_size=32,features=64")
    conds = [t["condition"] for s in data["shapes"] for t in s["trials"]]
    assert (rc == 0) is passes, data["error"]
    assert passes or "(training mode with autograd on" in data["error"], data["error"]
    assert said is None or said in (md if passes else data["error"]), (data["error"], md[-2000:])
    if passes:
        assert {"mode:train+grad:data", "mode:train+grad:frozen", "mode:train+grad:partial"} <= set(conds), conds
        first = conds.index("mode:train+grad:data")
        assert conds.index("mode:grad") < first and conds.index("mode:train+grad") < first, conds


@pytest.mark.parametrize("ref, dims, kernel, passes", [
    ("kb_ref_gelu.py", "batch_size=64,dim=512", "kb_cheat_gelu_grad_stored_row_major.py", False),
    ("kb_ref_gelu.py", "batch_size=64,dim=512", "kb_new_gelu_grad_contiguous.py", True),
    ("kb_ref_gelu_seq.py", "batch_size=8,seq=16,dim=64", "kb_cheat_gelu_grad_contiguous_on_last_stride.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=8,seq=16,dim=64", "kb_new_gelu_grad_contiguous.py", True),
    ("kb_ref_gelu_seq.py", "batch_size=8,seq=16,dim=64", "kb_cheat_gelu_grad_row_major_by_first_stride.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=8,seq=16,dim=64", "kb_cheat_gelu_grad_one_value_where_any_stride_0.py", False)])
def test_an_upstream_gradient_comes_in_each_layout_a_user_hands(tmp_path, worker_here, ref, dims, kernel, passes):
    """Found by a thirteenth red team: the gradient handed to backward() was row-major or one value expanded, so a
    backward that stored row-major into empty_like(grad) passed and gave a GELU's input gradient 141% off for an
    output transposed downstream.  tensors.upstream's layouts (row-major; expanded over all dims or some; dense, the
    dims reversed, or the first two or the last two swapped: a review's and a second red team's backwards checked one
    stride, or took any stride 0 for one value) come in turn, carried from shape to shape (not at a batch of one)."""
    rc, data, md = _kb(tmp_path, ref, kernel, dims)
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert "gradient of input 'arg0'" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_linear_relu_grad_accumulated_twice.py", False),
                                            ("kb_cheat_linear_relu_grad_overwritten.py", False),
                                            ("kb_cheat_linear_relu_grad_set_where_not_contiguous.py", False),
                                            ("kb_new_linear_relu_grad_accumulated_into_grad.py", True)])
def test_a_gradient_is_what_a_users_backward_leaves_in_grad(tmp_path, worker_here, kernel, passes):
    """Found by a thirteenth red team: the gradients were read from torch.autograd.grad alone, so a backward that
    accumulated them into .grad itself and returned them to autograd too passed, and a user's loss.backward() got
    twice the gradient.  What a backward writes into .grad now counts with autograd's (tensors.grads_into), so that
    one fails, and one that accumulates into .grad alone (Megatron's fusion) passes, its gradients compared.  In some
    calls .grad holds an earlier micro-batch's values first (tensors.earlier): a review's backward that set it failed."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", kernel, "batch_size=32,features=64")
    assert (rc == 0) is passes, data["error"]
    if passes:
        assert "not compared" not in md, md[-3000:]
    else:
        assert "gradient of parameter 'fc." in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_linear_relu_grad_off_in_reentrant_checkpoint.py", False),
                                            ("kb_new_linear_relu_reentrant_checkpoint.py", False),
                                            ("kb_new_linear_relu_checkpoint.py", True)])
def test_gradients_under_reentrant_checkpointing_are_compared(tmp_path, worker_here, kernel, passes):
    """Found by a review: gradients were read with torch.autograd.grad, which torch.utils.checkpoint(use_reentrant=True)
    refuses, so they were noted as not compared and a backward 10% off passed.  They are now read from .grad after
    torch.autograd.backward, as a user's loss.backward() leaves them: that one fails, and so does an exact one under
    reentrant checkpointing, which gives the parameters no gradient where no input asks one (a user's first layer)."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", kernel, "batch_size=32,features=64")
    assert (rc == 0) is passes, data["error"]
    assert "backward() raised" not in md, md[-3000:]
    if "off" in kernel:
        assert "gradient of parameter 'fc." in data["error"] and "differs from Model's" in data["error"], data["error"]
    elif not passes:
        assert "use use_reentrant=False" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_gelu_grad_views_the_upstream.py", False),
                                            ("kb_cheat_gelu_grad_fake_oom_where_not_contiguous.py", False),
                                            ("kb_cheat_gelu_grad_fake_graph_freed_where_not_contiguous.py", False),
                                            ("kb_cheat_gelu_grad_none_where_not_contiguous.py", False),
                                            ("kb_new_gelu_without_backward.py", True),
                                            ("kb_new_gelu_grad_contiguous.py", True)])
def test_a_backward_that_raises_in_some_calls_only_fails(tmp_path, worker_here, kernel, passes):
    """Found by a review: a backward that raised was a note in each call, so one that viewed the upstream gradient
    (and raised where a transposed output handed it non-contiguous) passed on the calls where it ran, and a user's
    loss.backward() crashed.  Raised in some calls and run in others (the run's calls, across shapes) now fails
    (modes.backward_raised); one raised in every call stays a note (a kernel without a backward).  A red team's
    backward then gave no gradient there instead: reached in some calls of a mode and not in others fails too
    (modes.grads_gone).  A red team's raised an out-of-memory error there, or autograd's "through the graph a second
    time", whose messages alone were excused: now only where the device is short of memory as the judge reads it, or
    Model itself raises so (modes.raise_excused)."""
    rc, data, md = _kb(tmp_path, "kb_ref_gelu_seq.py", kernel, "batch_size=8,seq=16,dim=64")
    assert (rc == 0) is passes, data["error"]
    if "views" in kernel or "fake" in kernel:
        assert "'backward()'" in data["error"] and "crashes in some of their calls" in data["error"], data["error"]
    elif not passes:
        assert "gradient of input 'arg0'" in data["error"] and "none in others" in data["error"], data["error"]
    assert ("backward() raised (NotImplementedError" in md) is ("without" in kernel), md[-3000:]


HOOKED_REF = '''import torch
from torch import nn


class Model(nn.Module):
    """A Linear whose weight's gradient is clipped by a hook of its own (a tensor hook, and a post-accumulate one)."""

    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.fc.weight.register_hook(lambda g: g.clamp(-0.01, 0.01))
        self.fc.bias.register_post_accumulate_grad_hook(lambda p: p.grad.clamp_(-0.01, 0.01))

    def forward(self, x):
        return torch.relu(self.fc(x))


batch_size, features = 32, 64


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''


def test_a_model_whose_parameters_carry_hooks_passes_as_itself(tmp_path, worker_here):
    """Found by a red team: Model with a hook on a parameter (gradient clipping) failed with ModelNew = Model, since
    the judge's copies of Model (copy.deepcopy) dropped the hooks of its parameters and the worker's ModelNew kept
    them.  The copies now carry them (modes.model_copy)."""
    ref = tmp_path / "ref_hooked.py"
    ref.write_text(HOOKED_REF)
    kernel = tmp_path / "hooked_new.py"
    kernel.write_text(HOOKED_REF + "\n\nModelNew = Model\n")
    rc, data, md = _kb(tmp_path, ref, kernel, "batch_size=32,features=64")
    assert rc == 0, data["error"]


EMBEDDING_REF = '''import torch
from torch import nn

batch_size, seq, vocab, dim = 8, 12, 50, 16


class Model(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.out(self.emb(ids))


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq))]


def get_init_inputs():
    return [vocab, dim]
'''


def test_a_model_of_integer_inputs_passes_as_itself(tmp_path, worker_here):
    """Found by a red team: an Embedding + Linear (token ids in) failed with ModelNew = Model.  Its calls with autograd
    on made no input a leaf (integers take no gradient), so the worker kept nothing for a backward, the judge's request
    for the parameters' gradients was refused, and since a refusal in some calls fails (modes.backward_raised), every
    model of integer inputs failed.  Such a call keeps its outputs for the backward as a plain-data call does."""
    ref = tmp_path / "ref_embedding.py"
    ref.write_text(EMBEDDING_REF)
    kernel = tmp_path / "embedding_new.py"
    kernel.write_text(EMBEDDING_REF + "\n\nModelNew = Model\n")
    rc, data, md = _kb(tmp_path, ref, kernel, "batch_size=8,seq=12,vocab=50,dim=16")
    assert rc == 0 and "backward() raised" not in md, data["error"]


def test_an_out_of_memory_raise_is_excused_only_where_the_device_is_short_of_memory(monkeypatch):
    """modes.raise_excused on a CUDA device (mem_get_info as the judge would read it): a backward's out-of-memory error
    is a note where less than an eighth of the device is free, a raise like any other where more is (a red team's
    backward raised the message on a nearly empty device), and never on the CPU (its text is the kernel's to write)."""
    import types

    import torch
    from kernel_loop.measure import modes

    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    total = 80 << 30
    for free, excused in ((1 << 30, True), (9 << 30, True), (11 << 30, False), (70 << 30, False)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, f=free: (f, total))
        ok, said = modes.raise_excused(types.SimpleNamespace(device="cuda:0", seen={}), False, None, oom)
        assert ok is excused and said.startswith(oom) and f"{free / 2**30:.1f} of 80.0 GiB free" in said, (free, said)
    assert modes.raise_excused(types.SimpleNamespace(device="cpu", seen={}), False, None, oom) == (False, oom)


def test_a_gradient_zero_by_the_math_is_not_owed(tmp_path, worker_here):
    """Found by a review: a gradient reached while all trained was owed in the training-mode data call wherever
    Model's float32 one had a nonzero element, so an honest Linear + BatchNorm that leaves the bias (cancelled by the
    batch's mean) out of autograd in training mode failed on Model's rounding.  Owed is now nonzero in float64."""
    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", "kb_new_linear_bn_bias_left_out_in_training.py",
                       "batch_size=32,features=64")
    assert rc == 0, data["error"]


def test_a_call_whose_gradients_all_vanish_takes_the_scale_of_the_call_before(tmp_path, worker_here):
    """Found by a false-rejection hunt: with one value expanded over an InstanceNorm's output as the upstream gradient,
    every gradient of the call is zero in float64, so ZERO_GRAD's scale (the call's largest) was 1e-13 and a written-out
    norm failed on its rounding 3 runs in 6 (2 runs here: both failed before).  Such a call takes the scale of the last
    call with another upstream."""
    for run in range(2):
        rc, data, md = _kb(tmp_path / str(run), "kb_ref_conv_instancenorm.py", "kb_new_conv_instancenorm_written_out.py",
                           "batch_size=8,in_channels=4,out_channels=8,size=32")
        assert rc == 0, data["error"]


def test_out_of_memory_errors_in_the_workers_backward_reach_that_calls_failure(tmp_path, worker_here, monkeypatch):
    """Found by a review: the worker's count of out-of-memory errors (held.memory) came with the forward call's reply
    alone, so one raised in the backward after it showed in the next call's row, not in the failing one's.  Here each
    backward counts as one (a CPU has no such count); the first call that fails is the first with a backward."""
    from kernel_loop import tensors
    from kernel_loop.measure import guards

    seen, real = [0], tensors.grads_into

    def grads_into(*args, **kwargs):
        seen[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(tensors, "grads_into", grads_into)
    monkeypatch.setattr(guards, "ooms", lambda torch, device: seen[0])
    rc, data, md = _kb(tmp_path, "kb_ref_shifted_scale.py", "kb_cheat_scale_grad_bf16.py",
                       "batch_size=64,features=4096")
    first = next(t for s in data["shapes"] for t in s["trials"] if not t["passed"])
    assert rc == 1 and "gradient of parameter 'w'" in data["error"], data["error"]
    assert first["ooms"] == seen[0] if seen[0] == 1 else first["ooms"] >= 1, (first, seen)
    assert "torch ran out of device memory" in data["error"], data["error"]


@pytest.mark.parametrize("expr", ["a + b", "(a + b).sum(dim=1)"])
def test_model_gradients_that_share_memory_are_zeroed_apart_at_zero_inputs(tmp_path, worker_here, expr):
    """Found by a review: Model's gradients, zeroed in place where an input is exactly zero, are often views autograd
    shares (a + b hands one tensor to both inputs; a sum, or an upstream gradient expanded from one value, a stride-0
    one): one zero in the input wiped the other input's expected gradient, or all of it, so the honest ModelNew =
    Model failed (and a wrong gradient could match zeros).  They are zeroed in copies."""
    ref = tmp_path / "ref.py"
    ref.write_text("import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def forward(self, a, b):\n"
                   f"        return {expr}\n\n\nbatch_size = 16\nfeatures = 32\n\n\ndef get_inputs():\n"
                   "    return [torch.relu(torch.randn(batch_size, features)), torch.randn(batch_size, features)]\n\n\n"
                   "def get_init_inputs():\n    return []\n")
    kernel = tmp_path / "kernel.py"
    kernel.write_text(ref.read_text() + "\n\nModelNew = Model\n")
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "k", "--ref", ref, "--impl", "triton", "--baseline", kernel,
                      "--skip-env") == 0
    rc = klcli.main("correctness", out)
    data = json.loads((out / "v0" / "correctness.json").read_text())
    names = {o["name"] for s in data["shapes"] for t in s["trials"] for o in t["outputs"]}
    assert rc == 0, data["error"]
    assert {"gradient of input 'arg0'", "gradient of input 'arg1'"} <= names, names


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_bn_dropout_training_as_eval.py", False),
                                            ("kb_new_bn_dropout_bn.py", True)])
def test_a_model_with_dropout_has_its_deterministic_buffers_compared_in_training_mode(tmp_path, worker_here, kernel,
                                                                                      passes):
    """Found by an eleventh red team: where Model's training-mode output is random (dropout), no training call was
    compared, so a ModelNew that ran eval() in training mode passed.  The buffers that do not depend on the draw (a
    BatchNorm's before the dropout) are now compared after every training call; the outputs are not."""
    rc, data, md = _kb(tmp_path, "kb_ref_bn_dropout_bn.py", kernel, "batch_size=32,features=16")
    notes = [n for s in data["shapes"] for n in s.get("notes") or []]
    assert (rc == 0) is passes, data["error"]
    assert any(n.startswith("outputs in training mode: not compared") for n in notes), notes
    if not passes:
        assert "buffer 'bn1.running_mean'" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_linear_rows_of_first_call.py", False),
                                            ("kb_new_linear_cached_weight_t.py", True)])
def test_one_instance_is_called_at_every_batch_size_of_the_run(tmp_path, worker_here, kernel, passes):
    """Found by an eleventh red team: each shape got a ModelNew of its own, so one sized at its first call (a grid, a
    workspace) passed every shape.  A shape whose constructor arguments and Model's constants are the same as the
    previous shape's calls the same instance, its weights loaded again, as a user's next batch of another size."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", kernel, "batch_size=32,features=64", "--extra-shapes",
                       "batch_size=48")
    assert (rc == 0) is passes, data["error"]
    # correctness's own batch sizes are called too, beside the run's other one (an agent's trial: an extra shape of
    # another batch size had dropped them all, one row included)
    if passes:  # (the run's own size again after each other one)
        assert {s["dims"]["batch_size"] for s in data["shapes"] if s.get("own")} == {1, 16, 32, 41}
    if not passes:
        assert "batch_size=48" in data["error"], data["error"]


def test_a_one_row_path_fails_when_the_run_names_another_batch_size_too(tmp_path, worker_here):
    """An agent's trial: an --extra-shapes entry of another batch size (batch_size=333) dropped correctness's own sizes,
    so the red team's Linear+ReLU whose one-row path forgets the bias passed a run that named one.  They stay now."""
    rc, data, _ = _kb(tmp_path, "kb_ref_linear_relu.py", "kb_cheat_linear_relu_row_path.py", "batch_size=32,features=64",
                      "--extra-shapes", "batch_size=48")
    assert rc == 1 and "batch_size=1," in data["error"], data["error"]


@pytest.mark.parametrize("ref, kernel, dims, passes, why", [
    ("kb_ref_relu_only.py", "kb_cheat_relu_storage_base.py", "batch_size=8,features=16", False, "big[1:]"),
    ("kb_ref_relu_only.py", "kb_cheat_relu_faults_off_alignment.py", "batch_size=8,features=15", False, "misaligned"),
    ("kb_ref_conv2d.py", "kb_cheat_conv_weight_oihw.py", "batch_size=2", False, "model.to(memory_format"),
    ("kb_ref_conv2d.py", "kb_cheat_conv_weight_alias.py", "batch_size=2", False, "model.to(memory_format"),
    ("kb_ref_conv2d.py", "kb_cheat_conv_weight_order_of_input.py", "batch_size=2", False, "channels_last"),
    ("kb_ref_conv2d.py", "kb_new_conv_weight_made_contiguous.py", "batch_size=2", True, None),
    ("kb_ref_conv2d.py", "kb_new_conv_refuses_permuted_weight.py", "batch_size=2", True, "refused"),
    ("kb_ref_conv_pointwise.py", "ModelNew = Model", "batch_size=2", True, None),
])
def test_a_kernel_right_only_for_the_layouts_the_judge_used_to_hand_fails(tmp_path, worker_here, ref, kernel, dims,
                                                                            passes, why):
    """A red team's: a kernel that read its input's storage from the start passed (no input was ever at a storage
    offset), and a conv that read its weight's storage as contiguous OIHW passed (the weights were never permuted).
    Now a batch less its first row (layout:offset) and a channels_last model (layout:permuted) are among the calls.
    A 1x1 and a depthwise conv's weights are in that order already: the judge poisoned the old memory of a weight
    that had not moved, the weight itself, and every later call of an honest DenseNet layer failed (found on the
    level-3 example's drafts).  A later red team's conv took its weight's order from its input's: the weights moved
    exactly when the inputs did; now each also without the other (layout:permuted:input, layout:weights)."""
    rc, data, md = _kb(tmp_path, ref, _same_model(tmp_path, ref, kernel), dims)
    assert rc == (0 if passes else 1), data["error"]
    assert passes or why in data["error"], data["error"]
    if passes and why:  # a raise where the weights alone are channels_last is a refusal, noted, as in the others
        assert "torch.channels_last) holds them, every input as drawn" in md and why in md, md[:3000]


@pytest.mark.parametrize("ref, kernel, passes", [
    ("kb_ref_linear_relu.py", "kb_cheat_linear_rows_of_first_call.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_raises_then_wrong.py", False),
    ("kb_ref_batchnorm.py", "kb_cheat_bn_stats_first_rows.py", False),
    ("kb_ref_batchnorm.py", "kb_cheat_bn_stats_to_first_instance.py", False),
    ("kb_ref_linear_relu.py", "kb_new_linear_cached_weight_t.py", True),
    ("kb_ref_linear_relu.py", "kb_new_linear_one_batch_size.py", True),
    ("kb_ref_batchnorm.py", "kb_new_bn_training_one_batch_size.py", True),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_breaks_after_another_size.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_tuned_after_five_calls.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_inference_rows_of_first.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_raises_twice_in_training.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_shared_cache_at_other_sizes.py", False),
    ("kb_ref_batchnorm.py", "kb_cheat_bn_stale_stats_at_other_sizes.py", False),
    ("kb_ref_linear_relu.py", "kb_new_linear_launch_config_refusal.py", True),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_stale_per_batch_cache.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_tiles_of_eight.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_relu_row_path.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_row_path_stale_weight.py", False),
    ("kb_ref_fixed_batch_view.py", "ModelNew = Model", True),
    ("kb_ref_rows_table.py", "ModelNew = Model", True)])
def test_a_kernelbench_model_is_called_at_other_batch_sizes_on_the_same_instance(tmp_path, worker_here, ref, kernel,
                                                                                  passes):
    """The eleventh red team's kernel sized by its first call passed every run without --extra-shapes.  Correctness now
    calls the instance at one (a red team's path for a single row forgot the bias), at half the run's batch size and at
    a quarter more (plain calls around one in training mode, one
    with autograd, one after the parameters changed), then at the run's again: silently wrong there fails.  A training
    step there stays for the calls at the run's size again (a cache per batch size with one stamp, the thirteenth
    session's, made only the stepped size's copy again).  A refusal
    (it raises) is noted, every call there must raise too or be right (a twelfth red team's raised once, then was
    wrong; its statistics of a first training batch's rows, and of every instance in the first, passed before), and
    so is a Model that cannot run there itself."""
    kernel = _same_model(tmp_path, ref, kernel)
    b = 16 if "batchnorm" in ref else 64
    rc, data, md = _kb(tmp_path, ref, kernel, f"batch_size=32,features={b}")
    assert (rc == 0) is passes, data["error"]
    others = [s for s in data["shapes"] if s.get("own")]  # the run's size again after each (a red team's cache of two)
    want = [{"batch_size": n, "features": b} for n in (1, 16, 32, 41, 32)]  # (a failure ends the calls)
    assert [s["dims"] for s in others] == want[:len(others)] and (len(others) == 5 or not passes)
    sizes, backs = others[0:1] + others[1::2], others[2::2]  # one row: three calls, the next size after them
    assert passes or len(sizes[0]["trials"]) <= 4
    notes = [n for s in sizes for n in s["notes"] if "refused" in n or "not checked" in n]
    if not passes:
        err = data["error"]  # at another batch size; the statistics of every instance in the first one, already
        if "breaks_after" in kernel:  # a raise at the run's batch size again is the kernel's failure
            assert "workspace sized for the first batch" in err and "the run's batch size again" in err, err
        elif "stale_per_batch" in kernel:  # the step at the other sizes, seen there: its first copy at the run's size
            assert "the run's batch size again, after calls at other sizes and a change of the parameters" in err, err
        else:  # at another batch size; the statistics of every instance in the first one, already at the twin's
            assert ("a second instance" in err) if "first_instance" in kernel else "batch_size=32," not in err, err
    elif "fixed_batch" in ref or "rows_table" in ref:
        assert len(notes) == 3 and all("not checked: the reference cannot run there" in n for n in notes), notes
        assert all(len(s["trials"]) == 2 and not s["notes"] for s in backs)
    elif "one_batch_size" in str(kernel) or "launch_config" in str(kernel):
        assert notes and all("the kernel refused its batch size (it raised: " in n for n in notes), notes
    else:  # 8 to 11 calls at each other size (and a run of training steps for BatchNorm), two at the run's again: a
        # plain one, then one with a parameter changed alone (six such calls a run with the run's own two)
        assert len(sizes[0]["trials"]) in (3, 4) and all(len(s["trials"]) >= 8 for s in sizes[1:]) and not notes, notes
        assert all(len(s["trials"]) == 2 for s in backs)
        assert all([t["condition"] for t in s["trials"]] == ["batch:back", "weights:updated"] for s in backs), backs
        conds = [t["condition"] for s in data["shapes"] for t in s["trials"]]
        assert conds.count("weights:updated") == 6, conds


@pytest.mark.parametrize("ref, kernel, passes", [
    ("kb_ref_mlp2.py", "kb_cheat_mlp_stamp_first_layer.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_bias_stamped_on_weight.py", False),
    ("kb_ref_batchnorm.py", "kb_cheat_bn_fold_ignores_affine.py", False),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_two_sizes_one_stamp.py", False),
    ("kb_ref_frozen_proj.py", "kb_cheat_frozen_class_cache.py", False),
    ("kb_ref_tied.py", "kb_new_tied_other_order.py", True),
    ("kb_ref_ema_buffer.py", "ModelNew = Model", True),
    ("kb_ref_frozen_proj.py", "ModelNew = Model", True),
    ("kb_ref_causal_mask.py", "kb_new_causal_tril.py", True),
    ("kb_ref_additive_mask.py", "ModelNew = Model", True),
    ("kb_ref_relu_only.py", "ModelNew = Model", True),
    ("kb_ref_constant_fill.py", "ModelNew = Model", True),
    ("kb_ref_proj_buffer.py", "kb_cheat_proj_buffer_class_cache.py", False),
    ("kb_ref_perm_buffer.py", "kb_cheat_perm_buffer_class_cache.py", False),
    ("kb_ref_proj_buffer.py", "ModelNew = Model", True),
    ("kb_ref_perm_buffer.py", "ModelNew = Model", True),
    ("kb_ref_sincos_table.py", "kb_new_sincos_computed.py", True),
    ("kb_ref_h0_attribute.py", "ModelNew = Model", True),
    ("kb_ref_h0_attribute.py", "kb_cheat_h0_class_cache.py", False),
    ("kb_ref_nonpersistent_proj.py", "ModelNew = Model", True),
    ("kb_ref_sorted_bounds.py", "kb_new_bucketize_bounds.py", True),
    ("kb_ref_symmetric_buffer.py", "kb_new_symmetric_transposed.py", True),
    ("kb_ref_frozen_linear.py", "kb_cheat_frozen_keyed_on_trainable.py", False),
    ("kb_ref_frozen_linear.py", "ModelNew = Model", True),
    ("kb_ref_bn_stats_drawn.py", "ModelNew = Model", True),
    ("kb_ref_numpy_buffer.py", "ModelNew = Model", True),
    ("kb_ref_rf_noparam.py", "kb_cheat_rf_noparam_class_cache.py", False),
    ("kb_ref_rf_noparam.py", "ModelNew = Model", True),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_sum_keyed_cache.py", False),
    ("kb_ref_linear_nobias.py", "kb_cheat_linear_nobias_sum_keyed.py", False),
    ("kb_ref_linear_nobias.py", "ModelNew = Model", True)])
def test_a_cache_must_follow_every_parameter_and_every_instance(tmp_path, worker_here, ref, kernel, passes):
    """The thirteenth session's red team: caches stamped with one parameter's _version (the first layer's, the weight's
    and not the bias's, the Linear's and not the BatchNorm's) passed, since every change the judge made moved all the
    parameters at once: a weights:updated call now changes one parameter alone, each in turn through the run's shapes
    (on half its elements).  A cache of the last two batch sizes under one stamp passed, the run's size gone by the
    time it came back: the run's size now comes back after each other size.  A class cache of a frozen parameter
    passed: a second instance differs in its frozen parameters (and norms' running means) too.  Honest: tied weights
    registered in another order (the judge raised on the name), and a buffer other than a norm's that training
    updates (never copied back, so compared with the loaded one); and, from the review after: frozen masks (0/1, or
    -inf above the diagonal) are structure the second instance keeps, and a model without parameters gets no second
    instance at another batch size (it was noted as the kernel refusing it).  The second red team: a class cache of a
    buffer drawn per instance (a random projection, a permutation) passed, buffers never differing between instances:
    the second instance gets the judge's second Model's own draw of such a buffer (an order of its elements alone broke
    what every instance holds: sorted thresholds, a symmetric matrix), and keeps a buffer every instance builds alike
    (a sine table an honest kernel computes again).  An older KernelBench RNN's h0, a tensor attribute drawn in
    __init__ (outside the state): the judge's second Model is built as the worker builds its second ModelNew, its own
    h0 drawn (ModelNew = Model failed every call of the second instance)."""
    kernel = _same_model(tmp_path, ref, kernel)
    rc, data, md = _kb(tmp_path, ref, kernel, "batch_size=32," + ("features=64" if "linear" in ref or "mlp" in ref
                                                                  or "proj" in ref or "tied" in ref or "ema" in ref or "perm" in ref
                                                                  or "sincos" in ref or "nonpersistent" in ref
                                                                  or "symmetric" in ref or "frozen" in ref else "features=16"))
    assert (rc == 0) is passes, data["error"]
    why = {"two_sizes": "the run's batch size again, after calls at other sizes"}  # (the stamped caches' first wrong
    # call varies: a change of one parameter, a second instance, or a call after either)
    assert passes or all(w in data["error"] for k, w in why.items() if k in str(kernel)), data["error"]
    assert not passes or not [n for s in data["shapes"] for n in s["notes"] if "refused" in n]


def test_a_model_wrong_in_every_plain_call_is_told_they_run_in_eval(tmp_path, worker_here):
    """A new user's BatchNorm that always normalised with the batch's statistics failed with no word of the mode:
    every plain call of a KernelBench model is in eval() without autograd, and the message now says so, and that
    training mode passes."""
    from kernel_loop.steps.correctness import _overall

    rc, data, md = _kb(tmp_path, "kb_ref_batchnorm.py", "kb_wrong_in_eval_batch_stats.py", "batch_size=32,features=16")
    assert rc != 0
    with open(tmp_path / "run" / "v0" / "correctness.json") as fh:
        said = _overall(json.load(fh))[1]
    assert "(the model in eval() without autograd, as in every plain call; it passes in train" in said, said


@pytest.mark.parametrize("kernel, passes", [("cheat_vadd_returns_fresh.py", False), ("honest_vadd_returns_out.py", True)])
def test_a_handed_output_is_what_is_checked(tmp_path, worker_here, kernel, passes):
    """Found by a red team: a kernel handed 'out' that left it as it was and returned the right values in a new
    tensor under its name passed (the returned tensor was copied over the buffer).  The buffer a caller passed is
    what it reads: returning another tensor under that name is refused; returning the buffer itself is fine."""
    rc, data, md = _correctness(tmp_path, "ref_vadd.py", kernel, "N=1000")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert "output 'out' is handed to the kernel" in data["error"] and "returned another tensor" in data["error"]


@pytest.mark.parametrize("kernel, passes", [("cheat_softmax_ring.py", False),
                                            ("cheat_softmax_ring_every_5th.py", False),
                                            ("cheat_softmax_ring_freed_by_gc.py", False),
                                            ("cheat_softmax_ring_idle_without_collections.py", False),
                                            ("cheat_softmax_ring_idle_on_repeated_inputs.py", False),
                                            ("cheat_softmax_scratch_put_back.py", False),
                                            ("honest_softmax_compile_on_second_sight.py", True),
                                            ("honest_softmax_compile_per_variant.py", True),
                                            ("honest_softmax_result_in_a_cycle.py", True),
                                            ("honest_softmax_compile_keeps_args.py", True)])
def test_a_ring_of_returned_buffers_larger_than_the_calls_fails(tmp_path, worker_here, kernel, passes):
    """Found by a red team: a ring of more buffers than correctness makes calls returned results that no later
    call overwrote in time.  After the calls the worker lets go of every result; memory the kernel still holds
    after its caller let go is memory it can write again.  A fresh result in a reference cycle is freed then.  Seen
    on the H100: CuTe DSL's cute.compile keeps the tensors of the call that compiled, so the first call of each layout
    and module mode may stay held (noted); any other held call fails, however few (a red team's ring served every
    5th call).  The worker holds a result through an object of its own: a kernel that reuses its buffer once the
    returned object dies (a weak reference) overwrote a caller's view of it, and fails.  Rings given back at a garbage
    collection: the ring probe's calls freeze what lived before them out of collections (guards.before_call), each on
    inputs of its own (a red team's rings stood still where no collection ran, or where the inputs repeated)."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert (rc == 0) is passes, data["error"]
    if passes:
        assert ("as a compile cache keeps" in md) is ("compile" in kernel), md
        # a result in a cycle (an agent's trial: a Triton kernel under the interpreter, and autograd's graph) is no
        # result the kernel holds: the ring probe's calls may follow (a collection there would give a ring back that
        # frees itself at one), but the note says no more than it knows
        assert "the kernel held results" not in md and ("still holds the results" in md) is ("compile" in kernel), md
        assert "cycle" not in kernel or "or only a reference cycle no garbage collection" in md, md
        return
    err = data["error"]  # held once its caller let go, or written again while held (a ring cycled by more calls)
    assert ("is still held by the kernel after its caller let go of it" in err or "changed when the kernel" in err
            or "Inplace update to inference tensor" in err), err  # a scratch borrowed in an inference_mode call
    assert not any("is stored where the result" in n for n in _failed(data)[1])  # no result was overwritten in time


@pytest.mark.parametrize("kernel", ["cheat_softmax_ring_idle_on_repeated_inputs.py", "cheat_softmax_ring_freed_by_gc.py"])
def test_a_ring_given_back_at_a_collection_is_caught_whenever_one_runs(tmp_path, worker_here, monkeypatch, kernel):
    """Found in `make test`: a ring of buffers given back when a collection frees a sentinel passed 1 run in 8 under
    load.  A collection between the calls whose results the caller held and the ring probe emptied the ring, so the
    probe cycled a ring that held none of them; one just before the probe's question made the kernel hold nothing then.
    Here a collection runs at both moments, every run (the worker is a thread of this process): the kernel was seen
    holding results at an earlier call, and the call before the probe is quiet and keeps its results."""
    import gc

    from kernel_loop.measure import held

    def collected(fn, when):
        def wrapped(*args):
            gc.collect() if when(*args) else None
            return fn(*args)
        return wrapped

    monkeypatch.setattr(held, "holding", collected(held.holding, lambda sess, n, t: t == n - 2))
    monkeypatch.setattr(held, "cycle_rings", collected(held.cycle_rings, lambda *args: True))
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    err = data["error"] or ""  # (a ring made in an inference_mode call fails as the outputs' scratch outside one)
    assert rc != 0 and ("changed when the kernel" in err or "Inplace update to inference tensor" in err), md
    assert "changed when the kernel" not in err or "calls more before the last one" in md, md


def test_collection_runs_as_a_users_except_in_the_ring_probes_quiet_calls(tmp_path, monkeypatch):
    """guards.before_call: Python's garbage collection as a user's process has it in every verified call (a red team's
    kernel, right only where no collection ran, passed a judge that turned it off in every call); in the unverified
    calls of the ring probe (held.cycle_rings) what lived before each call is frozen out of collections, which go on
    for what the call makes (another red team's ring stood still where none ran), and all goes back after them."""
    import gc

    import torch
    from kernel_loop.measure import guards

    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_right_where_no_collection_runs.py", "M=8,N=64")
    assert rc == 1 and "outside tolerance" in data["error"], data["error"]
    try:
        gc.unfreeze()
        guards.before_call(torch, "cpu", {"quiet": True})
        assert gc.isenabled() and gc.get_freeze_count() > 0
        guards.before_call(torch, "cpu", {"quiet": True})
        guards.before_call(torch, "cpu", {"keep": True})
        assert gc.isenabled() and gc.get_freeze_count() == 0
        collected, spared, used = [], [], [10]  # on a GPU: a collection in a quiet call past half the device's memory
        monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)
        monkeypatch.setattr(guards.tensors, "spare_cached", lambda torch, device: spared.append(device))
        fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
            memory_allocated=lambda d: used[0], get_device_properties=lambda d: types.SimpleNamespace(total_memory=100)))
        guards.before_call(fake, "cuda:0", {"quiet": True})
        used[0] = 51
        guards.before_call(fake, "cuda:0", {"quiet": True})
        guards.before_call(fake, "cuda:0", {"keep": True})
        assert collected == [1] and spared == ["cuda:0"] and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.parametrize("kept, kernel, passes", [(5, "cheat_softmax_ring.py", False),
                                                  (2, "cheat_softmax_ring.py", False),
                                                  (2, "cheat_softmax_first_as_scratch.py", False)])
def test_results_too_large_to_all_keep_are_kept_for_some_calls(tmp_path, worker_here, monkeypatch, kept, kernel,
                                                                passes):
    """Seen on the H100: ConvTranspose2d at KernelBench's size returns 2 GiB a call, and the worker holding every
    call's result ran out of memory.  The calls that keep theirs are drawn to fit a share of the memory; a ring is
    still caught, however few keep theirs (one of them is never the first call of its layout and mode, which a compile
    cache may hold), and the report says how many did."""
    import os

    from kernel_loop.measure import held

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    monkeypatch.setattr(held, "KEEP_SHARE", total // (kept * 8 * 64 * 4))  # M=8,N=64 float32: 2 KiB a result
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert (rc == 0) is passes, data["error"]
    n = len(data["shapes"][0]["trials"])
    assert f"held results: {kept} of the {n} calls" in md, md
    err = data["error"]  # held once its caller let go, or written again while held (the ring cycled by more calls)
    assert passes or "is still held by the kernel after its caller let go of it" in err or "changed when the kernel" in err


def test_a_ring_too_large_to_come_back_within_the_calls_is_a_pool(tmp_path, worker_here):
    """A ring of 4096 buffers writes a held result again only after 4096 calls, more than correctness makes with
    the calls that cycle rings: the kernel still holding the results of every call is what fails it (POOL_CALLS)."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_ring_4096.py", "M=8,N=64")
    assert rc == 1 and "(a pool of buffers returned in turn)" in data["error"], data["error"]


def test_the_hint_that_a_kernel_holds_results_is_calibrated_on_this_torch():
    """protocol.held_elsewhere decides whether a shape gets the calls that cycle a ring: another tensor over a held
    result's storage (the kernel's) counts, a result alone does not, a returned object the kernel holds too (held as
    it is, one time in two) counts, and a followed one counts while it lives."""
    import torch
    from kernel_loop.measure.protocol import held_elsewhere
    from kernel_loop.tensors import WeakHold

    x = torch.zeros(4)
    held = {"out": x.detach()}  # the caller's own object over the kernel's result
    assert held_elsewhere([held])
    del x
    assert not held_elsewhere([held])
    ring = [torch.zeros(4)]  # the object returned, held by the caller, and by the kernel too (a ring's list)
    held = {"out": ring[0]}
    assert held_elsewhere([held])
    ring.clear()
    assert not held_elsewhere([held])
    z = torch.zeros(4)
    w = WeakHold(z)
    assert held_elsewhere([{"out": w}])
    del z
    assert not held_elsewhere([{"out": w}]) and w.strong() is None


def test_a_kernel_reusing_its_buffer_once_the_returned_object_dies_fails(tmp_path, worker_here):
    """Found by a red team: a pool that reuses a buffer once the tensor object it returned is dead (a weak reference)
    never touched what the worker held, the returned object itself; a user keeping y[0] or y.detach() had it
    overwritten.  The worker holds a result through an object of its own one time in two, so the kernel's buffer
    comes back (or, made in a call under inference_mode, is refused where a later call writes it)."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_weakref_pool.py", "M=8,N=64")
    assert rc == 1 and ("changed when the kernel was called again" in data["error"]
                        or "Inplace update to inference tensor" in data["error"]), data["error"]


@pytest.mark.parametrize("kernel, passes", [("cheat_softmax_cross_shape_scratch.py", False),
                                            ("cheat_softmax_last_as_scratch.py", False),
                                            ("cheat_softmax_borrows_and_puts_back.py", False),
                                            ("honest_softmax_compile_keeps_args.py", True)])
def test_a_result_a_compile_cache_keeps_is_read_again_after_the_later_shapes(tmp_path, worker_here, kernel, passes):
    """Found by a red team: a kernel that kept each shape's first result (as a compile cache would, noted) and used it
    as scratch in the next shape's calls, where no check looked: a user's result of one shape, changed by a call of
    another.  The results a kernel keeps are read again after every later shape's calls.  (Where the kept result was
    made in a call under inference_mode, the kernel's own later write to it raises instead: refused too, as a user's
    inference call followed by a normal one would be; seen in CI and by a red team, now and then.)"""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64", "--extra-shapes", "M=4,N=32")
    assert (rc == 0) is passes, data["error"]
    if not passes:  # the kept result read after the later shape's calls, or the one the caller carried into them
        assert ("changed during the calls of a later shape" in data["error"]
                or "Inplace update to inference tensor" in data["error"]), data["error"]


@pytest.mark.parametrize("ref, kernel, dims, why", [
    ("ref_vadd.py", "cheat_vadd_scribbles_on_earlier_out.py", "N=1024", "changed when the kernel was called again"),
    ("ref_softmax_rand.py", "cheat_softmax_wrong_without_grad.py", "M=8,N=64", "torch.no_grad()"),
    ("ref_softmax.py", "cheat_softmax_wrong_after_refill.py", "M=8,N=64", "| Result | FAIL |")])
def test_a_kernel_wrong_where_a_users_calls_differ_from_the_judges_fails(tmp_path, worker_here, ref, kernel, dims, why):
    """Found by an eighth red team: every call of a shape but the moved one was handed the same output buffer, and the
    moved one died after its call, so a kernel could write an earlier call's buffer where it was seen once and still
    lived (a user's out2 of three calls); a kernel function was always called with autograd on.  The outputs a moved
    call is handed are now kept, as a user keeps each call's, and read back after the later calls; a function is
    called under torch.no_grad() and torch.inference_mode() too.  A ninth's: the inputs' refills never moved their
    _version (a kernel wrong after a user's x.copy_(batch)); the worker's __main__ told it was the judge's (the
    static check names that module now)."""
    rc, data, md = _correctness(tmp_path, ref, kernel, dims)
    assert rc == 1 and why in md, data["error"]
    assert any("main module" in f.why for f in static_check.findings(KERNELS / "cheat_softmax_main_module.py"))


def test_a_kept_result_borrowed_as_scratch_until_the_next_call_fails(tmp_path, worker_here):
    """Found by a red team: a kernel that used the previous call's result as scratch and put it back in the next call
    was seen only where one of two reads drawn at random, or the read after the shape's last call, fell in the
    window.  Where the results are small, the kept ones are read back after every call."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_scratch_till_next_call.py", "M=8,N=64")
    assert rc == 1 and ("changed when the kernel was called again" in data["error"]  # or, kept from a call under
                        or "Inplace update to inference tensor" in data["error"]), data["error"]  # inference_mode


def test_a_kernel_right_only_while_every_result_is_kept_fails(tmp_path, worker_here):
    """Found by a sixth red team: correctness kept every result while the next call ran, the timed loops none, so a
    kernel could tell the judge's calls from a user's who drops a result now and then.  One call in four (drawn at
    random) now lets go of its results at once; over two shapes (29 calls) every call keeps its result once in 4000."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_right_while_all_kept.py", "M=8,N=64",
                                "--extra-shapes", "M=4,N=32")
    assert rc == 1, data["error"]


def test_a_kernel_reshaping_by_its_copy_of_a_constant_model_never_reads_fails(tmp_path, worker_here):
    """Found by a sixth red team: the kernel file's copies of ref.py's constants took every shape's dims, so a
    ModelNew that laid its rows out by its own batch_size passed at each shape and was wrong at any other batch in a
    user's import.  Only the constants ref.py's Model reads take the run's dims now (VanillaRNN's batch_size)."""
    rc, data, md = _kb(tmp_path, "kb_ref_softmax_sized.py", "cheat_kb_softmax_by_its_batch_size.py", "batch_size=16",
                       "--extra-shapes", "batch_size=13")
    assert rc == 1 and "dims batch_size=13" in data["error"], data["error"]


def test_a_compile_cache_per_layout_and_mode_is_not_a_pool(tmp_path, worker_here):
    """Found by a red team: an honest KernelBench ModelNew that "compiles" once per (training, strides) and keeps the
    tensors it compiled with holds the results of the 4 calls that compiled (eval, train, strided, padded): each the
    first of its layout and mode, so noted, not failed."""
    rc, data, md = _correctness(tmp_path, "kb_ref_batchnorm.py", "honest_kb_bn_compiled_per_layout_and_mode.py",
                                "batch_size=32,features=16")
    assert rc == 0, data["error"]
    assert "as a compile cache keeps the tensors it compiled with); they never changed" in md, md


@pytest.mark.parametrize("kernel, passes", [("cheat_softmax_ring_dlpack.py", False),
                                            ("cheat_softmax_ring_numpy.py", False),
                                            ("honest_softmax_numpy_cloned.py", True)])
def test_a_result_in_memory_torch_did_not_allocate_fails(tmp_path, worker_here, kernel, passes):
    """Left open by a red team: a ring of results handed out through DLPack or NumPy gives the caller a new storage
    object each call over memory the kernel keeps, so the caller letting go frees the object, not the memory.  A
    returned tensor must live in memory torch allocated for it (or in a buffer the kernel was handed)."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert "lives in memory torch did not allocate" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("cheat_prelu_max.py", False), ("honest_prelu.py", True)])
def test_an_input_of_one_element_is_moved_to_other_ranges_too(tmp_path, worker_here, kernel, passes):
    """Found by a red team: an input of at most 16 distinct values counted as discrete (a mask, labels) and kept its
    range, so a one-element slope did too.  An input whose few values are all distinct fractions is moved now."""
    rc, data, md = _correctness(tmp_path, "ref_prelu_slope.py", kernel, "M=8,N=64")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert any(c.startswith("range:") for c in _failed(data)[0]), data["error"]


@pytest.mark.parametrize("kernel, why", [("cheat_softmax_flushes_denormals.py", "torch.set_flush_denormal (False -> True)"),
                                         ("cheat_softmax_tf32_at_import.py", "kernel.py's import changed"),
                                         ("honest_softmax_scoped_setting.py", None)])
def test_a_kernel_that_changes_its_callers_process_settings_fails(tmp_path, no_static_check, kernel, why):
    """Found by a red team: right outputs from a kernel that turned on flush-to-zero (or TF32, a default dtype ...)
    for its caller's whole process.  The worker compares torch's process-wide settings after the import and after
    every call with what they were before any kernel code ran.  (A real worker process: the kernel changes it.)"""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert (rc == 0) is (why is None), data["error"]
    if why:
        assert why in data["error"] and "restore it" in data["error"], data["error"]


def test_a_kernel_right_only_at_the_first_address_it_saw_fails(tmp_path, worker_here):
    """Found by a red team: every call of a shape got its inputs in one staged buffer (same address, new values), so
    a kernel keyed on the first address passed.  One call hands the inputs in memory of their own."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_first_address.py", "M=8,N=64")
    assert rc == 1 and "layout:moved" in _failed(data)[0], data["error"]
    assert "at another address" in data["error"]


@pytest.mark.parametrize("kernel", ["cheat_vadd_first_output_buffer.py", "cheat_vadd_captured_first_output.py"])
def test_a_kernel_that_keeps_writing_its_first_output_buffer_fails(tmp_path, worker_here, kernel):
    """Found by a red team: the outputs a kernel is handed were always the same buffer, so one that wrote every result
    into the buffer of its first call passed.  The call that moves the inputs moves the handed outputs too.  Found by
    a second: one that also copied into the buffer it was handed (a CUDA graph replaying into the first output it
    captured) passed; the buffer the earlier calls were handed must keep what it held through the moved call."""
    rc, data, md = _correctness(tmp_path, "ref_vadd.py", kernel, "N=1000")
    assert rc == 1 and "layout:moved" in _failed(data)[0], data["error"]


def test_a_scalar_drawn_per_seed_reaches_the_kernel(tmp_path, worker_here):
    """Found by a red team: a run_kernel's scalar arguments were bound once, from the first data set, so when setup()
    drew a scalar per seed the reference got each draw's value and the kernel the first one: an honest kernel failed
    14 of 15 calls.  The worker now gets each data set's scalars with the call."""
    rc, data, md = _correctness(tmp_path, "ref_scale_drawn.py", "honest_scale.py", "M=8,N=64")
    assert rc == 0, data["error"]


def test_a_kernel_that_resets_torchs_random_numbers_fails(tmp_path):
    """Found by a red team: right outputs from a kernel that called torch.manual_seed(0), so its caller's random numbers
    repeated after every call.  Where the reference draws no random number, the call must leave torch's generators
    as they were (a KernelBench model in training mode with dropout draws, and is exempt there).
    (A real worker process: the kernel changes its generators.)"""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_reseeds.py", "M=8,N=64")
    assert rc == 1 and "random number generator's state" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, why", [
    ("cheat_softmax_autocast_left_on.py", "torch.is_autocast_enabled('cpu') (False -> True)"),
    ("cheat_softmax_grad_off.py", "turned autograd off"),
    ("cheat_softmax_python_reseeds.py", "random number generator's state"),
    ("cheat_softmax_overrides_copy.py", "the dispatcher's aten::copy_"),
    ("cheat_softmax_session_leader.py", "elements outside tolerance")])
def test_red_team_5_changes_to_the_callers_process_fail(tmp_path, no_static_check, kernel, why):
    """Found by a fifth red team, right outputs each: autocast left on, autograd turned off under the worker's own
    context, Python's random module reseeded, and an aten::copy_ of the kernel's own that computed the answer in the
    worker's hand-over (a wrong output in a user's hands); and a kernel right only as a session leader, as the worker
    was.  (A real worker process: the kernel changes it, or reads it.)"""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", kernel, "M=8,N=64")
    assert rc == 1 and why in data["error"], data["error"]


def test_a_memo_keyed_on_address_and_version_fails(tmp_path, worker_here):
    """Found by a fifth red team: every staged input got a new version, so a memo keyed on address and version never hit
    in the judge.  The worker now stages new values through .data (same address, same version), as a user's buffer
    refilled through NumPy is."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_memo_address_version.py", "M=8,N=64")
    assert rc == 1, data["error"]


def test_a_kernel_more_exact_than_the_reference_passes_the_normwise_bound(tmp_path, worker_here):
    """Found by a CPU sweep (a ModelNew computing in float64): where the float32 reference is itself further from the
    exact answer than the relative L2 limit, a more exact kernel failed that limit on every call.  An output that fails
    only the normwise bound passes when it is within twice the reference's own error of the float64 reference."""
    rc, data, md = _correctness(tmp_path, "ref_standardise_near_one.py", "honest_standardise_float64.py", "M=16,N=512")
    assert rc == 0, data["error"]
    assert "against the reference in float64" in md


@pytest.mark.parametrize("kernel, passes", [("honest_shift_exact.py", True), ("cheat_shift_three_times_off.py", False)])
def test_an_output_as_exact_as_an_inexact_reference_passes_elementwise_too(tmp_path, worker_here, kernel, passes):
    """Seen on the H200 (KernelBench ConvTranspose2d, ModelNew = Model: 19 of 21 calls failed, cuDNN's TF32 rounding in
    another algorithm): where the float32 reference is itself off elementwise, a kernel as exact as it, or more, failed
    the elementwise bound.  It passes when within twice the reference's own error of the float64 answer, in units of
    the tolerance; a kernel further off than that still fails."""
    rc, data, md = _correctness(tmp_path, "ref_shift_loses_digits.py", kernel, "N=4096")
    assert (rc == 0) is passes, data["error"]
    if passes:
        assert "as exact as the reference, or more" in md


@pytest.mark.parametrize("kernel, passes", [("kb_new_bn_shift_exact.py", True),
                                            ("kb_cheat_bn_shift_off_in_training.py", False)])
def test_a_model_more_exact_than_the_reference_passes_in_every_mode_and_with_other_weights(tmp_path, worker_here,
                                                                                         kernel, passes):
    """Found on the H100 (the level-3 example's DenseNet layer, exact fp32 Triton against cuDNN's TF32 conv): the
    float64 answer forgave the plain calls only, so every call in training mode, from other running statistics or
    with other weights failed.  Each is now held to the float64 answer of the Model copy its reference came from; a
    kernel off in training mode by more than the reference's own error still fails there."""
    rc, data, md = _kb(tmp_path, "kb_ref_bn_shift_loses_digits.py", kernel, "batch_size=32,features=16")
    assert (rc == 0) is passes, data["error"]
    if passes:  # (the report's table is bounded: the rows' notes are read from the json)
        forgiven = {t["condition"] for s in data["shapes"] for t in s["trials"] for o in t["outputs"]
                    if "as exact as the reference, or more" in (o.get("note") or "")}
        assert {c for c in forgiven if c.startswith(("mode:", "weights:"))}, forgiven
    else:
        conds, _ = _failed(data)
        assert conds and all("train" in c for c in conds), conds


@pytest.mark.parametrize("ref, kernel, passes", [
    ("kb_ref_ema_buffer.py", "kb_cheat_ema_bf16_in_training.py", False),
    ("kb_ref_ema_buffer.py", "ModelNew = Model", True),
    ("kb_ref_noise_in_forward.py", "kb_cheat_noise_bf16_where_typical.py", False),
    ("kb_ref_noise_in_forward.py", "ModelNew = Model", True)])
def test_the_float64_answer_is_of_the_model_as_it_gave_the_reference(tmp_path, ref, kernel, passes):
    """A review's two bfloat16 cheats passed the float64 re-check of a condition's calls: it ran the Model copy after
    the float32 call had changed its buffer (a running mean kept in a plain buffer), and it ran a Model that draws in
    forward, whose float64 draws are other numbers.  The copy is now kept as it was before that call, and a
    reference that draws is never re-checked in float64.  (A real worker process: the generators are compared.)"""
    rc, data, md = _kb(tmp_path, ref, _same_model(tmp_path, ref, kernel), "batch_size=32,features=64")
    assert (rc == 0) is passes, data["error"]


@pytest.mark.parametrize("layout", ["layout:permuted", "layout:padded"])
def test_inputs_again_after_a_layout_call_are_handed_as_the_worker_holds_them(tmp_path, monkeypatch, layout):
    """Found while checking a review's fixes (about 1 run in 10 of ModelNew = Model on a Model that adds
    randn_like(x) noise): the call with the previous call's inputs again took them as that call's judge had them,
    a transposed or padded view after a layout condition, so the reference drew its noise laid out another way than
    the worker's plain buffer.  They are now dense, as the worker holds them.  (A real worker process: the
    generators are compared.)"""
    from kernel_loop.measure import judge

    monkeypatch.setattr(judge, "condition_plan", lambda rng, ds, prob, trials: ["plain", layout, "input:again", "plain"])
    ref = "kb_ref_noise_in_forward.py"
    rc, data, md = _kb(tmp_path, ref, _same_model(tmp_path, ref, "ModelNew = Model"), "batch_size=32,features=64")
    assert rc == 0, data["error"]
    assert [t["condition"] for t in data["shapes"][0]["trials"]][:4] == ["plain", layout, "input:again", "plain"]


def test_the_float64_recheck_reads_a_copy_of_what_the_call_returned(tmp_path, worker_here, monkeypatch):
    """Red team 13: the re-check read the shared output again after the float64 reference, so a kernel's thread could
    write right values for that read and undo them.  It reads a private copy whose fingerprint is the call's return;
    where the device has no room for the copy the output is not forgiven (here: no copy at all)."""
    from kernel_loop import tensors

    monkeypatch.setattr(tensors, "clone_or_none", lambda t: None)
    rc, data, md = _correctness(tmp_path, "ref_shift_loses_digits.py", "honest_shift_exact.py", "N=4096")
    assert rc == 1 and "as exact as the reference, or more" not in md, data["error"]


@pytest.mark.parametrize("ref, kernel, dims, why", [
    ("ref_inexact_two_outputs.py", "cheat_two_outputs_one_tensor_inexact_ref.py", "N=4096", "shares memory with the output"),
    ("ref_inexact_row_sum_repeated.py", "cheat_row_sum_expanded_inexact_ref.py", "M=64,N=64", "expanded tensor"),
    ("ref_inexact_then_exact.py", "cheat_sloppy_where_the_reference_is_exact.py", "N=4096", "outside tolerance"),
    ("ref_inexact_then_exact.py", "cheat_float16_where_the_reference_is_exact.py", "N=4096", "outside tolerance"),
    ("ref_inexact_then_exact.py", "honest_inexact_then_exact.py", "N=4096", None),
    ("ref_inexact_two_outputs.py", "honest_two_outputs_inexact_ref.py", "N=4096", None)])
def test_red_team_6_an_output_forgiven_for_an_inexact_reference_is_still_checked(tmp_path, worker_here, ref, kernel,
                                                                                 dims, why):
    """Found by a sixth red team against the as-exact-as-the-reference rule: an output it forgave skipped the checks
    after the values (two outputs in one tensor; a stride-0 output that writes one value per row), and the allowance,
    twice the reference's worst error anywhere, let a kernel be ten times the tolerance off where the reference is
    exact.  The rule now runs before those checks, and the allowance is the reference's error near each element; honest
    kernels more exact than the reference still pass.  A later red team's float16 half, within the elementwise
    tolerance, passed on the reference's relative L2 error over the whole output: that allowance is local too."""
    rc, data, md = _correctness(tmp_path, ref, kernel, dims)
    assert (rc == 0) is (why is None), data["error"]
    assert why is None or why in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("cheat_noise_then_reseeds_everything.py", False),
                                            ("honest_noise_as_the_reference.py", True)])
def test_red_team_7_a_reference_drawing_from_python_too_still_checks_torchs_generators(tmp_path, no_static_check,
                                                                                       kernel, passes):
    """Found by a seventh red team: a reference that also drew from Python's random turned the check of torch's
    generators off, so a kernel that drew as the reference does and then reseeded torch, random and NumPy passed.
    Only Python's and NumPy's are left unchecked there.  (A real worker process: the kernel changes its generators.)"""
    rc, data, md = _correctness(tmp_path, "ref_noise_and_python_draw.py", kernel, "N=4096")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        assert "other than the reference's call leaves them" in data["error"], data["error"]


def test_the_ends_of_every_input_range_are_tried(tmp_path, worker_here):
    """Found by a red team: one factor drawn per range could miss a kernel wrong only near the range's end.  Each
    range is now tried at both ends as well as at a random point (which lands in the kernel's gap too about once in
    30 runs: 4 seeds of 100 failed range:shift as well)."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_range_gaps.py", "M=64,N=256")
    assert rc == 1, md
    conds, _ = _failed(data)
    ends = {"range:up:hi", "range:down:lo", "range:shift:hi"}
    assert ends <= conds <= ends | {"range:up", "range:down", "range:shift"}, conds


@pytest.mark.parametrize("kernel, wrong", [
    ("kb_cheat_softmax_assumes_contiguous.py", {"layout:strided", "layout:padded", "layout:permuted"}),
    ("kb_cheat_softmax_empty_like.py", {"layout:permuted"}),  # a red team's: a dense transpose alone shows it
    ("kb_new_softmax_refuses_strided.py", None)])
def test_a_strided_input_is_handed_once_to_a_modelnew(tmp_path, worker_here, kernel, wrong):
    """A module's caller may hand it a view (a slice with a step, rows of a wider tensor) or a dense tensor in
    another memory order (a transpose, channels_last): one call each hands every input of a ModelNew so.  A ModelNew
    silently wrong there fails; one that raises refuses honestly, and correctness.md says so.  (A run_kernel's
    inputs are setup()'s, layout included.)"""
    rc, data, md = _kb(tmp_path, "kb_ref_softmax.py", kernel, "batch_size=8,dim=512")
    assert (rc == 0) is (wrong is None), data["error"]
    if wrong is None:
        assert "refused inputs so laid out" in md and "needs a contiguous x" in md, md[:3000]
    else:
        conds, _ = _failed(data)
        assert conds == wrong, conds


def test_permuted_views_are_dense_in_another_order():
    import torch
    from kernel_loop.tensors import strided_view

    for shape in ((6, 5), (2, 3, 4, 5), (4, 1, 5), (2, 3, 1, 5)):
        t = torch.randn(shape)
        v = strided_view(t, "permuted")
        assert torch.equal(v, t) and not v.is_contiguous() and v.untyped_storage().nbytes() == t.nbytes, shape
    assert strided_view(torch.randn(2, 3, 4, 5), "permuted").is_contiguous(memory_format=torch.channels_last)
    one = torch.randn(1, 7)
    assert strided_view(one, "permuted") is one  # no two dims to order otherwise


def test_a_kernel_is_imported_under_the_name_a_users_import_gives_it(tmp_path, no_static_check):
    """Found by a red team: the worker imported a kernel as <stem>_<hash>, a name no user's `import kernel` gives, and
    a kernel right only under such a name passed.  (The static check, which refuses reading the name now, off; a
    worker process: a test process has imported other kernels.)"""
    rc, data, _ = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_by_module_name.py", "M=8,N=64")
    assert rc == 1 and data["result"] == "FAIL", data


@pytest.mark.parametrize("ref, kernel, dims, passes, note", [
    ("kb_ref_linear_relu.py", "kb_cheat_wrong_grad.py", "batch_size=32,features=64", False, None),
    ("kb_ref_linear_relu.py", "kb_new_no_grad.py", "batch_size=32,features=64", True, "carries no gradient"),
    ("kb_ref_linear_relu.py", "kb_cheat_grads_rounded_to_half.py", "batch_size=32,features=64", False, None),
    ("kb_ref_linear_relu.py", "kb_new_grads_own_backward.py", "batch_size=32,features=64", True, None),
    ("kb_ref.py", "kb_new.py", "batch_size=16,in_features=64,out_features=32", True, "gradients of the inputs"),
    # a red team's false rejection: a weight layout cached on the first call reaches no gradient: noted, not failed
    ("kb_ref_linear_relu.py", "kb_new_linear_cached_weight_t.py", "batch_size=32,features=64", True,
     "parameter 'fc.weight': not compared: ModelNew's output does not reach it"),
])
def test_gradients_of_a_modelnew(tmp_path, worker_here, ref, kernel, dims, passes, note):
    """A ModelNew whose output carries a gradient has its input and parameter gradients compared with Model's on
    one call with autograd on; one whose output carries none (a custom kernel without backward) is noted.  A later red
    team's backward rounded its gradients to float16, within the elementwise tolerance: a gradient Model gets within
    the relative L2 limit is held to it too (against float64, beyond twice Model's own error)."""
    rc, data, md = _kb(tmp_path, ref, kernel, dims)
    assert (rc == 0) is passes, data["error"]
    if kernel == "kb_cheat_grads_rounded_to_half.py":
        assert "relative L2 error against Model's float64 gradient" in data["error"], data["error"]
    elif not passes:
        # its backward halves the input's gradient and gives the weight none (noted, like a cached layout)
        assert "gradient of input 'arg0'" in data["error"], data["error"]
        assert "parameter 'fc.weight': not compared" in md
    if note:
        assert note in md, md[:3000]


@pytest.mark.parametrize("ref, kernel, wrong, what", [
    ("kb_ref_linear_relu.py", "kb_cheat_linear_grad_dropped_when_frozen.py",
     {"mode:grad:frozen", "mode:grad:partial", "mode:train+grad:frozen", "mode:train+grad:partial"},
     "with parameters frozen, ModelNew's output carries no gradient to it"),  # the first of the four calls' rows
    ("kb_ref_linear_relu.py", "kb_cheat_linear_bias_grad_with_weight.py", {"mode:grad:partial", "mode:train+grad:partial"},
     "gradient of parameter 'fc.bias'"),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_forward_only_when_frozen.py", {"mode:grad:frozen", "mode:train+grad:frozen"},
     "with parameters frozen, ModelNew's output carries no gradient to it"),
    ("kb_ref_linear_relu.py", "kb_cheat_linear_grads_only_for_input_grad.py", {"mode:grad:data", "mode:train+grad:data"},
     "with inputs that ask no gradient (data), ModelNew gives this parameter none"),
    ("kb_ref_linear_relu.py", "kb_new_linear_own_backward.py", None, None),
    ("kb_ref_linear_plus_y.py", "kb_new_linear_forward_only_plus_y.py", None, "3 of them unused by ModelNew"),
    ("kb_ref_linear_plus_y.py", "kb_new_linear_forward_only_in_eval_plus_y.py", None, "3 of them unused by ModelNew")])
def test_gradients_are_compared_with_parameters_frozen(tmp_path, worker_here, ref, kernel, wrong, what):
    """Found by a red team and a review: a custom backward that gave no gradient at all once the weight was frozen, and
    one that gave the bias its gradient only while the weight trained, passed, since every call with autograd
    trained every parameter.  One call has them all frozen (a user's adapter training), one all but the smallest (a
    bias fine-tuned alone), one the inputs plain data (a first layer's: a red team's backward ran only where the input
    asked a gradient); a gradient ModelNew reached while all trained, missing there, fails.  One it never
    reached (a forward-only kernel on one input of two) is noted there as everywhere (the review's false rejection).
    Each of the three comes in eval() and in training mode (a thirteenth red team's)."""
    dims = "batch_size=32,features=64"
    rc, data, md = _kb(tmp_path, ref, kernel, dims)
    assert (rc == 0) is (wrong is None), data["error"]
    if wrong is not None:
        conds, _ = _failed(data)
        assert conds == wrong and what in data["error"], (conds, data["error"])
    elif what is not None:
        assert what in md and "not compared: ModelNew's output does not reach it" in md, md[:3000]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_softmax3d_empty_like_guarded.py", False),
                                            ("ModelNew = Model", True)])
def test_an_input_with_its_leading_dims_swapped_is_handed_once(tmp_path, worker_here, kernel, passes):
    """A review's kernel took a fresh row-major output only where the last dim was not unit-stride: right on every
    layout handed then, wrong on a sequence-first tensor made batch-first (dense, the leading dims swapped)."""
    kernel = _same_model(tmp_path, "kb_ref_softmax3d.py", kernel)
    rc, data, md = _kb(tmp_path, "kb_ref_softmax3d.py", kernel, "batch_size=8,seq=16,dim=64")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        conds, _ = _failed(data)
        assert conds == {"layout:lead"}, conds


def _fails_only_at(tmp_path, ref, kernel, dims, passes, cond):
    """``kernel`` (or "ModelNew = Model") FAILs at the condition ``cond`` alone, or passes with ``cond`` checked."""
    rc, data, md = _kb(tmp_path, ref, _same_model(tmp_path, ref, kernel), dims)
    assert (rc == 0) is passes, data["error"]
    if not passes:
        conds, _ = _failed(data)
        assert conds == {cond}, (conds, data["error"])
    else:
        assert f"{cond}: not checked" not in md, md[:3000]
        assert any(t["condition"] == cond for s in data["shapes"] for t in s["trials"])


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_softmax_global_max.py", False), ("ModelNew = Model", True)])
def test_rows_far_apart_meet_a_max_taken_over_the_whole_tensor(tmp_path, worker_here, kernel, passes):
    """Found by a red team: every range condition moved the whole tensor by one factor, so each row kept the others'
    level and a softmax steadied by the tensor's max in place of each row's passed.  One call shifts each row on its
    own, up or down by 2 to 500 RMS (range:rows)."""
    _fails_only_at(tmp_path, "kb_ref_softmax.py", kernel, "batch_size=16,dim=512", passes, "range:rows")


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_two_softmax_one_max.py", False), ("ModelNew = Model", True)])
def test_each_input_gets_row_shifts_of_its_own(tmp_path, worker_here, kernel, passes):
    """A review's: every KernelBench input (arg0, arg1: one length) drew the same row shifts, so row i of a and of b
    always sat at one level there and a max shared by the two inputs' rows passed range:rows (it fails x500 too,
    where the two rows' maxima lie hundreds apart); each input's shifts come from its name."""
    kernel = _same_model(tmp_path, "kb_ref_two_softmax.py", kernel)
    rc, data, md = _kb(tmp_path, "kb_ref_two_softmax.py", kernel, "batch_size=16,dim=256")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        conds, _ = _failed(data)
        assert "range:rows" in conds, (conds, data["error"])


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_relu_whole_blocks.py", False), ("kb_new_relu_refuses_tail.py", True),
                                            ("kb_new_relu.py", True)])
def test_a_width_other_than_the_runs_meets_a_tail_left_unwritten(tmp_path, worker_here, kernel, passes):
    """Found by a red team: a ReLU over whole blocks of 1024 with no tail passed, since every size the judge called
    (the run's width 1024 at batch sizes 1, 32, 64 and 81) was a multiple of the block.  The dims only get_inputs()
    reads are made a quarter smaller and odd in one shape of the judge's own (sizes:other, at 32 x 769); a kernel
    that refuses a size it does not take, by raising, passes, and the refusal is noted."""
    rc, data, md = _kb(tmp_path, "kb_ref_relu_rand.py", kernel, "batch_size=64,dim=1024")
    assert (rc == 0) is passes, data["error"]
    sizes = [s for s in data["shapes"] if s["dims"] == {"batch_size": 32, "dim": 769}]
    assert len(sizes) == 1 and sizes[0].get("own"), [s["dims"] for s in data["shapes"]]
    if not passes:  # there alone, and at its every call
        assert all(t["passed"] for s in data["shapes"] if s is not sizes[0] for t in s["trials"]), data["error"]
        assert not any(t["passed"] for t in sizes[0]["trials"]) and "as a user's input of another width" in data["error"]
    elif "refuses" in kernel:
        assert "the kernel refused its batch size" not in md and "refused these input sizes" in md, md[:3000]
    else:
        assert all(t["passed"] for t in sizes[0]["trials"]) and len(sizes[0]["trials"]) >= 2


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_linear_scaled_arg_hardcoded.py", False),
                                            ("kb_new_linear_scaled_arg.py", True), ("ModelNew = Model", True),
                                            ("kb_new_linear_scaled_arg_refuses_init.py", True),
                                            ("kb_new_linear_scaled_arg_refuses_call.py", False)])
def test_a_second_instance_gets_other_float_constructor_arguments(tmp_path, worker_here, kernel, passes):
    """Found by a red team: the constructor's arguments were always the file's, so a kernel with the slope and the
    scale written in as the problem's values passed, wrong for a user's ModelNew(features, 0.5, 0.2).  The second
    instance (weights:twin) is built with every float argument scaled by one factor of the run's (problem.twin_init),
    as a network's second layer with its own; an integer argument (a size) stays."""
    kernel = _same_model(tmp_path, "kb_ref_linear_scaled_arg.py", kernel)
    rc, data, md = _kb(tmp_path, "kb_ref_linear_scaled_arg.py", kernel, "batch_size=16,features=32")
    assert (rc == 0) is passes, data["error"]
    assert ("the second instance (weights:twin) is built with [32, " in md) is ("refuses_init" not in str(kernel)), md[:3000]
    if not passes:
        conds, _ = _failed(data)
        assert (conds and all(c.startswith("weights:twin") for c in conds)) if "refuses" not in str(kernel) else (
            "ValueError: made for multiplier 2.0" in data["error"] and "a second instance of the model" in data["error"]), (
            conds, data["error"])
    if "refuses" in str(kernel):  # a red team's: one made for the file's values that raises in __init__ is noted (its
        # second instance built with the first's, the checks as ever); a raise in a call is a failure (a review's: a
        # kernel raising for every second instance would skip the checks of a cache shared by instances)
        assert ("the kernel refused the second instance's float arguments" in md) is passes, md[:4000]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_softmax_online_masked_block.py", False),
                                            ("kb_new_softmax_online_masked_block.py", True), ("ModelNew = Model", True)])
def test_a_row_that_leads_with_minus_inf_meets_an_online_softmax(tmp_path, worker_here, kernel, passes):
    """Found by a red team: the inputs were always finite, so an online softmax that rescales by exp(m_old - m_new)
    passed and gives NaN on a row whose first block is all -inf (a left-padded batch's masked logits).  One call
    leads every other row with -inf over a quarter to three quarters of its length (range:masked)."""
    _fails_only_at(tmp_path, "kb_ref_softmax.py", kernel, "batch_size=16,dim=1024", passes, "range:masked")


def test_a_refusal_that_names_a_fault_in_its_own_words_is_a_refusal(tmp_path, worker_here):
    """A red team's: a ValueError whose text said 'misaligned address' was taken for a CUDA fault at sizes:other (a
    refusal is told by the CUDA error's own words in the first line, not by any mention)."""
    rc, data, md = _kb(tmp_path, "kb_ref_relu_rand.py", "kb_new_relu_refuses_misaligned_words.py", "batch_size=64,dim=1024")
    assert rc == 0, data["error"]
    assert "the kernel refused these input sizes (it raised: ValueError" in md, md[:3000]


def test_nan_where_the_reference_is_finite_is_named_in_the_error(tmp_path, worker_here):
    """A red team's: a kernel's NaN outputs read as '4201 of 16384 elements outside tolerance' beside a largest error of
    0 (NaN is no number): the error now counts them."""
    rc, data, md = _kb(tmp_path, "kb_ref_softmax.py", "kb_cheat_softmax_online_masked_block.py", "batch_size=16,dim=1024")
    assert rc == 1 and "of them NaN or Inf where the reference is finite)" in data["error"], data["error"]


def test_an_elementwise_op_meets_no_mask(tmp_path, worker_here):
    """A red team's ReLU written (x + |x|) / 2 failed range:masked (NaN at -inf, where torch.relu gives 0): formally
    wrong, but no user's masked logits meet a ReLU.  The condition is for ops that couple a row's elements: where the
    mask changes no output at the elements it left alone, it is not checked (noted)."""
    rc, data, md = _kb(tmp_path, "kb_ref_relu_rand.py", "kb_cheat_relu_abs_form.py", "batch_size=16,dim=1024")
    assert rc == 0, data["error"]
    assert "range:masked" in md and "an elementwise op: a mask's -inf changes no other output" in md, md[:3000]


def test_a_symmetric_input_stays_symmetric_when_each_row_is_shifted(tmp_path, worker_here):
    """A review's: range:rows turned a symmetric problem's inputs into others, and failed a kernel that reads A as
    A.T, as the problem's contract allows; a square matrix equal to its transpose is shifted as a whole."""
    rc, data, md = _kb(tmp_path, "kb_ref_symmetric_matmul.py", "kb_new_symmetric_reads_transpose.py", "N=32")
    assert rc == 0, data["error"]
    assert any(t["condition"] == "range:rows" for s in data["shapes"] for t in s["trials"]), md[:2000]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_relu_identity.py", False), ("kb_new_relu.py", True)])
def test_inputs_drawn_never_negative_are_moved_across_zero(tmp_path, worker_here, kernel, passes):
    """Found by a red team: the range conditions only scaled by positive factors and shifted up, so inputs drawn
    with torch.rand stayed non-negative in every call and ReLU as the identity passed.  Signs are now flipped in
    one call (x-0.5 to x-2) and shifted down in others, where the reference is as well conditioned there."""
    rc, data, md = _kb(tmp_path, "kb_ref_relu_rand.py", kernel, "batch_size=64,dim=256")
    assert (rc == 0) is passes, data["error"]
    if not passes:
        err = data["error"]  # (each row shifted on its own, up or down, takes some below zero too: range:rows)
        assert "signs flipped" in err or "shifted down" in err or "shifted row by row" in err, err


def test_logits_far_below_zero_are_tried(tmp_path, worker_here):
    """Found by a red team: a softmax that subtracts max(row max, 0) passed (every draw had a non-negative logit per
    row); the far end of the downward shift (500 RMS) makes every logit of a row negative."""
    rc, data, md = _correctness(tmp_path, "ref_softmax.py", "cheat_softmax_clamped_max.py", "M=64,N=128")
    assert rc != 0 and ("shifted down by" in data["error"] or "shifted row by row" in data["error"]), data["error"]
    conds, _ = _failed(data)  # (each row on its own, some far down: range:rows too, when it comes first)
    assert "range:sink:lo" in conds and not conds & {"plain", "range:up", "range:down", "range:flip"}, conds


def test_a_column_slice_is_a_layout_too(tmp_path, worker_here):
    """Found by a red team: the strided condition was always strided along the last dim, so a kernel that read
    rows as packed whenever the last dim had unit stride passed; a user's column slice big[:, :n] got wrong values
    without an error.  Rows of a wider tensor are now handed too."""
    rc, data, md = _kb(tmp_path, "kb_ref_softmax.py", "kb_cheat_softmax_rows_packed.py", "batch_size=8,dim=512")
    assert rc != 0, md[:2000]
    conds, _ = _failed(data)
    assert conds == {"layout:padded"}, conds


def test_every_call_with_autograd_on_is_followed_by_a_checked_backward(tmp_path, worker_here):
    """Found by a red team: only the first backward() of a run was checked, so a custom backward right the first
    time and wrong after passed.  Every call with autograd on is now followed by a compared backward()."""
    rc, data, md = _kb(tmp_path, "kb_ref_linear_relu.py", "kb_cheat_grad_first_only.py", "batch_size=32,features=64")
    assert rc != 0 and "gradient of" in data["error"], data["error"]



def test_the_twin_in_eval_is_never_followed_by_the_twin_in_training_mode():
    """A twelfth session's review: the twin in eval() could land right before the first instance's training call, and
    the twin's training call was then inserted between them, so the first instance was not called next."""
    import torch
    from kernel_loop.measure.conditions import condition_plan

    first = types.SimpleNamespace(write_only=lambda: False, accumulates=[], args={"x": torch.randn(8, 4)},
                                  input_names=lambda: ["x"])
    for model in (torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))):
        prob = types.SimpleNamespace(model=model, kind="kb")
        for seed in range(300):
            plan = condition_plan(random.Random(seed), first, prob, 5)
            at = plan.index("weights:twin")
            assert not plan[at + 1].startswith("weights:"), plan
            assert plan[plan.index("weights:twin:train") + 1] == "mode:train", plan


def test_a_cuda_error_at_another_batch_size_is_a_crash_not_a_refusal():
    from kernel_loop.measure import held

    assert held.refusal("ValueError: this kernel is specialised for batch_size 32")
    assert held.refusal("ValueError: rows of 769 floats would give a misaligned address for float4 loads")
    assert not held.refusal("RuntimeError: an illegal memory access was encountered")  # (TORCH_CHECK of cudaGetErrorString)
    assert not held.refusal("CUDA_ERROR_MISALIGNED_ADDRESS: cuda.bindings.driver.CUresult")
    assert not held.refusal("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered")
    for text in ("RuntimeError: CUDA error: an illegal memory access was encountered",
                 "torch.AcceleratorError: CUDA error: device-side assert triggered"):
        assert not held.refusal(text)


def test_init_again_on_a_run_made_before_the_judges_batch_sizes_changes_nothing(tmp_path):
    """A twelfth session's review: init run again on a KernelBench run whose run.json has no batch_shapes (made before
    them) refused it as another configuration."""
    out = tmp_path / "run"
    args = ("init", out, "--kernel", "k", "--ref", KERNELS / "kb_ref_linear_relu.py", "--impl", "triton", "--baseline",
            KERNELS / "kb_new_linear_cached_weight_t.py", "--dims", "batch_size=32,features=64", "--skip-env")
    assert klcli.main(*args) == 0
    data = json.loads((out / "run.json").read_text())
    assert [s["batch_size"] for s in data.pop("batch_shapes")] == [1, 16, 41]
    (out / "run.json").write_text(json.dumps(data, indent=2) + "\n")
    assert klcli.main(*args) == 0


@pytest.mark.parametrize("kernel, seed, passes", [
    ("kb_cheat_layernorm_one_pass.py", 42, False), ("kb_cheat_layernorm_zeros_far.py", 42, False),
    ("kb_cheat_layernorm_nan_far.py", 42, False), *(("kb_new_layernorm_written.py", s, True) for s in (1, 2, 3, 4))])
def test_a_kernel_wrong_only_where_the_reference_loses_digits_fails(tmp_path, worker_here, kernel, seed, passes):
    """A red team's: a one-pass variance, and zeros, on rows shifted far passed 2 and 6 runs in 10 (CPU, 4 x 4096), the
    range conditions where the float32 reference is itself off going unchecked; held there to float64, within
    exact.LOOSE times the reference's own error over the whole output, each failed 16 runs of 16.  An honest LayerNorm
    written out passes: every range call is held so, its relative L2 error within exact.RANGE_L2 limits too, however exact
    the reference happened to be (block by block, 5 runs of 12 failed; with neither rule, about one in ten).  A review's
    NaN on those rows fails too (an output not finite where the reference is never goes to the float64 re-check)."""
    rc, data, md = _kb(tmp_path, "kb_ref_layernorm.py", kernel, "batch_size=4,features=4096", "--seed", str(seed))
    if not passes:
        assert rc == 1 and any(c.startswith("range:") for c in _failed(data)[0]), data["error"]  # (and the calls on
        # the same inputs again: input:again)
    else:
        assert rc == 0, data["error"]
