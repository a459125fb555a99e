"""build: solve() signature parsing, nvcc command construction, cache key; a real nvcc build when nvcc exists."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import KERNELS
from kernel_loop import build
from kernel_loop.common import UsageError
from kernel_loop.config import RunConfig


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
