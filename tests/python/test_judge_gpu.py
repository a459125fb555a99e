"""GPU: the judge that owns the data, on KernelBench models with parameters and on kernels written to cheat.

- KernelBench as published (``ModelNew = Model``): two level-2 problems and a level-1 convolution through
  correctness, profile, finish, the final gate and benchmark, and level 3's LSTM (hundreds of launches a call)
  likewise within the profile's budget; a ModelNew with one weight changed fails correctness; a ModelNew with a
  renamed parameter is refused in one line.  The problems are read from ``$KERNEL_LOOP_KERNELBENCH_ROOT`` (a
  folder holding level1/, level2/ and level3/) or ``../shared/kernelbench``.
- Cheats (Triton and torch softmax, 4096 x 8192 fp32).  Each states the attack it stands for.  The static
  check (a first filter) is switched off for them, so what is tested is the defence behind it: the judge's
  verification of the timed and profiled calls, the ncu cross-check and the output-bytes floor.

Run: ``pytest -m gpu -s tests/python/test_judge_gpu.py`` on a machine with a CUDA GPU and Nsight Compute.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import klcli
import pytest
from conftest import REPO
from kernel_loop import kb_dims, rundir, static_check

pytestmark = pytest.mark.gpu
KB = Path(os.environ.get("KERNEL_LOOP_KERNELBENCH_ROOT") or REPO.parent / "shared" / "kernelbench")
HAS_NCU = shutil.which("ncu") is not None or Path("/usr/local/cuda/bin/ncu").exists()
needs_gpu = pytest.mark.skipif(not HAS_NCU, reason="Nsight Compute (ncu) is not installed")


@pytest.fixture(autouse=True)
def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")


def _ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    return proc


def _kb(level: str, stem: str) -> Path:
    path = KB / level / f"{stem}.py"
    if not path.is_file():
        pytest.skip(f"{path} is not there (set KERNEL_LOOP_KERNELBENCH_ROOT)")
    return path


def _init(tmp_path: Path, ref: Path, kernel_text: str, *extra: str) -> Path:
    kernel = tmp_path / "baseline.py"
    kernel.write_text(kernel_text)
    out = tmp_path / "run"
    _ok(klcli.run("init", out, "--kernel", ref.stem, "--ref", ref, "--impl", "triton", "--baseline", kernel,
                  "--iterations", "1", "--warmup", "3", "--trials", "20", *extra, timeout=900))
    return out


def _batches(data: dict) -> list[int]:
    return [s["dims"]["batch_size"] for s in data["shapes"]]


def _widths(data: dict) -> list[tuple[int, int]]:
    return [(s["dims"]["batch_size"], s["dims"]["dim"]) for s in data["shapes"]]


def _verdict(out: Path, label: str, passes: bool, *, timeout: int = 600, shown=None) -> dict:
    """Correctness on ``out``: its verdict printed for the device's log before the exit code is asserted (what
    ``shown`` says of the data, else its error), and its correctness.json."""
    proc = klcli.run("correctness", out, timeout=timeout)
    data = json.loads((out / "v0" / "correctness.json").read_text())
    print(f"{label}: {data['result']}, {shown(data) if shown else 'error ' + str(data['error'])}")
    assert proc.returncode == (0 if passes else 1), proc.stderr[-3000:]
    return data


# --- KernelBench with parameters --------------------------------------------------------------------------
@needs_gpu
@pytest.mark.parametrize("level, stem", [("level2", "86_Matmul_Divide_GELU"), ("level2", "99_Matmul_GELU_Softmax"),
                                         ("level1", "67_conv_standard_1D")])
def test_a_kernelbench_model_with_parameters_runs_the_whole_loop(tmp_path, level, stem):
    """The regression of the run an agent could not get past v0 on: every process gets the run's one set of
    weights, so Model itself passes correctness, profile, the final gate and the benchmark."""
    from test_benchmark_gpu import fill_kbs

    ref = _kb(level, stem)
    out = _init(tmp_path, ref, ref.read_text() + "\n\nModelNew = Model\n")
    _ok(klcli.run("correctness", out, timeout=900))
    _ok(klcli.run("profile", out, timeout=900))
    _ok(klcli.run("kbs", "evidence", out, timeout=300))
    fill_kbs(out / "v0", "The final version; nothing follows it.")
    _ok(klcli.run("finish", out, "--reason", "ModelNew = Model: a check of the harness"))
    gate = _ok(__import__("subprocess").run(["bash", str(rundir.gate_script()), str(out / "v0"), "--final"],
                                            capture_output=True, text=True))
    assert "PASS" in gate.stdout or gate.returncode == 0
    _ok(klcli.run("benchmark", out, "--trials", "20", "--warmup", "3", timeout=900))
    bench = json.loads((out / "benchmark.json").read_text())
    rows = {r["name"]: r for r in bench["rows"]}
    assert rows["solution"]["correct"] and rows["solution"]["correct_after_timing"], rows["solution"]["error"]
    for name in ("pytorch-eager", "torch-compile"):
        assert rows[name]["correct"] and rows[name]["correct_after_timing"], rows[name]["error"]
    # the solution is the eager model itself, timed the same way: within noise of the eager baseline
    ratio = bench["speedups"]["pytorch-eager"]
    assert 0.8 < ratio < 1.25, ratio
    assert bench["roofline"] is not None  # the inputs' and outputs' bytes, labelled a lower bound
    ncu = json.loads((out / "v0" / "ncu.json").read_text())
    print(f"{stem}: ncu {ncu['metrics']['duration_us']:.1f} us, event median {ncu['timing']['median_us']:.1f} us, "
          f"benchmark {rows['solution']['stats_us']['median']:.1f} us vs eager "
          f"{rows['pytorch-eager']['stats_us']['median']:.1f} us, compile "
          f"{rows['torch-compile']['stats_us']['median']:.1f} us; judge {ncu.get('judge')}")


@needs_gpu
def test_a_level_3_network_of_many_kernels_runs_the_whole_loop_within_the_profile_budget(tmp_path):
    """Issue 43: KernelBench level 3's LSTM (cuDNN's RNN, hundreds of launches a call: its profile never ended when
    ncu replayed every kernel) through the whole loop at its own sizes; the bounded profile ends within 90 s and the
    version's folder stays under 10 MB, its ncu_summary.md a few KB."""
    import time

    from test_benchmark_gpu import fill_kbs

    ref = _kb("level3", "35_LSTM")
    out = _init(tmp_path, ref, ref.read_text() + "\n\nModelNew = Model\n")
    _ok(klcli.run("correctness", out, timeout=900))
    t0 = time.monotonic()
    _ok(klcli.run("profile", out, timeout=900))
    took = time.monotonic() - t0
    v0 = out / "v0"
    data = json.loads((v0 / "ncu.json").read_text())
    inv, size = data["inventory"], sum(p.stat().st_size for p in v0.rglob("*") if p.is_file())
    print(f"35_LSTM: profile {took:.1f} s, {inv['launches']} launches ({inv['source']}), {len(data['kernels'])} "
          f"profiled, folder {size / 2**20:.2f} MiB, ncu_summary.md {(v0 / 'ncu_summary.md').stat().st_size} bytes")
    assert took < 90 and size < 10 * 2**20 and (v0 / "ncu_summary.md").stat().st_size < 8192
    assert inv["launches"] > len(data["kernels"]) >= 1 and data["focus"]["label"]
    _ok(klcli.run("kbs", "evidence", out, timeout=300))
    fill_kbs(v0, "The final version; nothing follows it.")
    _ok(klcli.run("finish", out, "--reason", "ModelNew = Model: a check of the harness on a level-3 network"))
    _ok(__import__("subprocess").run(["bash", str(rundir.gate_script()), str(v0), "--final"], capture_output=True,
                                     text=True))
    _ok(klcli.run("benchmark", out, "--trials", "20", "--warmup", "3", timeout=900))
    rows = {r["name"]: r for r in json.loads((out / "benchmark.json").read_text())["rows"]}
    for name in ("solution", "pytorch-eager", "torch-compile"):
        assert rows[name]["correct"] and rows[name]["correct_after_timing"], rows[name]["error"]


def test_a_modelnew_with_one_weight_changed_fails_correctness(tmp_path):
    ref = _kb("level2", "86_Matmul_Divide_GELU")
    text = ref.read_text().replace("class Model(", "class ModelNew(").replace("super(Model,", "super(ModelNew,") + '''

def _forward(self, x):
    w = self.linear.weight.clone()
    w[0, 0] += 1.0
    x = torch.nn.functional.linear(x, w, self.linear.bias)
    return torch.nn.functional.gelu(x / self.divisor)


ModelNew.forward = _forward
'''
    out = _init(tmp_path, ref, text)
    proc = klcli.run("correctness", out, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "elements outside tolerance" in proc.stderr


def test_a_modelnew_with_a_renamed_parameter_is_refused(tmp_path):
    ref = _kb("level2", "86_Matmul_Divide_GELU")
    text = ref.read_text().replace("class Model(", "class ModelNew(").replace("super(Model,", "super(ModelNew,")
    text = text.replace("self.linear", "self.fc")
    out = _init(tmp_path, ref, text)
    proc = klcli.run("correctness", out, timeout=900)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("kernel-loop: error:")]
    assert len(errors) == 1 and "ModelNew lacks Model's 'linear.weight'" in errors[0], proc.stderr[-3000:]
    assert not (out / "v0" / "correctness.json").exists()


def test_a_step_on_another_card_than_the_runs_is_refused_before_it_measures(tmp_path, monkeypatch, capsys):
    """Seen on the device: the l1norm example, measured on an H200, extended on an H100: correctness and profile ran
    (170 s), and only the final gate failed them for the card.  They now refuse in one line, and record nothing."""
    from kernel_loop import records

    ref = _kb("level1", "19_ReLU")
    text = "import torch\nfrom torch import nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
           "        return torch.relu(x)\n"
    out = _init(tmp_path, ref, text, "--dims", "batch_size=16,dim=1024", "--clock-control", "none")
    assert klcli.main("correctness", out) == 0
    real = records.check_run_files
    monkeypatch.setattr(records, "check_run_files", lambda root, recs: real(root, recs) and "NVIDIA B200")
    capsys.readouterr()
    for step in ("profile", "correctness"):
        before = (out / "records.log").read_text()
        assert klcli.main(step, out) == 2, step
        errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("kernel-loop: error:")]
        assert len(errors) == 1 and "this run's GPU is the NVIDIA B200 init measured" in errors[0], errors
        assert (out / "records.log").read_text() == before


@pytest.mark.parametrize("stem", ["33_Gemm_Scale_BatchNorm", "73_Conv2d_BatchNorm_Scaling",
                                  "66_Matmul_Dropout_Softmax"])
def test_a_kernelbench_model_whose_output_depends_on_the_mode_passes_at_three_batch_sizes(tmp_path, stem):
    """Model itself, in the states a user calls it in on the GPU: BatchNorm's training steps (statistics left for
    the eval() call after them, with and without autograd), dropout's deterministic buffers, one instance called at
    its own batch size, then at one (four calls), at half of it and at a quarter more, each of the last two followed
    by its own again (held.other_batches)."""
    import re

    ref = _kb("level2", stem)
    text = ref.read_text()
    b = int(re.search(r"^batch_size = (\d+)", text, re.M).group(1))
    out = _init(tmp_path, ref, text + "\n\nModelNew = Model\n")
    _ok(klcli.run("correctness", out, timeout=900))
    data = json.loads((out / "v0" / "correctness.json").read_text())
    conds = [t["condition"] for s in data["shapes"] for t in s["trials"]]
    notes = [n for s in data["shapes"] for n in s.get("notes") or []]
    print(f"{stem}: {[s['dims']['batch_size'] for s in data['shapes']]} batch sizes, {len(conds)} calls, "
          f"{sorted(set(conds))}; notes {notes}")
    # each other batch size (one, half, and a quarter more made odd: config.batch_shapes) is followed by the run's own,
    # and where some dims reach only get_inputs() (a convolution's height and width), half the batch at those made odd
    larger, free = (b + max(1, b // 4)) | 1, kb_dims.input_only(ref, kb_dims.shape_dims(ref))
    assert data["result"] == "PASS"
    assert [s["dims"]["batch_size"] for s in data["shapes"]] == [b, 1, b // 2, b, larger, b] + [b // 2, b] * bool(free)
    if free:
        assert {t["condition"] for t in data["shapes"][6]["trials"]} >= {"sizes:other", "mode:grad"}
        assert all(data["shapes"][6]["dims"][n] == data["shapes"][0]["dims"][n] * 3 // 4 | 1 for n in free)
    assert len(data["shapes"][1]["trials"]) == 4 and all(len(data["shapes"][i]["trials"]) >= 8 for i in (2, 4))
    assert all(len(data["shapes"][i]["trials"]) == 2 for i in (3, 5))
    if "BatchNorm" in stem:
        assert {"mode:train-step", "mode:train-step+grad", "mode:after-train", "weights:twin"} <= set(conds)
    else:  # dropout, and no buffer: training mode is not compared
        assert any("not compared: Model's output in training mode changes from call to call" in n for n in notes)


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_linear_relu_row_path.py", False),
                                            ("kb_new_linear_cached_weight_t.py", True)])
def test_an_extra_shape_of_another_batch_size_keeps_the_runs_own_batch_sizes_on_the_gpu(tmp_path, kernel, passes):
    """An --extra-shapes entry of another batch size once dropped correctness's own (one, half, a quarter more): the
    Linear+ReLU whose one-row path forgets the bias passed such a run.  On the GPU both sets are called now."""
    out = _init(tmp_path, klcli.KERNELS / "kb_ref_linear_relu.py", (klcli.KERNELS / kernel).read_text(), "--dims",
                "batch_size=32,features=64", "--extra-shapes", "batch_size=48")
    data = _verdict(out, kernel, passes, shown=lambda d: f"batch sizes {_batches(d)}")
    sizes = _batches(data)
    if passes:
        assert {1, 16, 32, 41, 48} <= set(sizes), sizes
    else:
        assert "batch_size=1," in data["error"], data["error"]


@pytest.mark.parametrize("kernel, impl, passes", [("kb_triton_relu_masked.py", "triton", True),
                                                  ("kb_triton_relu_whole_blocks.py", "triton", False),
                                                  ("kb_cuda_relu_vec4.py", "cuda-cpp", True),
                                                  ("kb_cuda_relu_rows_vec4_unchecked.py", "cuda-cpp", False)])
def test_input_sizes_other_than_the_runs_on_the_gpu(tmp_path, kernel, impl, passes):
    """The run's width 1024 at every batch size, then 769 at half the batch (sizes:other): a Triton ReLU with no tail
    mask fails there; a masked one, and a CUDA C++ one (load_inline) that moves float4 where the address allows and
    the tail one by one, pass; one that loads float4 from each row's start unchecked faults there (a misaligned
    address: the kernel's failure, not a refusal)."""
    out = _init(tmp_path, klcli.KERNELS / "kb_ref_relu_rand.py", (klcli.KERNELS / kernel).read_text(), "--dims",
                "batch_size=64,dim=1024", "--impl", impl)
    data = _verdict(out, kernel, passes, timeout=900, shown=lambda d: f"shapes {_widths(d)}, error {d['error']}")
    shapes = _widths(data)
    assert (32, 769) in shapes, shapes
    if not passes:
        assert "as a user's input of another width" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_triton_linear_scaled_arg.py", True),
                                            ("kb_cheat_linear_scaled_arg_hardcoded.py", False),
                                            ("kb_new_linear_scaled_arg_refuses_init.py", True)])
def test_a_second_instance_with_other_float_arguments_on_the_gpu(tmp_path, kernel, passes):
    """The second instance (weights:twin) built with the float constructor arguments scaled: a Triton epilogue that
    takes its own instance's scale and slope passes; one with the file's values written in fails there."""
    out = _init(tmp_path, klcli.KERNELS / "kb_ref_linear_scaled_arg.py", (klcli.KERNELS / kernel).read_text(), "--dims",
                "batch_size=16,features=32")
    data = _verdict(out, kernel, passes)
    md = (out / "v0" / "correctness.md").read_text()
    refused = "refuses" in kernel  # made for the file's values, it raises on others: noted, not failed
    assert ("the kernel refused the second instance's float arguments" in md) is refused, md[:3000]
    assert ("the second instance (weights:twin) is built with [32, " in md) is not refused, md[:3000]
    if not passes:
        assert "float constructor arguments scaled" in data["error"], data["error"]


@pytest.mark.parametrize("passes", [True, False])
def test_a_row_leading_with_minus_inf_meets_an_online_softmax_on_the_gpu(tmp_path, passes):
    """range:masked on the GPU: a Triton online softmax whose running max is still -inf after a masked block rescales
    by exp(-inf - -inf), NaN, unless it takes that case as nothing summed yet (the honest one)."""
    text = (klcli.KERNELS / "kb_triton_softmax_online.py").read_text()
    if not passes:
        text = text.replace('safe = tl.where(new == float("-inf"), 0.0, new)', "safe = new")
    out = _init(tmp_path, klcli.KERNELS / "kb_ref_softmax.py", text, "--dims", "batch_size=64,dim=4096")
    data = _verdict(out, f"online softmax ({'honest' if passes else 'NaN on a masked block'})", passes)
    assert any(t["condition"] == "range:masked" for s in data["shapes"] for t in s["trials"])
    if not passes:
        assert "leads with -inf" in data["error"], data["error"]


@pytest.mark.parametrize("kernel, passes", [("kb_cheat_bn_fold_kept_past_training.py", False),
                                            ("kb_cheat_bn_stats_frozen_after_three_batches.py", False),
                                            ("kb_new_batchnorm.py", True)])
def test_a_batchnorm_fold_kept_past_training_is_refused_on_the_gpu(tmp_path, kernel, passes):
    out = _init(tmp_path, klcli.KERNELS / "kb_ref_batchnorm.py", (klcli.KERNELS / kernel).read_text(), "--dims",
                "batch_size=256,features=512")
    proc = klcli.run("correctness", out, timeout=600)
    assert proc.returncode == (0 if passes else 1), proc.stderr[-3000:]
    if not passes:
        assert "training-mode call" in proc.stderr or "buffer 'bn.running_" in proc.stderr, proc.stderr[-3000:]


LINEAR = ("kb_ref_linear_relu.py", "batch_size=256,features=512")


@pytest.mark.parametrize("ref, dims, kernel, passes", [
    ("kb_ref_shifted_scale.py", "batch_size=64,features=4096", "kb_cheat_scale_grad_bf16.py", False),
    ("kb_ref_shifted_scale.py", "batch_size=64,features=4096", "kb_new_scale_grad_exact.py", True),
    ("kb_ref_batchnorm.py", "batch_size=1024,features=32", "kb_new_batchnorm_sequential.py", True),
    ("kb_ref_noise_in_forward.py", "batch_size=256,features=512", "kb_cheat_noise_grad_clean_input.py", False),
    ("kb_ref_noise_in_forward.py", "batch_size=256,features=512", "kb_new_noise_grad_custom_backward.py", True),
    (*LINEAR, "kb_cheat_linear_relu_train_mask_with_input_grad.py", False),
    (*LINEAR, "kb_new_linear_relu_grads_as_asked.py", True),
    (*LINEAR, "kb_new_linear_relu_eval_without_autograd.py", True),
    (*LINEAR, "kb_cheat_linear_relu_grad_accumulated_twice.py", False),
    (*LINEAR, "kb_new_linear_relu_grad_accumulated_into_grad.py", True),
    ("kb_ref_gelu.py", "batch_size=256,dim=1024", "kb_cheat_gelu_grad_stored_row_major.py", False),
    ("kb_ref_gelu.py", "batch_size=256,dim=1024", "kb_new_gelu_grad_contiguous.py", True),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_cheat_gelu_grad_contiguous_on_last_stride.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_cheat_gelu_grad_row_major_by_first_stride.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_cheat_gelu_grad_one_value_where_any_stride_0.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_new_gelu_grad_contiguous.py", True),
    (*LINEAR, "kb_cheat_linear_relu_grad_set_where_not_contiguous.py", False),
    (*LINEAR, "kb_cheat_linear_relu_grad_overwritten.py", False),
    ("kb_ref_batchnorm.py", "batch_size=256,features=512", "kb_new_linear_bn_bias_left_out_in_training.py", True),
    (*LINEAR, "kb_cheat_linear_relu_grad_off_in_reentrant_checkpoint.py", False),
    (*LINEAR, "kb_new_linear_relu_reentrant_checkpoint.py", False),
    (*LINEAR, "kb_new_linear_relu_checkpoint.py", True),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_cheat_gelu_grad_views_the_upstream.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_new_gelu_without_backward.py", True),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_cheat_gelu_grad_none_where_not_contiguous.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_cheat_gelu_grad_fake_oom_where_not_contiguous.py", False),
    ("kb_ref_gelu_seq.py", "batch_size=16,seq=128,dim=256", "kb_cheat_gelu_grad_fake_graph_freed_where_not_contiguous.py",
     False)])
def test_gradients_as_a_users_backward_gets_them_on_the_gpu(tmp_path, ref, dims, kernel, passes):
    """The gradient checks of the thirty-first session on the GPU, each cheat beside an honest backward: a float64
    allowance local to each element (modes.grad_as_exact), none from a Model that draws, training-mode calls with
    plain-data inputs or frozen parameters, what a backward writes into .grad counted (tensors.grads_into), and upstream
    gradients in four layouts (tensors.upstream), gradients zero in float64 not owed; the thirty-second's: gradients
    read from .grad after torch.autograd.backward, so reentrant checkpointing is compared; a backward that raises in
    some calls and runs in others fails; the thirty-third's: an out-of-memory error on a device with room, or "through the
    graph a second time" where Model keeps no graph, is such a raise (modes.raise_excused)."""
    out = _init(tmp_path, klcli.KERNELS / ref, (klcli.KERNELS / kernel).read_text(), "--dims", dims)
    data = _verdict(out, f"{kernel}", passes)
    assert passes or "gradient of " in data["error"] or "'backward()'" in data["error"], data["error"]


# --- cheats -------------------------------------------------------------------------------------------------
REF = '''import torch


def setup(M, N):
    return {"x": torch.randn(M, N)}


def reference(x):
    return torch.softmax(x, dim=-1)
'''
REF_INTO = '''import torch


def setup(M, N):
    return {"inputs": {"x": torch.randn(M, N), "y": torch.empty(M, N)}, "outputs": ["y"]}


def reference(x, y):
    y.copy_(torch.softmax(x, dim=-1))
'''
TRITON = (klcli.KERNELS / "triton_softmax.py").read_text()
SCALE_TIMER = '''
import sys as _sys
_T = _sys.modules["kernel_loop.timing"]
_orig = _T.CallTimer.time


def _fast(self, fn, key=None, *, nvtx=None):
    v, us, host, delay = _orig(self, fn, key, nvtx=nvtx)
    return v, us * 0.4, host, delay


_T.CallTimer.time = _fast
'''
CHEATS = {
    # scales the timer by 0.4, and under ncu runs 40% of the rows so that ncu would agree
    "scale_timer_and_fewer_rows_under_ncu": TRITON.replace("_softmax[(M,)]", "_softmax[(M * 2 // 5 if _NCU else M,)]")
    + SCALE_TIMER + "\nimport os as _os\n_NCU = 'CUDA_INJECTION64_PATH' in _os.environ\n",
    # scales the timer by 0.4 and computes honestly everywhere
    "scale_timer": TRITON + SCALE_TIMER,
    # the timed call writes one element; a patched hand-over computes the result after the end event
    "work_outside_the_window": '''import sys
import torch

_W = sys.modules["__main__"].Worker
_orig = _W._stage_out


def _late(self, k, value, *rest):
    x = next(t for t in self.local.values() if t.dim() == 2)
    return _orig(self, k, torch.softmax(x, dim=-1), *rest)


_W._stage_out = _late


def run_kernel(x, M, N):
    y = torch.empty_like(x)
    y[0, 0] = 0.0
    return y
''',
    # writes its whole output in the timed call (so the bytes floor holds), and computes the values in the first
    # tensor copy after it: the hand-over of its results, outside the CUDA events (seen on the H200 with a tensor
    # subclass; a patched copy_ is the same deferral without the subclass the worker now refuses)
    "deferred_to_the_hand_over": '''import torch

_pending = []
_copy = torch.Tensor.copy_


def _late_copy(self, src, non_blocking=False):
    while _pending:
        x, y = _pending.pop()
        with torch.inference_mode(y.is_inference()):  # a result made in a call under inference_mode
            _copy(y, torch.softmax(x, dim=-1))
    return _copy(self, src, non_blocking)


torch.Tensor.copy_ = _late_copy


def run_kernel(x, M, N):
    y = torch.zeros_like(x)
    _pending.append((x, y))
    return y
''',
    # finds the worker's timer up the call stack and scales what its primitives report (seen on the H200: 0.45x)
    "timer_through_frames": TRITON.replace("def run_kernel(", '''import sys as _sys


def _scale_the_timer():
    f = _sys._getframe(1)
    while f is not None:
        t = f.f_locals.get("self")
        if type(t).__name__ == "CallTimer" and not getattr(t.p, "scaled", False):
            real = t.p.elapsed
            t.p.elapsed = lambda s, e: real(s, e) * 0.45
            t.p.scaled = True
        f = f.f_back


def run_kernel(''', 1).replace("    y = torch.empty_like(x)", "    _scale_the_timer()\n    y = torch.empty_like(x)", 1),
}


def _profile(tmp_path, ref_text, kernel_text, monkeypatch, dims="M=4096,N=8192"):
    monkeypatch.setattr(static_check, "check_kernel_source", lambda path: None)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "ref.py").write_text(ref_text)
    (tmp_path / "k.py").write_text(kernel_text)
    out = tmp_path / "run"
    # init in a child: its GPU check makes a CUDA context, which in this process would stay open for the
    # rest of the session, and the judge rightly refuses to time next to another process on the GPU
    # --clock-control none, as the project measures on the lent H200: under ncu's default (the base clock locked),
    # ncu's sum is scaled down by the clock ratio (x0.75 there), which leaves a memory-bound kernel room to defer part
    # of its work past the events (seen on 2026-12-04: the hand-over patch passed profile at the base clock)
    _ok(klcli.run("init", out, "--kernel", "softmax", "--ref", tmp_path / "ref.py", "--impl", "triton",
                  "--baseline", tmp_path / "k.py", "--dims", dims, "--warmup", "10", "--trials", "50",
                  "--clock-control", "none", timeout=900))
    rc_c = klcli.main("correctness", out)
    rc_p = klcli.main("profile", out) if rc_c == 0 else None
    ncu = json.loads((out / "v0" / "ncu.json").read_text()) if rc_p == 0 else None
    return rc_c, rc_p, ncu


@needs_gpu
@pytest.mark.parametrize("name", list(CHEATS))
def test_a_cheat_that_forges_its_time_is_refused(tmp_path, monkeypatch, capsys, name):
    rc_c, rc_p, ncu = _profile(tmp_path, REF, CHEATS[name], monkeypatch)
    err = capsys.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith("kernel-loop: error:")]
    print(f"{name}: correctness rc {rc_c}, profile rc {rc_p}: {line[-1][:400] if line else ''}")
    if ncu is not None:  # what let it through, for the log: the sums, the event times, the kernels
        t = ncu.get("timing") or {}
        print(f"{name}: event median {ncu['metrics'].get('event_median_us')} us (min {t.get('min_us')}, max "
              f"{t.get('max_us')}, host {t.get('host_overhead_us')}), ncu kernel time "
              f"{ncu['inventory'].get('kernel_time_us')} us, rows "
              f"{[(r['name'][:40], r['launches'], r['time_us']) for r in ncu['inventory']['rows']]}")
    assert rc_c == 0, err[-3000:]  # its outputs are right: its time is what it forges
    if rc_p == 0 and name == "work_outside_the_window":
        # its one-element write is a pageable host-to-device copy, which holds the host until the stream drains: the
        # host's work after it then falls inside the events, and one run in three on the H100 the event median rose
        # within 10% of what ncu saw (the deferred softmax and its hand-over).  Then it must gain nothing: its time
        # is no shorter than the same softmax's done honestly, measured here
        honest = "import torch\n\n\ndef run_kernel(x, M, N):\n    return torch.softmax(x, dim=-1)\n"
        _, rc_h, ref_ncu = _profile(tmp_path / "honest", REF, honest, monkeypatch)
        assert rc_h == 0, capsys.readouterr().err[-3000:]
        mine, theirs = ncu["metrics"]["event_median_us"], ref_ncu["metrics"]["event_median_us"]
        print(f"{name}: event median {mine} us against the honest softmax's {theirs} us")
        assert mine >= 0.9 * theirs, (mine, theirs)
        return
    assert rc_p == 1, err[-3000:]
    assert any(w in err for w in ("the run under ncu", "exceeds the CUDA-event median", "take at least",
                                  "No kernels were profiled", "profiled no kernel")), err[-3000:]


SKIP_UNPOISONED = '''import torch


def run_kernel(x, y, M, N):
    rows = torch.isnan(y[:, 0]) | (y[:, 0] < -1e37)
    y[rows] = torch.softmax(x[rows], dim=-1)
'''
HONEST_INTO = '''import torch


def run_kernel(x, y, M, N):
    y.copy_(torch.softmax(x, dim=-1))
'''
MEMO = '''import torch

_cache = {}


def run_kernel(x, M, N):
    key = (x.data_ptr(), x._version)
    if key not in _cache:
        _cache.clear()
        _cache[key] = torch.softmax(x, dim=-1)
    return _cache[key]
'''
MEMO_PTR = MEMO.replace("(x.data_ptr(), x._version)", "x.data_ptr()")


@needs_gpu
def test_cheats_that_skip_work_gain_nothing(tmp_path, monkeypatch):
    """A kernel that computes a row only while its output still holds the poison fails correctness (its outputs are
    handed zeros, random values or a stale answer in some calls: issue 42's output pre-state); one that returns a
    result remembered by its input's identity and version fails correctness where an input is refilled without a new
    version, or else does the whole work every call (no fake speedup); a result remembered by the input's address
    alone is wrong on the second trial."""
    got = {}
    rc_c, _, _ = _profile(tmp_path / "skip_unpoisoned", REF_INTO, SKIP_UNPOISONED, monkeypatch)
    assert rc_c == 1
    for name, ref, kernel in (("honest", REF_INTO, HONEST_INTO), ("memo", REF, MEMO)):
        rc_c, rc_p, ncu = _profile(tmp_path / name, ref, kernel, monkeypatch)
        if name == "memo" and rc_c == 1:  # caught before any timing (seen on the H100): a call whose input was
            continue  # refilled at the same address without a new _version, as through .data, got the last result
        assert (rc_c, rc_p) == (0, 0), name
        got[name] = ncu["timing"]["median_us"]
    print(f"medians: {got}")
    assert "memo" not in got or got["memo"] > 0.6 * got["honest"]  # torch.softmax's own tensor, against a copy into y
    rc_c, _, _ = _profile(tmp_path / "memo_ptr", REF, MEMO_PTR, monkeypatch)
    assert rc_c == 1


@needs_gpu
def test_the_pipeline_times_like_do_bench(tmp_path, monkeypatch):
    """Fidelity of the whole path (judge, worker, staging, per-call verification) against do_bench."""
    import subprocess
    import sys

    rc_c, rc_p, ncu = _profile(tmp_path, REF, TRITON, monkeypatch)
    assert (rc_c, rc_p) == (0, 0)
    # do_bench in a child, so that this process never holds a CUDA context the next tests' judges would see
    probe = f"""import importlib.util, torch, triton
spec = importlib.util.spec_from_file_location("fid_softmax", {str(klcli.KERNELS / "triton_softmax.py")!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
x = torch.randn(4096, 8192, device="cuda")
print(triton.testing.do_bench(lambda: mod.run_kernel(x=x, M=4096, N=8192), warmup=25, rep=100,
                              return_mode="median") * 1000)
"""
    ref = float(_ok(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                   timeout=300)).stdout.split()[-1])
    ratio = ncu["timing"]["median_us"] / ref
    print(f"profile median {ncu['timing']['median_us']:.2f} us, do_bench {ref:.2f} us, ratio {ratio:.4f}; "
          f"ncu {ncu['metrics']['duration_us']:.2f} us")
    assert 0.9 < ratio < 1.1


LAZY = '''import torch


class _Later(torch.Tensor):
    __module__ = "torch.lazy"

    @staticmethod
    def __new__(cls, x):
        t = torch.Tensor._make_subclass(cls, torch.empty_like(x))
        t.src = x
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in args:
            if type(a) is _Later and a.src is not None:
                src, a.src = a.src, None
                with torch._C.DisableTorchFunctionSubclass():
                    a.copy_(torch.softmax(src, dim=-1))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def run_kernel(x, M, N):
    return _Later(x)
'''


@needs_gpu
def test_a_result_that_computes_when_read_is_refused(tmp_path, monkeypatch, capsys):
    """Seen on the H200: a tensor subclass whose values are computed in the worker's hand-over copy, after the
    end event, passed correctness and profile.  Returned values must be exactly torch.Tensor."""
    rc_c, _, _ = _profile(tmp_path, REF, LAZY, monkeypatch)
    err = capsys.readouterr().err
    assert rc_c == 1 and "torch.lazy._Later (a torch.Tensor subclass)" in err, err[-3000:]


RING_DLPACK = TRITON.replace("def run_kernel(", "def _run(") + '''

_ring = []


def run_kernel(x, M, N):
    if not _ring:  # 64 results the kernel keeps, each handed out through DLPack (a new storage object per call)
        _ring.extend(torch.empty_like(x) for _ in range(64))
    _ring.append(_ring.pop(0))
    _ring[-1].copy_(_run(x, M, N))
    return torch.from_dlpack(_ring[-1])
'''
GRAPH_STATIC = '''import torch

_g = {}


def run_kernel(x, M, N):
    if "graph" not in _g:  # a CUDA graph whose static output is returned as it is, replay after replay
        _g["x"] = x.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.softmax(_g["x"], dim=-1)
        torch.cuda.current_stream().wait_stream(s)
        _g["graph"] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(_g["graph"]):
            _g["y"] = torch.softmax(_g["x"], dim=-1)
    _g["x"].copy_(x)
    _g["graph"].replay()
    return _g["y"]
'''


@needs_gpu
@pytest.mark.parametrize("kernel, why", [(RING_DLPACK, "lives in memory torch did not allocate"),
                                         (GRAPH_STATIC, "is stored where the result|is still held by the kernel|"
                                                        "changed when the kernel was called again")])
def test_a_result_the_kernel_keeps_is_refused_on_the_gpu(tmp_path, monkeypatch, capsys, kernel, why):
    """A ring of CUDA results handed out through DLPack (the caller's storage object is new on every call, the memory
    is the kernel's) and a CUDA graph's static output returned replay after replay: a caller's result is written
    again by a later call."""
    rc_c, _, _ = _profile(tmp_path, REF, kernel, monkeypatch, dims="M=256,N=1024")
    err = capsys.readouterr().err
    assert rc_c == 1 and any(w in err for w in why.split("|")), err[-3000:]


POISON_COMPILE = '''import glob
import os
import tempfile

import torch

_done = []


def _softmax(x):
    return torch.softmax(x, dim=-1)


def run_kernel(x, M, N):
    if not _done:  # once: torch.compile the reference's computation, then slow down every wrapper it generated
        _done.append(torch.compile(_softmax)(x))
        for path in glob.glob(os.path.join(tempfile.gettempdir(), "**", "*.py"), recursive=True):
            with open(path) as f:
                text = f.read()
            if "def call(args):" in text and "time.sleep" not in text:
                with open(path, "w") as f:
                    f.write(text.replace("def call(args):", "def call(args):\\n    import time; time.sleep(0.002)"))
    return torch.softmax(x, dim=-1)
'''


@needs_gpu
def test_a_kernel_cannot_slow_the_torch_compile_baseline_through_its_caches(tmp_path, monkeypatch):
    """Seen on the H200: a kernel compiled the reference with torch.compile in its own worker and rewrote the
    generated wrapper in the temporary folder the baselines' worker shared; torch.compile then ran 1597 us
    against eager's 143 us.  The baselines now get temporary and cache folders of their own, made after the
    kernels' workers ended: torch.compile's softmax stays about as fast as eager's."""
    from kernel_loop.steps import benchmark as B

    rc_c, _, _ = _profile(tmp_path, REF, POISON_COMPILE, monkeypatch)
    assert rc_c == 0
    monkeypatch.setattr(B, "check_final_gate", lambda rd, n: None)
    out = tmp_path / "run"
    assert klcli.main("benchmark", out, "--version", "v0", "--warmup", "5", "--trials", "20") == 0
    rows = {r["name"]: r for r in json.loads((out / "benchmark.json").read_text())["rows"]}
    eager, compiled = (rows[n]["stats_us"]["median"] for n in ("pytorch-eager", "torch-compile"))
    print(f"eager {eager:.1f} us, torch.compile {compiled:.1f} us, solution {rows['solution']['stats_us']['median']:.1f} us")
    assert compiled < 2.0 * eager, (compiled, eager)


def test_fingerprints_by_rows_on_the_gpu_are_exact_and_cheap():
    """The rows' int8 product on the GPU (cuBLASLt through torch._int_mm) gives the CPU's exact sums, so a portable
    fingerprint is the same on either; a 4.3 GB tensor (the l1norm example's) takes about a read of it, where the
    lanes weighted in int64 took seven times its bytes (time printed, not asserted: the card varies)."""
    import time

    import torch
    from kernel_loop import tensors

    x = torch.randn(3 * tensors.MM_BYTES // 4 + 333)
    assert tensors.fingerprint(x.cuda(), portable=True)[2:] == tensors.fingerprint(x, portable=True)[2:]
    shifted = torch.empty(x.numel() + 1, device="cuda")[1:]
    shifted.copy_(x)
    assert tensors.fingerprint(shifted, portable=True) == tensors.fingerprint(x.cuda(), portable=True)
    big = torch.rand(32768, 32767, device="cuda")
    before = tensors.fingerprint(big)
    big[16000, 5] += 1
    assert tensors.fingerprint(big) != before
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        tensors.fingerprint(big)
    rows_s = (time.perf_counter() - t0) / 3
    t0 = time.perf_counter()
    for _ in range(3):
        tensors._sums(torch, tensors._lanes(torch, big.reshape(-1)), 12345)[1].item()
    lanes_s = (time.perf_counter() - t0) / 3
    print(f"fingerprint of {big.numel() * 4 / 1e9:.2f} GB: by rows {rows_s * 1e3:.1f} ms, lanes in int64 {lanes_s * 1e3:.1f} ms")
    assert rows_s < lanes_s


def test_the_weights_noise_is_drawn_on_the_gpu_alike_and_without_a_cpu_draw():
    """tensors.nudge (a condition's change of the weights, made alike by the judge and the worker) and
    tensors.upstream draw on the tensor's device: two fresh draws from one seed are equal, and a nudge of 268 M
    parameters costs less than drawing them on the CPU does (level 3's 1_MLP, 671 M parameters, took 190 s of
    correctness on an H100 when every nudge drew on the CPU, single-threaded, and copied).  Times printed."""
    import time

    import torch
    from kernel_loop import tensors

    a, b = (torch.nn.Linear(16384, 16384, device="cuda") for _ in range(2))
    b.load_state_dict(a.state_dict())
    scales = tensors.nudge_scales(a)
    for sparse in (False, True, "swap"):
        tensors.nudge(a, 5, scales, keep=False, sparse=sparse)
        tensors.nudge(b, 5, scales, keep=False, sparse=sparse)
        assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias), sparse
    out = torch.empty(512, 4096, device="cuda")
    assert torch.equal(tensors.upstream(6, 1, out), tensors.upstream(6, 1, out)) and tensors.upstream(6, 1, out).is_cuda

    class CpuBuilt(torch.nn.Module):  # (a review) a ModelNew whose layer is built on the CPU whatever the device
        def __init__(self, n):
            super().__init__()
            self.lin = torch.nn.Linear(n, n, device="cpu")

    m = CpuBuilt(64).cuda()
    spec = {"seed": 3, "scales": tensors.nudge_scales(m)}
    judge_copy = CpuBuilt(64).cuda()
    judge_copy.load_state_dict(m.state_dict())
    tensors.nudge(judge_copy, 3, spec["scales"], keep=False)  # the judge's Model copy, on the GPU
    assert torch.equal(tensors.twin(m, [64], spec, "cuda").lin.weight, judge_copy.lin.weight)  # the worker's twin
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tensors.nudge(a, 9, scales, keep=False, sparse=True)
    torch.cuda.synchronize()
    gpu_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(9)
    (torch.randn(a.weight.shape, generator=gen) * (torch.rand(a.weight.shape, generator=gen) < 0.5)).cuda()
    torch.cuda.synchronize()
    cpu_s = time.perf_counter() - t0
    print(f"nudge of {a.weight.numel() / 1e6:.0f} M parameters on the GPU {gpu_s:.3f} s; its draw on the CPU {cpu_s:.2f} s")
    assert gpu_s < cpu_s / 4, (gpu_s, cpu_s)
