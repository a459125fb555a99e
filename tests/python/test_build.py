"""build: solve() signature parsing, nvcc command construction, cache key; a real nvcc build when nvcc exists.

Then a version's load_inline libraries kept by correctness and loaded by later steps (measure/libraries.py): what the
judge keeps (only load_inline's own plain files), what it hands (only bytes with the recorded hash), what a step
trusts (only a correctness record that still holds), and a benchmark on an empty build cache that builds nothing.

The judge's data (measure.problem) and the loader's helpers, on the CPU: seeded inputs (never zeros),
the reference on the drawn data, the run's one set of KernelBench weights, poisoning, output names."""

from __future__ import annotations

import gzip
import hashlib
import math
import os
from pathlib import Path

import pytest
import runfixture as rf
import torch
from conftest import KERNELS
from kernel_loop import build, loader, rundir, tensors
from kernel_loop.common import UsageError, read_json, write_json
from kernel_loop.config import RunConfig
from kernel_loop.measure import libraries
from kernel_loop.measure.problem import Problem, import_ref, kernel_kind
from kernel_loop.steps import benchmark as B


def test_parse_simple_signature():
    params = build.parse_signature((KERNELS / "cu_vadd.cu").read_text())
    assert [(p.name, p.ctype, p.pointer, p.const) for p in params] == [
        ("x", "float", True, True), ("y", "float", True, True), ("out", "float", True, False),
        ("N", "int", False, False)]
    assert [p.name for p in params if p.is_output] == ["out"]
    assert params[0].dtype == "float32"


def test_parse_comments_newlines_restrict_and_types():
    src = """
    // extern "C" void solve(int commented_out);
    /* extern "C" void solve(double also_commented); */
    #include <cuda_bf16.h>
    extern "C"
    void   solve (  const __nv_bfloat16 *__restrict__ q,   // queries
                    const half* const k,
                    __half * __restrict__ o,   /* output */
                    float* const acc,
                    const int8_t *mask, uint8_t* flags, bool *done, int64_t *idx,
                    const double* scale,
                    int64_t   n_rows,
                    size_t n_cols, long stride, unsigned int heads )
    { }
    """
    params = {p.name: p for p in build.parse_signature(src)}
    assert list(params) == ["q", "k", "o", "acc", "mask", "flags", "done", "idx", "scale", "n_rows",
                            "n_cols", "stride", "heads"]
    assert params["q"].dtype == "bfloat16" and params["q"].const
    assert params["k"].dtype == "float16" and params["k"].const
    assert params["o"].dtype == "float16" and params["o"].is_output
    assert params["acc"].is_output  # a const pointer to non-const data is still written
    assert params["mask"].dtype == "int8" and not params["mask"].is_output
    assert params["flags"].dtype == "uint8" and params["done"].dtype == "bool" and params["idx"].dtype == "int64"
    assert params["scale"].dtype == "float64"
    assert [params[n].ctype for n in ("n_rows", "n_cols", "stride", "heads")] == [
        "int64_t", "size_t", "long", "unsigned int"]
    assert not any(params[n].pointer for n in ("n_rows", "n_cols", "stride", "heads"))


def test_extern_c_block_form():
    params = build.parse_signature('extern "C" {\nvoid solve(const float* a, float* b, int n) {}\n}')
    assert [p.name for p in params] == ["a", "b", "n"]


@pytest.mark.parametrize("src, message", [
    ('extern "C" void solve(const float2* a, float* b) {}', "parameter 'a' has unsupported pointer type 'float2 *'"),
    ('extern "C" void solve(const float* a, float* b, dim3 grid) {}', "parameter 'grid' has unsupported scalar type"),
    ('extern "C" void solve(float** a) {}', "pointers to pointers"),
    ('extern "C" void solve(const float*, float* b) {}', "has no name"),
    ('extern "C" void solve(const float* a, const float* b) {}', "no non-const pointer"),
    ('extern "C" void solve(void) {}', "no parameters"),
    ('void solve(const float* a, float* b) {}', 'extern "C" void solve'),
    ('extern "C" void solve(const float* a, float* a) {}', "repeats parameter names"),
])
def test_signature_errors(src, message):
    with pytest.raises(UsageError, match=message.replace("*", r"\*").replace("(", r"\(")):
        build.parse_signature(src)


def test_arch_flags():
    assert build.arch_flag((9, 0)) == "-gencode=arch=compute_90a,code=sm_90a"
    assert build.arch_flag((8, 0)) == "-gencode=arch=compute_80,code=sm_80"
    assert build.arch_flag((8, 9)) == "-gencode=arch=compute_89,code=sm_89"
    assert build.arch_flag((10, 0)) == "-gencode=arch=compute_100a,code=sm_100a"


def test_include_dirs_from_config_and_environment(tmp_path):
    environ = {"CUTLASS_PATH": "/opt/cutlass", "CUTLASS_INCLUDE_DIR": "/opt/extra"}
    dirs = build.include_dirs(["/my/inc", "/opt/cutlass/include"], environ)
    assert dirs == ["/my/inc", "/opt/cutlass/include", "/opt/cutlass/tools/util/include", "/opt/extra"]
    assert build.include_dirs(None, {}, package_source="") == []
    # the nvidia-cutlass pip package's CUTLASS tree, when neither variable is set
    src = tmp_path / "site" / "cutlass_library" / "source"
    for sub in ("include/cute", "tools/util/include"):
        (src / sub).mkdir(parents=True)
    assert build.include_dirs(None, {}, package_source=str(src)) == [str(src / "include"),
                                                                     str(src / "tools" / "util" / "include")]
    assert build.include_dir_sources(["/my/inc"], {}, package_source=str(src))[:2] == [
        ("/my/inc", "run.json build.include_dirs"), (str(src / "include"), "nvidia-cutlass package")]
    assert build.include_dirs(None, environ, package_source=str(src)) == [
        "/opt/cutlass/include", "/opt/cutlass/tools/util/include", "/opt/extra"]


def test_build_command():
    cmd = build.build_command("/cuda/bin/nvcc", [Path("/r/v0/kernel.cu")], Path("/c/kernel.so"), (9, 0),
                              "cutlass", ["/opt/cutlass/include"], ["-DFOO=1", "--use_fast_math"])
    assert cmd[:8] == ["/cuda/bin/nvcc", "-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-lineinfo",
                       "-gencode=arch=compute_90a,code=sm_90a"]
    assert "--expt-relaxed-constexpr" in cmd and "-I/opt/cutlass/include" in cmd
    assert cmd[-5:] == ["-DFOO=1", "--use_fast_math", "-o", "/c/kernel.so", "/r/v0/kernel.cu"]
    plain = build.build_command("nvcc", [Path("k.cu")], Path("k.so"), (8, 0), "cuda-cpp", [], [])
    assert "--expt-relaxed-constexpr" not in plain


def test_cache_key():
    base = build.cache_key("src", (9, 0), "cuda-cpp", [], [], "nvcc")
    assert base == build.cache_key("src", (9, 0), "cuda-cpp", [], [], "nvcc")
    others = {build.cache_key("src2", (9, 0), "cuda-cpp", [], [], "nvcc"),
              build.cache_key("src", (8, 0), "cuda-cpp", [], [], "nvcc"),
              build.cache_key("src", (9, 0), "cuda-cpp", ["/inc"], [], "nvcc"),
              build.cache_key("src", (9, 0), "cuda-cpp", [], ["-DX"], "nvcc"),
              build.cache_key("src", (9, 0), "cuda-cpp", [], [], "/other/nvcc")}
    assert base not in others and len(others) == 5


needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not installed")


@needs_nvcc
def test_real_build_is_cached(tmp_path):
    kernel = tmp_path / "kernel.cu"
    kernel.write_text((KERNELS / "cu_vadd.cu").read_text())
    cfg = RunConfig.from_json({"kernel": "k", "impl": "cuda-cpp", "dims": {"N": 1}})
    first = build.build(kernel, cfg, (9, 0))
    assert first.so.is_file() and not first.cached and first.arch == "sm_90a"
    again = build.build(kernel, cfg, (9, 0))
    assert again.cached and again.so == first.so
    kernel.write_text(kernel.read_text() + "\n// changed\n")
    changed = build.build(kernel, cfg, (9, 0))
    assert not changed.cached and changed.so != first.so


@needs_nvcc
def test_compile_error_carries_compiler_output(tmp_path):
    with pytest.raises(build.BuildError, match="this_is_not_cuda"):
        build.build(KERNELS / "cu_vadd_compile_error.cu", RunConfig.from_json({"kernel": "k", "impl": "cuda-cpp", "dims": {"N": 1}}), (9, 0))


# --- load_inline libraries kept by correctness (measure/libraries.py) ---------------------------------
KEY = "ab" * 32


def _lib(root, name="kl_x", data=b"\x7fELF library bytes"):
    (root / name).mkdir(parents=True, exist_ok=True)
    path = root / name / f"{name}.so"
    path.write_bytes(data)
    return path


def test_the_judge_keeps_only_plain_files_of_load_inlines_cache(tmp_path, monkeypatch):
    """A kernel reports what it likes: the judge copies a file only from $TORCH_EXTENSIONS_DIR, a regular file with
    one link there (a link to the record key, or a hard link to it, is not copied), with a well-formed key and
    name; the copy is gzipped and named by its hash, and the entry binds that hash."""
    ext, dest = tmp_path / "ext", tmp_path / "v1" / "lib"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    good = _lib(ext)
    secret = tmp_path / "record.key"
    secret.write_text("the record key")
    (ext / "link").mkdir()
    (ext / "link" / "kl_y.so").symlink_to(secret)
    os.link(secret, ext / "hard.so")
    outside = _lib(tmp_path / "elsewhere")
    reports = [{"key": "1" * 64, "name": "kl_y", "module": True, "path": str(ext / "link" / "kl_y.so")},
               {"key": "2" * 64, "name": "kl_z", "module": True, "path": str(ext / "hard.so")},
               {"key": "3" * 64, "name": "kl_w", "module": True, "path": str(outside)},
               {"key": "4" * 64, "name": "kl_v", "module": True, "path": str(ext / "kl_x" / ".." / ".." / "record.key")},
               {"key": "not hex", "name": "kl_x", "module": True, "path": str(good)},
               {"key": "5" * 64, "name": "bad name; rm", "module": True, "path": str(good)},
               {"key": "6" * 64, "name": "kl_n", "module": True, "path": str(ext / "kl_x" / "a\0b.so")},
               {"key": KEY, "name": "kl_x", "module": True, "path": str(good)}]  # the one kept (8 at most)
    kept = libraries.keep(reports, str(dest))
    sha = hashlib.sha256(good.read_bytes()).hexdigest()
    assert kept == [{"key": KEY, "name": "kl_x", "module": True, "file": f"lib/{sha[:20]}.so.gz", "sha256": sha,
                     "bytes": len(good.read_bytes())}]
    assert [p.name for p in dest.iterdir()] == [f"{sha[:20]}.so.gz"]
    assert gzip.decompress((dest / f"{sha[:20]}.so.gz").read_bytes()) == good.read_bytes()
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    assert libraries.keep(reports, str(dest)) == []  # no cache named: nothing to trust


def test_no_link_on_the_way_is_followed_no_fifo_blocks_and_the_copies_are_bounded(tmp_path, monkeypatch, capfd):
    """A review's race: a folder on the way to a reported library swapped for a link (to the record key's folder)
    between a check and the open.  The judge opens one name at a time from the cache's real root without following
    any link, so a link anywhere on the way leads nowhere; a FIFO named like a library does not block it; a key
    reported twice is kept once; a version's libraries are bounded together; a copy that cannot be written is said
    and skipped, never the step's failure."""
    ext, dest = tmp_path / "ext", tmp_path / "v1" / "lib"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    keys = ext / "keys"  # a folder whose real path a resolve-then-open check lets pass (inside the cache)
    keys.mkdir(parents=True)
    (keys / "kl_k.so").write_bytes(b"the record key")
    (ext / "kx").symlink_to(keys, target_is_directory=True)  # a link on the way, as the swap leaves for an instant
    os.mkfifo(ext / "f.so")
    good, other = _lib(ext), _lib(ext, "kl_o", b"\x7fELF another library")
    key2 = "cd" * 32
    reports = [{"key": KEY, "name": "kl_k", "module": True, "path": str(ext / "kx" / "kl_k.so")},
               {"key": KEY, "name": "kl_f", "module": True, "path": str(ext / "f.so")},
               {"key": KEY, "name": "kl_x", "module": True, "path": str(good)},
               {"key": KEY, "name": "kl_x", "module": True, "path": str(good)},
               {"key": key2, "name": "kl_o", "module": True, "path": str(other)}]
    assert [k["name"] for k in libraries.keep(reports, str(dest))] == ["kl_x", "kl_o"]
    monkeypatch.setattr(libraries, "MAX_TOTAL", len(good.read_bytes()) + 1)
    assert [k["name"] for k in libraries.keep(reports, str(tmp_path / "d2"))] == ["kl_x"]
    (tmp_path / "d3").write_text("a file where the folder goes")
    assert libraries.keep(reports, str(tmp_path / "d3")) == []
    assert "kl_x's library was not kept" in capfd.readouterr().err


def test_a_version_never_loads_another_versions_library_and_a_library_that_fails_to_load_is_built(tmp_path,
                                                                                                helpers_env):
    """In the benchmark's one worker, the kept libraries handed at one version's import are replaced at the next:
    a library that v2's correctness kept under the key of v3's call (the review's cross-version find) is never
    loaded by v3.  And a kept library that does not load (a TMPDIR mounted noexec, another libstdc++) is built as
    torch would, not a failure."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "hooked.py"
    script.write_text(textwrap.dedent(r"""
        import sys, torch
        from torch.utils.cpp_extension import load_inline as _orig
        from kernel_loop.measure import libraries

        def src(value, name):
            return ('#include <Python.h>\n'
                    'static PyObject* one(PyObject*, PyObject*) { return PyFloat_FromDouble(' + value + '); }\n'
                    'static PyMethodDef M[] = {{"one", one, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};\n'
                    'static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "' + name + '", nullptr, -1, M};\n'
                    'PyMODINIT_FUNC PyInit_' + name + '(void) { return PyModule_Create(&D); }\n')

        def call(value, name):
            from torch.utils.cpp_extension import load_inline
            return load_inline(name=name, cpp_sources=src(value, name), no_implicit_headers=True)

        libraries.hook(torch, [])                      # v2's import builds its library
        assert call("2.0", "kl_h2").one() == 2.0
        [v2] = libraries.drain()
        libraries.hook(torch, [])                      # v3's import builds its own: v3's call's key
        assert call("1.0", "kl_h3").one() == 1.0
        [v3] = libraries.drain()
        forged = dict(v2, key=v3["key"])               # v2's library under v3's key, handed at v2's import
        libraries.hook(torch, [forged])
        assert call("1.0", "kl_h3").one() == 2.0                # within v2's import the table is v2's own claim
        libraries.hook(torch, [])                      # v3's import: v2's table is gone
        assert call("1.0", "kl_h3").one() == 1.0
        broken = sys.argv[1] + "/broken.so"
        open(broken, "wb").write(b"not a library")
        libraries.hook(torch, [dict(v3, path=broken)])  # a kept library that does not load: built
        assert call("1.0", "kl_h3").one() == 1.0
        print("ok")
    """))
    env = dict(helpers_env, TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert "the kept library of kl_h3 did not load" in proc.stderr


def test_a_cache_named_around_the_record_key_or_the_run_gives_neither_up(tmp_path, monkeypatch):
    """$TORCH_EXTENSIONS_DIR set by the user to a folder that also holds the record key and the run directory (the
    home folder, say): a kernel that reports the key's path, or a file of the run, gets nothing copied, even where
    the name ends in .so; a file that is not a .so is never copied."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    key, run = tmp_path / "keys" / "record.so", tmp_path / "run"
    key.parent.mkdir()
    key.write_bytes(b"the record key")
    planted = _lib(run / "v0", "kl_p")
    plain = _lib(tmp_path / "ext", "kl_q")
    text = tmp_path / "ext" / "kl_q" / "notes.txt"
    text.write_text("not a library")
    reports = [{"key": f"{i}" * 64, "name": n, "module": True, "path": str(p)}
               for i, (n, p) in enumerate((("kl_k", key), ("kl_p", planted), ("kl_t", text), ("kl_q", plain)))]
    kept = libraries.keep(reports, str(tmp_path / "dest"), [key, run])
    assert [k["name"] for k in kept] == ["kl_q"]
    assert len(libraries.keep(reports, str(tmp_path / "dest2"))) == 3  # what the hidden paths kept out


def test_a_worker_is_handed_only_bytes_with_the_recorded_hash(tmp_path, monkeypatch):
    ext, dest, folder = tmp_path / "ext", tmp_path / "v1" / "lib", tmp_path / "worker"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    folder.mkdir()
    good = _lib(ext)
    [entry] = libraries.keep([{"key": KEY, "name": "kl_x", "module": True, "path": str(good)}], str(dest))
    lib = dict(entry, path=str(tmp_path / "v1" / entry["file"]))
    [handed] = libraries.hand([lib], str(folder))
    assert open(handed["path"], "rb").read() == good.read_bytes() and handed["name"] == "kl_x"
    assert os.path.dirname(handed["path"]) == str(folder)
    with gzip.open(lib["path"], "wb") as gz:  # changed after correctness kept it
        gz.write(b"other bytes")
    assert libraries.hand([lib], str(folder)) == []
    (tmp_path / "v1" / entry["file"]).write_bytes(b"not gzip")
    assert libraries.hand([lib], str(folder)) == []
    damaged = bytearray(gzip.compress(good.read_bytes()))
    damaged[10] ^= 0xFF  # deflate's first byte: a zlib.error (invalid code lengths), caught like the others
    (tmp_path / "v1" / entry["file"]).write_bytes(bytes(damaged))
    assert libraries.hand([lib], str(folder)) == []
    assert libraries.hand([dict(lib, path=str(good.with_suffix(".so.gz")))], str(folder / "gone")) == []
    assert libraries.hand([lib], None) == []


TINY = r'''"""Row softmax in torch, times a constant from a C extension built with load_inline (a fast build: Python's
own header, no torch headers)."""
import torch
from torch.utils.cpp_extension import load_inline

SRC = """
#include <Python.h>
static PyObject* one(PyObject*, PyObject*) { return PyFloat_FromDouble(1.0); }
static PyMethodDef M[] = {{"one", one, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "kl_tiny_ext", nullptr, -1, M};
PyMODINIT_FUNC PyInit_kl_tiny_ext(void) { return PyModule_Create(&D); }
"""
_ext = load_inline(name="kl_tiny_ext", cpp_sources=SRC, no_implicit_headers=True)


def run_kernel(x, y, M, N):
    y.copy_(torch.softmax(x, dim=-1) * _ext.one())
'''
CPU_ARGS = ["--timing", "host_time", "--warmup", "1", "--trials", "3", "--baselines", "none"]


def _builds(cache):
    return sorted(p.name for p in (cache / "torch_extensions").rglob("*.so"))


def test_a_benchmark_on_an_empty_build_cache_loads_what_correctness_kept(tmp_path, monkeypatch):
    """Correctness keeps the version's load_inline library in v3/lib (named in correctness.json, which the signed
    record binds); a benchmark on a machine whose build cache is empty loads it and builds nothing.  A
    correctness.json changed since its record hands nothing (its libraries are built again; a library's own bytes
    changed: test_a_worker_is_handed_only_bytes_with_the_recorded_hash)."""
    try:
        rundir.gate_script()
    except UsageError:
        pytest.skip("scripts/check_iteration_gate.sh is not there yet")
    monkeypatch.setenv("KERNEL_LOOP_DEVICE", "cpu")
    root = rf.build_with_gate(tmp_path / "run", dims={"M": 4, "N": 48})
    monkeypatch.setattr(B, "check_final_gate", lambda rd, n: None)  # v3's kernel changes after the gate
    (root / "v3" / "kernel.py").write_text(TINY)
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache1"))
    assert rf.cli(B, ["correctness", str(root)]) == 0
    assert _builds(tmp_path / "cache1") == ["kl_tiny_ext.so"]
    [lib] = read_json(root / "v3" / "correctness.json")["libraries"]
    kept = root / "v3" / lib["file"]
    assert lib["name"] == "kl_tiny_ext" and lib["module"] is True
    assert hashlib.sha256(gzip.decompress(kept.read_bytes())).hexdigest() == lib["sha256"]

    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache2"))  # a fresh machine: nothing built there
    assert rf.cli(B, ["benchmark", str(root), "--version", "v3", *CPU_ARGS]) == 0
    rows = {r["name"]: r for r in read_json(root / "benchmark.json")["rows"]}
    assert rows["v3"]["correct"] and rows["v3"]["correct_after_timing"]
    assert _builds(tmp_path / "cache2") == []

    recorded = (root / "v3" / "correctness.json").read_bytes()
    data = read_json(root / "v3" / "correctness.json")  # a list edited after the record: not trusted
    write_json(root / "v3" / "correctness.json", dict(data, libraries=[dict(data["libraries"][0], sha256="0" * 64)]))
    assert libraries.stored(root, "v3", root / "v3" / "kernel.py", "cpu", 0) == []
    (root / "v3" / "correctness.json").write_bytes(recorded)
    assert libraries.stored(root, "v3", root / "v3" / "kernel.py", "cpu", 0)[0]["path"] == str(kept)  # as recorded again


# --- the judge's data (measure.problem) and the loader ---
def _problem(tmp_path: Path, ref="ref_vadd.py", kernel="py_vadd.py", dims=None, cfg=None, ref_text=None) -> Problem:
    root = tmp_path / "run"
    root.mkdir(parents=True, exist_ok=True)
    (root / "ref.py").write_text(ref_text if ref_text is not None else (KERNELS / ref).read_text())
    cfg = RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 257}, "seed": 42, **(cfg or {})})
    ref = import_ref(root)
    kind = kernel_kind(KERNELS / kernel, ref)
    text = (KERNELS / kernel).read_text() if kind == "cu" else None
    return Problem(cfg, ref, dims or {"N": 257}, "cpu", kind, text)


def test_a_data_set_holds_inputs_outputs_and_the_reference(tmp_path):
    ds = _problem(tmp_path).draw(5)
    assert set(ds.args) == {"x", "y", "out", "N"} and ds.in_place == ["out"] and ds.input_names() == ["x", "y"]
    assert ds.args["x"].shape == (257,) and ds.args["x"].abs().sum() > 0
    assert torch.equal(ds.expected["out"], ds.args["x"] + ds.args["y"])
    assert ds.expected["out"].data_ptr() != ds.args["out"].data_ptr()  # the reference's result is the judge's own


def test_seeds_give_fresh_reproducible_inputs(tmp_path):
    p = _problem(tmp_path)
    a, b, c = (p.draw(s).args["x"] for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert p.draw(3, reference=False).expected == {}


def test_a_reference_that_changes_its_inputs_is_bad_input(tmp_path):
    text = ("import torch\n"
            "def setup(N):\n    return {'x': torch.randn(N)}\n"
            "def reference(x):\n    x.mul_(2)\n    return x.clone()\n")
    with pytest.raises(UsageError, match="changed its input 'x'"):
        _problem(tmp_path, ref_text=text).draw(1)


def test_the_call_plan_says_nothing_about_counts_or_checks(tmp_path):
    p = _problem(tmp_path)
    ds = p.draw(1)
    names = {n: f"b-{n}" for n in ds.args}
    plan = p.call_plan(ds, "py", names)
    assert plan["tensors"] == {"x": "b-x", "y": "b-y", "out": "b-out"} and plan["outputs"] == {"out": "b-out"}
    assert plan["scalars"] == {"N": 257}
    assert not {"trials", "warmup", "checked", "mode", "seed"} & set(plan)


def test_returning_reference(tmp_path):
    p = _problem(tmp_path, ref="ref_softmax.py", kernel="triton_softmax.py", dims={"M": 3, "N": 40})
    ds = p.draw(1)
    assert ds.in_place == [] and list(ds.expected) == ["out"] and ds.expected["out"].shape == (3, 40)


def test_all_zero_inputs_are_refused(tmp_path):
    text = ("import torch\n"
            "def setup(N):\n    return {'inputs': {'x': torch.zeros(N), 'y': torch.randn(N), 'out': torch.empty(N)},"
            " 'outputs': ['out']}\n"
            "def reference(x, y, out):\n    out.copy_(x + y)\n")
    with pytest.raises(UsageError, match="input 'x' is all zeros"):
        _problem(tmp_path, ref_text=text).draw(1)


def test_missing_pieces_are_clear(tmp_path):
    with pytest.raises(UsageError, match="setup"):
        _problem(tmp_path, ref_text="def reference(x):\n    return x\n").draw(1)
    with pytest.raises(UsageError, match="needs N"):
        _problem(tmp_path, dims={"M": 3}).draw(1)


def test_kernelbench_weights_come_from_the_run_seed_alone(tmp_path):
    p = _problem(tmp_path, ref="kb_ref.py", kernel="kb_new.py", dims={"batch_size": 5})
    a, b = p.draw(1), p.draw(2)
    assert list(a.args) == ["arg0"] and a.args["arg0"].shape == (5, 64) and not torch.equal(a.args["arg0"], b.args["arg0"])
    state = {n: tensors.fingerprint(t) for n, t in p.state().items()}
    assert state
    again = _problem(tmp_path / "again", ref="kb_ref.py", kernel="kb_new.py", dims={"batch_size": 5})
    assert {n: tensors.fingerprint(t) for n, t in again.state().items()} == state
    other = _problem(tmp_path / "other", ref="kb_ref.py", kernel="kb_new.py", dims={"batch_size": 5},
                     cfg={"seed": 7})
    assert {n: tensors.fingerprint(t) for n, t in other.state().items()} != state


def test_normalize_outputs():
    t = torch.ones(2)
    assert tensors.normalize_outputs(t, ["y"]) == {"y": t}
    assert tensors.normalize_outputs(t, []) == {"out": t}
    assert list(tensors.normalize_outputs((t, t), ["a", "b"])) == ["a", "b"]
    assert list(tensors.normalize_outputs((t, t), [])) == ["out0", "out1"]
    assert list(tensors.normalize_outputs({"z": t}, ["y"])) == ["z"]


def test_poison_values():
    f, i, u, b = torch.ones(3), torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.uint8), torch.zeros(
        3, dtype=torch.bool)
    for t in (f, i, u, b):
        tensors.poison_tensor(t)
    assert all(math.isnan(v) for v in f.tolist())
    assert i.tolist() == [tensors.INT_SENTINEL] * 3 and u.tolist() == [255] * 3 and b.all()


def test_device_for(monkeypatch):
    monkeypatch.delenv("KERNEL_LOOP_DEVICE", raising=False)

    def cfg(**kw):
        return RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 1}, **kw})

    assert loader.device_for(cfg(gpu=2)) == "cuda:2"
    assert loader.device_for(cfg(gpu=0, device="cpu")) == "cpu"
    monkeypatch.setenv("KERNEL_LOOP_DEVICE", "cpu")
    assert loader.device_for(cfg(gpu=1)) == "cpu"


def test_a_cu_kernel_against_a_kernelbench_ref_is_refused(tmp_path):
    with pytest.raises(UsageError, match="a .cu kernel needs ref.py with reference"):
        _problem(tmp_path, ref="kb_ref.py", kernel="cu_vadd.cu")


def test_a_reference_output_at_a_freed_outputs_address_is_not_a_reused_buffer(tmp_path, monkeypatch):
    """The allocator gives a freed result's address to the next one: only a previous result still alive (the
    reference keeps it) makes the next at its address a reused buffer, cloned and allowed to the kernel."""
    p = _problem(tmp_path)
    ds = p.draw(1)
    (name, (hold, fp, _)), = p._prev_out.items()
    nxt = p.draw(2, reference=False)
    result = nxt.args["x"] + nxt.args["y"]
    monkeypatch.setattr(p, "run_reference", lambda args, ds, *a, **kw: {"out": result})
    p._prev_out = {name: (hold, fp, tensors.storage_ptr(result))}  # the first result, at the next one's address
    del ds  # the caller let go of the first result: freed
    assert hold.ref.expired()
    p.reference(nxt)
    assert not nxt.ref_props["out"]["reuses"] and nxt.expected["out"] is result  # not cloned
    kept = p.draw(3)  # one the reference still holds, at the next one's address: reused
    (name, (hold, fp, _)), = p._prev_out.items()
    again = p.draw(4, reference=False)
    monkeypatch.setattr(p, "run_reference", lambda args, ds, *a, **kw: {"out": kept.expected["out"]})
    p._prev_out = {name: (hold, fp, tensors.storage_ptr(kept.expected["out"]))}
    p.reference(again)
    assert again.ref_props["out"]["reuses"] and again.expected["out"] is not kept.expected["out"]
