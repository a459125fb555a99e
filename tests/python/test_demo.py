"""`kernel-loop demo` without a GPU: gate, status and report on an unpacked copy; nothing written elsewhere."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys

import klcli
import pytest
from conftest import REPO


def _demo(tmp_path, *args):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "helpers")}
    proc = subprocess.run([sys.executable, str(REPO / "helpers" / "kloop.py"), "demo", "--no-live", *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return proc, home


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_demo_lists_the_bundled_examples(tmp_path):
    proc, _ = _demo(tmp_path, "--list")
    assert proc.returncode == 0, proc.stderr
    archives = sorted(p.parent.name for p in (REPO / "examples").glob("*/run.tar.gz"))
    assert proc.stdout.split() == archives
    assert {"softmax-triton", "transpose-cuda", "kernelbench-l1norm-cuda"} <= set(archives)


def test_demo_replays_an_example_in_the_given_dir(tmp_path):
    archive = REPO / "examples" / "transpose-cuda" / "run.tar.gz"
    committed = _digest(archive)
    before = sorted(p.name for p in tmp_path.iterdir())
    proc, home = _demo(tmp_path, "--example", "transpose-cuda", "--dir", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "demo" / "transpose-cuda"
    assert (run / "final_report.md").is_file() and (run / "final_report.png").is_file()
    assert "gate: v6 passed (final audit of v0..v6)" in proc.stdout  # extended from v3 to v6
    assert "note: the run was extended: final version v3 -> v6" in proc.stdout
    assert "next step (done)" in proc.stdout
    assert "nothing re-measured" in proc.stdout
    # nothing outside the demo dir: the fake HOME stays empty and no new top-level entries appear
    assert list(home.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["demo", "home"])
    # the committed example is untouched and was not unpacked in place
    assert _digest(archive) == committed
    assert not (REPO / "examples" / "transpose-cuda" / "run").exists()


def test_demo_refuses_an_unknown_example(tmp_path):
    proc, _ = _demo(tmp_path, "--example", "no-such-run", "--dir", str(tmp_path / "d"))
    assert proc.returncode == 2
    assert "unknown example 'no-such-run'" in proc.stderr and "Traceback" not in proc.stderr


def test_demo_refuses_to_overwrite(tmp_path):
    (tmp_path / "d" / "transpose-cuda").mkdir(parents=True)
    proc, _ = _demo(tmp_path, "--example", "transpose-cuda", "--dir", str(tmp_path / "d"))
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_demo_refuses_a_dir_that_is_a_file_and_live_without_a_gpu(tmp_path, capsys, monkeypatch):
    from kernel_loop.steps import demo

    f = tmp_path / "file"
    f.write_text("x")
    assert klcli.main("demo", "--dir", f) == 2
    assert "is a file" in capsys.readouterr().err
    monkeypatch.setattr(demo, "_gpu_available", lambda: False)
    assert klcli.main("demo", "--live", "--dir", tmp_path / "d") == 2
    assert "--live needs a CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_demo_without_examples_says_it_needs_the_repository(tmp_path, capsys, monkeypatch):
    from kernel_loop.steps import demo

    monkeypatch.setattr(demo, "examples_dir", lambda: tmp_path / "none")
    assert klcli.main("demo") == 2
    assert "the demo needs the kernel-loop repository" in capsys.readouterr().err


# --- where the examples are, and what a demo leaves behind --------------------------------------------
def test_every_example_ships_with_a_pip_install():
    """pyproject.toml's shared data carry each examples/<name>/ archive, key file and report."""
    tomllib = pytest.importorskip("tomllib")
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "shared-data"]
    for archive in sorted((REPO / "examples").glob("*/run.tar.gz")):
        name = archive.parent.name
        for f in ("run.tar.gz", "loop.json", "final_report.md"):
            assert data.get(f"examples/{name}/{f}") == f"share/kernel-loop/examples/{name}/{f}", (name, f)
    assert all((REPO / f).is_file() for f in data)


def test_an_installed_package_finds_its_examples_and_runs_itself(tmp_path, monkeypatch):
    """As after pip install .: no examples/ beside the package and no kloop.py, the archives under
    <prefix>/share/kernel-loop/examples."""
    from kernel_loop.steps import demo

    prefix = tmp_path / "prefix"
    installed = prefix / "share" / "kernel-loop" / "examples" / "transpose-cuda"
    installed.mkdir(parents=True)
    for f in ("run.tar.gz", "loop.json"):
        shutil.copy(REPO / "examples" / "transpose-cuda" / f, installed / f)
    monkeypatch.setattr(demo, "skill_root", lambda: tmp_path / "site-packages")
    monkeypatch.setattr(demo.sys, "prefix", str(prefix))
    monkeypatch.chdir(tmp_path)
    assert demo.list_examples() == ["transpose-cuda"] and demo.examples_dir() == installed.parent
    seen = {}
    monkeypatch.setattr(demo.subprocess, "run", lambda cmd, **kw: seen.setdefault("cmd", cmd))
    demo._cli("status", "x", env={})
    assert seen["cmd"][1:4] == ["-m", "kernel_loop.cli", "status"]


def test_the_examples_of_a_checkout_around_the_current_directory_are_found(tmp_path, monkeypatch):
    from kernel_loop.steps import demo

    monkeypatch.setattr(demo, "skill_root", lambda: tmp_path / "site-packages")
    monkeypatch.setattr(demo.sys, "prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(demo.sys, "base_prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(demo.sysconfig, "get_path", lambda name: str(tmp_path / "prefix"))
    monkeypatch.setattr(demo.site, "getuserbase", lambda: str(tmp_path / "user"))
    monkeypatch.chdir(REPO / "helpers")
    assert demo.examples_dir() == REPO / "examples" and "transpose-cuda" in demo.list_examples()
    monkeypatch.chdir(tmp_path)
    assert demo.list_examples() == []


def test_a_demo_removes_its_temporary_folder_unless_kept_and_picks_the_named_example(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp)}
    cmd = [sys.executable, str(REPO / "helpers" / "kloop.py"), "demo", "--no-live", "--example", "transpose-cuda"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(tmp.iterdir()) == [] and "which is removed now" in proc.stdout
    assert "run directory:" not in proc.stdout and "chart:" not in proc.stdout
    # kept, and the example named picked (another one than above, and than the first of the list)
    cmd[-1] = "softmax-triton"
    proc = subprocess.run([*cmd, "--keep"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (kept,) = tmp.iterdir()
    assert f"run directory: {kept / 'softmax-triton'}" in proc.stdout and (kept / "softmax-triton" / "run.json").is_file()
    assert [p.name for p in kept.iterdir() if not p.name.startswith(".") and p.is_dir()] == ["softmax-triton"]
    assert "unpacked to" in proc.stderr + proc.stdout


def test_the_default_example_stays_the_same_when_one_is_added():
    from kernel_loop.common import UsageError
    from kernel_loop.steps import demo

    names = ["cutlass-gemm-bias-relu", demo.DEFAULT_EXAMPLE, "softmax-triton"]
    assert demo.choose(None, names) == demo.DEFAULT_EXAMPLE  # not the first by name
    assert demo.choose("softmax-triton", names) == "softmax-triton"
    assert demo.choose(None, ["softmax-triton"]) == "softmax-triton"  # a copy without it: the first
    with pytest.raises(UsageError, match="unknown example 'nope'"):
        demo.choose("nope", names)
    assert demo.DEFAULT_EXAMPLE in demo.list_examples()
