"""The environment check behind ``env`` and ``init``: GPU, toolchain, profiler, measured peaks.

The pure parts (version parsing, the counter-permission check, requirement evaluation, the copy
sizes and the copy peak, rendering) take plain data so they are testable without a GPU; ``gather``
collects the facts.  The copy peak is the fastest of copies at several sizes (``COPY_SIZES``, as free
memory allows), all recorded in ``peaks.copy_bandwidth_by_size``.
Required: torch with a visible CUDA GPU; nvcc for .cu kernels; triton / nvidia-cutlass-dsl /
CUTLASS headers for their implementations.  The CUTLASS include folder (``cutlass``: the one ``build``
uses, and where it came from) and the CuTe DSL version (``cute_dsl``: with whether ``import cutlass.cute``
works) are reported for every implementation, required only for their own; the fix names
scripts/cutlass_offline.sh.  ncu and counter access are needed by ``profile`` and are reported as missing
(with the fix) without failing ``env``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import build
from .common import UsageError, atomic_write_text, now_iso, progress, step, write_json
from .measure import sandbox
from .templating import render
from .vocab import IMPL_SUFFIX

CTRPERM_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
CTRPERM_FIX = ("run the profiler as root/admin, or allow profiling for all users: add "
               "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` to a file in /etc/modprobe.d/ "
               f"and reload the nvidia module (or reboot); see {CTRPERM_URL}")
PACKAGES = {  # shown name -> distribution names tried in order, import name
    "jinja2": (("jinja2", "Jinja2"), "jinja2"),
    "pyyaml": (("pyyaml", "PyYAML"), "yaml"),
    "torch": (("torch",), "torch"),
    "triton": (("triton",), "triton"),
    "cuda-python": (("cuda-python", "cuda-bindings"), "cuda"),
    "nvidia-cutlass-dsl": (("nvidia-cutlass-dsl",), "cutlass"),
    "nvidia-cutlass": (("nvidia-cutlass",), "cutlass_library"),  # the CUTLASS headers as a pip package
    "flashinfer": (("flashinfer-python", "flashinfer"), "flashinfer"),
}
# Copy-peak sizes: the bytes of the copied tensor (the copy reads them and writes as many).  Bandwidth rises
# with size (an H200 reached 4101 GB/s at 512 MiB, 4.26-4.30 TB/s at 4 GiB), so the peak is the fastest
# of several, each measured only where its two buffers fit in the free memory with COPY_RESERVE to spare.
COPY_SIZES = (256 << 20, 1 << 30, 4 << 30)
COPY_RESERVE = 1 << 30
COPY_MIN = 16 << 20  # below this a copy is mostly launch and L2 effects: no peak is measured
OFFLINE_SCRIPT = "scripts/cutlass_offline.sh"
CUTLASS_FIX = ("set CUTLASS_PATH to a CUTLASS checkout (git clone https://github.com/NVIDIA/cutlass), set "
               "CUTLASS_INCLUDE_DIR or pass --include-dir, or pip install nvidia-cutlass (its headers are found "
               f"without CUTLASS_PATH); on a GPU machine without network: {OFFLINE_SCRIPT} (fetch where pip works, "
               "install there, then eval the export lines it prints)")
CUTE_DSL_FIX = ("pip install nvidia-cutlass-dsl (4.2.1 or newer with CUDA 13 / cuda-bindings 13); on a GPU machine "
                f"without network: {OFFLINE_SCRIPT} (fetch where pip works, install there, then eval the export lines "
                "it prints: PYTHONPATH needs <target>/nvidia_cutlass_dsl/python_packages)")
_PROBE = ("import torch; d = torch.device('cuda:{gpu}'); x = torch.ones(4096, device=d); "
          "y = (x * 2).sum(); torch.cuda.synchronize(d)")


# --- pure parts -------------------------------------------------------------------------
def parse_nvcc_version(text: str) -> str | None:
    m = re.search(r"release (\d+\.\d+)(?:, V([\d.]+))?", text or "")
    return (m.group(2) or m.group(1)) if m else None


def parse_ncu_version(text: str) -> str | None:
    m = re.search(r"Version\s+([\d][\w.\-]*)", text or "")
    return m.group(1) if m else None


def counters_from_probe(output: str, returncode: int | None) -> dict[str, Any]:
    """Interpret the tiny ncu run: ok, denied (ERR_NVGPUCTRPERM) or unknown."""
    text = output or ""
    if "ERR_NVGPUCTRPERM" in text:
        return {"status": "denied", "detail": "ncu cannot read GPU performance counters (ERR_NVGPUCTRPERM)",
                "fix": CTRPERM_FIX}
    if re.search(r"gpu__time_duration\.sum\s+\S+\s+[\d.,]+", text):
        return {"status": "ok", "detail": "ncu read gpu__time_duration.sum", "fix": None}
    tail = "\n".join(text.strip().splitlines()[-6:])
    return {"status": "unknown", "detail": f"ncu test run gave no metric (exit {returncode}): {tail}",
            "fix": "run `ncu --metrics gpu__time_duration.sum python -c '...'` by hand to see why"}


def copy_sizes(free_bytes: int | None, sizes: tuple[int, ...] = COPY_SIZES, reserve: int = COPY_RESERVE) -> list[int]:
    """The copy sizes (bytes of the copied tensor, ascending) to measure with ``free_bytes`` of device memory
    free: those whose source and destination fit with ``reserve`` to spare.  When none does, the largest
    power of two that fits (at least COPY_MIN); [] when not even that fits.  ``free_bytes`` None (unknown):
    the smallest size alone."""
    sizes = sorted(sizes)
    if free_bytes is None:
        return sizes[:1]
    room = free_bytes - reserve
    fit = [s for s in sizes if 2 * s <= room]
    if fit:
        return fit
    best = 1 << max(0, (room // 2).bit_length() - 1) if room >= 2 else 0
    return [best] if best >= COPY_MIN else []


def copy_peaks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """env.json's copy fields from the measured rows ({"bytes", "gbps"}): the table in ascending size, each
    row with ``moved_bytes`` (read + written: the working set of the copy), and ``copy_bandwidth_gbps``, the
    highest of them (None without rows), so every roofline divides by the fastest copy measured."""
    table = sorted(({"bytes": int(r["bytes"]), "moved_bytes": 2 * int(r["bytes"]), "gbps": float(r["gbps"])}
                    for r in rows if r.get("gbps") is not None), key=lambda r: r["bytes"])
    return {"copy_bandwidth_gbps": max((r["gbps"] for r in table), default=None), "copy_bandwidth_by_size": table}


def copy_peak_near(peaks: dict[str, Any] | None, working_set_bytes: float | None) -> dict[str, Any] | None:
    """The copy-table row whose working set (``moved_bytes``: source + destination) is nearest to a problem's
    working set (inputs + outputs bytes), by ratio; None without a table (an env.json from before the table,
    or nothing measured) or without a positive size.  For a "% of a copy of the same size" figure beside the
    roofline, which uses ``copy_bandwidth_gbps`` (the highest)."""
    table = (peaks or {}).get("copy_bandwidth_by_size") or []
    if not table or not working_set_bytes or working_set_bytes <= 0:
        return None
    return min(table, key=lambda r: abs(math.log(max(r.get("moved_bytes") or 2 * r["bytes"], 1) / working_set_bytes)))


def _size_text(nbytes: int | float | None) -> str:
    if not nbytes:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            v = nbytes / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{int(nbytes)} B"


def copy_table_markdown(peaks: dict[str, Any] | None) -> str:
    """The env_check.md table of the copy bandwidth at each measured size; "" when env.json has none."""
    table = (peaks or {}).get("copy_bandwidth_by_size") or []
    if not table:
        return ""
    best = (peaks or {}).get("copy_bandwidth_gbps")
    lines = ["### Copy bandwidth by size", "",
             "Device-to-device `copy_` of one tensor: GB/s counts the bytes read and written; the peak used by "
             "every roofline is the highest row.", "",
             "| Tensor copied | Read + written | GB/s | Peak |", "|---|---|---|---|"]
    for r in table:
        mark = "yes" if best is not None and r["gbps"] == best else ""
        lines.append(f"| {_size_text(r['bytes'])} | {_size_text(r.get('moved_bytes') or 2 * r['bytes'])} | "
                     f"{r['gbps']:.1f} | {mark} |")
    return "\n".join(lines) + "\n"


def _check(item: str, ok: bool, level: str, detail: str, fix: str | None = None) -> dict[str, Any]:
    return {"item": item, "status": "ok" if ok else "missing", "level": level, "detail": detail,
            "fix": None if ok else fix}


def evaluate(facts: dict[str, Any], impl: str | None) -> list[dict[str, Any]]:
    """Requirement checks; level 'required' failures make env exit 2."""
    checks = []
    v = facts.get("versions", {})
    for name in ("jinja2", "pyyaml"):  # the helpers' own needs: every rendered file, the KBS pages
        if name in v:
            checks.append(_check(name, bool(v.get(name)), "required", f"{name} {v.get(name) or 'not installed'}",
                                 f"pip install {name} (in the Python that runs kernel-loop)"))
    checks.append(_check("torch", bool(v.get("torch")), "required", f"torch {v.get('torch') or 'not installed'}",
                         "pip install torch (a CUDA build: https://pytorch.org/get-started/locally/)"))
    if v.get("torch"):
        gpu = facts.get("gpu")
        if not facts.get("cuda_available"):
            detail = (f"no CUDA GPU visible: torch.cuda.is_available() is False (torch {v.get('torch')}, "
                      f"built with CUDA {facts.get('torch_cuda') or 'none'})")
            fix = ("check `nvidia-smi`, the NVIDIA driver and CUDA_VISIBLE_DEVICES; install a CUDA build of "
                   "torch if torch.version.cuda is None")
            checks.append(_check("CUDA GPU", False, "required", detail, fix))
        elif gpu is None:
            checks.append(_check("CUDA GPU", False, "required",
                                 f"GPU index {facts.get('gpu_index')} does not exist "
                                 f"({facts.get('device_count')} visible)", "pass --gpu with a visible index"))
        else:
            checks.append(_check("CUDA GPU", True, "required",
                                 f"{gpu['name']} (sm_{gpu['cc'].replace('.', '')}, {gpu['sm_count']} SMs)"))
    cu = impl is not None and IMPL_SUFFIX.get(impl) == ".cu"
    tools = facts.get("tools", {})
    nvcc = tools.get("nvcc") or {}
    checks.append(_check("nvcc", bool(nvcc.get("path")), "required" if cu else "optional",
                         f"nvcc {nvcc.get('version')} at {nvcc.get('path')}" if nvcc.get("path")
                         else "nvcc not found" + ("" if cu else " (needed only for .cu kernels)"),
                         "install the CUDA toolkit and put its bin/ on PATH (or set CUDA_HOME)"))
    if impl == "triton":
        checks.append(_check("triton", bool(v.get("triton")), "required", f"triton {v.get('triton')}",
                             "pip install triton"))
    checks.append(_cute_dsl_check(facts, "required" if impl == "cute-dsl" else "optional"))
    checks.append(_cutlass_check(facts, "required" if impl == "cutlass" else "optional"))
    ncu = tools.get("ncu") or {}
    checks.append(_check("ncu", bool(ncu.get("path")), "profile",
                         f"ncu {ncu.get('version')} at {ncu.get('path')}" if ncu.get("path") else "ncu not found",
                         "install Nsight Compute (it ships with the CUDA toolkit; or apt install nsight-compute-<ver>) "
                         "and put ncu on PATH"))
    ctr = facts.get("counters")
    if ctr:
        c = _check("ncu counter access", ctr["status"] == "ok", "profile", ctr["detail"], ctr.get("fix"))
        if ctr["status"] == "unknown":
            c["status"] = "unknown"
        checks.append(c)
    san = tools.get("compute-sanitizer") or {}
    checks.append(_check("compute-sanitizer", bool(san.get("path")), "optional",
                         san.get("path") or "not found (needed only for correctness --sanitize)",
                         "install the CUDA toolkit's compute-sanitizer"))
    if "landlock_abi" in facts:
        abi = int(facts.get("landlock_abi") or 0)
        checks.append(_check("worker sandbox", abi > 0, "integrity",
                             f"Landlock ABI {abi}: the kernel's worker cannot read or change the record key or the "
                             "run directory" if abi else "no Landlock in this kernel: the kernel's worker runs with "
                             "the user's rights over the user's files, the record key among them",
                             "Linux 5.13 or later with landlock in its LSM list (lsm=...,landlock); every step "
                             "still runs, and says the worker was not isolated"))
    for name in ("cuda-python", "flashinfer"):
        checks.append(_check(name, bool(v.get(name)), "optional", f"{name} {v.get(name) or 'not installed'}",
                             f"pip install {'flashinfer-python' if name == 'flashinfer' else name} (optional)"))
    return checks


def _cutlass_check(facts: dict[str, Any], level: str) -> dict[str, Any]:
    """CUTLASS headers: the include folder holding cute/tensor.hpp and where it came from (``facts["cutlass"]``;
    an env.json from before it has only ``cute_headers``)."""
    info = facts.get("cutlass") or {}
    heads = info.get("include") or facts.get("cute_headers")
    if heads:
        where = f" (from {info['source']})" if info.get("source") else ""
        pkg = f", nvidia-cutlass {info['package_version']}" if info.get("package_version") else ""
        return _check("CUTLASS headers", True, level, f"cute/tensor.hpp in {heads}{where}{pkg}")
    searched = info.get("searched")
    if searched:
        detail = "cute/tensor.hpp not found in " + ", ".join(searched)
    elif searched is not None:
        detail = ("cute/tensor.hpp not found: no include folder (CUTLASS_PATH and CUTLASS_INCLUDE_DIR are unset and "
                  "the nvidia-cutlass package is not installed)")
    else:
        detail = "cute/tensor.hpp not found"
    return _check("CUTLASS headers", False, level, detail, CUTLASS_FIX)


def _cute_dsl_check(facts: dict[str, Any], level: str) -> dict[str, Any]:
    """CuTe DSL: the nvidia-cutlass-dsl version and whether ``import cutlass.cute`` worked (``facts["cute_dsl"]``;
    an env.json from before it has only the version)."""
    info = facts.get("cute_dsl") or {}
    ver = info.get("version", (facts.get("versions") or {}).get("nvidia-cutlass-dsl"))
    if not ver:
        return _check("nvidia-cutlass-dsl", False, level, "nvidia-cutlass-dsl not installed (no importable cutlass)",
                      CUTE_DSL_FIX)
    if info.get("import") == "failed":
        return _check("nvidia-cutlass-dsl", False, level,
                      f"nvidia-cutlass-dsl {ver} is installed but `import cutlass.cute` failed: {info.get('error')}",
                      CUTE_DSL_FIX)
    done = " (import cutlass.cute OK)" if info.get("import") == "ok" else ""
    return _check("nvidia-cutlass-dsl", True, level, f"nvidia-cutlass-dsl {ver}{done}")


def required_failures(checks: list[dict]) -> list[dict]:
    return [c for c in checks if c["level"] == "required" and c["status"] != "ok"]


def make_report(facts: dict, impl: str | None, gpu_index: int) -> dict[str, Any]:
    checks = evaluate(facts, impl)
    return {"schema": 1, "skipped": False, "time": now_iso(), "gpu_index": gpu_index, "impl": impl,
            "ok": not required_failures(checks), **facts, "checks": checks}


def render_markdown(report: dict) -> str:
    """env_check.md; without jinja2 a plain listing, so that env can still say what to install.  The copy
    bandwidth table (``copy_table_markdown``) follows the measured peaks, the template's last section."""
    table = "" if report.get("skipped") else copy_table_markdown(report.get("peaks"))
    try:
        import jinja2  # noqa: F401
    except ModuleNotFoundError:
        lines = ["# Environment check", "", "(plain listing: jinja2 is not installed, so the usual template "
                 "could not be used)", ""]
        lines += [f"- {c['item']}: {c['status']} ({c['level']}): {c['detail']}"
                  + (f" -> {c['fix']}" if c.get("fix") else "") for c in report.get("checks", [])]
        return "\n".join(lines) + "\n" + ("\n" + table if table else "")
    md = render("env_check.md.j2", r=report)
    return md.rstrip("\n") + "\n\n" + table if table else md


def write_skipped(out: Path, why: str = "`init --skip-env`") -> None:
    """env.json and env_check.md of a run whose environment was not checked, saying why (the flag that skipped it)."""
    report = {"schema": 1, "skipped": True, "skipped_why": why, "time": now_iso(), "ok": None, "gpu": None,
              "peaks": None, "checks": []}
    write_json(Path(out) / "env.json", report)
    atomic_write_text(Path(out) / "env_check.md", render_markdown(report))


# --- gathering facts ----------------------------------------------------------------------
def _importable(mod: str) -> bool:
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken parent package
        return False


def package_versions() -> dict[str, str | None]:
    """Installed version of each package, None when it cannot be imported here (even if metadata remains)."""
    out: dict[str, str | None] = {}
    for shown, (dists, mod) in PACKAGES.items():
        ver = None
        if _importable(mod):
            for d in dists:
                try:
                    ver = importlib.metadata.version(d)
                    break
                except importlib.metadata.PackageNotFoundError:
                    continue
            ver = ver or "installed (version unknown)"
        out[shown] = ver
    return out


def _run(cmd: list[str], timeout: float) -> tuple[int | None, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)


def tool_facts() -> dict[str, dict]:
    tools = {}
    for name, parse in (("nvcc", parse_nvcc_version), ("ncu", parse_ncu_version), ("compute-sanitizer", None)):
        path = build.find_cuda_tool(name)
        ver = None
        if path and parse:
            ver = parse(_run([path, "--version"], 60)[1])
        tools[name] = {"path": path, "version": ver}
    return tools


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        rc, out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 30)
        return out.strip().splitlines()[0] if rc == 0 and out.strip() else None


def cutlass_facts(cfg_dirs: list[str] | None, environ: dict | None = None,
                  package_source: str | None = None) -> dict[str, Any]:
    """The CUTLASS include folder ``build`` would use: the first of ``build.include_dir_sources`` holding
    cute/tensor.hpp, where it came from, and every folder searched."""
    found = build.include_dir_sources(cfg_dirs, environ, package_source)
    for d, why in found:
        if (Path(d) / "cute" / "tensor.hpp").is_file():
            return {"include": d, "source": why, "cutlass_h": (Path(d) / "cutlass" / "cutlass.h").is_file(),
                    "searched": [x for x, _ in found]}
    return {"include": None, "source": None, "cutlass_h": False, "searched": [x for x, _ in found]}


def cute_dsl_facts(version: str | None, timeout: float = 300) -> dict[str, Any]:
    """The nvidia-cutlass-dsl version and whether ``import cutlass.cute`` works, tried in a child Python (the
    import loads a large MLIR library); nothing is tried when the package is not installed."""
    if not version:
        return {"version": None, "import": None, "error": None}
    with step("importing cutlass.cute"):
        rc, out = _run([sys.executable, "-c", "import cutlass, cutlass.cute"], timeout)
    if rc == 0:
        return {"version": version, "import": "ok", "error": None}
    lines = [ln for ln in (out or "").strip().splitlines() if ln.strip()]
    return {"version": version, "import": "failed", "error": (lines[-1] if lines else f"exit {rc}")[:500]}


def _measure_copies(torch: Any, dev: Any, sizes: list[int], median_ms: Any) -> list[dict[str, Any]]:
    """Time a device-to-device copy at each size (prefixes of one pair of buffers of the largest size); a
    size whose buffers cannot be allocated is dropped, the next smaller one tried."""
    sizes = sorted(sizes)
    src = dst = None
    while sizes and src is None:
        try:
            src = torch.empty(sizes[-1] // 4, device=dev, dtype=torch.float32).uniform_()
            dst = torch.empty_like(src)
        except torch.cuda.OutOfMemoryError:
            src = dst = None
            sizes.pop()
            torch.cuda.empty_cache()
    rows = []
    for size in sizes:
        a, b = src[:size // 4], dst[:size // 4]
        ms = median_ms(lambda a=a, b=b: b.copy_(a), 3, 15)
        rows.append({"bytes": size, "gbps": round(2 * size / (ms * 1e-3) / 1e9, 1)})
    del src, dst
    torch.cuda.empty_cache()
    return rows


def measure_peaks(gpu: int) -> dict[str, Any]:
    """Device copy bandwidth at several sizes (the peak is the fastest) and bf16/fp32 matmul throughput
    (median of CUDA-event timings)."""
    import torch

    dev = torch.device(f"cuda:{gpu}")

    def median_ms(fn, warmup: int, reps: int) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return sorted(times)[len(times) // 2]

    with torch.cuda.device(dev):
        try:
            free = int(torch.cuda.mem_get_info(dev)[0])
        except (RuntimeError, AttributeError):
            free = None
        res: dict[str, Any] = copy_peaks(_measure_copies(torch, dev, copy_sizes(free), median_ms))
        old_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            for key, size, dtype in (("bf16_matmul_tflops", 8192, torch.bfloat16),
                                     ("fp32_matmul_tflops", 4096, torch.float32)):
                a = torch.randn(size, size, device=dev, dtype=dtype)
                b = torch.randn(size, size, device=dev, dtype=dtype)
                ms = median_ms(lambda a=a, b=b: torch.mm(a, b), 3, 10)
                res[key] = round(2 * size ** 3 / (ms * 1e-3) / 1e12, 1)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old_tf32
        torch.cuda.empty_cache()
    res["method"] = copy_method(res["copy_bandwidth_by_size"])
    return res


def copy_method(table: list[dict[str, Any]]) -> str:
    """The ``peaks.method`` text, naming the copy sizes measured."""
    sizes = ", ".join(_size_text(r["bytes"]) for r in table) or "none (too little free memory)"
    return ("median of CUDA-event timings after warmup, random data: device-to-device copies of "
            f"{sizes} (bytes read + written; the copy peak is the fastest), torch.mm 8192^3 bf16 and 4096^3 "
            "fp32 (TF32 off)")


def gather(gpu: int, cfg_build: dict | None = None, measure: bool = True) -> dict[str, Any]:
    facts: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                             "versions": package_versions(), "tools": tool_facts(), "gpu_index": gpu,
                             "gpu": None, "cuda_available": False, "torch_cuda": None, "driver": None,
                             "counters": None, "peaks": None,
                             "cutlass": cutlass_facts((cfg_build or {}).get("include_dirs"))}
    facts["cute_headers"] = facts["cutlass"]["include"]
    facts["cutlass"]["package_version"] = facts["versions"].get("nvidia-cutlass")
    facts["cute_dsl"] = cute_dsl_facts(facts["versions"].get("nvidia-cutlass-dsl"))
    facts["landlock_abi"] = sandbox.abi()
    if not facts["versions"]["torch"]:
        return facts
    import torch

    facts["torch_cuda"] = torch.version.cuda
    facts["cuda_available"] = bool(torch.cuda.is_available())
    if not facts["cuda_available"]:
        return facts
    facts["device_count"] = torch.cuda.device_count()
    if not 0 <= gpu < facts["device_count"]:
        return facts
    p = torch.cuda.get_device_properties(gpu)
    facts["gpu"] = {"name": p.name, "cc": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
                    "memory_gib": round(p.total_memory / 2**30, 1),
                    "l2_bytes": getattr(p, "L2_cache_size", None)}
    facts["driver"] = _driver_version()
    ncu = facts["tools"]["ncu"]["path"]
    if ncu:
        with step("checking that ncu can read performance counters"):
            rc, out = _run([ncu, "--metrics", "gpu__time_duration.sum", sys.executable, "-c",
                            _PROBE.format(gpu=gpu)], 300)
        facts["counters"] = counters_from_probe(out, rc)
    if measure:
        with step("measuring copy bandwidth and matmul peaks"):
            facts["peaks"] = measure_peaks(gpu)
    return facts


def check_and_write(gpu: int, impl: str | None, out: Path | None, cfg_build: dict | None = None,
                    as_json: bool = False, echo: bool = False) -> dict[str, Any]:
    """Gather, evaluate, write env.json/env_check.md into ``out``; UsageError on a missing requirement."""
    report = make_report(gather(gpu, cfg_build), impl, gpu)
    md = render_markdown(report)
    if out is not None:
        write_json(Path(out) / "env.json", report)
        atomic_write_text(Path(out) / "env_check.md", md)
        progress(f"wrote {Path(out) / 'env_check.md'}")
    if echo:
        print(json.dumps(report, indent=2, default=str) if as_json else md, end="" if not as_json else "\n")
    for c in report["checks"]:
        if c["status"] != "ok" and c["level"] == "profile":
            progress(f"warning: {c['item']}: {c['detail']} -> {c['fix']} (needed by profile)")
    failed = required_failures(report["checks"])
    if failed:
        raise UsageError("; ".join(f"{c['detail']} -> {c['fix']}" for c in failed))
    return report
