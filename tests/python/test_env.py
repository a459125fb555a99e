"""env: version parsing, counter-permission detection, requirement evaluation, copy peaks by size,
rendering, no-CUDA exit."""

from __future__ import annotations

import json
import sys

import klcli
import pytest
from conftest import cuda_available
from kernel_loop import envcheck

NVCC_OUT = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Thu_Jun__6_02:18:23_PDT_2024
Cuda compilation tools, release 12.5, V12.5.82
Build cuda_12.5.r12.5/compiler.34385749_0
"""
NCU_OUT = """NVIDIA (R) Nsight Compute Command Line Profiler
Copyright (c) 2018-2024 NVIDIA Corporation
Version 2024.2.1.0 (build 34372528) (public-release)
"""
PERM_OUT = """==PROF== Connected to process 1234 (/usr/bin/python3.10)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions on enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 1234
"""
OK_OUT = """==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 1 pass
  vectorized_elementwise_kernel (4, 1, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    gpu__time_duration.sum          us         2.37
"""


def _facts(**over):
    facts = {
        "versions": {"torch": "2.5.1", "triton": "3.1.0", "cuda-python": None, "nvidia-cutlass-dsl": None,
                     "flashinfer": None},
        "torch_cuda": "12.4", "cuda_available": True, "gpu_index": 0, "device_count": 1,
        "gpu": {"name": "NVIDIA H200", "cc": "9.0", "sm_count": 132, "memory_gib": 139.8, "l2_bytes": 62914560},
        "driver": "560.35.03",
        "tools": {"nvcc": {"path": "/usr/local/cuda/bin/nvcc", "version": "12.5.82"},
                  "ncu": {"path": "/usr/local/cuda/bin/ncu", "version": "2024.2.1.0"},
                  "compute-sanitizer": {"path": "/usr/local/cuda/bin/compute-sanitizer", "version": None}},
        "counters": envcheck.counters_from_probe(OK_OUT, 0),
        "peaks": {"copy_bandwidth_gbps": 3900.5, "bf16_matmul_tflops": 700.1, "fp32_matmul_tflops": 50.2,
                  "method": "median of CUDA-event timings"},  # an env.json from before the table
        "cute_headers": None, "python": "3.11.9", "platform": "Linux",
    }
    facts.update(over)
    return facts


def test_version_parsing():
    assert envcheck.parse_nvcc_version(NVCC_OUT) == "12.5.82"
    assert envcheck.parse_nvcc_version("Cuda compilation tools, release 13.0") == "13.0"
    assert envcheck.parse_ncu_version(NCU_OUT) == "2024.2.1.0"
    assert envcheck.parse_nvcc_version("command not found") is None
    assert envcheck.parse_ncu_version("") is None


def test_counter_probe_interpretation():
    denied = envcheck.counters_from_probe(PERM_OUT, 1)
    assert denied["status"] == "denied"
    assert "NVreg_RestrictProfilingToAdminUsers=0" in denied["fix"]
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in denied["fix"]
    assert envcheck.counters_from_probe(OK_OUT, 0)["status"] == "ok"
    unknown = envcheck.counters_from_probe("==WARNING== No kernels were profiled.", 0)
    assert unknown["status"] == "unknown" and "No kernels were profiled" in unknown["detail"]


def test_evaluate_all_present():
    checks = envcheck.evaluate(_facts(), "cuda-cpp")
    assert envcheck.required_failures(checks) == []
    by = {c["item"]: c for c in checks}
    assert by["CUDA GPU"]["detail"].startswith("NVIDIA H200 (sm_90")
    assert by["ncu counter access"]["status"] == "ok"


def test_evaluate_no_cuda():
    checks = envcheck.evaluate(_facts(cuda_available=False, gpu=None, torch_cuda=None), "triton")
    failed = envcheck.required_failures(checks)
    assert [c["item"] for c in failed] == ["CUDA GPU"]
    assert "no CUDA GPU visible: torch.cuda.is_available() is False" in failed[0]["detail"]


def test_evaluate_missing_tools_by_impl():
    tools = {"nvcc": {"path": None, "version": None}, "ncu": {"path": None, "version": None},
             "compute-sanitizer": {"path": None, "version": None}}
    facts = _facts(tools=tools, counters=None)
    # nvcc is required for .cu kernels only; ncu is needed by profile and never fails env
    assert [c["item"] for c in envcheck.required_failures(envcheck.evaluate(facts, "cuda-cpp"))] == ["nvcc"]
    assert envcheck.required_failures(envcheck.evaluate(facts, "triton")) == []
    ncu = next(c for c in envcheck.evaluate(facts, "triton") if c["item"] == "ncu")
    assert ncu["status"] == "missing" and ncu["level"] == "profile" and "Nsight Compute" in ncu["fix"]
    cute = envcheck.evaluate(_facts(), "cute-dsl")
    assert [c["item"] for c in envcheck.required_failures(cute)] == ["nvidia-cutlass-dsl"]
    cutlass = envcheck.evaluate(_facts(), "cutlass")
    assert "CUTLASS_PATH" in envcheck.required_failures(cutlass)[0]["fix"]
    assert envcheck.required_failures(envcheck.evaluate(_facts(versions={**_facts()["versions"], "torch": None}), None))


def test_evaluate_counter_permission_is_reported():
    facts = _facts(counters=envcheck.counters_from_probe(PERM_OUT, 1))
    c = next(c for c in envcheck.evaluate(facts, "triton") if c["item"] == "ncu counter access")
    assert c["status"] == "missing" and "ERR_NVGPUCTRPERM" in c["fix"]


def test_render_report():
    md = envcheck.render_markdown(envcheck.make_report(_facts(), "triton", 0))
    assert "| Result | OK |" in md
    assert "NVIDIA H200" in md and "3900.5 GB/s" in md and "700.1 TFLOP/s" in md
    assert "| ncu | ok | profile |" in md
    bad = envcheck.render_markdown(envcheck.make_report(_facts(cuda_available=False, gpu=None, peaks=None), "triton", 0))
    assert "MISSING REQUIREMENTS" in bad and "Not measured" in bad


GIB, MIB = 1 << 30, 1 << 20


@pytest.mark.parametrize("free, expected", [
    (139 * GIB, [256 * MIB, GIB, 4 * GIB]),            # an idle H200: every size
    (8 * GIB, [256 * MIB, GIB]),                        # 4 GiB needs 8 GiB for its two buffers, plus the reserve
    (9 * GIB, [256 * MIB, GIB, 4 * GIB]),
    (GIB + 300 * MIB, [128 * MIB]),                     # none fits: the largest power of two that does
    (GIB + 20 * MIB, []),                               # not even COPY_MIN (16 MiB) fits
    (None, [256 * MIB]),                                # free memory unknown: the smallest size
])
def test_copy_sizes_are_bounded_by_free_memory(free, expected):
    assert envcheck.copy_sizes(free) == expected


def test_the_copy_peak_is_the_fastest_size_and_every_size_is_kept():
    rows = [{"bytes": 4 * GIB, "gbps": 4280.3}, {"bytes": 256 * MIB, "gbps": 3950.0}, {"bytes": GIB, "gbps": 4190.7}]
    peaks = envcheck.copy_peaks(rows)
    assert peaks["copy_bandwidth_gbps"] == 4280.3
    assert [(r["bytes"], r["moved_bytes"], r["gbps"]) for r in peaks["copy_bandwidth_by_size"]] == [
        (256 * MIB, 512 * MIB, 3950.0), (GIB, 2 * GIB, 4190.7), (4 * GIB, 8 * GIB, 4280.3)]
    assert envcheck.copy_peaks([]) == {"copy_bandwidth_gbps": None, "copy_bandwidth_by_size": []}


def test_the_copy_entry_nearest_a_problem_working_set():
    peaks = envcheck.copy_peaks([{"bytes": 256 * MIB, "gbps": 3950.0}, {"bytes": GIB, "gbps": 4190.7},
                                 {"bytes": 4 * GIB, "gbps": 4280.3}])
    near = envcheck.copy_peak_near
    assert near(peaks, 17.2e9)["bytes"] == 4 * GIB      # 38_L1Norm_: 8.6 GB read + 8.6 GB written
    assert near(peaks, 2.1e9)["bytes"] == GIB           # a working set of 2.1 GB: a 1 GiB copy moves 2 GiB
    assert near(peaks, 1e6)["bytes"] == 256 * MIB       # small problems: the smallest size measured
    assert near(peaks, 0) is None and near({"copy_bandwidth_gbps": 4101.0}, 1e9) is None and near(None, 1e9) is None


class _FakeTensor:
    def __init__(self, torch, n):
        self.torch, self.n = torch, n

    def uniform_(self):
        return self

    def __getitem__(self, sl):
        return _FakeTensor(self.torch, len(range(*sl.indices(self.n))))

    def copy_(self, other):
        assert other.n == self.n
        self.torch.copied.append(4 * self.n)
        return self


class _FakeTorch:
    """Enough of torch for _measure_copies: float32 buffers up to ``limit`` bytes, OOM above."""

    float32 = "float32"

    class cuda:
        class OutOfMemoryError(RuntimeError):
            pass

        @staticmethod
        def empty_cache():
            pass

    def __init__(self, limit):
        self.limit, self.allocated, self.copied = limit, [], []

    def empty(self, n, device=None, dtype=None):
        if 4 * n > self.limit:
            raise self.cuda.OutOfMemoryError("out of memory")
        self.allocated.append(4 * n)
        return _FakeTensor(self, n)

    def empty_like(self, t):
        return self.empty(t.n)


def test_measure_copies_times_each_size_and_drops_one_that_does_not_fit():
    fake = _FakeTorch(limit=2 * GIB)

    def median_ms(fn, warmup, reps):  # a copy that moves 4 TB/s at every size
        fn()
        return 2 * fake.copied[-1] / 4e12 * 1e3

    rows = envcheck._measure_copies(fake, "cuda:0", [256 * MIB, GIB, 4 * GIB], median_ms)
    assert [r["bytes"] for r in rows] == [256 * MIB, GIB]  # 4 GiB did not allocate; 1 GiB buffers served both
    assert fake.allocated == [GIB, GIB] and fake.copied == [256 * MIB, GIB]
    assert all(r["gbps"] == 4000.0 for r in rows)


def test_render_copy_table():
    peaks = {"bf16_matmul_tflops": 700.1, "fp32_matmul_tflops": 50.2,
             **envcheck.copy_peaks([{"bytes": 256 * MIB, "gbps": 3950.0}, {"bytes": 4 * GIB, "gbps": 4280.3}])}
    peaks["method"] = envcheck.copy_method(peaks["copy_bandwidth_by_size"])
    md = envcheck.render_markdown(envcheck.make_report(_facts(peaks=peaks), "triton", 0))
    assert "4280.3 GB/s" in md and "copies of 256 MiB, 4 GiB" in md
    assert "### Copy bandwidth by size" in md
    assert "| 256 MiB | 512 MiB | 3950.0 |  |" in md and "| 4 GiB | 8 GiB | 4280.3 | yes |" in md
    assert md.index("## Measured peaks") < md.index("### Copy bandwidth by size")
    old = envcheck.render_markdown(envcheck.make_report(_facts(), "triton", 0))
    assert "Copy bandwidth by size" not in old  # an env.json from before the table renders as it did


def test_plain_listing_keeps_the_copy_table(monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 now fails
    peaks = envcheck.copy_peaks([{"bytes": GIB, "gbps": 4190.7}])
    md = envcheck.render_markdown(envcheck.make_report(_facts(peaks=peaks), "triton", 0))
    assert "plain listing" in md and "| 1 GiB | 2 GiB | 4190.7 | yes |" in md


def test_skipped_report(tmp_path):
    envcheck.write_skipped(tmp_path)
    assert "skipped" in (tmp_path / "env_check.md").read_text()
    assert json.loads((tmp_path / "env.json").read_text())["skipped"] is True


@pytest.mark.skipif(cuda_available(), reason="checks the message on a machine without CUDA")
def test_no_cuda_message_exit_2(tmp_path):
    proc = klcli.run("env", "--out", tmp_path / "envdir")
    assert proc.returncode == 2, proc.stderr
    assert "no CUDA GPU visible: torch.cuda.is_available() is False" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "MISSING REQUIREMENTS" in (tmp_path / "envdir" / "env_check.md").read_text()
    proc = klcli.run("env", "--json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["ok"] is False


@pytest.mark.skipif(cuda_available(), reason="checks init on a machine without CUDA")
def test_init_without_cuda_fails_cleanly(tmp_path):
    out = tmp_path / "run"
    proc = klcli.run("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                     "--baseline", klcli.KERNELS / "triton_vadd.py", "--dims", "N=64")
    assert proc.returncode == 2 and "no CUDA GPU visible" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()  # a refused init leaves no half-made run directory; `env --out` writes the report


@pytest.mark.gpu
def test_env_on_gpu(tmp_path):
    proc = klcli.run("env", "--json", "--out", tmp_path)
    report = json.loads(proc.stdout)
    assert proc.returncode == (0 if report["ok"] else 2), proc.stderr
    assert report["gpu"]["name"] and report["gpu"]["sm_count"] > 0 and report["torch_cuda"]
    peaks = report["peaks"]
    assert 50 < peaks["copy_bandwidth_gbps"] < 50_000
    table = peaks["copy_bandwidth_by_size"]
    assert table and peaks["copy_bandwidth_gbps"] == max(r["gbps"] for r in table)
    assert [r["bytes"] for r in table] == sorted(r["bytes"] for r in table)
    assert "Copy bandwidth by size" in (tmp_path / "env_check.md").read_text()
    assert 1 < peaks["bf16_matmul_tflops"] < 10_000 and 0.1 < peaks["fp32_matmul_tflops"] < 1_000
    assert peaks["bf16_matmul_tflops"] > peaks["fp32_matmul_tflops"]
    assert (tmp_path / "env_check.md").read_text().count(report["gpu"]["name"]) >= 1
    if report["tools"]["ncu"]["path"]:
        assert report["counters"]["status"] in ("ok", "denied", "unknown")
