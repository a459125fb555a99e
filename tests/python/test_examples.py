"""The bundled example runs stay valid: each archive unpacks safely, the final gate audit and status pass
on it (no GPU), its report re-renders, the browsable report beside it matches, and re-packing is exact.

`kernel-loop demo` without a GPU: gate, status and report on an unpacked copy; nothing written elsewhere."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import klcli
import pytest
from conftest import REPO
from kernel_loop import plan, records
from kernel_loop.common import UsageError
from kernel_loop.rundir import RunDir
from kernel_loop.steps.demo import ARCHIVE, example_key, list_examples, unpack_archive, unpack_example

EXAMPLES = sorted(p.parent.name for p in (REPO / "examples").glob(f"*/{ARCHIVE}"))


@pytest.fixture(params=EXAMPLES)
def example_copy(request, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_LOOP_RECORD_KEY", str(example_key(request.param, tmp_path)))  # status, report too
    return unpack_example(request.param, tmp_path / request.param)


def test_there_are_examples():
    assert len(EXAMPLES) >= 2
    assert list_examples() == EXAMPLES


def _key(example_copy) -> dict:
    """The environment with the example's own record key (from its loop.json; not secret)."""
    return dict(os.environ, KERNEL_LOOP_RECORD_KEY=str(example_key(example_copy.name, example_copy.parent)))


def test_every_record_of_an_example_verifies_and_a_forged_one_fails(example_copy, monkeypatch):
    monkeypatch.setenv("KERNEL_LOOP_RECORD_KEY", str(example_key(example_copy.name, example_copy.parent)))
    recs = records.read(example_copy)
    assert recs[0]["step"] == "init" and {"correctness", "profile", "kbs", "gate", "benchmark"} <= {r["step"] for r in recs}
    assert all(r["device"].startswith("cuda:") for r in recs if r["step"] in ("correctness", "profile"))
    if example_copy.name != EXAMPLES[0]:
        return  # the forged record below: the gate's one check, the same for every example (run on the first)
    n = plan.final_version(RunDir.open(example_copy))
    corr = example_copy / f"v{n}" / "correctness.json"
    corr.write_text(corr.read_text().replace('"PASS"', '"FAIL"', 1))
    proc = subprocess.run(["bash", str(REPO / "scripts" / "check_iteration_gate.sh"), str(example_copy / f"v{n}"),
                           "--final"], capture_output=True, text=True, env=_key(example_copy))
    assert proc.returncode == 1 and "correctness.json changed after kernel-loop correctness wrote it" in proc.stdout


def _kloop(example_copy, helpers_env, capsys, *args: str) -> subprocess.CompletedProcess:
    """``kloop.py ARGS`` as a command for the first example; through the same ``cli.main`` in this process for
    the others (what is under test is the example's run directory; the command's own exit status and output
    are the first example's)."""
    if example_copy.name == EXAMPLES[0]:
        return subprocess.run([sys.executable, str(REPO / "helpers" / "kloop.py"), *args],
                              capture_output=True, text=True, env=helpers_env)
    capsys.readouterr()
    rc = klcli.main(*args)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, rc, out, err)


def test_status_is_consistent(example_copy, helpers_env, capsys):
    proc = _kloop(example_copy, helpers_env, capsys, "status", str(example_copy), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads(proc.stdout)
    assert status["consistent"] is True and status["drift"] == [], status
    assert status["artifacts"]["missing"] == [] and status["artifacts"]["stale"] == {}
    assert status["next"]["step"] == "done"
    # status ran the real gate's final audit on the final version (its read-only run): it passed
    n = plan.final_version(RunDir.open(example_copy))
    assert status["gate"]["exit"] == 0 and f"v{n}" in status["gate"]["command"] and "--final" in status["gate"]["command"]


def test_report_renders_from_sidecars(example_copy, helpers_env, capsys):
    before = (example_copy / "final_report.md").read_text()
    (example_copy / "final_report.md").unlink()
    proc = _kloop(example_copy, helpers_env, capsys, "report", str(example_copy))
    assert proc.returncode == 0, proc.stderr
    after = (example_copy / "final_report.md").read_text()
    # the measured tables are rebuilt identically from the sidecars
    table = before.split("## 3. Versions")[1].split("## 4.")[0]
    assert table in after


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_archive_holds_the_whole_run(name, tmp_path):
    run = unpack_example(name, tmp_path / name)
    # hidden files travel too (the gate's lock file)
    assert (run / ".gate.lock").is_file()
    n = json.loads((run / "run.json").read_text())["iterations"]
    for k in range(n + 1):
        assert (run / f"v{k}" / "measured.sha256").is_file()


@pytest.mark.parametrize("name", EXAMPLES)
def test_browsable_report_matches_the_archive(name, tmp_path):
    run = unpack_example(name, tmp_path / name)
    here = REPO / "examples" / name
    for fname in ("final_report.md", "final_report.png"):
        assert (here / fname).read_bytes() == (run / fname).read_bytes(), f"examples/{name}/{fname} is out of date"
    # every relative link in the browsable copy resolves beside it
    md = (here / "final_report.md").read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", md):
        if re.match(r"[a-z]+:|#", target):
            continue
        assert (here / target.split("#")[0]).exists(), f"examples/{name}/final_report.md links to missing {target}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_archive_is_in_canonical_form(name):
    with tarfile.open(REPO / "examples" / name / ARCHIVE, "r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[0] == "run" and all(n.startswith("run/") for n in names[1:])
    assert {m.mtime for m in members} == {members[0].mtime}
    assert {(m.uid, m.gid) for m in members} == {(0, 0)}
    assert all(m.isfile() or m.isdir() for m in members)
    # gzip header without a file name or a time stamp (gzip -n)
    head = (REPO / "examples" / name / ARCHIVE).read_bytes()[:10]
    assert head[3] & 0x08 == 0 and head[4:8] == b"\0\0\0\0"


def _gnu_tar() -> bool:
    try:
        out = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "GNU tar" in out and shutil.which("gzip") is not None and shutil.which("make") is not None


@pytest.mark.skipif(not _gnu_tar(), reason="re-packing needs GNU tar, gzip and make")
def test_repacking_gives_the_same_bytes(tmp_path):
    root = tmp_path / "examples"
    for name in EXAMPLES:
        unpack_example(name, root / name / "run")
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "examples-pack", f"EXAMPLES_ROOT={root}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in EXAMPLES:
        for fname in (ARCHIVE, "final_report.md", "final_report.png"):
            assert (root / name / fname).read_bytes() == (REPO / "examples" / name / fname).read_bytes(), \
                f"re-packing examples/{name} changed {fname}"


def _archive(path, entries):
    """A gzip'ed tar with the given (name, TarInfo type, link target) entries."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, link in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            if link:
                info.linkname = link
            data = b"x" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("bad, why", [
    (("run/../evil.txt", tarfile.REGTYPE, None), "'..'"),
    (("/tmp/evil.txt", tarfile.REGTYPE, None), "absolute"),
    (("run/../../evil.txt", tarfile.REGTYPE, None), "'..'"),
    (("elsewhere/evil.txt", tarfile.REGTYPE, None), "outside run/"),
    (("run/link", tarfile.SYMTYPE, "/etc/passwd"), "not a regular file"),
    (("run/hard", tarfile.LNKTYPE, "run/ok.txt"), "not a regular file"),
])
def test_unsafe_archive_members_are_refused(tmp_path, bad, why):
    archive = _archive(tmp_path / "run.tar.gz", [("run", tarfile.DIRTYPE, None),
                                                  ("run/ok.txt", tarfile.REGTYPE, None), bad])
    dest = tmp_path / "out" / "run"
    with pytest.raises(UsageError, match=re.escape(why)):
        unpack_archive(archive, dest)
    # refused before anything was written
    assert not dest.exists() and not (tmp_path / "evil.txt").exists()


def test_a_safe_archive_unpacks_below_dest(tmp_path):
    archive = _archive(tmp_path / "run.tar.gz", [("run", tarfile.DIRTYPE, None), ("run/v0", tarfile.DIRTYPE, None),
                                                  ("run/v0/a.txt", tarfile.REGTYPE, None),
                                                  ("run/.hidden", tarfile.REGTYPE, None)])
    dest = unpack_archive(archive, tmp_path / "out")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == [".hidden", "v0", "v0/a.txt"]
    with pytest.raises(UsageError, match="already exists"):
        unpack_archive(archive, dest)


def test_a_damaged_archive_is_a_usage_error(tmp_path):
    broken = tmp_path / "run.tar.gz"
    broken.write_bytes((REPO / "examples" / EXAMPLES[0] / ARCHIVE).read_bytes()[:2000])
    with pytest.raises(UsageError, match="not a readable"):
        unpack_archive(broken, tmp_path / "out")


# --- `kernel-loop demo` ---
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
