"""init: run.json creation, validation, immutability, contradicting flags, partial extra shapes and the
dims of KernelBench files (tuple elements, axis arguments, derived constants)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import klcli
import pytest
from kernel_loop.common import UsageError
from kernel_loop.config import RunConfig, check_flags_against_run
from kernel_loop.kbs import family as kfamily
from kernel_loop.steps import init
from test_env import _facts
from test_kb_dims import CUMSUM


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


def test_rerun_keeps_the_kernel_type_an_older_init_guessed(tmp_path, capsys):
    """A run an older init made holds the type it guessed ("any" where a KernelBench Linear now guesses "gemm"): the
    same init command again is a no-op, not a refusal over kernel_type; --kernel-type given is compared as before."""
    out = tmp_path / "run"
    assert klcli.init_run(out, "kb_ref.py", "kb_new.py", "triton", "batch_size=8") == 0
    cfg = json.loads((out / "run.json").read_text())
    assert cfg["kernel_type"] == "gemm"
    (out / "run.json").write_text(json.dumps(dict(cfg, kernel_type="any"), indent=2) + "\n")
    capsys.readouterr()
    assert klcli.init_run(out, "kb_ref.py", "kb_new.py", "triton", "batch_size=8") == 0
    assert "nothing to do" in capsys.readouterr().out and _cfg(out)["kernel_type"] == "any"
    assert klcli.init_run(out, "kb_ref.py", "kb_new.py", "triton", "batch_size=8", "--kernel-type", "gemm") == 2
    assert "kernel_type" in capsys.readouterr().err


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
    assert "names M, not a run dim (the run dims: N)" in capsys.readouterr().err
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
    assert _cfg(tmp_path / "run")["kernel_type"] == "gemm"  # its Model's main op, a Linear (the name says nothing)


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
    assert kfamily.kernel_type_of(name)[0] == expected


def test_init_says_the_kernel_type_and_guesses_it_from_an_op_family_or_the_ref(tmp_path, capsys):
    """An agent's trial (96_HuberLoss, --kernel huber_loss): the run's kernel type was "any", said only in run.json.
    A loss names a reduction; a name that says nothing leaves it to ref.py's main op; init says which and from what."""
    assert kfamily.kernel_type_of("huber_loss") == ("reduction", "from the name 'huber_loss', a loss")
    ref = tmp_path / "ref.py"
    ref.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, p, t):\n"
                   "        return torch.nn.functional.smooth_l1_loss(p, t)\n"
                   "def get_inputs():\n    return [torch.rand(8), torch.rand(8)]\n"
                   "def get_init_inputs():\n    return []\n")
    assert kfamily.kernel_type_of("mine", ref) == ("reduction", "from ref.py's main op, a loss")
    assert klcli.init_run(tmp_path / "run", "kb_ref.py", "kb_new.py", "triton", "batch_size=8") == 0
    err = capsys.readouterr().err
    assert f"kernel type {_cfg(tmp_path / 'run')['kernel_type']}, " in err and "--kernel-type sets it" in err


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


# --- shapes that name only the dims they change ----------------------------------------------------
REF_2D = """import torch


def setup(M, N):
    return {"x": torch.randn(M, N)}


def reference(x):
    return torch.softmax(x, dim=-1)
"""


def _init_files(tmp_path, ref_text, *args):
    """init --skip-env of ``ref_text`` with a .py baseline (init only places it, never runs it)."""
    ref = tmp_path / "ref.py"
    ref.write_text(ref_text)
    kernel = tmp_path / "kernel.py"
    kernel.write_text("ModelNew = None\n")
    out = tmp_path / "run"
    rc = klcli.main("init", out, "--kernel", "k", "--ref", ref, "--impl", "triton", "--baseline", kernel,
                    "--skip-env", *args)
    return rc, out


def test_extra_shapes_name_only_the_dims_they_change(tmp_path):
    rc, out = _init_files(tmp_path, REF_2D, "--dims", "M=64,N=128", "--extra-shapes", "N=37; M=3,N=5 ;M=100")
    assert rc == 0
    assert _cfg(out)["extra_shapes"] == [{"M": 64, "N": 37}, {"M": 3, "N": 5}, {"M": 100, "N": 128}]


def test_an_extra_shape_may_not_name_a_dim_the_run_lacks(tmp_path, capsys):
    rc, out = _init_files(tmp_path, REF_2D, "--dims", "M=64,N=128", "--extra-shapes", "N=37;K=3")
    assert rc == 2 and "'K=3' names K, not a run dim (the run dims: M, N)" in capsys.readouterr().err
    assert not (out / "run.json").exists()
    rc, _ = _init_files(tmp_path, REF_2D, "--dims", "M=64,N=128", "--extra-shapes", "N=0")
    assert rc == 2 and "N=0 must be a positive integer" in capsys.readouterr().err


KB_CUMSUM = CUMSUM.replace("batch_size = 32768", "batch_size = 256").replace("input_shape = (32768,)",
                                                                             "input_shape = (4096,)")

KB_GEMM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.bias)


batch_size = 128
in_features = 512
unit = 64
out_features = unit * 4
bias_shape = (out_features,)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
"""


def test_a_kernelbench_tuple_constant_is_varied_by_element_and_the_axis_is_no_dim(tmp_path):
    rc, out = _init_files(tmp_path, KB_CUMSUM, "--extra-shapes", "input_shape_0=1000;batch_size=3")
    assert rc == 0
    cfg = _cfg(out)
    assert cfg["dims"] == {"batch_size": 256, "input_shape_0": 4096}  # dim = 1 is the scanned axis, not a size
    assert cfg["extra_shapes"] == [{"batch_size": 256, "input_shape_0": 1000}, {"batch_size": 3, "input_shape_0": 4096}]
    # correctness's own batch sizes stay beside an extra shape of another batch size (an agent's trial gave
    # batch_size=333, and one, half and a quarter more made odd were all dropped; a one-row path went unchecked)
    # and last, the width only get_inputs() reads a quarter smaller and odd, at half the batch (kb_dims.input_only)
    assert cfg["batch_shapes"] == [{"batch_size": 1, "input_shape_0": 4096}, {"batch_size": 128, "input_shape_0": 4096},
                                   {"batch_size": 321, "input_shape_0": 4096}, {"batch_size": 128, "input_shape_0": 3073}]
    (tmp_path / "b").mkdir()
    rc, out = _init_files(tmp_path / "b", KB_CUMSUM, "--extra-shapes", "batch_size=128")
    assert rc == 0 and [s["batch_size"] for s in _cfg(out)["batch_shapes"]] == [1, 321, 128]  # its own size is not repeated
    (tmp_path / "c").mkdir()  # (a review) at other sizes of the rest, that batch size is still called at the run's
    rc, out = _init_files(tmp_path / "c", KB_CUMSUM, "--extra-shapes", "batch_size=128,input_shape_0=1000")
    assert rc == 0 and [s["batch_size"] for s in _cfg(out)["batch_shapes"]] == [1, 128, 321, 128]


@pytest.mark.parametrize("flag, value, message", [
    ("--extra-shapes", "dim=0", "dim = 1 in ref.py is an axis argument"),
    ("--extra-shapes", "dim=2", "a shape cannot change it"),
    ("--dims", "dim=2", "--dims: dim = 1 in ref.py is an axis argument"),
    ("--dims", "input_shape=1000", "input_shape = (4096,) is a tuple constant: name its elements (input_shape_0)"),
    ("--extra-shapes", "input_shape_1=5", "input_shape_1 names no module-level integer constant"),
    ("--extra-shapes", "input_shape_0=-3", "input_shape_0=-3 must be a positive integer"),
])
def test_kernelbench_shapes_refused_with_their_reason(tmp_path, capsys, flag, value, message):
    rc, out = _init_files(tmp_path, KB_CUMSUM, flag, value)
    assert rc == 2 and message in capsys.readouterr().err
    assert not (out / "run.json").exists()


def test_an_axis_of_zero_or_below_is_accepted(tmp_path):
    for i, axis in enumerate(("0", "-1")):
        (tmp_path / str(i)).mkdir()
        rc, out = _init_files(tmp_path / str(i), KB_CUMSUM.replace("dim = 1", f"dim = {axis}"))
        assert rc == 0 and _cfg(out)["dims"] == {"batch_size": 256, "input_shape_0": 4096}


def test_derived_kernelbench_constants_follow_the_dims_they_come_from(tmp_path):
    rc, out = _init_files(tmp_path, KB_GEMM, "--dims", "in_features=256",
                          "--extra-shapes", "unit=10;out_features=100;unit=10,out_features=7")
    assert rc == 0
    cfg = _cfg(out)
    # bias_shape = (out_features,) names another constant: no dim of its own, it follows out_features
    assert cfg["dims"] == {"batch_size": 128, "in_features": 256, "unit": 64, "out_features": 256}
    assert cfg["extra_shapes"] == [
        {"batch_size": 128, "in_features": 256, "unit": 10, "out_features": 40},  # out_features = unit * 4 follows
        {"batch_size": 128, "in_features": 256, "unit": 64, "out_features": 100},
        {"batch_size": 128, "in_features": 256, "unit": 10, "out_features": 7},  # named: the file's formula yields
    ]
    (tmp_path / "b").mkdir()
    rc, _ = _init_files(tmp_path / "b", KB_GEMM, "--extra-shapes", "bias_shape_0=5")
    assert rc == 2


def test_init_reads_kernelbench_dims_without_importing_ref_or_torch(tmp_path):
    ref = tmp_path / "ref.py"
    ref.write_text('raise SystemExit("ref.py was imported")\n' + KB_CUMSUM)
    kernel = tmp_path / "kernel.py"
    kernel.write_text("ModelNew = None\n")
    code = ("import sys; from kernel_loop import cli; rc = cli.main(sys.argv[1:]); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, "init", str(tmp_path / "run"), "--kernel", "k", "--ref",
                           str(ref), "--impl", "triton", "--baseline", str(kernel), "--skip-env",
                           "--extra-shapes", "input_shape_0=1000"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(klcli.HELPERS)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no torch" in proc.stdout
    assert _cfg(tmp_path / "run")["extra_shapes"] == [{"batch_size": 256, "input_shape_0": 1000}]


def test_help_says_a_shape_names_only_what_it_changes(capsys):
    with pytest.raises(SystemExit):
        klcli.main("init", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "names only the dims it changes" in text and "keep the run dims" in text
    assert "input_shape_0=1000" in text and "axis" in text


@pytest.mark.parametrize("text, msg", [
    ("", "--ncu-budget: the value is empty: give one or more of kernels=N from 1 to 64"),
    ("kernels=2,kernels=4", "--ncu-budget: kernels is given twice"),
    ("kernels=8,,share=1", "has an empty entry"),
    ("configs=0", "--ncu-budget: configs must be from the value of kernels (8) to 256 (got 0)"),
    ("configs=1.5", "configs must be a whole number"),
    ("census=8", "--ncu-budget: census must be a whole number from 16 to 100000 (got 8)"),
])
def test_a_bad_ncu_budget_is_refused_in_one_line_without_a_doubled_prefix(text, msg):
    with pytest.raises(UsageError) as exc:
        init._budget(text)
    assert str(exc.value).startswith("--ncu-budget: ") and msg in str(exc.value) and "ncu.budget:" not in str(exc.value) and "\n" not in str(exc.value)


def test_ncu_budget_defaults_and_help_gives_the_ranges(capsys):
    assert init._budget(None) == init._budget("kernels=8") == {"kernels": 8, "share": 0.9, "configs": 16,
                                                               "census": 400}
    with pytest.raises(SystemExit):
        klcli.main("init", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert ("kernels 1 to 64, share above 0 and at most 1, configs from the value of kernels to 256, census 16 to "
            "100000") in text


# --- issue 25: init refuses what cannot run, and a refused init leaves nothing behind -------------------
HUGE = "1" + "0" * 30
REF_ABC = ("import torch\n\n\ndef setup(A, B, C, device='cpu'):\n    return {'x': torch.zeros(A, device=device)}\n\n\n"
           "def reference(x):\n    return x\n")


def _kb_ref(tmp_path, batch_size="16", in_features="64"):
    text = (klcli.KERNELS / "kb_ref.py").read_text()
    text = text.replace("batch_size = 16", f"batch_size = {batch_size}").replace("in_features = 64",
                                                                                   f"in_features = {in_features}")
    ref = tmp_path / "kb_big_ref.py"
    ref.write_text(text)
    return ref


@pytest.mark.parametrize("dims, message", [
    (f"N={HUGE}", f"--dims: N={HUGE} exceeds 2^31-1 (2147483647), the largest value one dim may take"),
    ("N=2147483648", "--dims: N=2147483648 exceeds 2^31-1 (2147483647)"),
], ids=["10^30", "2^31"])
def test_a_dim_beyond_2_31_is_refused(tmp_path, capsys, dims, message):
    rc = klcli.init_run(tmp_path / "run", "ref_vadd.py", "py_vadd.py", "triton", dims, "--device", "cpu")
    assert rc == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    rc = klcli.init_run(tmp_path / "run", "ref_vadd.py", "py_vadd.py", "triton", "N=64", "--extra-shapes", dims)
    assert rc == 2 and "--extra-shapes: N=" in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_dims_whose_product_overflows_are_refused(tmp_path, capsys):
    ref = tmp_path / "ref_abc.py"
    ref.write_text(REF_ABC)
    big = 2**31 - 1
    rc = klcli.main("init", tmp_path / "run", "--kernel", "k", "--ref", ref, "--impl", "triton", "--baseline",
                    klcli.KERNELS / "py_vadd.py", "--dims", f"A={big},B={big},C={big}", "--device", "cpu")
    err = capsys.readouterr().err
    assert rc == 2 and "the product of the dims" in err and "2^63-1" in err, err
    assert not (tmp_path / "run").exists()
    assert klcli.main("init", tmp_path / "run", "--kernel", "k", "--ref", ref, "--impl", "triton", "--baseline",
                      klcli.KERNELS / "py_vadd.py", "--dims", f"A={big},B=2,C=2", "--device", "cpu") == 0


@pytest.mark.parametrize("dims, constant", [(f"batch_size={HUGE}", None), (None, HUGE)], ids=["--dims", "constant"])
def test_a_kernelbench_dim_beyond_2_31_is_refused(tmp_path, capsys, dims, constant):
    ref = _kb_ref(tmp_path, batch_size=constant or "16")
    extra = ["--dims", dims] if dims else []
    rc = klcli.main("init", tmp_path / "run", "--kernel", "k", "--ref", ref, "--impl", "triton", "--baseline",
                    klcli.KERNELS / "kb_new.py", "--device", "cpu", *extra)
    err = capsys.readouterr().err
    assert rc == 2 and f"batch_size={HUGE} exceeds 2^31-1" in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["", "   ", "soft\nmax"], ids=["empty", "blank", "newline"])
def test_an_empty_kernel_name_is_refused(tmp_path, capsys, name):
    rc = klcli.main("init", tmp_path / "run", "--kernel", name, "--ref", klcli.KERNELS / "ref_vadd.py", "--impl",
                    "triton", "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--device", "cpu")
    err = capsys.readouterr().err
    assert rc == 2 and "--kernel" in err and ("is empty" in err or "control character" in err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("impl", ["cuda-cpp", "cutlass"])
def test_a_cuda_impl_with_a_plain_python_kernel_is_refused(tmp_path, capsys, impl):
    rc = klcli.init_run(tmp_path / "run", "ref_vadd.py", "triton_vadd.py", impl, "N=64")
    err = capsys.readouterr().err
    assert rc == 2 and f"--impl {impl} takes a .cu kernel or a .py that builds CUDA C++ with " \
                       "torch.utils.cpp_extension" in err, err
    assert "triton_vadd.py does not use torch.utils.cpp_extension" in err and "--impl triton" in err
    assert not (tmp_path / "run").exists()
    inline = tmp_path / "inline_vadd.py"
    inline.write_text("from torch.utils.cpp_extension import load_inline\n\nSRC = '__global__ void k() {}'\n")
    assert klcli.main("init", tmp_path / "run", "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py",
                      "--impl", impl, "--baseline", inline, "--dims", "N=64", "--skip-env") == 0


def test_a_triton_impl_with_a_cu_kernel_names_the_cuda_impls(tmp_path, capsys):
    assert klcli.init_run(tmp_path / "run", "ref_vadd.py", "cu_vadd.cu", "triton", "N=64") == 2
    err = capsys.readouterr().err
    assert "--impl triton needs a .py kernel, but --baseline is cu_vadd.cu" in err and "--impl cuda-cpp" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag", ["--ref", "--baseline"])
def test_ref_and_baseline_path_errors_say_what_the_path_is(tmp_path, capsys, flag):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    for path, what in [(folder, "is a directory"), ("/dev/null", "is a device"),
                       (tmp_path / "absent.py", "does not exist"), (tmp_path / "absent.py" / "x.py", "does not exist")]:
        args = {"--ref": klcli.KERNELS / "ref_vadd.py", "--baseline": klcli.KERNELS / "py_vadd.py", flag: path}
        rc = klcli.main("init", tmp_path / "run", "--kernel", "k", "--ref", args["--ref"], "--impl", "triton",
                        "--baseline", args["--baseline"], "--dims", "N=64", "--device", "cpu")
        err = capsys.readouterr().err
        assert rc == 2 and f"{flag} {path} {what}" in err, err
    assert not (tmp_path / "run").exists()


def _fake_env_check(report):
    """envcheck.check_and_write as on a machine whose check gives ``report`` (or fails when it is None): with an
    ``out`` folder it writes there first, as the real one does."""
    def fake(gpu, impl, out, cfg_build=None, **kw):
        if out is not None:
            (out / "env.json").write_text("{}\n")
            (out / "env_check.md").write_text("# env\n")
        if report is None:
            raise UsageError("no CUDA GPU visible: torch.cuda.is_available() is False -> check `nvidia-smi`")
        return report
    return fake


@pytest.mark.parametrize("before", [False, True], ids=["new-folder", "existing-folder"])
def test_a_gpu_init_refused_by_the_environment_leaves_nothing_behind(tmp_path, capsys, monkeypatch, before):
    monkeypatch.setattr(init.envcheck, "check_and_write", _fake_env_check(None))
    out = tmp_path / "new" / "run"
    if before:
        out.mkdir(parents=True)
        (out / "notes.txt").write_text("mine\n")
    rc = klcli.main("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                    "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64")
    assert rc == 2 and "no CUDA GPU visible" in capsys.readouterr().err
    if before:
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    else:
        assert not (tmp_path / "new").exists()


def test_a_gpu_init_on_a_machine_without_cuda_leaves_no_folder(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    rc = klcli.main("init", tmp_path / "run", "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl",
                    "triton", "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64")
    assert rc == 2 and "no CUDA GPU visible" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_write_that_fails_midway_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    def boom(*a, **kw):
        raise UsageError("cannot append to records.log: disk full")

    monkeypatch.setattr(init.records, "append", boom)
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_vadd.py", "py_vadd.py", "triton", "N=64") == 2
    assert "disk full" in capsys.readouterr().err and not out.exists()
    out.mkdir()
    (out / "env.json").write_text('{"mine": true}\n')
    assert klcli.init_run(out, "ref_vadd.py", "py_vadd.py", "triton", "N=64") == 2
    assert sorted(p.name for p in out.iterdir()) == ["env.json"] and "mine" in (out / "env.json").read_text()


def test_inputs_beyond_the_gpus_memory_are_refused(tmp_path, capsys, monkeypatch):
    facts = _facts()
    report = init.envcheck.make_report({**facts, "gpu": {**facts["gpu"], "name": "Small GPU", "memory_gib": 1.0}},
                                       "triton", 0)
    monkeypatch.setattr(init.envcheck, "check_and_write", _fake_env_check(report))
    ref = _kb_ref(tmp_path, batch_size="65536", in_features="8192")  # randn(65536, 8192): 2 GiB of float32
    rc = klcli.main("init", tmp_path / "run", "--kernel", "linear", "--ref", ref, "--impl", "triton", "--baseline",
                    klcli.KERNELS / "kb_new.py")
    err = capsys.readouterr().err
    assert rc == 2 and "the inputs get_inputs() makes take at least 2 GiB" in err, err
    assert "Small GPU has 1 GiB" in err and not (tmp_path / "run").exists()
    rc = klcli.main("init", tmp_path / "run", "--kernel", "linear", "--ref", ref, "--impl", "triton", "--baseline",
                    klcli.KERNELS / "kb_new.py", "--dims", "batch_size=1024")  # 32 MiB
    assert rc == 0, capsys.readouterr().err
    assert "Small GPU" in (tmp_path / "run" / "env_check.md").read_text()


@pytest.mark.parametrize("kind", ["setup", "kernelbench"])
def test_a_cpu_init_with_large_inputs_warns_and_names_the_size(tmp_path, capsys, kind):
    if kind == "setup":  # ref_vadd's setup(N) makes x, y and out: 3 * 4 bytes * 2^25 = 384 MiB
        args = ["--ref", klcli.KERNELS / "ref_vadd.py", "--baseline", klcli.KERNELS / "py_vadd.py",
                "--dims", f"N={2**25}"]
        size, what, small = "384 MiB", "the tensors setup() makes", ["--dims", "N=4096"]
    else:  # randn(65536, 8192): 2 GiB of float32
        args = ["--ref", _kb_ref(tmp_path, batch_size="65536", in_features="8192"), "--baseline",
                klcli.KERNELS / "kb_new.py"]
        size, what, small = "2 GiB", "the inputs get_inputs() makes", ["--dims", "batch_size=16,in_features=64"]
    rc = klcli.main("init", tmp_path / "run", "--kernel", "k", "--impl", "triton", "--device", "cpu", *args)
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "warning:" in line]
    assert rc == 0 and (tmp_path / "run" / "run.json").is_file(), err
    assert len(warning) == 1 and f"{what} take at least {size}" in warning[0], err
    assert "--device cpu" in warning[0] and "smaller --dims" in warning[0], warning
    rc = klcli.main("init", tmp_path / "small", "--kernel", "k", "--impl", "triton", "--device", "cpu",
                    *args, *small)
    assert rc == 0 and "warning:" not in capsys.readouterr().err
