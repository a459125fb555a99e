"""The worker's file sandbox (measure/sandbox.py): the plan of its rules, and the rules at work in a child
process (Landlock needs Linux 5.13+; where the kernel has none, the child tests skip and say so)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from kernel_loop.measure import sandbox
from klcli import HELPERS

needs_landlock = pytest.mark.skipif(sandbox.abi() < 1, reason="this kernel has no Landlock")


def _tree(tmp_path):
    (tmp_path / "home" / ".config" / "kernel-loop").mkdir(parents=True)
    key = tmp_path / "home" / ".config" / "kernel-loop" / "record.key"
    key.write_text("0" * 64 + "\n")
    (tmp_path / "home" / ".config" / "other.conf").write_text("x")
    run = tmp_path / "work" / "run"
    (run / "v0").mkdir(parents=True)
    (run / "v0" / "kernel.py").write_text("# kernel\n")
    (run / "ref.py").write_text("# ref\n")
    (run / "records.log").write_text("signed\n")
    (tmp_path / "work" / "notes.txt").write_text("mine")
    (tmp_path / "work" / "to-key").symlink_to(key.parent)
    return key, run


def test_the_plan_reads_everywhere_writes_only_its_folders_and_hides_the_key_and_the_run(tmp_path):
    key, run = _tree(tmp_path)
    scratch = tmp_path / "work" / "scratch"
    scratch.mkdir()
    pol = sandbox.policy([key, run], [run / "v0" / "kernel.py", run / "ref.py"], [scratch])
    rules = dict(sandbox.grants(sandbox.zones(pol, [str(tmp_path / "home" / ".cache")])))
    real = os.path.realpath
    assert rules[real(tmp_path / "home" / ".config" / "other.conf")] == "read"  # beside the key: read, not write
    assert rules[real(tmp_path / "work" / "notes.txt")] == "read"                # beside the run directory
    assert rules[real(run / "v0" / "kernel.py")] == rules[real(run / "ref.py")] == "read"
    assert rules[real(scratch)] == "all"                                         # its own temporary folder
    for hidden in (key, key.parent, run, run / "records.log", run / "v0", tmp_path / "work" / "to-key"):
        assert str(hidden) not in rules and real(hidden) not in rules, hidden     # a link to the key folder too
    for way in (tmp_path, tmp_path / "home", tmp_path / "work"):               # folders on the way get no rule
        assert real(way) not in rules
    assert all(right in ("read", "all") for right in rules.values())
    assert [p for p, r in rules.items() if r == "all"] == [real(scratch)]  # the cache named does not exist


def test_a_zone_inside_a_zone_keeps_its_own_right(tmp_path):
    cache = tmp_path / "cache"
    (cache / "theirs").mkdir(parents=True)
    (cache / "mine").mkdir()
    rules = dict(sandbox.grants({str(cache): "all", str(cache / "theirs"): "read"}))
    assert rules[str(cache / "mine")] == "all" and rules[str(cache / "theirs")] == "read"
    assert str(cache) not in rules  # on the way: its own entries carry the rights


CHILD = """
import os, sys
from kernel_loop.measure import sandbox
key, run, parent = sys.argv[1], sys.argv[2], int(sys.argv[3])
ok, how = sandbox.apply(sandbox.policy([key, run], [os.path.join(run, "v0", "kernel.py")], [os.environ["TMPDIR"]]))
assert ok, how
def can(fn):
    try:
        fn()
        return True
    except OSError:
        return False
print("key", can(lambda: open(key).read()))
print("records", can(lambda: open(os.path.join(run, "records.log")).read()))
print("append", can(lambda: open(os.path.join(run, "records.log"), "a").write("forged")))
print("new", can(lambda: open(os.path.join(run, "v0", "planted.py"), "w").write("x")))
print("kernel", can(lambda: open(os.path.join(run, "v0", "kernel.py")).read()))
print("beside", can(lambda: open(os.path.join(os.path.dirname(run), "notes.txt")).read()))
print("change", can(lambda: open(os.path.join(os.path.dirname(run), "notes.txt"), "a").write("x")))
print("plant", can(lambda: open(os.path.join(os.path.dirname(run), "evil.pth"), "w").write("x")))
print("tmp", can(lambda: open(os.path.join(os.environ["TMPDIR"], "scratch"), "w").write("x")))
print("cache", can(lambda: open(os.path.join(os.environ["TRITON_CACHE_DIR"], "k.cubin"), "w").write("x")))
print("mem", can(lambda: open(f"/proc/{parent}/mem", "rb").read(1)))
print("root", can(lambda: open(f"/proc/{parent}/root" + key).read()))
"""


@needs_landlock
def test_a_sandboxed_process_cannot_reach_the_key_the_records_or_the_judge(tmp_path):
    key, run = _tree(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, PYTHONPATH=str(HELPERS), TMPDIR=str(scratch), TRITON_CACHE_DIR=str(tmp_path / "tc"))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(key), str(run), str(os.getpid())],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = dict(line.split() for line in proc.stdout.splitlines())
    assert got == {"key": "False", "records": "False", "append": "False", "new": "False", "kernel": "True",
                   "beside": "True", "change": "False", "plant": "False", "tmp": "True", "cache": "True",
                   "mem": "False", "root": "False"}, got
    assert (run / "records.log").read_text() == "signed\n" and not (run / "v0" / "planted.py").exists()
    assert (tmp_path / "work" / "notes.txt").read_text() == "mine" and not (tmp_path / "work" / "evil.pth").exists()


def test_without_landlock_the_worker_says_it_is_not_isolated(monkeypatch):
    monkeypatch.setattr(sandbox, "abi", lambda: 0)
    ok, why = sandbox.apply({"hide": ["/nonexistent"], "read": []})
    assert not ok and "no Landlock" in why and "record key" in why
    assert sandbox.apply(None) == (False, "the sandbox was switched off (KERNEL_LOOP_SANDBOX=off)")


def test_prepare_makes_a_named_build_cache_before_the_rules(tmp_path, monkeypatch):
    """Seen on the GPU: load_inline's cache named in a folder that also holds the record key (so a folder on
    the way to a hidden path) did not exist yet; made by the worker after the rules, it was refused
    (PermissionError), so every build failed.  The worker makes it whole before the rules."""
    key = tmp_path / "beside-the-key" / "record.key"
    key.parent.mkdir()
    key.write_text("0" * 64 + "\n")
    ext = tmp_path / "beside-the-key" / "cache" / "torch_extensions"
    tri = tmp_path / "triton-cache"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(ext))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tri))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    sandbox.prepare()
    assert ext.is_dir() and tri.is_dir()
    rules = dict(sandbox.grants(sandbox.zones({"hide": [str(key)]}, sandbox.cache_folders())))
    assert rules[str(ext)] == rules[str(tri)] == "all"  # so the rules let them be written


def test_a_zone_inside_a_zone_of_the_same_right_is_dropped(tmp_path):
    """A baselines' worker's caches live in its own temporary folder: as zones of their own they would make that
    folder a folder on the way, where a new file gets no rights (seen: tempfile found no usable folder)."""
    own = str(tmp_path / "w")
    zs = sandbox.zones({"hide": [str(tmp_path / "run")], "write": [own]}, [own + "/triton_cache_dir"])
    assert zs == {own: "all", str(tmp_path / "run"): "none"}
