"""`kernel-loop demo` without a GPU: gate, status and report on a copy; nothing written elsewhere."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def _demo(tmp_path, *args):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "helpers")}
    proc = subprocess.run([sys.executable, str(REPO / "helpers" / "kloop.py"), "demo", "--no-live", *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return proc, home


def test_demo_replays_an_example_in_the_given_dir(tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    proc, home = _demo(tmp_path, "--example", "transpose-cuda", "--dir", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "demo" / "transpose-cuda"
    assert (run / "final_report.md").is_file() and (run / "final_report.png").is_file()
    assert "gate: v3 passed (final audit" in proc.stdout
    assert "next step (done)" in proc.stdout
    assert "nothing re-measured" in proc.stdout
    # nothing outside the demo dir: the fake HOME stays empty and no new top-level entries appear
    assert list(home.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["demo", "home"])
    # the committed example is untouched
    assert (REPO / "examples" / "transpose-cuda" / "run" / "final_report.md").read_text() != ""


def test_demo_refuses_an_unknown_example(tmp_path):
    proc, _ = _demo(tmp_path, "--example", "no-such-run", "--dir", str(tmp_path / "d"))
    assert proc.returncode == 2
    assert "unknown example 'no-such-run'" in proc.stderr and "Traceback" not in proc.stderr


def test_demo_refuses_to_overwrite(tmp_path):
    (tmp_path / "d" / "transpose-cuda").mkdir(parents=True)
    proc, _ = _demo(tmp_path, "--example", "transpose-cuda", "--dir", str(tmp_path / "d"))
    assert proc.returncode == 2 and "already exists" in proc.stderr
