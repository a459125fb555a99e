"""init: run.json creation, validation, immutability, contradicting flags."""

from __future__ import annotations

import argparse
import json

import klcli
import pytest
from kernel_loop.common import UsageError
from kernel_loop.config import RunConfig, check_flags_against_run
from kernel_loop.steps import init


def _cfg(out):
    return json.loads((out / "run.json").read_text())


def test_init_writes_run_dir(tmp_path, capsys):
    out = tmp_path / "run"
    rc = klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=4096",
                        "--extra-shapes", "N=37;N=1000", "--seed", "7")
    assert rc == 0
    cfg = _cfg(out)
    assert cfg["schema"] == 1 and cfg["impl"] == "triton" and cfg["kernel"] == "triton_vadd"
    assert cfg["dims"] == {"N": 4096} and cfg["extra_shapes"] == [{"N": 37}, {"N": 1000}]
    assert cfg["seed"] == 7 and cfg["gpu"] == 0 and cfg["iterations"] == 3
    assert (cfg["warmup"], cfg["trials"], cfg["correctness_trials"], cfg["timeout_s"]) == (25, 100, 5, 300)
    assert cfg["ncu"]["set"] == "detailed"
    assert cfg["ncu"]["sections"] == ["WarpStateStats", "SchedulerStats", "SourceCounters"]
    assert cfg["ncu"]["clock_control"] is None and cfg["ncu"]["cache_control"] is None
    assert cfg["tolerance"]["source"] == "dtype-default" and cfg["tolerance"]["atol"] is None
    assert (out / "ref.py").read_text() == (klcli.KERNELS / "ref_vadd.py").read_text()
    assert (out / "v0" / "kernel.py").read_text() == (klcli.KERNELS / "triton_vadd.py").read_text()
    assert "skipped" in (out / "env_check.md").read_text()
    assert json.loads((out / "env.json").read_text())["skipped"] is True
    assert not (out / "current_iteration.txt").exists()


def test_rerun_identical_is_noop_and_different_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=4096") == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=4096") == 0
    assert "nothing to do" in capsys.readouterr().out
    assert before == {p.name: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    rc = klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=2048", "--seed", "1")
    err = capsys.readouterr().err
    assert rc == 2 and "dims" in err and "seed" in err
    assert _cfg(out)["dims"] == {"N": 4096}


def test_rerun_never_overwrites_changed_v0(tmp_path, capsys):
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=64") == 0
    kernel = out / "v0" / "kernel.py"
    kernel.write_text(kernel.read_text() + "\n# edited by hand\n")
    rc = klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=64")
    assert rc == 2 and "baseline" in capsys.readouterr().err
    assert kernel.read_text().endswith("# edited by hand\n")


def test_existing_different_v0_without_run_json_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "v0").mkdir(parents=True)
    (out / "v0" / "kernel.py").write_text("# someone else's kernel\n")
    assert klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=64") == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (out / "v0" / "kernel.py").read_text() == "# someone else's kernel\n"
    assert not (out / "run.json").exists()


@pytest.mark.parametrize("dims, message", [
    ("N=abc", "N=abc is not an integer"),
    ("N=0", "must be a positive integer"),
    ("N", "is not NAME=VALUE"),
    ("N=4,N=5", "given twice"),
    ("", "empty"),
])
def test_bad_dims(tmp_path, capsys, dims, message):
    rc = klcli.init_run(tmp_path / "run", "ref_vadd.py", "triton_vadd.py", "triton", dims)
    assert rc == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run" / "run.json").exists()


def test_validation_errors(tmp_path, capsys):
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_vadd.py", "cu_vadd.cu", "triton", "N=8") == 2
    assert "needs a .py kernel" in capsys.readouterr().err
    assert klcli.init_run(out, "missing_ref.py", "triton_vadd.py", "triton", "N=8") == 2
    assert "does not exist" in capsys.readouterr().err
    not_ref = tmp_path / "not_ref.py"
    not_ref.write_text("def helper():\n    return 1\n")
    assert klcli.init_run(out, str(not_ref), "triton_vadd.py", "triton", "N=8") == 2
    assert "defines neither reference" in capsys.readouterr().err
    broken = tmp_path / "broken_ref.py"
    broken.write_text("def reference(:\n")
    assert klcli.init_run(out, str(broken), "triton_vadd.py", "triton", "N=8") == 2
    assert "does not parse" in capsys.readouterr().err
    assert klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=8", "--extra-shapes", "M=3") == 2
    assert "must name exactly the dims N" in capsys.readouterr().err
    assert klcli.init_run(out, "ref_vadd.py", "triton_vadd.py", "triton", "N=8", "--trials", "0") == 2
    assert not (out / "run.json").exists()


def test_cu_without_setup_needs_ptr_size(tmp_path, capsys):
    rc = klcli.init_run(tmp_path / "run", "ref_flat_vadd.py", "cu_vadd.cu", "cuda-cpp", "N=1024")
    assert rc == 2 and "--ptr-size" in capsys.readouterr().err
    rc = klcli.init_run(tmp_path / "run", "ref_flat_vadd.py", "cu_vadd.cu", "cuda-cpp", "N=1024",
                        "--ptr-size", "1024", "--nvcc-flag=-DKL_TEST", "--include-dir", str(tmp_path))
    assert rc == 0
    cfg = _cfg(tmp_path / "run")
    assert cfg["ptr_size"] == 1024 and (tmp_path / "run" / "v0" / "kernel.cu").is_file()
    assert cfg["build"] == {"include_dirs": [str(tmp_path.resolve())], "nvcc_flags": ["-DKL_TEST"]}


def test_kernelbench_ref_is_accepted(tmp_path):
    assert klcli.init_run(tmp_path / "run", "kb_ref.py", "kb_new.py", "triton", "batch_size=8") == 0
    assert _cfg(tmp_path / "run")["kernel_type"] == "any"


def test_tolerance_from_ref_and_cli(tmp_path):
    assert klcli.init_run(tmp_path / "a", "ref_vadd_tol.py", "py_vadd.py", "triton", "N=8") == 0
    tol = _cfg(tmp_path / "a")["tolerance"]
    assert (tol["atol"], tol["rtol"], tol["source"]) == (5e-3, 5e-2, "ref.py")
    assert klcli.init_run(tmp_path / "b", "ref_vadd_tol.py", "py_vadd.py", "triton", "N=8", "--atol", "1e-6") == 0
    tol = _cfg(tmp_path / "b")["tolerance"]
    assert (tol["atol"], tol["rtol"], tol["source"]) == (1e-6, 5e-2, "cli")
    assert tol["by"] == {"atol": "cli", "rtol": "ref.py", "rel_l2": "ref.py"}


@pytest.mark.parametrize("name, expected", [
    ("rms_norm", "norm"), ("flash_attention_fwd", "attention"), ("softmax", "softmax"),
    ("sgemm_bf16", "gemm"), ("vector_add", "elementwise"), ("prefix_scan", "scan"),
    ("moe_gate", "moe"), ("conv2d", "conv"), ("transpose", "transpose"), ("mystery", "any"),
])
def test_kernel_type_guess(name, expected):
    assert init.guess_kernel_type(name) == expected


def test_check_flags_against_run():
    cfg = RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 4096, "M": 8}, "seed": 42, "gpu": 0})
    check_flags_against_run(cfg, argparse.Namespace(dims="N=4096,M=8", seed=42, gpu=None))
    with pytest.raises(UsageError, match="dims are fixed for this run: N=4096,M=8 \\(got N=4096\\)"):
        check_flags_against_run(cfg, argparse.Namespace(dims="N=4096", seed=None, gpu=None))  # a subset is refused
    with pytest.raises(UsageError, match="dims are fixed for this run: N=4096,M=8"):
        check_flags_against_run(cfg, argparse.Namespace(dims="N=1024", seed=None, gpu=None))
    with pytest.raises(UsageError, match="dims are fixed"):
        check_flags_against_run(cfg, argparse.Namespace(dims="K=3", seed=None, gpu=None))
    with pytest.raises(UsageError, match="seed is fixed for this run: seed=42"):
        check_flags_against_run(cfg, argparse.Namespace(dims=None, seed=1, gpu=None))
    with pytest.raises(UsageError, match="gpu is fixed"):
        check_flags_against_run(cfg, argparse.Namespace(dims=None, seed=None, gpu=3))


def test_help_mentions_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        klcli.main("init", "--help")
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--kernel-type", "--extra-shapes", "--ptr-size", "--ncu-section", "--clock-control",
                 "--cache-control", "--skip-env", "--include-dir", "--nvcc-flag", "--correctness-trials"):
        assert flag in text
