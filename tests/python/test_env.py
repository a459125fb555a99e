"""env: version parsing, counter-permission detection, requirement evaluation, copy peaks by size,
rendering, no-CUDA exit."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile

import klcli
import pytest
from conftest import cuda_available
from kernel_loop import build, envcheck

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
def test_no_cuda_message_exit_2(tmp_path, capsys):
    # the CLI in this process (torch is imported here already); `env --json` as a command of its own, on this machine:
    # test_env_json_reports_cutlass_and_cute_dsl (exit 2, "ok": false, no traceback)
    assert klcli.main("env", "--out", tmp_path / "envdir") == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU visible: torch.cuda.is_available() is False" in err
    assert "Traceback" not in err
    assert "MISSING REQUIREMENTS" in (tmp_path / "envdir" / "env_check.md").read_text()


@pytest.mark.skipif(cuda_available(), reason="checks init on a machine without CUDA")
def test_init_without_cuda_fails_cleanly(tmp_path, capsys):
    out = tmp_path / "run"  # the CLI in this process (torch is imported here already)
    rc = klcli.main("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                    "--baseline", klcli.KERNELS / "triton_vadd.py", "--dims", "N=64")
    err = capsys.readouterr().err
    assert rc == 2 and "no CUDA GPU visible" in err and "Traceback" not in err
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


# --- CUTLASS headers and CuTe DSL: what env reports, and scripts/cutlass_offline.sh --------------------------
OFFLINE = klcli.REPO / "scripts" / "cutlass_offline.sh"
CUTLASS_WHEEL, DSL_WHEEL = "nvidia_cutlass-4.2.0.0-py3-none-any.whl", "nvidia_cutlass_dsl-4.2.1-py3-none-any.whl"


def _cutlass_tree(root):
    """A fake CUTLASS tree: include/{cutlass/cutlass.h, cute/tensor.hpp} and tools/util/include."""
    for rel in ("include/cutlass/cutlass.h", "include/cute/tensor.hpp", "tools/util/include/cutlass/util/debug.h"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("#pragma once\n")
    return root


def _fake_site(root, dsl_init="", cutlass_pkg=True):
    """A site folder with a fake nvidia-cutlass (cutlass_library/source) and, when ``dsl_init`` is not None, a
    fake nvidia-cutlass-dsl 4.2.1 whose cutlass/cute/__init__.py holds ``dsl_init``."""
    if cutlass_pkg:
        (root / "cutlass_library").mkdir(parents=True)
        (root / "cutlass_library" / "__init__.py").write_text("raise ImportError('never imported by env')\n")
        _cutlass_tree(root / "cutlass_library" / "source")
    if dsl_init is not None:
        (root / "cutlass" / "cute").mkdir(parents=True)
        (root / "cutlass" / "__init__.py").write_text("")
        (root / "cutlass" / "cute" / "__init__.py").write_text(dsl_init)
        meta = root / "nvidia_cutlass_dsl-4.2.1.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cutlass-dsl\nVersion: 4.2.1\n")
    return root


def _item(checks, item):
    return next(c for c in checks if c["item"] == item)


def test_cutlass_include_from_the_environment(tmp_path):
    tree = _cutlass_tree(tmp_path / "cutlass")
    info = envcheck.cutlass_facts(None, {"CUTLASS_PATH": str(tree)}, package_source="")
    assert info["include"] == str(tree / "include") and info["source"] == "$CUTLASS_PATH" and info["cutlass_h"]
    assert info["searched"] == [str(tree / "include"), str(tree / "tools" / "util" / "include")]
    info = envcheck.cutlass_facts(None, {"CUTLASS_INCLUDE_DIR": str(tree / "include")}, package_source="")
    assert info["include"] == str(tree / "include") and info["source"] == "$CUTLASS_INCLUDE_DIR"
    info = envcheck.cutlass_facts([str(tree / "include")], {}, package_source="")
    assert info["source"] == "run.json build.include_dirs"
    c = _item(envcheck.evaluate(_facts(cutlass={**info, "package_version": None}), "cutlass"), "CUTLASS headers")
    assert c["status"] == "ok" and c["level"] == "required" and c["fix"] is None
    assert c["detail"] == f"cute/tensor.hpp in {tree / 'include'} (from run.json build.include_dirs)"


def test_cutlass_include_from_the_pip_package(tmp_path, monkeypatch):
    site = _fake_site(tmp_path / "site", dsl_init=None)
    monkeypatch.syspath_prepend(str(site))
    src = site / "cutlass_library" / "source"
    assert build.cutlass_package_source() == str(src)
    info = envcheck.cutlass_facts(None, {})
    assert info["include"] == str(src / "include") and info["source"] == "nvidia-cutlass package"
    assert build.include_dirs(None, {}) == [str(src / "include"), str(src / "tools" / "util" / "include")]
    # CUTLASS_PATH (or CUTLASS_INCLUDE_DIR) wins: the package is not added behind a tree the user chose
    tree = _cutlass_tree(tmp_path / "checkout")
    assert envcheck.cutlass_facts(None, {"CUTLASS_PATH": str(tree)})["source"] == "$CUTLASS_PATH"
    assert str(src / "include") not in build.include_dirs(None, {"CUTLASS_PATH": str(tree)})
    c = _item(envcheck.evaluate(_facts(cutlass={**info, "package_version": "4.2.0.0"}), None), "CUTLASS headers")
    assert c["status"] == "ok" and c["level"] == "optional"
    assert c["detail"].endswith("(from nvidia-cutlass package), nvidia-cutlass 4.2.0.0")


def test_cutlass_headers_missing_names_the_offline_script(tmp_path):
    none = envcheck.cutlass_facts(None, {}, package_source="")
    assert none == {"include": None, "source": None, "cutlass_h": False, "searched": []}
    failed = envcheck.required_failures(envcheck.evaluate(_facts(cutlass=none), "cutlass"))
    assert [c["item"] for c in failed] == ["CUTLASS headers"]
    assert "no include folder" in failed[0]["detail"] and "scripts/cutlass_offline.sh" in failed[0]["fix"]
    empty = envcheck.cutlass_facts(None, {"CUTLASS_PATH": str(tmp_path / "nothing")}, package_source="")
    c = _item(envcheck.evaluate(_facts(cutlass=empty), "triton"), "CUTLASS headers")
    assert c["status"] == "missing" and c["level"] == "optional"  # reported, but not needed by triton
    assert c["detail"].startswith(f"cute/tensor.hpp not found in {tmp_path / 'nothing' / 'include'}")
    assert envcheck.required_failures(envcheck.evaluate(_facts(cutlass=empty), "triton")) == []


def test_cute_dsl_version_and_import(tmp_path, monkeypatch):
    assert envcheck.cute_dsl_facts(None) == {"version": None, "import": None, "error": None}
    good = _fake_site(tmp_path / "good", cutlass_pkg=False)
    monkeypatch.syspath_prepend(str(good))
    monkeypatch.setenv("PYTHONPATH", str(good))
    assert envcheck.package_versions()["nvidia-cutlass-dsl"] == "4.2.1"
    ok = envcheck.cute_dsl_facts("4.2.1")
    assert ok == {"version": "4.2.1", "import": "ok", "error": None}
    c = _item(envcheck.evaluate(_facts(cute_dsl=ok), "cute-dsl"), "nvidia-cutlass-dsl")
    assert c["status"] == "ok" and c["detail"] == "nvidia-cutlass-dsl 4.2.1 (import cutlass.cute OK)"
    bad = _fake_site(tmp_path / "bad", dsl_init="raise ImportError('libcuda.so.1: cannot open shared object')\n",
                     cutlass_pkg=False)
    monkeypatch.setenv("PYTHONPATH", str(bad))
    broken = envcheck.cute_dsl_facts("4.2.1")
    assert broken["import"] == "failed" and "libcuda.so.1" in broken["error"]
    failed = envcheck.required_failures(envcheck.evaluate(_facts(cute_dsl=broken), "cute-dsl"))
    assert [c["item"] for c in failed] == ["nvidia-cutlass-dsl"]
    assert "`import cutlass.cute` failed: ImportError: libcuda.so.1" in failed[0]["detail"]
    assert "scripts/cutlass_offline.sh" in failed[0]["fix"]
    missing = _item(envcheck.evaluate(_facts(cute_dsl=envcheck.cute_dsl_facts(None)), "triton"), "nvidia-cutlass-dsl")
    assert missing["status"] == "missing" and missing["level"] == "optional"


@pytest.mark.skipif(cuda_available(), reason="a quick env run on a machine without CUDA (no peaks measured)")
def test_env_json_reports_cutlass_and_cute_dsl(tmp_path):
    site = _fake_site(tmp_path / "site")
    proc = klcli.run("env", "--json", env={"PYTHONPATH": f"{klcli.HELPERS}:{site}", "CUTLASS_PATH": "",
                                           "CUTLASS_INCLUDE_DIR": ""})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False  # no CUDA GPU here: exit 2, and the report says so
    src = site / "cutlass_library" / "source"
    assert report["cutlass"]["include"] == report["cute_headers"] == str(src / "include")
    assert report["cutlass"]["source"] == "nvidia-cutlass package"
    assert report["cute_dsl"] == {"version": "4.2.1", "import": "ok", "error": None}
    items = {c["item"]: c for c in report["checks"]}
    assert items["CUTLASS headers"]["status"] == items["nvidia-cutlass-dsl"]["status"] == "ok"


def _offline(*args, env=None):
    return subprocess.run(["bash", str(OFFLINE), *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_offline_verify_refuses_a_wheel_with_another_sha256(tmp_path):
    (tmp_path / CUTLASS_WHEEL).write_bytes(b"not the wheel that was pinned")
    proc = _offline("verify", tmp_path)
    assert proc.returncode == 2
    assert f"sha256 mismatch: {tmp_path / CUTLASS_WHEEL}" in proc.stderr and "never carry them" in proc.stderr
    assert "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6" in proc.stderr  # the recorded sum
    # fetch checks the wheels it already has (no download: both are there) and packs nothing
    wheels = tmp_path / "dl" / "wheels"
    wheels.mkdir(parents=True)
    for name in (CUTLASS_WHEEL, "nvidia_cutlass_dsl-4.2.1-cp312-cp312-manylinux_2_28_x86_64.whl"):
        (wheels / name).write_bytes(b"tampered")
    proc = _offline("fetch", tmp_path / "dl")
    assert proc.returncode == 2 and proc.stderr.count("sha256 mismatch") == 2, proc.stderr
    assert not (tmp_path / "dl" / "carry" / "cutlass-offline.tar.xz").exists()


def _wheel(path, files):
    """A minimal wheel at ``path`` holding ``files`` ({name: text}) and a RECORD of their sha256."""
    dist, version = path.name.split("-")[:2]
    info = f"{dist}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    data = {n: t.encode() for n, t in files.items()}
    digest = {n: base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode() for n, b in data.items()}
    data[f"{info}/RECORD"] = "".join(f"{n},sha256={digest[n]},{len(b)}\n" for n, b in data.items()).encode() \
        + f"{info}/RECORD,,\n".encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in data.items():
            z.writestr(n, b)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs sha256sum")
def test_offline_fetch_install_round_trip_with_pinned_fakes(tmp_path):
    wheels = tmp_path / "dl" / "wheels"
    wheels.mkdir(parents=True)
    pins = [
        (_wheel(wheels / CUTLASS_WHEEL, {"cutlass_library/__init__.py": "",
                                         "cutlass_library/source/include/cutlass/cutlass.h": "#pragma once\n",
                                         "cutlass_library/source/include/cute/tensor.hpp": "#pragma once\n"}),
         CUTLASS_WHEEL),
        (_wheel(wheels / DSL_WHEEL, {"nvidia_cutlass_dsl.pth": "nvidia_cutlass_dsl/python_packages\n",
                                     "nvidia_cutlass_dsl/python_packages/cutlass/__init__.py": "",
                                     "nvidia_cutlass_dsl/python_packages/cutlass/cute/__init__.py": "OK = 1\n"}),
         DSL_WHEEL),
    ]
    (tmp_path / "pins").write_text("".join(f"{s}  {n}\n" for s, n in pins))
    env = {"CUTLASS_OFFLINE_PINS": str(tmp_path / "pins")}
    assert _offline("verify", wheels, env=env).returncode == 0
    proc = _offline("fetch", tmp_path / "dl", env=env)
    assert proc.returncode == 0, proc.stderr
    carry = tmp_path / "dl" / "carry"
    assert sorted(p.name for p in carry.iterdir()) == ["SHA256SUMS", "cutlass-offline.tar.xz"]
    assert "MiB working tree" in proc.stderr and "of 64 MiB" in proc.stderr
    proc = _offline("install", carry, tmp_path / "site", env=env)
    assert proc.returncode == 0, proc.stderr
    site = (tmp_path / "site").resolve()
    assert f"export CUTLASS_PATH={site / 'cutlass_library' / 'source'}" in proc.stdout.splitlines()
    assert f"export PYTHONPATH={site / 'nvidia_cutlass_dsl' / 'python_packages'}:{site}" in proc.stdout
    assert "import cutlass.cute OK, nvidia-cutlass-dsl 4.2.1" in proc.stderr
    check = subprocess.run(["bash", "-c", proc.stdout + 'python3 -c "import cutlass.cute as c; print(c.OK)"; '
                            'test -f "$CUTLASS_PATH/include/cute/tensor.hpp" && echo headers'],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert check.stdout.split() == ["1", "headers"], check.stderr
    # a damaged copy is refused before anything is installed
    with open(carry / "cutlass-offline.tar.xz", "ab") as f:
        f.write(b"\0")
    proc = _offline("install", carry, tmp_path / "site2", env=env)
    assert proc.returncode == 2 and "checksum mismatch" in proc.stderr and not (tmp_path / "site2").exists()


def test_env_says_whether_the_worker_can_be_sandboxed():
    from kernel_loop import envcheck

    rows = {c["item"]: c for c in envcheck.evaluate(_facts(landlock_abi=7), "triton")}
    assert rows["worker sandbox"]["status"] == "ok" and "Landlock ABI 7" in rows["worker sandbox"]["detail"]
    row = {c["item"]: c for c in envcheck.evaluate(_facts(landlock_abi=0), "triton")}["worker sandbox"]
    assert row["status"] == "missing" and "record key" in row["detail"] and row["fix"]
    assert "worker sandbox" not in [c["item"] for c in envcheck.required_failures(envcheck.evaluate(
        _facts(landlock_abi=0), "triton"))]  # a kernel without Landlock still runs every step
