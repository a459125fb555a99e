"""A version's load_inline libraries kept by correctness and loaded by later steps (measure/libraries.py): what the
judge keeps (only load_inline's own plain files), what it hands (only bytes with the recorded hash), what a step
trusts (only a correctness record that still holds), and a benchmark on an empty build cache that builds nothing."""

from __future__ import annotations

import gzip
import hashlib
import json
import os

import pytest
import runfixture as rf
from kernel_loop import rundir
from kernel_loop.common import UsageError, read_json, write_json
from kernel_loop.measure import libraries
from kernel_loop.steps import benchmark as B

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
    reports = [{"key": KEY, "name": "kl_x", "module": True, "path": str(good)},
               {"key": KEY, "name": "kl_y", "module": True, "path": str(ext / "link" / "kl_y.so")},
               {"key": KEY, "name": "kl_z", "module": True, "path": str(ext / "hard.so")},
               {"key": KEY, "name": "kl_w", "module": True, "path": str(outside)},
               {"key": KEY, "name": "kl_v", "module": True, "path": str(ext / "kl_x" / ".." / ".." / "record.key")},
               {"key": "not hex", "name": "kl_x", "module": True, "path": str(good)},
               {"key": KEY, "name": "bad name; rm", "module": True, "path": str(good)}, "not a dict"]
    kept = libraries.keep(reports, str(dest))
    sha = hashlib.sha256(good.read_bytes()).hexdigest()
    assert kept == [{"key": KEY, "name": "kl_x", "module": True, "file": f"lib/{sha[:20]}.so.gz", "sha256": sha,
                     "bytes": len(good.read_bytes())}]
    assert [p.name for p in dest.iterdir()] == [f"{sha[:20]}.so.gz"]
    assert gzip.decompress((dest / f"{sha[:20]}.so.gz").read_bytes()) == good.read_bytes()
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    assert libraries.keep(reports, str(dest)) == []  # no cache named: nothing to trust


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
    reports = [{"key": KEY, "name": n, "module": True, "path": str(p)}
               for n, p in (("kl_k", key), ("kl_p", planted), ("kl_t", text), ("kl_q", plain))]
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
CPU_ARGS = ["--timing", "host_time", "--warmup", "1", "--trials", "3", "--baselines", "pytorch-eager"]


def _builds(cache):
    return sorted(p.name for p in (cache / "torch_extensions").rglob("*.so"))


def test_a_benchmark_on_an_empty_build_cache_loads_what_correctness_kept(tmp_path, monkeypatch, capfd):
    """Correctness keeps the version's load_inline library in v3/lib (named in correctness.json, which the signed
    record binds); a benchmark on a machine whose build cache is empty loads it and builds nothing.  A library
    changed since is built again, and the version still passes; so is every library of a correctness.json changed
    since its record."""
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

    kept.write_bytes(gzip.compress(b"another library"))  # changed since correctness: built again
    monkeypatch.setenv("KERNEL_LOOP_CACHE", str(tmp_path / "cache3"))
    assert rf.cli(B, ["benchmark", str(root), "--version", "v3", *CPU_ARGS]) == 0
    assert _builds(tmp_path / "cache3") == ["kl_tiny_ext.so"]
    assert {r["name"]: r for r in read_json(root / "benchmark.json")["rows"]}["v3"]["correct"]
    capfd.readouterr()

    data = read_json(root / "v3" / "correctness.json")  # a list edited after the record: not trusted
    write_json(root / "v3" / "correctness.json", dict(data, libraries=[dict(data["libraries"][0], sha256="0" * 64)]))
    assert libraries.stored(root, "v3", root / "v3" / "kernel.py") == []
    write_json(root / "v3" / "correctness.json", data)
    assert libraries.stored(root, "v3", root / "v3" / "kernel.py")[0]["path"] == str(kept)
    assert json.loads((root / "v3" / "correctness.json").read_text())["libraries"] == data["libraries"]
