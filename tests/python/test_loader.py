"""The judge's data (measure.problem) and the loader's helpers, on the CPU: seeded inputs (never zeros),
the reference on the drawn data, the run's one set of KernelBench weights, poisoning, output names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import KERNELS
from kernel_loop import loader, tensors
from kernel_loop.common import UsageError
from kernel_loop.config import RunConfig
from kernel_loop.measure.problem import Problem, import_ref, kernel_kind


def _problem(tmp_path: Path, ref="ref_vadd.py", kernel="py_vadd.py", dims=None, cfg=None, ref_text=None) -> Problem:
    root = tmp_path / "run"
    root.mkdir(parents=True, exist_ok=True)
    (root / "ref.py").write_text(ref_text if ref_text is not None else (KERNELS / ref).read_text())
    cfg = RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 257}, "seed": 42, **(cfg or {})})
    ref = import_ref(root)
    kind = kernel_kind(KERNELS / kernel, ref)
    text = (KERNELS / kernel).read_text() if kind == "cu" else None
    return Problem(cfg, ref, dims or {"N": 257}, "cpu", kind, text)


def test_a_data_set_holds_inputs_outputs_and_the_reference(tmp_path):
    ds = _problem(tmp_path).draw(5)
    assert set(ds.args) == {"x", "y", "out", "N"} and ds.in_place == ["out"] and ds.input_names() == ["x", "y"]
    assert ds.args["x"].shape == (257,) and ds.args["x"].abs().sum() > 0
    assert torch.equal(ds.expected["out"], ds.args["x"] + ds.args["y"])
    assert ds.expected["out"].data_ptr() != ds.args["out"].data_ptr()  # the reference's result is the judge's own


def test_seeds_give_fresh_reproducible_inputs(tmp_path):
    p = _problem(tmp_path)
    a, b, c = (p.draw(s).args["x"] for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert p.draw(3, reference=False).expected == {}


def test_a_reference_that_changes_its_inputs_is_bad_input(tmp_path):
    text = ("import torch\n"
            "def setup(N):\n    return {'x': torch.randn(N)}\n"
            "def reference(x):\n    x.mul_(2)\n    return x.clone()\n")
    with pytest.raises(UsageError, match="changed its input 'x'"):
        _problem(tmp_path, ref_text=text).draw(1)


def test_the_call_plan_says_nothing_about_counts_or_checks(tmp_path):
    p = _problem(tmp_path)
    ds = p.draw(1)
    names = {n: f"b-{n}" for n in ds.args}
    plan = p.call_plan(ds, "py", names)
    assert plan["tensors"] == {"x": "b-x", "y": "b-y", "out": "b-out"} and plan["outputs"] == {"out": "b-out"}
    assert plan["scalars"] == {"N": 257}
    assert not {"trials", "warmup", "checked", "mode", "seed"} & set(plan)


def test_returning_reference(tmp_path):
    p = _problem(tmp_path, ref="ref_softmax.py", kernel="triton_softmax.py", dims={"M": 3, "N": 40})
    ds = p.draw(1)
    assert ds.in_place == [] and list(ds.expected) == ["out"] and ds.expected["out"].shape == (3, 40)


def test_all_zero_inputs_are_refused(tmp_path):
    text = ("import torch\n"
            "def setup(N):\n    return {'inputs': {'x': torch.zeros(N), 'y': torch.randn(N), 'out': torch.empty(N)},"
            " 'outputs': ['out']}\n"
            "def reference(x, y, out):\n    out.copy_(x + y)\n")
    with pytest.raises(UsageError, match="input 'x' is all zeros"):
        _problem(tmp_path, ref_text=text).draw(1)


def test_missing_pieces_are_clear(tmp_path):
    with pytest.raises(UsageError, match="setup"):
        _problem(tmp_path, ref_text="def reference(x):\n    return x\n").draw(1)
    with pytest.raises(UsageError, match="needs N"):
        _problem(tmp_path, dims={"M": 3}).draw(1)


def test_kernelbench_weights_come_from_the_run_seed_alone(tmp_path):
    p = _problem(tmp_path, ref="kb_ref.py", kernel="kb_new.py", dims={"batch_size": 5})
    a, b = p.draw(1), p.draw(2)
    assert list(a.args) == ["arg0"] and a.args["arg0"].shape == (5, 64) and not torch.equal(a.args["arg0"], b.args["arg0"])
    state = {n: tensors.fingerprint(t) for n, t in p.state().items()}
    assert state
    again = _problem(tmp_path / "again", ref="kb_ref.py", kernel="kb_new.py", dims={"batch_size": 5})
    assert {n: tensors.fingerprint(t) for n, t in again.state().items()} == state
    other = _problem(tmp_path / "other", ref="kb_ref.py", kernel="kb_new.py", dims={"batch_size": 5},
                     cfg={"seed": 7})
    assert {n: tensors.fingerprint(t) for n, t in other.state().items()} != state


def test_normalize_outputs():
    t = torch.ones(2)
    assert tensors.normalize_outputs(t, ["y"]) == {"y": t}
    assert tensors.normalize_outputs(t, []) == {"out": t}
    assert list(tensors.normalize_outputs((t, t), ["a", "b"])) == ["a", "b"]
    assert list(tensors.normalize_outputs((t, t), [])) == ["out0", "out1"]
    assert list(tensors.normalize_outputs({"z": t}, ["y"])) == ["z"]


def test_poison_values():
    f, i, u, b = torch.ones(3), torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.uint8), torch.zeros(
        3, dtype=torch.bool)
    for t in (f, i, u, b):
        tensors.poison_tensor(t)
    assert all(math.isnan(v) for v in f.tolist())
    assert i.tolist() == [tensors.INT_SENTINEL] * 3 and u.tolist() == [255] * 3 and b.all()


def test_device_for(monkeypatch):
    monkeypatch.delenv("KERNEL_LOOP_DEVICE", raising=False)

    def cfg(**kw):
        return RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 1}, **kw})

    assert loader.device_for(cfg(gpu=2)) == "cuda:2"
    assert loader.device_for(cfg(gpu=0, device="cpu")) == "cpu"
    monkeypatch.setenv("KERNEL_LOOP_DEVICE", "cpu")
    assert loader.device_for(cfg(gpu=1)) == "cpu"


def test_a_cu_kernel_against_a_kernelbench_ref_is_refused(tmp_path):
    with pytest.raises(UsageError, match="a .cu kernel needs ref.py with reference"):
        _problem(tmp_path, ref="kb_ref.py", kernel="cu_vadd.cu")


def test_a_reference_output_at_a_freed_outputs_address_is_not_a_reused_buffer(tmp_path, monkeypatch):
    """The allocator gives a freed result's address to the next one: only a previous result still alive (the
    reference keeps it) makes the next at its address a reused buffer, cloned and allowed to the kernel."""
    p = _problem(tmp_path)
    ds = p.draw(1)
    (name, (hold, fp, _)), = p._prev_out.items()
    nxt = p.draw(2, reference=False)
    result = nxt.args["x"] + nxt.args["y"]
    monkeypatch.setattr(p, "run_reference", lambda args, ds, *a, **kw: {"out": result})
    p._prev_out = {name: (hold, fp, tensors.storage_ptr(result))}  # the first result, at the next one's address
    del ds  # the caller let go of the first result: freed
    assert hold.ref.expired()
    p.reference(nxt)
    assert not nxt.ref_props["out"]["reuses"] and nxt.expected["out"] is result  # not cloned
    kept = p.draw(3)  # one the reference still holds, at the next one's address: reused
    (name, (hold, fp, _)), = p._prev_out.items()
    again = p.draw(4, reference=False)
    monkeypatch.setattr(p, "run_reference", lambda args, ds, *a, **kw: {"out": kept.expected["out"]})
    p._prev_out = {name: (hold, fp, tensors.storage_ptr(kept.expected["out"]))}
    p.reference(again)
    assert again.ref_props["out"]["reuses"] and again.expected["out"] is not kept.expected["out"]
