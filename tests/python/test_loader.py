"""loader: seeded inputs (never zeros), poisoning, launch, reference on clones, KernelBench (all on CPU)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import KERNELS
from kernel_loop import loader
from kernel_loop.common import UsageError
from kernel_loop.config import RunConfig


def _root(tmp_path: Path, ref: str, text: str | None = None) -> Path:
    root = tmp_path / "run"
    root.mkdir(exist_ok=True)
    (root / "ref.py").write_text(text if text is not None else (KERNELS / ref).read_text())
    return root


def _case(tmp_path, ref="ref_vadd.py", kernel="py_vadd.py", dims=None, seed=5, cfg=None, ref_text=None):
    cfg = RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 257}, "seed": 42, **(cfg or {})})
    return loader.load_case(cfg, _root(tmp_path, ref, ref_text), KERNELS / kernel, dims or {"N": 257}, seed, "cpu")


def test_case_inputs_outputs_and_launch(tmp_path):
    case = _case(tmp_path)
    assert set(case.inputs) == {"x", "y", "out", "N"} and list(case.outputs) == ["out"]
    assert case.inputs["x"].shape == (257,) and case.inputs["x"].abs().sum() > 0
    case.poison()
    assert torch.isnan(case.outputs["out"]).all()
    expected = case.reference()
    assert torch.isnan(case.outputs["out"]).all(), "the reference must not write the kernel's buffers"
    got = case.launch()
    assert torch.equal(got["out"], case.inputs["x"] + case.inputs["y"])
    assert torch.equal(expected["out"], got["out"])
    assert expected["out"].data_ptr() != got["out"].data_ptr()


def test_seeds_give_fresh_reproducible_inputs(tmp_path):
    a = _case(tmp_path, seed=1).inputs["x"]
    b = _case(tmp_path, seed=1).inputs["x"]
    c = _case(tmp_path, seed=2).inputs["x"]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_reference_ignores_kernel_results(tmp_path):
    case = _case(tmp_path, kernel="py_nowrite.py")
    case.outputs["out"].fill_(7.0)
    expected = case.reference()["out"]
    assert torch.allclose(expected, case.inputs["x"] + case.inputs["y"])


def test_reference_fn_and_callable(tmp_path):
    case = _case(tmp_path)
    case.reference_fn()()  # runs eagerly, no error
    fn, kwargs = case.reference_callable_and_args()
    assert set(kwargs) == {"x", "y", "out"}
    fn(**kwargs)
    assert torch.equal(kwargs["out"], case.inputs["x"] + case.inputs["y"])
    assert kwargs["x"].data_ptr() != case.inputs["x"].data_ptr()


def test_baseline_passthrough(tmp_path):
    case = _case(tmp_path)
    with pytest.raises(UsageError, match="takes no 'baseline'"):
        case.reference(baseline="flashinfer")
    text = ("import torch\n"
            "def setup(N):\n    return {'inputs': {'x': torch.randn(N), 'y': torch.randn(N), 'out': torch.empty(N)},"
            " 'outputs': ['out']}\n"
            "def reference(x, y, out, baseline=None):\n"
            "    out.copy_(x + y if baseline is None else x - y)\n")
    case = _case(tmp_path, ref_text=text)
    assert torch.equal(case.reference(baseline="flashinfer")["out"], case.inputs["x"] - case.inputs["y"])


def test_returning_reference_and_kernel(tmp_path):
    case = _case(tmp_path, ref="ref_softmax.py", kernel="triton_softmax.py", dims={"M": 3, "N": 40},
                 cfg={"impl": "cute-dsl", "seed": 1})  # not triton: keep this test off the interpreter
    assert case.outputs == {}
    expected = case.reference()
    assert list(expected) == ["out"] and expected["out"].shape == (3, 40)


def test_all_zero_inputs_are_refused(tmp_path):
    text = ("import torch\n"
            "def setup(N):\n    return {'inputs': {'x': torch.zeros(N), 'y': torch.randn(N), 'out': torch.empty(N)},"
            " 'outputs': ['out']}\n"
            "def reference(x, y, out):\n    out.copy_(x + y)\n")
    with pytest.raises(UsageError, match="input 'x' is all zeros"):
        _case(tmp_path, ref_text=text)


def test_missing_pieces_are_clear(tmp_path):
    text = "def reference(x):\n    return x\n"
    with pytest.raises(UsageError, match="setup"):
        _case(tmp_path, ref_text=text)
    with pytest.raises(UsageError, match="needs N"):
        _case(tmp_path, dims={"M": 3})
    with pytest.raises(UsageError, match="defines no run_kernel"):
        _case(tmp_path, kernel="kb_new.py")


def test_kernelbench_case(tmp_path):
    case = _case(tmp_path, ref="kb_ref.py", kernel="kb_new.py", dims={"batch_size": 5})
    assert list(case.inputs) == ["arg0"] and case.inputs["arg0"].shape == (5, 64)
    got, expected = case.launch(), case.reference()
    assert list(got) == list(expected) == ["out"]
    assert torch.allclose(got["out"], expected["out"], atol=1e-5)
    fn, kwargs = case.reference_callable_and_args()
    assert torch.equal(fn(**kwargs), expected["out"])


def test_normalize_outputs():
    t = torch.ones(2)
    assert loader.normalize_outputs(t, ["y"]) == {"y": t}
    assert loader.normalize_outputs(t, []) == {"out": t}
    assert list(loader.normalize_outputs((t, t), ["a", "b"])) == ["a", "b"]
    assert list(loader.normalize_outputs((t, t), [])) == ["out0", "out1"]
    assert list(loader.normalize_outputs({"z": t}, ["y"])) == ["z"]


def test_poison_values():
    f, i, u, b = torch.ones(3), torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.uint8), torch.zeros(
        3, dtype=torch.bool)
    for t in (f, i, u, b):
        loader.poison_tensor(t)
    assert all(math.isnan(v) for v in f.tolist())
    assert i.tolist() == [loader.INT_SENTINEL] * 3 and u.tolist() == [255] * 3 and b.all()


def test_device_for(monkeypatch):
    monkeypatch.delenv("KERNEL_LOOP_DEVICE", raising=False)
    def cfg(**kw):
        return RunConfig.from_json({"kernel": "k", "impl": "triton", "dims": {"N": 1}, **kw})

    assert loader.device_for(cfg(gpu=2)) == "cuda:2"
    assert loader.device_for(cfg(gpu=0, device="cpu")) == "cpu"
    monkeypatch.setenv("KERNEL_LOOP_DEVICE", "cpu")
    assert loader.device_for(cfg(gpu=1)) == "cpu"


def test_cu_kernel_needs_cuda(tmp_path):
    with pytest.raises(UsageError, match="needs a CUDA device"):
        _case(tmp_path, kernel="cu_vadd.cu", cfg={"impl": "cuda-cpp", "seed": 1})
