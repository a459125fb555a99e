"""The front door on bad input: one clear line and the right exit code, never a traceback, and nothing
lost or overwritten when a command refuses.  Every case runs on the CPU."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import klcli
import pytest
import runfixture as rf
from kernel_loop.common import atomic_write_text, read_json, write_json
from kernel_loop.runner import ChildOutcome
from kernel_loop.steps import benchmark as B

HELPERS = Path(__file__).resolve().parents[2] / "helpers"


def _cli(*args, env=None):
    proc = klcli.run(*args, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _one_line_error(proc, code=2):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("kernel-loop: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


# --- nothing lost --------------------------------------------------------------------------------------
@pytest.fixture
def benchmarked(tmp_path, monkeypatch):
    root = rf.build_complete(tmp_path / "run")
    write_json(root / "benchmark.json", {"schema": 1, "version": "v1", "note": "from an earlier run"})
    (root / "benchmark.md").write_text("# earlier benchmark\n")
    monkeypatch.setattr(B, "check_final_gate", lambda rd, n: None)
    return root


@pytest.mark.parametrize("outcome, code", [
    (ChildOutcome({"error": "no CUDA GPU visible: benchmark needs a GPU", "usage": True}, 0, False, 1.0), 2),
    (ChildOutcome(None, -11, False, 2.0, "segfault"), 1),
    (ChildOutcome(None, None, True, 600.0, ""), 1),
], ids=["refused", "crashed", "timed-out"])
def test_benchmark_that_does_not_measure_leaves_the_earlier_results(benchmarked, monkeypatch, capsys, outcome, code):
    before = {n: (benchmarked / n).read_bytes() for n in ("benchmark.json", "benchmark.md")}
    rf.fake_benchmark_children(monkeypatch, B, outcome)
    assert rf.cli(B, ["benchmark", str(benchmarked)]) == code
    assert "left as they were" in capsys.readouterr().err
    assert {n: (benchmarked / n).read_bytes() for n in before} == before


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


# --- bad input: one line, exit 2 -----------------------------------------------------------------------
def test_ref_py_that_raises_on_import_is_one_clear_line(tmp_path):
    ref = tmp_path / "ref.py"
    ref.write_text("import torch\nraise RuntimeError('ref is broken')\n\ndef setup(N):\n    return {}\n\n"
                   "def reference(x):\n    return x\n")
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "vadd", "--ref", ref, "--impl", "triton", "--baseline",
                      klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--device", "cpu") == 0
    line = _one_line_error(_cli("correctness", out))
    assert "ref.py failed to import: RuntimeError: ref is broken" in line
    assert not (out / "v0" / "correctness.json").exists()  # bad input: nothing recorded as a measurement


def test_init_device_cpu_is_recorded_and_used(tmp_path):
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                      "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--device", "cpu") == 0
    assert read_json(out / "run.json")["device"] == "cpu"
    env = {k: v for k, v in os.environ.items() if k != "KERNEL_LOOP_DEVICE"}
    proc = subprocess.run([sys.executable, str(HELPERS / "kloop.py"), "correctness", str(out)], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert read_json(out / "v0" / "correctness.json")["device"] == "cpu"


@pytest.mark.parametrize("extra, message", [
    (["--atol", "-1"], "--atol must be a finite number >= 0"),
    (["--rtol", "nan"], "--rtol must be a finite number >= 0"),
    (["--gpu", "-1"], "--gpu must be a CUDA device index"),
    (["--dims", "N=64,K=3"], "ref.py setup() takes no K"),
    (["--dims", "M=64"], "setup() needs N"),
    (["--extra-shapes", "N=7;M=3"], "must name exactly the dims"),
    (["--device", "cpu", "--impl", "cuda-cpp"], "--device cpu runs .py kernels only"),
], ids=["atol", "rtol", "gpu-index", "unknown-dim", "missing-dim", "extra-shapes", "cpu-cu"])
def test_init_refuses_values_it_cannot_use(tmp_path, extra, message):
    args = {"--kernel": "vadd", "--ref": str(klcli.KERNELS / "ref_vadd.py"), "--impl": "triton",
            "--baseline": str(klcli.KERNELS / "py_vadd.py"), "--dims": "N=64"}
    rest = []
    it = iter(extra)
    for flag in it:
        value = next(it)
        if flag in args:
            args[flag] = value
        else:
            rest += [flag, value]
    argv = [x for kv in args.items() for x in kv] + rest
    assert message in _one_line_error(_cli("init", tmp_path / "run", *argv, "--skip-env"))
    assert not (tmp_path / "run" / "run.json").exists()


def test_init_refuses_a_run_inside_a_run(tmp_path):
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_vadd.py", "py_vadd.py", "triton", "N=64") == 0
    assert "is inside the run directory" in _one_line_error(
        _cli("init", out / "v0" / "nested", "--kernel", "k", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl",
             "triton", "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--skip-env"))


def test_a_path_under_a_regular_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder\n")
    line = _one_line_error(_cli("init", blocker / "run", "--kernel", "k", "--ref", klcli.KERNELS / "ref_vadd.py",
                                "--impl", "triton", "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64",
                                "--skip-env"))
    assert str(blocker) in line


def test_an_unwritable_cache_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = _one_line_error(_cli("kbs", "query", "softmax", env={"KERNEL_LOOP_CACHE": str(blocker / "cache")}))
    assert str(blocker) in line


def test_env_out_that_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "report.txt"
    f.write_text("x")
    assert "is a file" in _one_line_error(_cli("env", "--out", f))


@pytest.mark.parametrize("module, package, argv", [
    ("yaml", "pyyaml", ["kbs", "check"]),
    ("jinja2", "jinja2", ["hypothesis", "--help"]),
])
def test_a_missing_package_names_the_pip_line(tmp_path, module, package, argv):
    """The package is blocked in the child Python (sys.modules[name] = None makes every import of it fail)."""
    code = (f"import sys; sys.modules[{module!r}] = None; sys.path.insert(0, {str(HELPERS)!r}); "
            f"from kernel_loop import cli; sys.exit(cli.main({argv!r}))")
    env = dict(os.environ, KERNEL_LOOP_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if argv[-1] == "--help":
        assert proc.returncode == 0, proc.stderr  # help needs no template package
        return
    assert "Traceback" not in proc.stderr
    assert f"pip install {package}" in _one_line_error(proc)


def test_env_says_what_to_install_without_jinja2(tmp_path):
    code = (f"import sys; sys.modules['jinja2'] = None; sys.path.insert(0, {str(HELPERS)!r}); "
            f"from kernel_loop import cli; sys.exit(cli.main(['env', '--out', {str(tmp_path / 'env')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "Traceback" not in proc.stderr and proc.returncode == 2
    assert "pip install jinja2" in proc.stderr
    assert "jinja2: missing" in (tmp_path / "env" / "env_check.md").read_text()


# --- help and messages ----------------------------------------------------------------------------------
def test_every_command_help_states_its_exit_codes():
    from kernel_loop.cli import STEPS

    for step in STEPS:
        name = "next" if step == "next_version" else step
        proc = _cli(name, "--help")
        assert proc.returncode == 0, (name, proc.stderr)
        assert "Exit codes" in " ".join(proc.stdout.split()), f"'{name} --help' does not state its exit codes"


def test_evidence_takes_one_id_per_flag_and_keeps_the_positional():
    from kernel_loop.cli import build_parser

    args = build_parser().parse_args(["hypothesis", "--evidence", "a", "--evidence", "b", "run-dir"])
    assert args.evidence == ["a", "b"] and args.out == "run-dir"


def test_next_on_a_finished_run_says_the_run_is_complete(tmp_path, capsys):
    root = rf.build_complete(tmp_path / "run")
    assert klcli.main("next", root) == 2
    assert "there is no next version" in capsys.readouterr().err
