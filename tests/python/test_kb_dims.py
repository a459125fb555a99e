"""kb_dims: the dims of a KernelBench file read from its AST (sizes, tuple elements, axis arguments,
derived constants) and ``apply_dims`` on an imported module."""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path

import pytest
from kernel_loop import kb_dims
from kernel_loop.common import UsageError

KERNELBENCH = Path(__file__).resolve().parents[3] / "shared" / "kernelbench"

CUMSUM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


batch_size = 32768
input_shape = (32768,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]
"""

# no torch: the module can be executed here, and get_inputs() reports the shape it would draw
PLAIN = """
batch_size = 16
in_features = 64
out_features = in_features * 2
bias_shape = (out_features, 1)
kernel_size = (3, 5)
padding = 0
scale = 1.0 / out_features
negative_slope = 0.01
name = "gemm"
flag = True
weird = len("abc")
after_weird = weird * 2


def get_inputs():
    return [(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape, kernel_size]
"""


def _module(text: str) -> types.ModuleType:
    mod = types.ModuleType("kb_plain")
    exec(compile(text, "kb_plain.py", "exec"), mod.__dict__)
    return mod


# --- sizes -------------------------------------------------------------------------------------------
def test_sizes_tuples_and_what_is_no_size():
    sizes = kb_dims.size_constants(PLAIN)
    # out_features = in_features * 2 is a derived int: still a size (it follows unless named);
    # bias_shape names another constant: derived, no size; floats, strings, bools and calls are no sizes
    assert sizes == {"batch_size": 16, "in_features": 64, "out_features": 128, "kernel_size": (3, 5), "padding": 0}
    assert kb_dims.flatten_dims(sizes) == {"batch_size": 16, "in_features": 64, "out_features": 128,
                                           "kernel_size_0": 3, "kernel_size_1": 5, "padding": 0}
    assert kb_dims.shape_dims(PLAIN) == {"batch_size": 16, "in_features": 64, "out_features": 128,
                                         "kernel_size_0": 3, "kernel_size_1": 5}  # positive values only
    consts = kb_dims.constants(PLAIN)
    assert consts["scale"] == 1.0 / 128 and consts["name"] == "gemm" and "weird" not in consts
    assert "after_weird" not in consts  # depends on a value that is not pure


def test_the_cumsum_file_has_a_tuple_size_and_an_axis():
    assert kb_dims.axis_constants(CUMSUM) == {"dim"}
    assert kb_dims.size_constants(CUMSUM) == {"batch_size": 32768, "input_shape": (32768,)}
    assert kb_dims.shape_dims(CUMSUM, {"input_shape_0": 1000}) == {"batch_size": 32768, "input_shape_0": 1000}


def test_sources_can_be_a_tree_a_path_or_text(tmp_path):
    path = tmp_path / "ref.py"
    path.write_text(CUMSUM)
    tree = ast.parse(CUMSUM)
    assert kb_dims.size_constants(path) == kb_dims.size_constants(tree) == kb_dims.size_constants(CUMSUM)
    with pytest.raises(TypeError):
        kb_dims.size_constants(42)


def test_assignment_forms_and_statements_that_hide_a_constant():
    text = """
M, N = 1024, 2048
K: int = 64
A = B = 8
A += 1
shape = (M // 2, 7)
T = (2 ** 10,)
from somewhere import N
if True:
    K = 3
"""
    consts = kb_dims.constants(text)
    assert consts["M"] == 1024 and consts["A"] == 9 and consts["B"] == 8 and consts["T"] == (1024,)
    assert "N" not in consts and "K" not in consts  # rebound by an import, inside an if: unknown from there on
    assert kb_dims.size_constants(text) == {"M": 1024, "A": 9, "B": 8, "T": (1024,)}  # shape names M: derived


def test_pure_expressions_are_bounded():
    consts = kb_dims.constants("a = 2 ** 100000\nb = (1,) * 10 ** 9\nc = 10 // 0\nd = 2 ** 10\ne = (1, 2)[1]\n")
    assert consts == {"d": 1024, "e": 2}


def test_a_tuple_element_named_like_a_constant_is_refused():
    with pytest.raises(UsageError, match="the constant shape_0 has the name of element 0 of shape"):
        kb_dims.flatten_dims(kb_dims.size_constants("shape = (4, 5)\nshape_0 = 3\n"))


# --- axes --------------------------------------------------------------------------------------------
AXIS_FORMS = """import torch
import torch.nn as nn
import torch.nn.functional as F

kw_axis = 1
method_axis = 2
function_axis = 0
module_axis = -1
list_axis = 1
pair_a, pair_b = 1, 2
flow_axis = 3
direct_flow = 1
size = 4096
dim = 1
axis = 0


class Model(nn.Module):
    def __init__(self, a, b, size, d):
        super().__init__()
        self.reduce = a
        self.hidden = size
        self.norm = nn.Softmax(dim=d)
        self.act = nn.LogSoftmax(module_axis)

    def forward(self, x):
        y = x.sum(method_axis) + torch.cumsum(x, function_axis) + F.softmax(x, dim=kw_axis)
        y = torch.cat([y, y], list_axis).transpose(pair_a, pair_b)
        return torch.amax(y, dim=self.reduce)


def get_inputs():
    return [torch.rand(size, size)]


def get_init_inputs():
    return [flow_axis, 7, size, direct_flow]
"""


def test_every_axis_form_is_told_from_a_size():
    assert kb_dims.axis_constants(AXIS_FORMS) == {
        "kw_axis", "method_axis", "function_axis", "module_axis", "list_axis", "pair_a", "pair_b", "flow_axis",
        "direct_flow", "dim", "axis"}
    assert kb_dims.size_constants(AXIS_FORMS) == {"size": 4096}


def test_a_constant_named_dim_that_is_a_size_stays_a_size():
    """Level 1 24_LogSoftmax: Model's own parameter dim (default 1) is the axis; the module constant dim is
    the row length, read by get_inputs, and get_init_inputs passes nothing."""
    text = """import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim
        self.sm = nn.Softmax(dim=dim)

    def forward(self, x):
        return torch.log_softmax(x, dim=self.dim)


batch_size = 4096
dim = 393216


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""
    assert kb_dims.axis_constants(text) == set()
    assert kb_dims.shape_dims(text) == {"batch_size": 4096, "dim": 393216}


def test_a_size_passed_to_model_is_not_an_axis():
    text = CUMSUM.replace("return torch.cumsum(x, dim=self.dim)", "return x[:, :self.dim]")
    assert kb_dims.axis_constants(text) == set()  # dim is read (get_init_inputs), never as an axis
    assert kb_dims.size_constants(text)["dim"] == 1


def test_an_axis_passed_to_forward_is_an_axis():
    text = """import torch
n = 64
red = 1


class Model(torch.nn.Module):
    def forward(self, x, d):
        return x.mean(dim=d)


def get_inputs():
    return [torch.rand(n, n), red]
"""
    assert kb_dims.axis_constants(text) == {"red"}


# --- shapes and their checks ------------------------------------------------------------------------
def test_a_shape_pins_what_it_names_and_derived_constants_follow():
    assert kb_dims.shape_dims(PLAIN, {"in_features": 10}) == {
        "batch_size": 16, "in_features": 10, "out_features": 20, "kernel_size_0": 3, "kernel_size_1": 5}
    assert kb_dims.shape_dims(PLAIN, {"in_features": 10, "out_features": 7})["out_features"] == 7  # named wins
    assert kb_dims.shape_dims(PLAIN, {"padding": 2, "kernel_size_1": 9}) == {
        "batch_size": 16, "in_features": 64, "out_features": 128, "kernel_size_0": 3, "kernel_size_1": 9,
        "padding": 2}


@pytest.mark.parametrize("changes, message", [
    ({"dim": 0}, "dims: dim = 1 in ref.py is an axis argument"),
    ({"input_shape": 5}, "input_shape = (32768,) is a tuple constant: name its elements (input_shape_0)"),
    ({"width": 5}, "width names no module-level integer constant (or tuple element)"),
    ({"input_shape_1": 5}, "input_shape_1 names no module-level integer constant"),
])
def test_changes_that_are_no_dims_are_refused_with_the_reason(changes, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kb_dims.check_changes(CUMSUM, changes, "dims")


def test_a_derived_tuple_is_changed_through_its_sources():
    with pytest.raises(UsageError, match="bias_shape_0: bias_shape is derived from other constants"):
        kb_dims.check_changes(PLAIN, {"bias_shape_0": 3})
    with pytest.raises(UsageError, match=r"bias_shape = \(128, 1\) is derived from other constants"):
        kb_dims.check_changes(PLAIN, {"bias_shape": 3})


# --- apply_dims -------------------------------------------------------------------------------------
def test_apply_dims_sets_named_dims_and_derived_constants_follow():
    mod = _module(PLAIN)
    changed = kb_dims.apply_dims(mod, {"in_features": 10, "kernel_size_1": 7}, PLAIN)
    assert changed == {"in_features": 10, "out_features": 20, "bias_shape": (20, 1), "kernel_size": (3, 7),
                       "scale": 1.0 / 20}
    assert mod.get_inputs() == [(16, 10)] and mod.get_init_inputs() == [10, 20, (20, 1), (3, 7)]
    assert mod.weird == 3 and mod.name == "gemm"  # not pure (a call) or unchanged: left alone


def test_apply_dims_starts_from_the_file_every_call():
    """One process runs several shapes: a dim a shape does not name takes the file's value, never the one a
    previous shape left behind."""
    mod = _module(PLAIN)
    kb_dims.apply_dims(mod, {"batch_size": 3, "in_features": 10}, PLAIN)
    changed = kb_dims.apply_dims(mod, {"in_features": 10}, PLAIN)
    assert changed == {"batch_size": 16}
    kb_dims.apply_dims(mod, {}, PLAIN)
    assert mod.get_init_inputs() == [64, 128, (128, 1), (3, 5)] and mod.scale == 1.0 / 128


def test_apply_dims_takes_a_complete_run_json_shape():
    mod = _module(PLAIN)
    shape = kb_dims.shape_dims(PLAIN, {"in_features": 32})
    kb_dims.apply_dims(mod, shape, PLAIN)
    assert mod.get_init_inputs() == [32, 64, (64, 1), (3, 5)]


def test_apply_dims_leaves_axes_alone_and_refuses_what_is_no_dim():
    text = CUMSUM.replace("import torch\nimport torch.nn as nn\n", "").replace("nn.Module", "object") \
        .replace("super().__init__()\n", "") \
        .replace("torch.rand(batch_size, *input_shape)", "(batch_size, *input_shape)")
    mod = _module(text)
    mod.dim = 5  # whatever set it: an axis is not apply_dims' business
    assert kb_dims.apply_dims(mod, {"input_shape_0": 1000, "dim": 1}, text) == {"input_shape": (1000,)}
    assert mod.dim == 5 and mod.get_inputs() == [(32768, 1000)]
    with pytest.raises(UsageError, match="dim = 1 in ref.py is an axis argument"):
        kb_dims.apply_dims(mod, {"dim": 2}, text)
    with pytest.raises(UsageError, match="names no module-level integer constant"):
        kb_dims.apply_dims(mod, {"nothing": 2}, text)


def test_apply_dims_reads_the_source_of_an_imported_file(tmp_path):
    path = tmp_path / "kb_file.py"
    path.write_text(PLAIN)
    spec = importlib.util.spec_from_file_location("kb_file_for_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        kb_dims.apply_dims(mod, {"batch_size": 2})
        assert mod.get_inputs() == [(2, 64)]
    finally:
        del sys.modules[spec.name]


# --- the KernelBench files themselves ---------------------------------------------------------------
@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason=f"no KernelBench checkout at {KERNELBENCH}")
def test_every_kernelbench_file_has_dims_and_the_known_axes():
    files = sorted(KERNELBENCH.glob("level[12]/*.py"))
    assert len(files) >= 200
    axes = {}
    for f in files:
        assert kb_dims.shape_dims(f), f.name
        if kb_dims.axis_constants(f):
            axes[f"{f.parent.name}/{f.name.split('_')[0]}"] = kb_dims.axis_constants(f)
    assert axes["level1/89"] == {"dim"} and axes["level1/47"] == {"reduce_dim"}
    assert axes["level2/8"] == {"sum_dim"} and axes["level2/80"] == {"max_dim"} and axes["level2/24"] == {"dim"}
    assert "level1/23" not in axes and "level1/24" not in axes  # dim = 393216 is the row length there
    assert kb_dims.shape_dims(next(KERNELBENCH.glob("level1/89_*.py"))) == {"batch_size": 32768, "input_shape_0": 32768}


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason=f"no KernelBench checkout at {KERNELBENCH}")
def test_apply_dims_on_imported_kernelbench_files():
    torch = pytest.importorskip("torch")
    for pattern, dims, want in (("level2/76_*.py", {"batch_size": 4, "in_features": 8, "out_features": 100}, (4, 100)),
                                ("level1/89_*.py", {"batch_size": 2, "input_shape_0": 1000}, (2, 1000))):
        path = next(KERNELBENCH.glob(pattern))
        spec = importlib.util.spec_from_file_location(f"kb_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        kb_dims.apply_dims(mod, dims, path.read_text())
        torch.manual_seed(0)
        out = mod.Model(*mod.get_init_inputs())(*mod.get_inputs())
        assert tuple(out.shape) == want, path.name


INPUT_ONLY = """import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, features, eps):
        super().__init__()
        self.norm = nn.LayerNorm(features, eps=eps)
        self.rows = rows

    def forward(self, x, y):
        return self.norm(x) + y[:, :1]


batch_size = 64
features = 256
rows = 32
width = 96
extra = width * 2
tiny = 4
eps = 1e-5


def get_inputs():
    return [torch.rand(batch_size, features), torch.rand(batch_size, extra, tiny)]


def get_init_inputs():
    return [features, eps]
"""


def test_the_dims_only_get_inputs_reads_are_input_only():
    """config.batch_shapes calls one shape with these a quarter smaller and odd: a dim get_init_inputs() hands to Model
    (features) or Model reads (rows) changes the instance, batch_size has shapes of its own, a dim under 8 is a
    structure, not a width; a dim read through a constant derived from it (width, through extra) counts."""
    dims = kb_dims.shape_dims(INPUT_ONLY)
    assert kb_dims.input_only(INPUT_ONLY, dims) == ["width"]
    assert kb_dims.input_only(INPUT_ONLY, {**dims, "width": 7}) == []


@pytest.mark.parametrize("level, stem, free", [
    ("level1", "19_ReLU", ["dim"]), ("level1", "1_Square_matrix_multiplication_", ["N"]),
    ("level1", "40_LayerNorm", []), ("level2", "76_Gemm_Add_ReLU", []),
    ("level2", "73_Conv2d_BatchNorm_Scaling", ["height", "width"]), ("level1", "89_cumsum", ["input_shape_0"]),
    ("level3", "35_LSTM", ["sequence_length"])])
def test_kernelbench_files_input_only_dims(level, stem, free):
    path = KERNELBENCH / level / f"{stem}.py"
    if not path.is_file():
        pytest.skip(f"{path} is not here (the shared KernelBench files)")
    assert kb_dims.input_only(path, kb_dims.shape_dims(path)) == free
