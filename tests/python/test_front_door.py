"""The front door on bad input: one clear line and the right exit code, never a traceback, and nothing
lost or overwritten when a command refuses.  Every case runs on the CPU."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import klcli
import pytest
import runfixture as rf
from kernel_loop.common import atomic_write_text, read_json, write_json
from kernel_loop.measure.session import Outcome as ChildOutcome
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
def test_ref_py_that_raises_on_import_is_one_clear_line(tmp_path, monkeypatch, capsys, worker_here):
    # the CLI, its judge and worker in this process (conftest.worker_here): the judge's refusal of a ref.py that
    # raises is what is under test; a child judge's usage error reaching the CLI as exit 2 is
    # test_correctness.py::test_gpu_run_without_cuda_is_a_usage_error, the CLI as a command test_subprocess_cli_exit_codes
    monkeypatch.delenv("KERNEL_LOOP_DEVICE", raising=False)
    ref = tmp_path / "ref.py"
    ref.write_text("import torch\nraise RuntimeError('ref is broken')\n\ndef setup(N):\n    return {}\n\n"
                   "def reference(x):\n    return x\n")
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "vadd", "--ref", ref, "--impl", "triton", "--baseline",
                      klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--device", "cpu") == 0
    capsys.readouterr()
    rc = klcli.main("correctness", out)
    err = capsys.readouterr().err
    line = _one_line_error(subprocess.CompletedProcess([], rc, "", err))
    assert "Traceback" not in err, err
    assert "ref.py failed to import: RuntimeError: ref is broken" in line
    assert not (out / "v0" / "correctness.json").exists()  # bad input: nothing recorded as a measurement


def test_init_device_cpu_is_recorded_and_used(tmp_path, monkeypatch, worker_here):
    # the CLI, its judge and worker in this process (conftest.worker_here), without KERNEL_LOOP_DEVICE: the
    # device comes from run.json alone (the step's spec carries it to the judge whether a child or not)
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                      "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--device", "cpu") == 0
    assert read_json(out / "run.json")["device"] == "cpu"
    monkeypatch.delenv("KERNEL_LOOP_DEVICE", raising=False)
    assert klcli.main("correctness", out) == 0
    assert read_json(out / "v0" / "correctness.json")["device"] == "cpu"
    assert worker_here == ["kernel"]


@pytest.mark.parametrize("extra, message", [
    (["--atol", "-1"], "--atol must be a finite number >= 0"),
    (["--rtol", "nan"], "--rtol must be a finite number >= 0"),
    (["--gpu", "-1"], "--gpu must be a CUDA device index"),
    (["--dims", "N=64,K=3"], "ref.py setup() takes no K"),
    (["--dims", "M=64"], "setup() needs N"),
    (["--extra-shapes", "N=7;M=3"], "not a run dim"),
    (["--device", "cpu", "--impl", "cuda-cpp"], "--impl cuda-cpp needs a CUDA GPU, whatever the kernel file's suffix"),
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
def test_every_command_help_states_its_exit_codes(capsys):
    """Every step's --help through the real parser in this process; the first one through the CLI as a command
    too (the same parser, and its exit status)."""
    from kernel_loop.cli import STEPS

    names = ["next" if step == "next_version" else step for step in STEPS]
    proc = _cli(names[0], "--help")
    assert proc.returncode == 0, (names[0], proc.stderr)
    assert "Exit codes" in " ".join(proc.stdout.split()), f"'{names[0]} --help' does not state its exit codes"
    for name in names:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            klcli.main(name, "--help")
        out = capsys.readouterr().out
        assert exc.value.code in (0, None), name
        assert "Exit codes" in " ".join(out.split()), f"'{name} --help' does not state its exit codes"


def test_evidence_takes_one_id_per_flag_and_keeps_the_positional():
    from kernel_loop.cli import build_parser

    args = build_parser().parse_args(["hypothesis", "--evidence", "a", "--evidence", "b", "run-dir"])
    assert args.evidence == ["a", "b"] and args.out == "run-dir"


def test_next_on_a_finished_run_says_the_run_is_complete(tmp_path, capsys):
    root = rf.build_complete(tmp_path / "run")
    assert klcli.main("next", root) == 2
    assert "there is no next version" in capsys.readouterr().err


# --- issue 25: messages name the real cause; a closed pipe ends quietly ---------------------------------
@pytest.mark.parametrize("argv", [["kbs", "stats"], ["kbs", "schema"], ["gate", "--help"]],
                         ids=["kbs-stats", "kbs-schema", "gate-help"])
def test_a_closed_pipe_ends_quietly_the_unix_way(argv):
    proc = subprocess.Popen([sys.executable, str(HELPERS / "kloop.py"), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(HELPERS)))
    proc.stdout.close()  # the reader is gone before the command writes a byte (like `| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err  # 128 + SIGPIPE, as a process the signal ended
    assert "Traceback" not in err and "Broken pipe" not in err and "error" not in err


def test_the_run_directory_error_says_what_the_path_is(tmp_path):
    afile = tmp_path / "notes.txt"
    afile.write_text("x\n")
    (tmp_path / "plain").mkdir()
    for path, what in [("/dev/null", "is a device"), (afile, "is a regular file"),
                       (tmp_path / "plain", "has no run.json"), (tmp_path / "absent", "does not exist"),
                       (afile / "run", "a part of the path is a file")]:
        line = _one_line_error(_cli("status", path))
        assert f"{path} " in line and what in line, line
        if what != "does not exist":
            assert "does not exist (run" not in line


def test_hints_name_the_command_the_way_it_was_run(tmp_path):
    line = _one_line_error(_cli("status", tmp_path / "absent"))
    assert f"run '{sys.executable} {HELPERS / 'kloop.py'} init' first" in line
    from kernel_loop import cli

    assert cli.as_invoked("run 'kernel-loop init' first") == "run 'kernel-loop init' first"  # in-process: unchanged
    assert cli._HINT.sub("X ", "TODO(kernel-loop) [kernel-loop] after kernel-loop profile wrote it") == \
        "TODO(kernel-loop) [kernel-loop] after kernel-loop profile wrote it"  # prose and names stay


def test_next_before_the_gate_names_the_gate(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.write_hypothesis(root, 0)
    assert rf.gate(root / "v0").returncode == 0
    assert klcli.main("next", root) == 0
    capsys.readouterr()
    assert klcli.main("next", root) == 2  # v1 has started; its gate has not run
    err = capsys.readouterr().err
    assert "v1 is the current version" in err and "the gate has not passed v1 yet" in err and "run the gate on it" in err
    assert sorted(p.name for p in (root / "v1").iterdir()) == ["kernel.py"]


def test_hypothesis_refuses_an_evidence_id_no_logged_query_returned(tmp_path, capsys):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    h = rf.HYPOTHESES[0]
    base = ["hypothesis", root, "--change", h["change"], "--rationale", h["rationale"], "--risk", h["risk"],
            "--decision-rule", h["decision_rule"]]
    assert klcli.main(*base, "--predict", "duration: -2%", "--evidence", "no-such-page") == 2
    err = capsys.readouterr().err
    assert "--evidence 'no-such-page': not among the hits of the queries logged for v0" in err
    assert "nothing was written" in err and not (root / "v0" / "hypothesis.txt").exists()
    assert klcli.main(*base, "--predict", "registers_per_thread: <= 48") == 2
    assert "no --predict is on duration" in capsys.readouterr().err
    assert not (root / "v0" / "hypothesis.txt").exists()
    assert klcli.main(*base, "--predict", "duration: -2%", "--evidence", "dram-bound-streaming") == 0
    assert "is complete; next: run the gate" in capsys.readouterr().err
    assert rf.gate(root / "v0").returncode == 0  # what hypothesis calls complete, the gate passes


def test_the_final_versions_evidence_draft_says_what_comes_next(tmp_path):
    from kernel_loop.kbs.evidence import draft_evidence
    from kernel_loop.prose import TODO, markdown_section
    from kernel_loop.rundir import RunDir

    root = rf.build_complete(tmp_path / "run", iterations=1)
    path, _ = draft_evidence(RunDir.open(root), corpus=[], force=True)
    text = path.read_text()
    link = markdown_section(text, "Decision Link")
    assert "v1 is the final version" in link and "no hypothesis.txt" in link and "benchmark and report" in link
    assert "for v2" not in text and "how hypothesis.txt will test it" not in text
    selected = markdown_section(text, "Selected Evidence")
    assert f"{TODO}: the list above is the helper's draft of candidates, not your selection: replace it" in selected
    rf.set_state(root, 0)  # a version before the final one keeps its decision-link prompt
    path, _ = draft_evidence(RunDir.open(root), corpus=[], force=True)
    assert "for v1 and how hypothesis.txt will test it" in markdown_section(path.read_text(), "Decision Link")


def test_make_gpu_test_skips_without_torch(tmp_path):
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'ModuleNotFoundError: torch' >&2\nexit 1\n")
    (fake / "python3").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([make, "-s", "-C", str(HELPERS.parent), "gpu-test"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpu-test: skipped: python3" in proc.stdout and "cannot import torch" in proc.stdout
    assert "ERROR" not in proc.stdout + proc.stderr


def test_kernel_loop_gate_passes_dry_run_through_and_writes_nothing(tmp_path, capfd):
    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.write_hypothesis(root, 0)
    before = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))
    capfd.readouterr()
    assert klcli.main("gate", root / "v0", "--dry-run") == 0
    assert "gate: v0 passed (dry run, transition); current_iteration.txt not written" in capfd.readouterr().out
    assert sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*")) == before


CUDA_ONLY_KERNEL = "import torch\n\n\ndef run_kernel(x, y, out):\n    out.copy_((x.cuda() + y.cuda()).cpu())\n"


@pytest.mark.parametrize("device", ["cuda", "cpu"], ids=["gpu-run-with-KERNEL_LOOP_DEVICE", "init-device-cpu"])
def test_a_kernel_that_needs_cuda_on_a_machine_without_it_signs_no_fail(tmp_path, monkeypatch, capsys, device,
                                                                         judge_here, worker_here):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    kernel = tmp_path / "cuda_vadd.py"
    kernel.write_text(CUDA_ONLY_KERNEL)
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                      "--baseline", kernel, "--dims", "N=64", "--skip-env", "--device", device) == 0
    if device == "cuda":
        monkeypatch.setenv("KERNEL_LOOP_DEVICE", "cpu")
    else:
        monkeypatch.delenv("KERNEL_LOOP_DEVICE", raising=False)
    capsys.readouterr()
    assert klcli.main("correctness", out) == 2
    err = capsys.readouterr().err
    assert "needs CUDA" in err and "Torch not compiled with CUDA" in err and "nothing was recorded" in err, err
    if device == "cuda":
        assert "KERNEL_LOOP_DEVICE=cpu is the cpu test mode of runs initialised with --device cpu" in err
        assert "this run measures on cuda:0" in err
    assert not (out / "v0" / "correctness.json").exists()
    assert [ln.split("\tstep=")[1].split("\t")[0] for ln in (out / "records.log").read_text().splitlines()] == ["init"]


# --- issue 44: the front door a new user met ----------------------------------------------------------
def test_extend_before_the_final_version_exists_says_to_create_it(tmp_path, capsys):
    """The state names v1 (the gate passed v0) but next never made v1: the hint is next, not v1's hypothesis."""
    from kernel_loop.steps import extend

    root = rf.write_run(tmp_path / "run", iterations=1)
    rf.write_measurements(root, 0)
    rf.write_kbs(root, 0)
    rf.set_state(root, 0)
    rf.write_hypothesis(root, 0)
    assert rf.gate(root / "v0").returncode == 0
    capsys.readouterr()
    assert rf.cli(extend, ["extend", str(root), "--iterations", "2"]) == 0
    err = capsys.readouterr().err
    assert f"kernel-loop next {root}" in err and "v1 does not exist yet" in err
    assert "write v1/hypothesis.txt" not in err


def test_pytest_keeps_the_temporary_folders_of_failed_tests_only(pytestconfig):
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"


def test_make_clean_removes_what_pip_install_leaves_in_the_checkout():
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    proc = subprocess.run([make, "-n", "-C", str(HELPERS.parent), "clean"], capture_output=True, text=True, timeout=60)
    assert "build" in proc.stdout.split() and "helpers/*.egg-info" in proc.stdout.split()


def test_pip_install_leaves_the_checkout_as_it_was(tmp_path):
    """`pip install .` in a checkout builds out of it: no build/ or *.egg-info left behind (the build backend
    pyproject.toml names, without build isolation: no download)."""
    tomllib = pytest.importorskip("tomllib")
    repo = HELPERS.parent
    backend = tomllib.loads((repo / "pyproject.toml").read_text())["build-system"]["build-backend"]
    pytest.importorskip(backend.split(".")[0])
    checkout = tmp_path / "checkout"
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    for rel in filter(None, listed.decode().split("\0")):
        if (repo / rel).is_file():
            (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, checkout / rel, follow_symlinks=False)
    before = sorted(p.relative_to(checkout) for p in checkout.rglob("*"))
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(tmp_path / "target"), "."], cwd=checkout, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    left = sorted(set(p.relative_to(checkout) for p in checkout.rglob("*")) - set(before))
    assert left == [], left
    installed = tmp_path / "target" / "kernel_loop"
    assert (installed / "cli.py").is_file() and (installed / "data" / "check_iteration_gate.sh").is_file()


def test_init_names_the_next_command_the_way_it_was_run_with_the_path_quoted(tmp_path):
    out = tmp_path / "my run"
    proc = _cli("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--skip-env")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(f"next: {sys.executable} {HELPERS / 'kloop.py'} correctness '{out}'")


def test_a_missing_record_names_the_command_with_the_run_directory(tmp_path, capsys):
    from kernel_loop.steps import profile

    root = rf.write_run(tmp_path / "run")
    assert rf.cli(profile, ["profile", str(root)]) == 2
    assert f"run `kernel-loop correctness {root}` first" in capsys.readouterr().err


def test_profile_without_a_gpu_says_so_before_looking_for_ncu(tmp_path, monkeypatch, capsys):
    from kernel_loop import gpustate
    from kernel_loop.steps import profile

    root = rf.write_run(tmp_path / "run")
    rf.write_measurements(root, 0)
    monkeypatch.setattr(gpustate, "gpu_visible", lambda: False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr(profile, "find_ncu", lambda: pytest.fail("looked for ncu first"))
    assert rf.cli(profile, ["profile", str(root)]) == 2
    err = capsys.readouterr().err
    assert "no NVIDIA GPU is visible on this machine" in err and "ncu" not in err


def test_benchmark_on_a_cpu_mode_run_says_why_not_the_gates_usage(tmp_path):
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_vadd.py", "py_vadd.py", "triton", "N=64", "--device", "cpu") == 0
    line = _one_line_error(_cli("benchmark", out))
    assert "cpu test mode" in line and "check_iteration_gate" not in line


@pytest.mark.parametrize("dims", ["N=4,,M=8", ",N=64", "N=64,"])
def test_an_empty_dims_entry_is_refused(tmp_path, dims):
    assert "empty entry" in _one_line_error(_cli("init", tmp_path / "run", "--kernel", "vadd", "--ref",
                                                  klcli.KERNELS / "ref_vadd.py", "--impl", "triton", "--baseline",
                                                  klcli.KERNELS / "py_vadd.py", "--dims", dims, "--skip-env"))


def test_an_empty_baseline_is_refused(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("")
    line = _one_line_error(_cli("init", tmp_path / "run", "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py",
                                "--impl", "triton", "--baseline", empty, "--dims", "N=64", "--skip-env"))
    assert "--baseline" in line and "is empty" in line
    assert not (tmp_path / "run").exists()


def test_a_second_kernel_source_beside_v0s_kernel_is_refused_at_init(tmp_path, capsys):
    out = tmp_path / "run"
    assert klcli.init_run(out, "ref_vadd.py", "py_vadd.py", "triton", "N=64") == 0
    (out / "v0" / "helper.py").write_text("X = 1\n")
    capsys.readouterr()
    assert klcli.init_run(out, "ref_vadd.py", "py_vadd.py", "triton", "N=64") == 2
    err = capsys.readouterr().err
    assert "helper.py" in err and "one kernel file" in err


def test_a_cpu_mode_init_does_not_say_skip_env(tmp_path):
    out = tmp_path / "run"
    assert klcli.main("init", out, "--kernel", "vadd", "--ref", klcli.KERNELS / "ref_vadd.py", "--impl", "triton",
                      "--baseline", klcli.KERNELS / "py_vadd.py", "--dims", "N=64", "--device", "cpu") == 0
    text = (out / "env_check.md").read_text()
    assert "--skip-env" not in text and "--device cpu" in text


def test_readme_and_skill_md_name_the_cpu_mode():
    root = HELPERS.parent
    for doc in ("README.md", "SKILL.md"):
        assert "--device cpu" in (root / doc).read_text(), doc


def test_the_demos_closing_hint_runs_as_the_demo_was_run():
    """`make demo` runs helpers/kloop.py: its hint for another example must too, not `kernel-loop` (not on PATH)."""
    from kernel_loop.steps import demo

    assert "kernel-loop demo" not in demo.other_examples_hint(["softmax-triton"], how="/venv/python /x/kloop.py")
    assert demo.other_examples_hint(["softmax-triton"], how="/venv/python /x/kloop.py") == \
        "other examples: softmax-triton (/venv/python /x/kloop.py demo --example softmax-triton)"


def _command_lines(parser, path=()):
    """(argv prefix, parser) of the CLI's parser and of every subcommand's, nested ones (kbs query) included."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _command_lines(sub, (*path, name))


def test_no_parser_takes_an_abbreviated_option(tmp_path):
    """`--tri 5` is refused, not read as --trials: each parser refuses `--hel` (an abbreviated --help shows the
    help and exits 0), and so do the scripts' own parsers."""
    from kernel_loop import cli

    lines = list(_command_lines(cli.build_parser()))
    assert {p[0] for p, _ in lines if p} == set(cli.COMMANDS) and ("kbs", "query") in {p for p, _ in lines}
    for path, parser in lines:
        assert parser.allow_abbrev is False, parser.prog
        with pytest.raises(SystemExit) as exc:
            klcli.main(*path, "--hel")
        assert exc.value.code == 2, path
    proc = _cli("benchmark", tmp_path, "--tri", "5")
    assert proc.returncode == 2 and "unrecognized arguments: --tri 5" in proc.stderr, proc.stderr
    for script in ("scripts/kbs_check_shas.py", "examples/drive_loop.py"):
        proc = subprocess.run([sys.executable, str(HELPERS.parent / script), "--hel"], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and "usage:" not in proc.stdout, (script, proc.stdout)  # no help shown
