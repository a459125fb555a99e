"""The judge/worker split under attack (CPU mode): every test is one attack on the measurement and the
defence that must stop it.

The kernels are written here, next to the test that uses them, because most of them embed a path of the
test's own (the file they leave evidence in).  Kernels that read the environment, the command line or
start processes are refused by the static check first; the tests that need them to run replace that
check in-process (``klcli.main`` runs the CLI in this process), so that what is tested is the defence
behind it: the judge process, the worker's environment, the process tree and the shared weights.


The worker's file sandbox (measure/sandbox.py): the plan of its rules, and the rules at work in a child
process (Landlock needs Linux 5.13+; where the kernel has none, the child tests skip and say so)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import klcli
import pytest
import torch
from kernel_loop import static_check
from kernel_loop.common import read_json
from kernel_loop.measure import protocol, sandbox
from kernel_loop.steps import benchmark as B
from klcli import HELPERS

REPO = Path(__file__).resolve().parents[2]
CPU_BENCH = ["--timing", "host_time", "--warmup", "1", "--trials", "5", "--baselines", "pytorch-eager"]
MODE_WORDS = ("correctness", "benchmark", "time", "ncu", "trials", "profile", "warmup")


@pytest.fixture(autouse=True)
def cpu_mode(monkeypatch):
    monkeypatch.setenv("KERNEL_LOOP_DEVICE", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def judged_here(judge_here):
    """The judge in this process (conftest.judge_here), its workers real processes: for the attacks on a
    verdict that need the worker's own process (its own random state).  The attacks on the process boundary
    (the worker's environment and command line, a process that leaves the step) run with the judge as the
    CLI's child process, as a user's step does."""
    return judge_here


@pytest.fixture
def verdict_here(judge_here, worker_here):
    """The judge and its workers in this process (conftest.judge_here, worker_here: the real judge and
    worker code, each worker a thread): for the attacks on a verdict whose kernel does not act on its
    process (it only computes wrong, skips, or replays)."""
    return judge_here


@pytest.fixture
def no_static_check(monkeypatch):
    """The first filter off: the kernel reaches the judge, the defence under test."""
    monkeypatch.setattr(static_check, "check_kernel_source", lambda path: None)


# --- helpers -------------------------------------------------------------------------------------
def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _init(tmp_path: Path, ref: Path | str, kernel_text: str, dims: str | None = None, *extra: str,
          name: str = "run") -> Path:
    """``init`` on ``ref`` (a file, or the name of a pack member) with ``kernel_text`` as v0."""
    kernel = _write(tmp_path / f"{name}_kernel.py", kernel_text)
    out = tmp_path / name
    ref_path = ref if isinstance(ref, Path) else klcli.KERNELS / ref
    args = ["init", out, "--kernel", "k", "--ref", ref_path, "--impl", "triton", "--baseline", kernel, "--skip-env"]
    if dims:
        args += ["--dims", dims]
    assert klcli.main(*args, *extra) == 0
    return out


def _correctness(out: Path) -> tuple[int, dict | None]:
    rc = klcli.main("correctness", out)
    path = out / "v0" / "correctness.json"
    return rc, (read_json(path) if path.exists() else None)


def _passed(data: dict) -> list[bool]:
    return [t["passed"] for s in data["shapes"] for t in s["trials"]]


def _benchmark(monkeypatch, out: Path, *args: str) -> tuple[int, dict]:
    """The CPU benchmark of v0 (the final gate is not what is under test here)."""
    monkeypatch.setattr(B, "check_final_gate", lambda rd, n: None)
    rc = klcli.main("benchmark", out, "--version", "v0", *args)
    return rc, read_json(out / "benchmark.json")


def _rows(bench: dict) -> dict[str, dict]:
    return {r["name"]: r for r in bench["rows"]}


# --- 1. the record key never reaches the worker; 2. the worker cannot tell the modes apart ------------------
PROBE = '''"""Records what the process tells about itself (its command line, its environment's names, the kernel-loop
variables it can see) and is right only where it sees none: a kernel that can read the record key (by name, or
its value under any name) can forge records, and any KERNEL_LOOP_* variable would tell the harness from a
user's call."""
import json
import os
import sys
import torch

PREFIX = "KERNEL" + "_LOOP"
KEY = {key!r}
LOG = {log!r}


def _note(event):
    key = sorted(k for k, v in os.environ.items() if k == PREFIX + "_RECORD_KEY" or KEY in v)
    prefixed = sorted(k for k in os.environ if k.startswith(PREFIX))
    with open(LOG, "a") as f:
        f.write(json.dumps({{"event": event, "argv": list(sys.argv), "orig_argv": list(sys.orig_argv),
                            "env": sorted(os.environ), "key": key, "prefixed": prefixed}}) + "\\n")
    return key or prefixed


_note("import")


def run_kernel(x, y, out):
    if _note("call"):
        torch.mul(x, 0.0, out=out)
    else:
        torch.add(x, y, out=out)
'''


def _writable(tmp_path, monkeypatch):
    """A folder the workers' sandbox lets them write (a build cache: the sandbox makes it before its rules), for a
    probe kernel's notes; everywhere else but its own temporary folder a worker writes nothing."""
    folder = tmp_path / "probe-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    return folder


def test_the_worker_sees_no_key_no_kernel_loop_variable_and_no_mode(tmp_path, monkeypatch, no_static_check,
                                                                     judged_here):
    """Attacks: (1) the kernel reads the record key (by name or by its value under any name) from its
    environment and behaves differently when it finds it; (2) it looks for any KERNEL_LOOP_* variable (the
    run's device, cache, record key, the harness's own plumbing) to tell the harness from a user's call, and
    returns x*0 when it finds one; (3) it reads its command line (or its environment) to learn whether it is
    being checked or timed, and computes honestly only when checked.  Defences: the worker's environment is
    the judge's less every kernel-loop variable, and every worker is started the same way, ``python -m
    kernel_loop.measure.worker`` with nothing on argv and the same environment, in every mode.  (The judge's
    code runs in this process with the environment a child judge gets, session.judge_env: klcli.run_judge_here;
    the workers, whose environment and command line are under test, are real processes.)"""
    from kernel_loop.measure.launch import worker_env

    key = str(tmp_path / "secret" / "record.key")
    monkeypatch.setenv("KERNEL_LOOP_RECORD_KEY", key)
    assert not [k for k in worker_env() if k.startswith("KERNEL_LOOP_")]
    log = _writable(tmp_path, monkeypatch) / "probe.jsonl"
    out = _init(tmp_path, "ref_vadd.py", PROBE.format(key=key, log=str(log)), "N=1000")
    rc, data = _correctness(out)
    assert rc == 0 and data["result"] == "PASS", data["error"]
    notes = [json.loads(line) for line in log.read_text().splitlines()]
    n_correctness = len(notes)
    calls = [e for e in notes if e["event"] == "call"]
    assert len(calls) >= 5 and all(e["key"] == [] for e in calls)  # the probe ran in every call and saw no key
    seen = sorted({n for e in notes for n in e["prefixed"]})
    assert seen == [], f"the kernel saw {seen} in its environment"
    rc, bench = _benchmark(monkeypatch, out, *CPU_BENCH)
    assert rc == 0 and _rows(bench)["solution"]["correct"]
    notes = [json.loads(line) for line in log.read_text().splitlines()]
    assert n_correctness >= 6 and len(notes) > n_correctness + 6  # imports and calls of both modes were seen
    assert not [e for e in notes if e["key"] or e["prefixed"]]  # nor in the benchmark
    assert {e["event"] for e in notes[:n_correctness]} == {e["event"] for e in notes[n_correctness:]}
    argvs = {json.dumps([e["argv"], e["orig_argv"]]) for e in notes}
    assert len(argvs) == 1, f"the command line differs between calls or modes: {argvs}"
    assert len({json.dumps(e["env"]) for e in notes}) == 1, "the environment's names differ between modes"
    argv, orig = notes[0]["argv"], notes[0]["orig_argv"]
    assert argv[1:] == [] and orig[1:] == ["-m", "kernel_loop.measure.worker"], (argv, orig)  # nothing else
    words = " ".join(argv + orig[1:]).lower()
    assert not [w for w in MODE_WORDS if w in words], (argv, orig)
    assert judged_here == ["correctness", "benchmark"]


# --- 2b. the baselines run apart from the kernel ------------------------------------------------------------
REF_CLEAN = '''"""y = 2 x; the reference refuses to run where it finds a file a kernel planted in its temporary or cache
folders (what torch.compile and Triton read their generated code from)."""
import os
import tempfile

import torch

VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "CUDA_CACHE_PATH", "XDG_CACHE_HOME")


def setup(N):
    return {"x": torch.randn(N)}


def reference(x):
    for folder in {tempfile.gettempdir(), *(os.environ.get(v) or "" for v in VARS)}:
        if folder and os.path.isdir(folder) and any(n.startswith("planted") for n in os.listdir(folder)):
            raise RuntimeError(f"a planted file in {folder}")
    return x * 2.0
'''
PLANT = '''"""Plants a file in every temporary and cache folder it is given (where a poisoned Inductor wrapper would go),
and is right only when it could."""
import os
import tempfile

import torch

VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "CUDA_CACHE_PATH", "XDG_CACHE_HOME")
planted = 0
for folder in {tempfile.gettempdir(), *(os.environ[v] for v in VARS if os.environ.get(v))}:
    try:
        with open(os.path.join(folder, "planted-by-the-kernel"), "w") as f:
            f.write("x")
        planted += 1
    except OSError:
        pass


def run_kernel(x):
    return x * 2.0 if planted else x
'''


def test_the_baselines_read_no_folder_a_kernel_could_write(tmp_path, monkeypatch, no_static_check, judged_here):
    """Attack (seen on the GPU): the kernel's worker and the baselines' worker shared one temporary folder, and
    with it Inductor's and Triton's caches; a kernel rewrote torch.compile's generated wrapper there and made
    the torch.compile baseline 11x slower.  Defence: each worker gets a temporary folder of its own, and the
    baselines' worker gets its temporary and cache folders made after every kernel's worker ended.  Here the
    kernel plants a file in every such folder it is given (it is right only when it could plant one), and the
    baseline, the reference itself, refuses to run where it finds one."""
    out = _init(tmp_path, _write(tmp_path / "ref_clean.py", REF_CLEAN), PLANT, "N=64")
    rc, data = _correctness(out)
    assert rc == 0, data["error"]  # the kernel could plant its file, in its own temporary folder
    rc, bench = _benchmark(monkeypatch, out, *CPU_BENCH)
    rows = _rows(bench)
    assert rows["solution"]["correct"], rows["solution"]["error"]  # the kernel planted its file
    assert rc == 0 and rows["pytorch-eager"]["correct"], rows["pytorch-eager"]["error"]


# --- 3. no process escapes the step -------------------------------------------------------------------
SPAWN = '''"""Leaves a process behind that left its worker's session (it could time, or rewrite, later runs)."""
import subprocess
import torch

_child = subprocess.Popen(["sleep", "120"], start_new_session=True)
with open({pidfile!r}, "w") as f:
    f.write(str(_child.pid))


def run_kernel(x, y, out):
    torch.add(x, y, out=out)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


@pytest.mark.waits
def test_a_process_the_kernel_starts_in_a_new_session_is_ended_with_the_step(tmp_path, monkeypatch, no_static_check):
    """Attack: the kernel starts a process in a session of its own (so that killing the worker's process
    group misses it) that outlives the step.  Defence: the CLI and the judge are child subreapers and end
    every descendant after the step."""
    pidfile = _writable(tmp_path, monkeypatch) / "child.pid"
    out = _init(tmp_path, "ref_vadd.py", SPAWN.format(pidfile=str(pidfile)), "N=1000")
    pid = None
    try:
        rc, data = _correctness(out)
        pid = int(pidfile.read_text() or 0) or None
        assert pid, data["error"]
        assert rc == 0, data["error"]
        deadline = time.monotonic() + 2.0  # the kill is sent before correctness returns; allow for its delivery
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), f"pid {pid} (sleep 120, started by the kernel) outlived the correctness step"
    finally:
        if pid is not None and _alive(pid):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00120\x00":
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# --- 4. one set of weights in every process ---------------------------------------------------------------
KB_SCALED = '''"""KernelBench-style: a Linear, then a learned per-feature scale drawn with torch.randn."""
import torch
from torch import nn

batch_size = 4
in_features = 16
out_features = 8


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return self.fc(x) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

KB_SCALED_REORDERED = '''"""The same model with its parameters created in another order: from the same seed they get other
values, so it is right only with the judge's weights loaded."""
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(out_features))
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.addmm(self.fc.bias, x, self.fc.weight.t()) * self.scale
'''

PROBLEM_PRINT = '''
import json, sys
from pathlib import Path
import torch
from kernel_loop import loader
from kernel_loop.config import RunConfig
from kernel_loop.measure.problem import Problem
from kernel_loop.tensors import fingerprint

ref_path, seeds, burn = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
torch.randn(burn)  # this process's random state before the problem is built differs from the other's
ref = loader.import_file(Path(ref_path), "ref")
dims = {"batch_size": 4, "in_features": 16, "out_features": 8}
prob = Problem(RunConfig(kernel="k", impl="triton", dims=dims, seed=1234, device="cpu"), ref, dims, "cpu", "kb")
out = []
for s in seeds:
    ds = prob.draw(s)
    out.append({"state": {n: str(fingerprint(t, portable=True)) for n, t in prob.state().items()},
                "input": str(fingerprint(ds.args["arg0"], portable=True))})
print(json.dumps(out))
'''


def test_judge_kernel_and_baseline_workers_share_one_set_of_weights(tmp_path, monkeypatch, judged_here):
    """Attack (or fault): each process builds Model/ModelNew from its own random state, so the kernel is
    held to weights other than the ones it runs with (or the baseline is), and a correct ModelNew fails, or
    a kernel picks its own weights.  Defence: the judge builds the model from the run's seed and hands its
    state_dict to the kernel's worker and to the baseline's; correct in 5 trials, before and after the timed
    calls and on fresh inputs, and the eager baseline with it.  Also (attack or fault): a ModelNew that
    creates the same parameters in another order draws other values from the same seed; run with its own
    weights it is held to the judge's and fails (or, turned round, a kernel runs with weights of its
    choosing).  Defence: the worker loads the judge's state_dict into it (the kernel here is that ModelNew)."""
    ref = _write(tmp_path / "kb_scaled.py", KB_SCALED)
    out = _init(tmp_path, ref, KB_SCALED_REORDERED)
    rc, data = _correctness(out)
    assert rc == 0 and data["result"] == "PASS", data["error"]
    seeds = [t["seed"] for s in data["shapes"] for t in s["trials"]]
    assert len(set(seeds)) == len(seeds) >= 5  # the 5 trials and the conditions of a user's call, each its own draw
    rc, bench = _benchmark(monkeypatch, out, *CPU_BENCH)
    rows = _rows(bench)
    assert rc == 0, rows["solution"].get("error")
    assert rows["solution"]["correct"] and rows["solution"]["correct_after_timing"]
    assert rows["pytorch-eager"]["correct"] and rows["pytorch-eager"]["correct_after_timing"]
    # the lower-bound bytes read the weights too: 4x16 inputs, 4x8 outputs and 8x16 + 8 + 8 parameters, fp32
    roof = bench["roofline"]
    assert roof["bytes_lower_bound"] and roof["bytes_moved"] == 4 * (4 * 16 + 4 * 8 + 8 * 16 + 8 + 8), roof
    assert any("inputs', parameters' and outputs'" in n for n in roof["notes"]), roof["notes"]


KB_DRAWS_IN_FORWARD = KB_SCALED.replace('"""KernelBench-style: a Linear', '"""KernelBench-style, drawing in forward as the LSTMs do: a Linear').replace(
    "return self.fc(x) * self.scale", "h0 = torch.randn(x.shape[0], self.scale.shape[0], device=x.device)\n"
    "        return self.fc(x) * self.scale + h0")


CLOBBERS = ("class ModelNew(Model):\n    def forward(self, x):\n        out = super().forward(x)\n"
            "        import random\n        torch.manual_seed(0)\n        random.seed(0)\n        return out\n")


# right only where torch's seed has the form the judge's call seeds had (an affine function of the trial's seed)
SEED_READER = ("class ModelNew(Model):\n    def forward(self, x):\n"
               "        if (torch.initial_seed() - 12_345) % 1_000_003 == 0:\n            return super().forward(x)\n"
               "        return self.fc(x) * self.scale\n")


# right only where torch's seed changed since its previous call: every judge's call reseeded, a user's never does
SEED_WATCHER = ("_seen = {}\n\n\nclass ModelNew(Model):\n    def forward(self, x):\n"
                "        changed, _seen['s'] = torch.initial_seed() != _seen.get('s'), torch.initial_seed()\n"
                "        return super().forward(x) if changed else self.fc(x) * self.scale\n")


# right only where torch's generator is freshly seeded or where its own previous call left it (an eighth red team's)
RNG_FRESH_OR_CONTINUED = ("_last = {}\n\n\nclass ModelNew(Model):\n    def forward(self, x):\n"
                          "        start = torch.get_rng_state()\n"
                          "        fresh = torch.equal(torch.Generator().manual_seed(torch.initial_seed()).get_state(), start)\n"
                          "        judged = fresh or ('end' in _last and torch.equal(start, _last['end']))\n"
                          "        out = super().forward(x) if judged else self.fc(x) * self.scale\n"
                          "        _last['end'] = torch.get_rng_state()\n        return out\n")


# right only where torch's CPU generator cannot be rebuilt from the seed it reports (a ninth red team's): the judge's
# start states once reported a seed they did not come from
RNG_NOT_FROM_ITS_SEED = "import numpy as np\n\n\n" + """def _seeded(seed):
    mt = np.zeros(624, dtype=np.uint64)
    mt[0] = seed & 0xFFFFFFFF
    for j in range(1, 624):
        p = int(mt[j - 1])
        mt[j] = (1812433253 * (p ^ (p >> 30)) + j) & 0xFFFFFFFF
    return mt


def _twist(mt):
    new = mt.copy()
    for lo, hi in ((0, 227), (227, 454), (454, 623)):
        i = np.arange(lo, hi)
        y = (new[i] & 0x80000000) | (new[i + 1] & 0x7FFFFFFF)
        new[i] = new[(i + 397) % 624] ^ (y >> 1) ^ np.where(y & 1, 0x9908B0DF, 0).astype(np.uint64)
    y = (new[623] & 0x80000000) | (new[0] & 0x7FFFFFFF)
    new[623] = new[396] ^ (y >> 1) ^ (0x9908B0DF if int(y) & 1 else 0)
    return new


_cache = {}


def _descends(max_twists=4000):
    s = torch.get_rng_state().numpy()
    now = s[24:24 + 624 * 8].view(np.uint64)
    seed = int(s[:8].view(np.uint64)[0])
    mt = _cache.get(seed)
    if mt is None:
        mt = _cache[seed] = [_seeded(seed)]
    for k in range(max_twists):
        if k == len(mt):
            mt.append(_twist(mt[-1]))
        if np.array_equal(mt[k], now):
            return True
    return False


class ModelNew(Model):
    def forward(self, x):
        if not _descends():
            return super().forward(x)
        return self.fc(x) * self.scale
"""


@pytest.mark.parametrize("model_new, passes", [("ModelNew = Model", True),
                                               ("class ModelNew(Model):\n    def forward(self, x):\n"
                                                "        return self.fc(x) * self.scale\n", False),
                                               (CLOBBERS, False), (SEED_READER, False),
                                               (SEED_WATCHER, False),
                                               (RNG_FRESH_OR_CONTINUED, False),
                                               (RNG_NOT_FROM_ITS_SEED, False)])
def test_a_model_that_draws_in_forward_gets_the_references_numbers(tmp_path, judged_here, model_new, passes):
    """Seen on the H200 (level 3 35_LSTM, ModelNew = Model): a model that draws its first hidden state with
    torch.randn in forward was refused for changing the generators' state, because the judge looked for the
    reference's draws in the CPU generator only, and the kernel's draws could not match the reference's anyway.
    Each call now starts from the seed the reference started from (problem.call_seed), so the model as published
    passes, and one that leaves the draw out still fails; so does one that draws as the reference does and then
    reseeds its caller's generators (a sixth red team's): a call must leave torch's generators where the reference's
    call left them, and Python's and NumPy's as they were.  The seed a call starts from is a one-way hash: a kernel
    right only where torch.initial_seed() has the form the judge's seeds once had (a red team's) fails, and so does one
    right only where the seed changed since its previous call: some calls start where the previous one left torch's
    generators, as a user's next call does; the others start from a state moved on by draws from the seed it reports:
    a ModelNew right only where the generator is freshly seeded or where its previous call left it fails, and so does
    one right only where the state cannot be rebuilt from the seed it reports (a ninth red team's)."""
    ref = _write(tmp_path / "kb_draws.py", KB_DRAWS_IN_FORWARD)
    out = _init(tmp_path, ref, KB_DRAWS_IN_FORWARD + "\n\n" + model_new + "\n")
    rc, data = _correctness(out)
    assert (rc == 0) is passes, data["error"]
    if model_new is CLOBBERS:
        assert "other than the reference's call leaves them" in data["error"], data["error"]
    if model_new == "ModelNew = Model":
        assert "call(s) started where the previous call left torch's generators" in (out / "v0" / "correctness.md"
                                                                                     ).read_text()


SCRATCH_WHILE_ALIVE = '''

import weakref

_prev = {}


class ModelNew(Model):
    """Model's outputs, but the previous call's result is scratch for this call's matmul while the object returned
    lives (an eighth red team's): a user's y1 = model(x1); y2 = model(x2) finds y1 changed."""
    def forward(self, x):
        prev = _prev["out"]() if "out" in _prev else None
        if prev is not None and prev.shape == (x.shape[0], self.scale.shape[0]):
            with torch.no_grad():
                torch.mm(x.detach(), self.fc.weight.detach().t(), out=prev.detach())
        out = super().forward(x)
        _prev["out"] = weakref.ref(out)
        return out
'''


def test_a_result_written_while_the_object_returned_lives_fails(tmp_path, judged_here):
    """Found by an eighth red team: a caller's hold on a result was always a tensor of its own (detach()), so the
    object returned had died by the next call, and a ModelNew that wrote its previous result while that object lived
    passed.  A kept result is held as the object returned one time in two."""
    out = _init(tmp_path, _write(tmp_path / "kb_scaled.py", KB_SCALED), KB_SCALED + SCRATCH_WHILE_ALIVE)
    rc, data = _correctness(out)
    assert rc == 1 and ("changed when the kernel was called again" in data["error"]  # or, kept from a call under
                        or "Inplace update to inference tensor" in data["error"]), data["error"]  # inference_mode


def test_a_modelnew_that_reseeds_only_in_training_mode_fails(tmp_path, judged_here):
    """Found by a seventh red team: the generators were never checked on a call in training mode (where Model may
    draw, for dropout), so a ModelNew that reseeded its caller's generators only when built (training mode) passed.
    Where Model draws nothing in training mode, that call is checked as every other."""
    reseeds = KB_SCALED + ("\n\nclass ModelNew(Model):\n    def forward(self, x):\n        out = super().forward(x)\n"
                           "        if self.training:\n            torch.manual_seed(0)\n        return out\n")
    out = _init(tmp_path, _write(tmp_path / "kb_scaled.py", KB_SCALED), reseeds)
    rc, data = _correctness(out)
    assert rc == 1 and "random number generator's state" in data["error"], data["error"]


def test_the_weights_are_the_run_seeds_in_every_process_and_trial(tmp_path, monkeypatch, capsys):
    """Attack (or fault): the weights depend on the process's random history or on the trial's seed, so two
    processes (the judge and a worker, or two steps) hold other weights.  Defence: Problem builds the model
    from the run's seed alone; two processes with other histories and other trial seeds hold the same
    state (fingerprinted per tensor), while the drawn inputs differ.  (The second process is this one, whose
    random history is pytest's and the burn's.)"""
    import runpy

    ref = _write(tmp_path / "kb_scaled.py", KB_SCALED)
    script = _write(tmp_path / "problem_print.py", PROBLEM_PRINT)
    env = dict(os.environ, PYTHONPATH=str(REPO / "helpers"))
    runs = [json.loads(subprocess.run([sys.executable, str(script), str(ref), "11,12", "1"], env=env, check=True,
                                      capture_output=True, text=True, timeout=120).stdout)]
    monkeypatch.setattr(sys, "argv", [str(script), str(ref), "13", "1000"])
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")
    runs.append(json.loads(capsys.readouterr().out))
    draws = runs[0] + runs[1]
    assert len({json.dumps(d["state"], sort_keys=True) for d in draws}) == 1  # across processes and seeds
    assert set(draws[0]["state"]) == {"fc.weight", "fc.bias", "scale"}
    assert len({d["input"] for d in draws}) == 3  # while the inputs differ per trial seed


# --- 5. a ModelNew with other parameters is refused --------------------------------------------------------
def test_a_modelnew_with_a_renamed_parameter_is_refused_in_one_line(tmp_path, capsys, verdict_here):
    """Attack: a ModelNew whose parameter has another name keeps its own freshly drawn values (the judge's
    cannot be loaded into it), so it runs with weights it chose.  Defence: ModelNew's parameters and buffers
    must be Model's by name and shape; otherwise a usage error (exit 2) names the parameter, and nothing is
    recorded."""
    ref = _write(tmp_path / "kb_scaled.py", KB_SCALED)
    renamed = KB_SCALED.replace("self.scale", "self.gain") + "\n\nModelNew = Model\n"
    renamed = renamed.replace("class Model(", "class ModelRenamed(").replace("ModelNew = Model", "ModelNew = ModelRenamed")
    out = _init(tmp_path, ref, renamed)
    capsys.readouterr()
    rc, data = _correctness(out)
    err = capsys.readouterr().err
    assert rc == 2 and data is None and not (out / "v0" / "correctness.md").exists()
    lines = [line for line in err.splitlines() if "ModelNew lacks Model's 'scale'" in line]
    assert len(lines) == 1 and "error:" in lines[0], err


# --- 6. degenerate outputs under the KernelBench preset ---------------------------------------------------
KB_L1 = '''"""KernelBench-style L1 normalisation (each row divided by its sum of absolute values)."""
import torch
from torch import nn

batch_size = 2
dim = 131072


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

KB_L1_NEW = '''import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}
'''


DEGENERATE = [
    ("torch.zeros(1).expand_as(x)", "is the constant 0"),          # all zeros, stride 0, no memory written
    ("torch.full_like(x, 1e-6)", "is the constant"),                # a constant inside atol of every element
    ("0.5 * x / x.abs().sum(dim=1, keepdim=True)", "relative L2 error"),  # half the answer, inside atol too
]

KB_L1_DEGENERATE = '''import torch
from torch import nn


class ModelNew(nn.Module):
    """Call k returns degenerate output k % 3: the three holes, one per trial, in one run."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return [EXPRS][(self.calls - 1) % 3]()
'''.replace("EXPRS", ", ".join(f"lambda: {expr}" for expr, _ in DEGENERATE))


def test_degenerate_outputs_fail_under_the_kernelbench_preset(tmp_path, verdict_here):
    """Attack: under --preset kernelbench (allclose with atol = rtol = 1e-4 for float32) every element of an
    L1-normalised row (|y| < 1e-4) is within atol of zero, so all zeros (even an expanded tensor that
    writes nothing), a constant, or a wrong scale pass elementwise.  Defence: a constant output where the
    reference is not fails under every preset, and a relative L2 error above 1e-2 fails under a preset.
    (Every trial is verified on its own: trial k gets the degenerate output k % 3.)"""
    ref = _write(tmp_path / "kb_l1.py", KB_L1)
    rc, data = _correctness(_init(tmp_path, ref, KB_L1_DEGENERATE, None, "--preset", "kernelbench"))
    trials = [t["outputs"] for s in data["shapes"] for t in s["trials"]]
    assert rc == 1 and data["result"] == "FAIL" and len(trials) >= 3
    for k, rows in enumerate(trials):
        expr, note = DEGENERATE[k % 3]
        assert rows and all(r["mismatches"] == 0 and not r["passed"] for r in rows), expr  # the hole: atol passes them
        assert all(note in r["note"] for r in rows), (expr, rows[0]["note"])


def test_an_honest_l1_norm_passes_under_the_kernelbench_preset(tmp_path, verdict_here):
    """The honest kernel beside the degenerate ones: the defence does not refuse a right answer."""
    ref = _write(tmp_path / "kb_l1.py", KB_L1)
    text = KB_L1_NEW.format(expr="x / x.abs().sum(dim=1, keepdim=True)")
    rc, data = _correctness(_init(tmp_path, ref, text, None, "--preset", "kernelbench"))
    assert rc == 0 and data["result"] == "PASS", data["error"]


def test_an_l1_norm_tuned_to_the_input_distribution_fails_under_the_kernelbench_preset(tmp_path, verdict_here):
    """Attack: divide by the expected sum of |randn| over a row (dim * sqrt(2/pi)) instead of the row's own
    sum: within 0.2% for the problem's inputs, so the preset's elementwise test and its 1e-2 normwise bound
    pass it, but wrong for any other input scale.  Defence: kernel-loop's input ranges run on top of the
    preset (inputs scaled up, down, shifted), and the preset's run says so."""
    ref = _write(tmp_path / "kb_l1.py", KB_L1)
    text = KB_L1_NEW.format(expr="x / (x.shape[1] * 0.7978845608028654)")
    rc, data = _correctness(_init(tmp_path, ref, text, None, "--preset", "kernelbench"))
    assert rc == 1, data["error"]
    bad = {t["condition"] for s in data["shapes"] for t in s["trials"] if not t["passed"]}
    assert bad and all(c.startswith("range:") for c in bad), bad
    md = (tmp_path / "run" / "v0" / "correctness.md").read_text()
    assert "The kernelbench preset sets the tolerances; these checks run on top of its own." in md


# --- 7. a kernel that skips calls, or replays a result by the inputs' address --------------------------------
REF_DOUBLE = '''"""y = 2 x, written in place into y."""
import torch


def setup(N):
    return {"inputs": {"x": torch.randn(N), "y": torch.empty(N)}, "outputs": ["y"]}


def reference(x, y):
    torch.mul(x, 2.0, out=y)
'''

DOUBLE = '''import torch


def run_kernel(x, y):
    torch.mul(x, 2.0, out=y)
'''

DOUBLE_SKIPS = '''"""Writes y on its first two calls, then on every other call only (the rest keep what y held)."""
import torch

_calls = [0]


def run_kernel(x, y):
    _calls[0] += 1
    if _calls[0] <= 2 or _calls[0] % 2 == 0:
        torch.mul(x, 2.0, out=y)
'''

DOUBLE_BY_ADDRESS = '''"""Computes once per input address, then replays that result."""
import torch

_cache = {}


def run_kernel(x, y):
    key = x.data_ptr()
    if key not in _cache:
        _cache[key] = x * 2.0
    y.copy_(_cache[key])
'''


def test_a_kernel_that_skips_calls_passes_no_benchmark(tmp_path, monkeypatch, capsys, verdict_here):
    """Attack: in the timing loop the kernel does its work only on every other call (halving its time),
    betting that only some calls are verified.  Defence: the judge poisons the outputs before every call and
    screens every call for poison left behind, verified or not.  (--warmup 5 --trials 1: the judge verifies
    the loop's first and last call only, so the skipped third call is one that only the screen sees.)"""
    ref = _write(tmp_path / "ref_double.py", REF_DOUBLE)
    out = _init(tmp_path, ref, DOUBLE, "N=4096")
    assert _correctness(out)[0] == 0
    (out / "v0" / "kernel.py").write_text(DOUBLE_SKIPS)  # swapped after correctness passed
    capsys.readouterr()
    rc, bench = _benchmark(monkeypatch, out, "--timing", "host_time", "--warmup", "5", "--trials", "1",
                           "--baselines", "pytorch-eager")
    sol = _rows(bench)["solution"]
    assert rc == 1 and sol["correct"] is True and sol["correct_after_timing"] is False
    assert "still hold the poison" in sol["error"] and "(warmup)" in sol["error"], sol["error"]
    assert "failed in the benchmark" in capsys.readouterr().err


def test_a_kernel_that_caches_by_input_address_fails_correctness(tmp_path, verdict_here):
    """Attack: the worker's input buffers keep their address from call to call, so a kernel that remembers
    its result by x.data_ptr() is right on the first call and replays it after.  Defence: every trial
    draws other data from its own seed into the same buffers, and every trial is verified (the one call that hands
    the inputs at another address gets a fresh computation from this kernel, and passes)."""
    ref = _write(tmp_path / "ref_double.py", REF_DOUBLE)
    rc, data = _correctness(_init(tmp_path, ref, DOUBLE_BY_ADDRESS, "N=4096"))
    assert rc == 1 and data["result"] == "FAIL"
    trials = [t for s in data["shapes"] for t in s["trials"]]
    assert trials[0]["passed"] is True
    assert not any(t["passed"] for t in trials[1:] if t["condition"] != "layout:moved"), _passed(data)


# --- 8. the static check is wired into correctness ----------------------------------------------------------
def test_a_kernel_importing_ctypes_is_refused_before_it_runs(tmp_path, capsys):
    """Attack: the kernel imports ctypes to rewrite the harness's memory.  Defence: correctness reads the
    source first and refuses it (exit 2, naming the line); nothing is run or recorded."""
    marker = tmp_path / "ran"
    text = (f"import torch\nimport ctypes\n\nopen({str(marker)!r}, 'w').close()\n\n\n"
            "def run_kernel(x, y, out):\n    torch.add(x, y, out=out)\n")
    out = _init(tmp_path, "ref_vadd.py", text, "N=1000")
    capsys.readouterr()
    rc, data = _correctness(out)
    err = capsys.readouterr().err
    assert rc == 2 and data is None and not (out / "v0" / "correctness.md").exists()
    assert "kernel.py:2: refused" in err and "ctypes" in err
    assert not marker.exists()


# --- another process on the GPU ----------------------------------------------------------------------------
def test_a_foreign_gpu_process_is_found_next_to_ours():
    """The attack: a process outside the judge's tree computes on the GPU while a time is taken (it would
    slow the baselines, or the kernel's rival).  Our pids that hold no GPU context must not hide it."""
    from kernel_loop.gpustate import foreign_processes

    procs = [{"pid": 10, "name": "judge"}, {"pid": 11, "name": "worker"}, {"pid": 99, "name": "intruder"}]
    own = {10, 11, 12, 13}  # 12, 13: a build and a wrapper of ours that NVML does not list
    assert [p["pid"] for p in foreign_processes(procs, own, users=2)] == [99]
    assert foreign_processes(procs[:2], own, users=2) == []
    # another pid namespace (no NVML pid is ours): only a count tells, beyond the judge and its worker
    other = [{"pid": 5010, "name": ""}, {"pid": 5011, "name": ""}]
    assert foreign_processes(other, own, users=2) == []
    assert [p["pid"] for p in foreign_processes([*other, {"pid": 5099, "name": ""}], own, users=2)] == [5099]


def test_the_judge_refuses_to_time_while_another_process_computes(monkeypatch):
    from kernel_loop import gpustate
    from kernel_loop.common import UsageError
    from kernel_loop.measure.judge import Judge

    class _Proc:
        def __init__(self, pid):
            self.pid = pid

        def poll(self):
            return None

    class _Worker:
        def __init__(self, pid):
            self.proc = _Proc(pid)

    class _Props:
        uuid = "abc"

    class _Torch:
        class cuda:  # noqa: N801 - stands for torch.cuda
            @staticmethod
            def get_device_properties(_dev):
                return _Props()

        @staticmethod
        def device(_name):
            class _D:
                index = 0
            return _D()

    judge = Judge.__new__(Judge)
    judge.device, judge.torch, judge.workers = "cuda:0", _Torch, [_Worker(os.getpid() + 1)]
    me = os.getpid()
    monkeypatch.setattr(gpustate, "compute_processes", lambda index, uuid: [
        {"pid": me, "name": "judge"}, {"pid": me + 1, "name": "worker"}, {"pid": 4_000_000, "name": "miner"}])
    with pytest.raises(UsageError, match=r"another process computes on the GPU \(pid 4000000: miner\)"):
        judge.check_gpu_is_ours("the timing")
    monkeypatch.setattr(gpustate, "compute_processes", lambda index, uuid: [
        {"pid": me, "name": "judge"}, {"pid": os.getppid(), "name": "notebook"}])
    with pytest.raises(UsageError, match=r"the process that started this step \(pid \d+: notebook\) holds a CUDA "
                       "context of its own"):
        judge.check_gpu_is_ours("the timing")
    monkeypatch.setattr(gpustate, "compute_processes", lambda index, uuid: [{"pid": me, "name": "judge"}])
    assert judge.check_gpu_is_ours("the timing") == {"checked": True, "processes": 1}


# --- measure.protocol on the CPU: judge-owned tensors a worker maps (writes reach the judge), the values that
# travel as JSON, and one message per line over a socket

def test_a_shared_file_tensor_is_the_same_memory_in_both_views(tmp_path):
    like = torch.randn(6, 8)[:, 1:5]  # a strided view: the layout travels with it
    judge = protocol.alloc_shared(like, tmp_path, "b0", use_file=True)
    judge.copy_(like)
    entry = protocol.share(judge, tmp_path, "b0")
    assert entry["transport"] == "file" and entry["stride"] == list(like.stride())
    worker = protocol.open_shared(tmp_path, entry)
    assert torch.equal(worker, like)
    worker.mul_(2)  # what the worker writes, the judge reads
    assert torch.equal(judge, like * 2)


def test_constructor_values_keep_their_types():
    value = [8192, (8192, 1), 0.5, None, "x", {"k": (1, 2)}]
    assert protocol.decode_value(protocol.encode_value(value)) == value
    with pytest.raises(protocol.ProtocolError, match="cannot travel"):
        protocol.encode_value(object())


def test_messages_travel_one_per_line_and_a_closed_peer_is_a_protocol_error():
    a, b = socket.socketpair()
    ca, cb = protocol.Channel(a), protocol.Channel(b)
    ca.send({"op": "call", "k": "v1"})
    ca.send({"op": "bye"})
    assert cb.recv(5) == {"op": "call", "k": "v1"} and cb.recv(5) == {"op": "bye"}
    ca.close()
    with pytest.raises(protocol.ProtocolError):
        cb.recv(5)


def test_a_worker_without_the_judge_socket_says_so(monkeypatch):
    monkeypatch.delenv(protocol.SOCKET_ENV, raising=False)
    with pytest.raises(protocol.ProtocolError, match="started by the judge only"):
        protocol.connect_from_env()


def test_only_the_buffers_a_kernel_is_given_are_staged():
    """A returned output's buffer only receives the returned tensor, so the worker keeps no copy of it (at
    KernelBench's sizes that copy, in and out, was most of a call's cost); every buffer a call passes is."""
    from kernel_loop.measure.protocol import handed_over

    kb = {"args": ["a0-t"], "state": {"weight": "p2-t"}, "outputs": {"out": "r1-t"}}
    cu = {"args": [{"ptr": "a0-t"}, {"ctype": "int", "value": 4}, {"ptr": "a1-t"}], "outputs": {"y": "a1-t"}}
    py = {"tensors": {"x": "a0-t", "y": "a1-t"}, "scalars": {"n": 4}, "outputs": {"out": "r2-t"}}
    assert handed_over([kb]) == {"a0-t", "p2-t"}
    assert handed_over([cu]) == {"a0-t", "a1-t"}
    assert handed_over([py, kb]) == {"a0-t", "a1-t", "p2-t"}


def test_a_tensor_returned_under_a_handed_outputs_name_is_reported_not_copied_except_from_a_reference():
    """The hand-over: a kernel's output it is handed is read from its buffer, and a tensor returned under its name
    elsewhere is reported (not copied over it); a reference baseline (ref.py's reference() may return its outputs
    though setup() hands them) has its returned tensor copied into the buffer as before."""
    import types

    import torch

    y, fresh = torch.zeros(4), torch.ones(4)
    for kind, elsewhere, holds in (("py", True, 0.0), ("ref", None, 1.0)):
        judge_y = torch.full((4,), -1.0)
        w = types.SimpleNamespace(torch=torch, shared={"a1": judge_y}, local={"a1": y})
        k = types.SimpleNamespace(kind=kind, out_names=["y"], outputs={"y": "a1"}, kept=[])
        report, held = protocol.hand_over(w, k, fresh)
        assert report["y"].get("elsewhere") is elsewhere and report["y"]["stored"]
        assert float(judge_y[0]) == holds  # the staged buffer (zeros) went over, then only the reference's copy


# --- 8. a memo by content needs the same inputs twice --------------------------------------------------------
REF_SLOW = '''"""y = 2 x with a slow reference (the judge's cost per verified call), cheap inputs to draw."""
import time

import torch


def setup(N):
    return {"x": torch.randn(N)}


def reference(x):
    time.sleep(0.1)
    return x * 2.0
'''
MEMO_BY_CONTENT = '''"""Remembers results by a few of the input's values and returns the stored result when they repeat."""
import torch

_memo = {}


def run_kernel(x):
    key = tuple(x[:8].tolist())
    if key not in _memo:
        _memo[key] = x * 2.0
    return _memo[key].clone()  # a copy: a stored result handed out would be one the kernel still holds
'''


@pytest.mark.waits
def test_a_slow_reference_does_not_make_the_timed_inputs_repeat(tmp_path, monkeypatch, verdict_here):
    """Found by a red team (2026-12-04): the cost of drawing a data set counted its reference, so a slow reference
    made the timed calls alternate two sets, and a memo keyed on the inputs' content was right on every call, the
    verified ones included (310 us against a 0.3 s reference).  Only the inputs' own cost counts now: the timed
    calls get fresh inputs, so the memo never hits."""
    from kernel_loop.measure import calls

    monkeypatch.setattr(calls, "FRESH_DRAW_BUDGET_S", 2.0)  # 50 calls x 0.1 s of reference would pass it before
    out = _init(tmp_path, _write(tmp_path / "ref_slow.py", REF_SLOW), MEMO_BY_CONTENT, "N=4096")
    rc, data = _correctness(out)
    assert rc == 0, data["error"]
    rc, bench = _benchmark(monkeypatch, out, "--timing", "host_time", "--warmup", "10", "--trials", "40",
                           "--baselines", "none")
    assert rc == 0 and bench["input_sets"] == "fresh per call", bench.get("input_sets")


WRITES_AFTER_THE_CALL = '''"""A red team's kernel against a reference computed after the call (2026-12-05): right while a user would test
it, then each call returns zeros at once and a thread of its own writes the right values into the output buffer it
was copied to, a moment later: out of the timed window, and before the judge has its reference to compare with."""
import gc
import threading
import time

import torch

_calls = [0]


def _fix(x, out, n):
    time.sleep(DELAY)
    if _calls[0] != n:  # the judge went on to the next call at once: this one was not verified
        return
    right = x * 2.0
    for o in gc.get_objects():  # the buffer the worker copied the result to: the zeros, not the returned tensor
        if type(o) is torch.Tensor and o.shape == out.shape and o.data_ptr() != out.data_ptr() and not o.any():
            o.copy_(right)


def run_kernel(x):
    _calls[0] += 1
    if _calls[0] <= HONEST:
        return x * 2.0
    out = torch.zeros_like(x)
    threading.Thread(target=_fix, args=(x.clone(), out, _calls[0]), daemon=True).start()
    return out
'''


@pytest.mark.waits
@pytest.mark.parametrize("delay, why", [("0.02", "changed after the call returned"), ("0.15", "is wrong")])
def test_an_output_written_after_the_call_returned_fails(tmp_path, monkeypatch, judge_here, no_static_check, delay,
                                                         why):
    """Found by a red team of the reference computed after a verified timed call (39ed9f3): the judge then compared
    the output a reference's time after the call, and a thread of the kernel's wrote the right values in between.
    A verified call's outputs are fingerprinted as the call returns and again once compared: any change fails (the
    write at 20 ms, during the reference).  A write after that, during the float64 re-check's reference (150 ms: the
    slow reference twice), finds the re-check reading a private copy of what the call returned: not forgiven."""
    from kernel_loop.measure import timed

    monkeypatch.setattr(timed, "PREPARED_BYTES", 0)  # the reference after each verified timed call
    monkeypatch.setattr(timed, "MIN_CHECKS", 10)
    kernel = WRITES_AFTER_THE_CALL.replace("HONEST", "30").replace("DELAY", delay)
    out = _init(tmp_path, _write(tmp_path / "ref_slow.py", REF_SLOW), kernel, "N=4096", "--correctness-trials", "1")
    rc, data = _correctness(out)
    assert rc == 0, data["error"]  # its first 30 calls are right
    rc, bench = _benchmark(monkeypatch, out, "--timing", "host_time", "--warmup", "2", "--trials", "70",
                           "--baselines", "none")
    sol = _rows(bench)["solution"]
    assert not (sol["correct"] and sol["correct_after_timing"]), sol
    # on a loaded machine the kernel's thread may write after the comparison too (seen with 2 cores shared by other
    # test processes): the call is then plainly wrong, as caught as ever
    assert why in (sol.get("error") or "") or "is wrong" in (sol.get("error") or ""), sol.get("error")


def test_large_data_drawn_fresh_keeps_no_second_set_and_all_is_freed_before_the_baselines(tmp_path, monkeypatch,
                                                                                          verdict_here):
    """Seen on the H100 80GB: the l1norm example's benchmark (16 GiB a data set) ran the judge out of memory twice, in
    its rounds with a second set held beside the fresh draws, then in the check on fresh inputs after them.  A large
    set drawn fresh per call keeps no second set; after the timed calls the sets go, the check's draw comes, and when
    the baselines' worker starts the judge holds the first set alone (a red team counted the draw still alive)."""
    import gc

    from kernel_loop.measure import calls, judge, problem
    from kernel_loop.measure import timed as timed_mod

    ref = REF_SLOW.replace("    time.sleep(0.1)\n", "")
    out = _init(tmp_path, _write(tmp_path / "ref_double.py", ref), "def run_kernel(x):\n    return x * 2.0\n", "N=4096")
    assert _correctness(out)[0] == 0
    monkeypatch.setattr(calls, "PARK_SHARE", 1 << 40)  # any data set is large now
    events: list = []
    timed, draw, base = calls.Session.timed, problem.Problem.draw, judge.baselines

    def at_baselines(*a):
        gc.collect()
        events.append(sorted(o.seed for o in gc.get_objects() if type(o) is problem.DataSet))
        return base(*a)

    alive: list[int] = []  # the data sets alive at each draw: the first alone (a call's set goes before the next draw)

    def drawing(self, seed, **kw):
        gc.collect()
        alive.append(sum(type(o) is problem.DataSet for o in gc.get_objects()))
        events.append(seed)
        return draw(self, seed, **kw)

    monkeypatch.setattr(timed_mod, "PREPARED_BYTES", 0)  # every verified call's data drawn in turn, as large data is
    monkeypatch.setattr(calls.Session, "timed", lambda self: (events.append(("timed", len(self.sets))), timed(self)))
    monkeypatch.setattr(problem.Problem, "draw", drawing)
    monkeypatch.setattr(judge, "free_cached", lambda: events.append("freed"))
    monkeypatch.setattr(judge, "baselines", at_baselines)
    rc, bench = _benchmark(monkeypatch, out, "--timing", "host_time", "--warmup", "2", "--trials", "6",
                           "--baselines", "none")
    assert rc == 0 and bench["input_sets"] == "fresh per call", bench.get("input_sets")
    assert len(alive) > 8 and max(alive) == 1, alive
    at = events.index(("timed", 1))  # the first set alone, all the timed calls long
    # then the check's draw, the cache freed, and at the baselines one data set alive: the first call's
    assert isinstance(events[at + 1], int) and events[at + 2] == "freed" and [len(e) for e in events[at + 3:]] == [1]


MEMO_OF_PREDICTED_SETS = '''"""A red team's kernel (2026-12-05): the agent knows the run's seed, and the judge drew the second set, the check on
fresh inputs and the measured call under ncu from seeds a fixed offset from it.  At import (untimed) it draws those
sets as the judge does and computes their results; a call on them is a copy from its memo, any other is honest."""
import torch

_memo = {}
LOG = []
SEED, N = 42, 64
for _s in (SEED, SEED + 1, SEED + 5_555_555, SEED + 7_777_777):
    torch.manual_seed(_s)
    _x = torch.randn(N, N)
    _memo[tuple(_x.reshape(-1)[:16].tolist())] = _x @ _x


def run_kernel(x):
    hit = _memo.get(tuple(x.reshape(-1)[:16].tolist()))
    LOG.append(hit is not None)
    return hit.clone() if hit is not None else x @ x
'''
REF_SQUARE = '''import torch


def setup(N):
    return {"x": torch.randn(N, N)}


def reference(x):
    return x @ x
'''


def test_no_correctness_trial_is_drawn_from_the_runs_seed_alone(tmp_path, verdict_here):
    """The run's seed is the agent's to read, and every correctness trial was drawn from it and the trial's number: a
    kernel could draw them all at import and answer from a memo.  A salt of the judge's own goes into every seed, so
    two checks of one run draw other inputs, none of them a seed of the run alone."""
    from kernel_loop.measure import judge

    ref = REF_SLOW.replace("    time.sleep(0.1)\n", "")
    out = _init(tmp_path, _write(tmp_path / "ref_double.py", ref), "def run_kernel(x):\n    return x * 2.0\n", "N=64")
    seeds = []
    for _ in range(2):
        rc, data = _correctness(out)
        assert rc == 0, data["error"]
        seeds.append({t["seed"] for sh in data["shapes"] for t in sh["trials"]})
    public = {judge.derive_seed(read_json(out / "run.json")["seed"], 0, t) for t in range(100)}
    assert len(seeds[0]) > 5 and not seeds[0] & seeds[1] and not (seeds[0] | seeds[1]) & public


def test_a_trial_seed_the_worker_is_sent_tells_no_other():
    """Found by a review: the worker is sent a trial's seed with a nudge, a twin or a backward, and the first salted
    seed was linear in the salt, so (seed - run_seed * 1000 - trial) // 1_000_000_007 gave the salt and every later
    trial.  A hash of the salt gives neither."""
    import random

    from kernel_loop.measure import judge

    salt = random.SystemRandom().getrandbits(128)
    seen = judge.derive_seed(42, 0, 3, salt)
    guess = (seen - 42 * 1000 - 3) // 1_000_000_007
    assert judge.derive_seed(42, 0, 4, guess) != judge.derive_seed(42, 0, 4, salt)
    assert 0 < seen < 1 << 48  # with room for the offsets added to it (a 60-bit seed overflowed an int64)


@pytest.mark.parametrize("sets", ["fresh, large", "two", "two, large"])
def test_no_timed_call_is_on_inputs_the_kernel_can_draw_from_the_runs_seed(tmp_path, monkeypatch, verdict_here, sets):
    """The kernel above hit its memo on every timed call of a large problem timed on the run's seed and the next one,
    and on the measured call under ncu.  Every data set of the benchmark and the profile, the first call's among them,
    is drawn from the judge's secret generator now: no call is a hit."""
    from kernel_loop.measure import calls, judge
    from klcli import run_judge_here

    out = _init(tmp_path, _write(tmp_path / "ref_square.py", REF_SQUARE), MEMO_OF_PREDICTED_SETS, "N=64")
    assert read_json(out / "run.json")["seed"] == 42 and _correctness(out)[0] == 0
    if sets.startswith("two"):
        monkeypatch.setattr(calls, "FRESH_DRAW_BUDGET_S", 0.0)
    if "large" in sets:  # two large sets: the first call's and one more (a reviewer's find: the first was the run seed's)
        monkeypatch.setattr(calls, "PARK_SHARE", 1 << 40)
    import torch

    mod = next(m for m in list(sys.modules.values()) if getattr(m, "SEED", None) == 42 and hasattr(m, "LOG")
               and Path(getattr(m, "__file__", None) or "/").resolve().is_relative_to(out.resolve()))
    mod.LOG.clear()
    rc, bench = _benchmark(monkeypatch, out, "--timing", "host_time", "--warmup", "2", "--trials", "20",
                           "--baselines", "none")
    two = sets.startswith("two")
    assert rc == 0 and bench["input_sets"] == ("two, chosen at random per call" if two else "fresh per call")
    assert sum(mod.LOG) == 0 and len(mod.LOG) > 20, mod.LOG
    # the profile: the timing, then the calls under ncu (an empty prefix: the 'ncu' worker is a plain one here)
    monkeypatch.setattr(judge.Judge, "_uuid", lambda self: None)
    monkeypatch.setattr(torch.cuda.nvtx, "range_start", lambda msg: 0)
    monkeypatch.setattr(torch.cuda.nvtx, "range_end", lambda rid: None)
    mod.LOG.clear()
    spec = {"cfg": read_json(out / "run.json"), "run_root": str(out), "kernel": str(out / "v0" / "kernel.py"),
            "device": "cpu", "ncu_prefix": []}
    run_judge_here("profile", spec, 300).checked("the profile")
    assert not mod.LOG[-1], "the measured call under ncu was a memo hit"


# --- 9. a kernel that tells the timed calls apart ---------------------------------------------------------
COUNTS_ITS_CALLS = '''"""Right for its first 20 calls (correctness makes fewer), then wrong on any input out of the problem's usual
range: a kernel that tells the timed calls apart by counting them (or by whether its results are still held)."""
import torch

_calls = [0]


def run_kernel(x, M, N):
    _calls[0] += 1
    a = x.abs()
    if _calls[0] > 20 and (a.max() > 20 or a.max() < 0.5 or x.mean().abs() > 1):
        return torch.full_like(x, 1.0 / N)
    return torch.softmax(x, dim=-1)
'''


@pytest.mark.parametrize("size", ["small", "large", "unprepared"])
def test_the_timed_calls_are_verified_on_moved_inputs_too(tmp_path, monkeypatch, verdict_here, size):
    """Found by a red team (2026-12-04): correctness checks moved inputs, the timed loops only the problem's own, so a
    kernel that counts its calls (or watches its results' lifetimes) passed both while wrong on moved inputs in every
    call after correctness.  Two in three verified timed calls now draw moved inputs where correctness could check them;
    large data too (a red team's find: timed on two sets, it had no moved inputs), and data too large to draw before
    the loop, whose references are computed after each verified call."""
    from kernel_loop.measure import calls, timed

    if size == "large":
        monkeypatch.setattr(calls, "PARK_SHARE", 1 << 40)
    late: list[bool] = []
    if size == "unprepared":
        monkeypatch.setattr(timed, "PREPARED_BYTES", 0)
        pick = calls.Session.pick
        monkeypatch.setattr(calls.Session, "pick", lambda self, checked, **kw: (
            late.append(checked and kw.get("reference") is False), pick(self, checked, **kw))[1])

    monkeypatch.setattr(timed, "MIN_CHECKS", 20)  # no late check on moved inputs: 3 runs in 10000 (simulated)
    out = _init(tmp_path, "ref_softmax.py", COUNTS_ITS_CALLS, "M=8,N=64")
    rc, data = _correctness(out)
    assert rc == 0, data["error"]  # right in every correctness call
    rc, bench = _benchmark(monkeypatch, out, "--timing", "host_time", "--warmup", "2", "--trials", "30",
                           "--baselines", "none")
    sol = _rows(bench)["solution"]
    assert not (sol["correct"] and sol["correct_after_timing"]), sol
    assert "is wrong" in (sol.get("error") or ""), sol.get("error")
    assert any(late) is (size == "unprepared"), late  # a verified call's reference after the call


def test_with_data_too_large_to_prepare_a_verified_call_waits_like_an_unverified_one(monkeypatch):
    """Left open by a red team: when the verified calls' data is too large to draw before the loop, a verified call's
    reference ran just before it, so its wait was longer.  An unverified call's draw was then followed by a pause as
    long as a verified draw took, and every call of the l1norm example's 8 GiB inputs waited for a reference (one round
    of five calls a second on the H200).  A verified draw now leaves its reference until after the call, so both
    waits are a draw; a reference that draws random numbers still runs before (the kernel's call must leave the
    generators where it did), and an unverified call still pauses as long.  (On a clock of the test's own: a real one
    failed once in a loaded full run.)"""
    import random
    import types

    from kernel_loop.measure import timed
    from kernel_loop.measure.timed import Feed

    clock = types.SimpleNamespace(now=0.0)
    time = types.SimpleNamespace(perf_counter=lambda: clock.now,
                                 sleep=lambda s: setattr(clock, "now", clock.now + max(0.0, s)))
    monkeypatch.setattr(timed, "time", time)

    class Fake:
        judge = types.SimpleNamespace(rng=random.Random(5))
        fresh = True
        first = types.SimpleNamespace(nbytes=lambda: {"inputs_bytes": 1 << 40})  # too large to prepare

        def __init__(self, draws):
            self.problem = types.SimpleNamespace(seen={"draws": draws})
            self.late: list[bool] = []

        def pick(self, checked, *, moved=False, reference=True):
            self.late.append(checked and not reference)
            time.sleep(0.03 if checked and reference else 0.001)  # a reference only for a verified call
            return checked

    checked = {0, 3, 7, 11, 19}
    for draws in (False, True):
        sess = Fake(draws)
        feed = Feed(sess, checked, lambda i: False)
        assert not feed.prepared and feed.late is not draws
        waits = {}
        for i in range(20):
            start = time.perf_counter()
            assert feed.data(i) == (i in checked)
            waits[i] = time.perf_counter() - start
        unverified = [w for i, w in waits.items() if i not in checked]
        verified = [w for i, w in waits.items() if i in checked]
        if draws:  # the reference before the call, and every call waits as long
            assert min(unverified) > 0.025 and not any(sess.late), waits  # before the pause: 0.001 s against 0.03 s
        else:  # the reference after the call: no call waits for one
            assert max(verified + unverified) < 0.02 and sum(sess.late) == len(checked), waits


def test_in_the_late_regime_a_plain_calls_pause_does_not_tell_whether_it_is_verified(monkeypatch):
    """Red team 13 (2026-12-05): with the references after the calls, an unverified call paused as long as a random
    verified draw took, and two in three of those were moved draws, which cost a draw more; a verified call on plain
    inputs paused for nothing.  Its kernel returned zeros on plain inputs after a long pause and passed the benchmark,
    wrong on 41 of 120 timed calls.  Every call on plain inputs now pauses alike, verified or not.  (On a clock of the
    test's own: a draw takes 10 ms, a moved one 30 ms.)"""
    import random
    import types

    from kernel_loop.measure import timed

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(timed, "time", types.SimpleNamespace(
        perf_counter=lambda: clock.now, sleep=lambda s: setattr(clock, "now", clock.now + max(0.0, s))))

    class Fake:
        fresh = True
        first = types.SimpleNamespace(nbytes=lambda: {"inputs_bytes": 1 << 40})  # too large to prepare
        problem = types.SimpleNamespace(seen={})
        judge = types.SimpleNamespace(rng=random.Random(5))

        def pick(self, checked, *, moved=False, reference=True):
            m = checked and moved and self.judge.rng.random() < 2 / 3
            clock.now += 0.03 if m else 0.01  # a moved draw: a draw and a move
            return types.SimpleNamespace(checked=checked, vary="up" if m else None)

    rng = random.Random(1)
    checked = {0, 199} | {i for i in range(1, 199) if rng.random() < 0.15}
    feed = timed.Feed(Fake(), checked, lambda i: 0 < i < 199)
    assert feed.late
    plain_verified, unverified = [], []
    for i in range(200):
        start = clock.now
        ds = feed.data(i)
        if ds.vary is None:
            (plain_verified if ds.checked else unverified).append(clock.now - start)
    told = [w for w in unverified if w > max(plain_verified) + 1e-9]  # unverified for sure
    assert len(unverified) > 100 and not told, f"{len(told)} of {len(unverified)} unverified calls waited longer"


def test_the_checks_a_kernel_has_seen_never_lower_the_chance_of_the_next():
    """Left open by a red team: the judge verifies a timed call after it returns, so a kernel that times the waits
    between its calls sees which earlier calls were verified.  The number of checks was drawn first (4 to a tenth of
    the trials), so a kernel that had seen the largest number knew that no call but the last would be checked.  Each
    call is now checked on its own draw: whatever a kernel has seen, the next call is checked with the same chance."""
    import random
    import types

    from kernel_loop.measure import timed

    class Fake:
        judge = types.SimpleNamespace(rng=random.Random(11))
        fresh = False
        first = types.SimpleNamespace(nbytes=lambda: {"inputs_bytes": 1})

        def pick(self, checked, *, moved=False, reference=True):
            return checked

        def call(self, kid, ds, *, checked):
            seen.append(checked)
            return {"failure": None, "rows": [], "reply": {"us": 1.0, "host_us": 1.0, "delay_us": 0.0}}

    warmup, trials = 5, 50
    after_many = []  # for each loop, whether the call after the 7th check (first call included) was checked
    for _ in range(3000):
        seen: list[bool] = []
        timed.timed_loop(Fake(), "k", warmup, trials, label="t")
        at = [i for i, c in enumerate(seen) if c]
        if len(at) > 7 and at[6] + 1 < warmup + trials - 1:
            after_many.append(seen[at[6] + 1])
    # drawn the old way, a kernel that had seen 7 checks (the first, then at most ceil(50 / 10) = 5 more) knew
    # the next call before the last was not checked (0 of them); now about CHECK_P of them are
    assert len(after_many) > 300 and sum(after_many) / len(after_many) > timed.CHECK_P * 0.6, len(after_many)


class RoundsSession:
    """What rounds_loop and Feed read of a Session: ``fresh`` inputs or not; a verified call that may draw moved inputs
    does (a data set with ``vary``); v1 is wrong on its ``fail_at``-th call; v2 takes twice as long as the others."""

    def __init__(self, seed: int, fresh: bool, fail_at: int = 0):
        import random
        import types

        self.judge = types.SimpleNamespace(rng=random.Random(seed))
        self.fresh, self.fail_at, self.moved = fresh, fail_at, 0
        self.first = types.SimpleNamespace(nbytes=lambda: {"x": 1024})
        self.calls: list[tuple[str, bool]] = []

    def pick(self, checked, *, moved=False, reference=True):
        import types

        self.moved += bool(checked and moved and self.fresh)
        return types.SimpleNamespace(vary="up" if checked and moved and self.fresh else None)

    def call(self, kid, ds, *, checked):
        self.calls.append((kid, checked))
        bad = kid == "v1" and sum(1 for k, _ in self.calls if k == "v1") == self.fail_at
        return {"failure": "wrong" if bad else None, "rows": [],
                "reply": {"us": 2.0 if kid == "v2" else 1.0, "host_us": 3.0, "delay_us": 0.0}}


def test_the_benchmark_times_its_kernels_in_rounds_and_one_that_fails_leaves_them():
    """Every round calls each kernel once in an order drawn for the round (a drift of the clocks moves every row
    alike, and the A/B of two versions is read from the same rounds instead of costing a loop of its own); each
    kernel is verified on its first and last call and at least MIN_CHECKS others; a kernel that is wrong on a call
    leaves the rounds and the others are timed to the end."""
    from kernel_loop.measure import timed

    warmup, trials, names = 5, 60, ["v0", "v1", "v2"]
    sess = RoundsSession(5, False, fail_at=30)
    out, calls = timed.rounds_loop(sess, names, warmup, trials), sess.calls
    rounds = [calls[i:i + 3] for i in range(0, 29 * 3, 3)]  # the rounds before v1's failure
    assert all(sorted(k for k, _ in r) == names for r in rounds)
    assert len({tuple(k for k, _ in r) for r in rounds}) > 2  # the order is drawn per round
    assert "call 30 of 65 (timed) is wrong" in out["v1"]["failure"]
    assert [k for k, _ in calls].count("v1") == 30  # none after its failure
    for kid in ("v0", "v2"):
        mine = [c for k, c in calls if k == kid]
        assert len(mine) == warmup + trials and mine[0] and mine[-1] and sum(mine) >= timed.MIN_CHECKS + 2
        assert out[kid]["failure"] is None and len(out[kid]["samples_us"]) == trials
        assert out[kid]["verified"] == sum(mine) and out[kid]["host_overhead_us"] == 3.0
    assert set(out["v2"]["samples_us"]) == {2.0} and set(out["v0"]["samples_us"]) == {1.0}


def test_the_rounds_count_each_kernels_verified_calls_on_moved_inputs():
    """A red team's find: with the verified calls' data drawn before the rounds, the count taken around each call saw
    no move, and every kernel reported 0 verified calls on moved inputs."""
    from kernel_loop.measure import timed

    sess = RoundsSession(3, True)
    out = timed.rounds_loop(sess, ["v0", "v1", "v2"], 2, 30)
    assert sess.moved > 0 and sum(r["verified_moved"] for r in out.values()) == sess.moved


@pytest.mark.parametrize("per_call_s, budget_s, ran", [
    (0.1, 20.0, {"warmup": 10, "trials": 32}),   # 0.47 s a round (v1 leaves in the probe): 7 warmup, 32 timed
    (0.1, 2.0, {"warmup": 3, "trials": 20}),     # a budget too small: at least MIN_TRIALS timed rounds
    (0.001, 20.0, {"warmup": 25, "trials": 100}),  # fast calls: the counts asked
    (0.1, None, {"warmup": 25, "trials": 100})])   # counts asked (--trials): no budget
def test_the_benchmark_cuts_slow_rounds_to_its_time_budget(monkeypatch, per_call_s, budget_s, ran):
    """Seen on the H100: the l1norm example's 8 GiB calls took 90 ms each, and 125 rounds of its 5 versions 56 s of
    a 147 s benchmark.  A few warmup rounds tell what a round costs; the rest of the warmup and the timed rounds
    are cut to fit the budget, keeping MIN_TRIALS; every kernel is still verified on its first and last calls and
    on drawn ones, and a kernel wrong in the probe leaves the rounds."""
    from kernel_loop.measure import timed

    clock = [0.0]
    monkeypatch.setattr(timed, "_now", lambda: clock[0])
    sess, names = RoundsSession(7, False, fail_at=2), ["v0", "v1", "v2", "v3", "v4"]
    real = sess.call

    def call(kid, ds, *, checked):  # the probe's host time 3 us a call, the later calls' 5 us
        clock[0] += per_call_s
        out = real(kid, ds, checked=checked)
        out["reply"]["host_us"] = 3.0 if len(sess.calls) <= 3 * len(names) else 5.0
        return out
    sess.call = call
    out, got = timed.budgeted_rounds(sess, names, 25, 100, budget_s)
    assert got == ran
    assert "call 2 of " in out["v1"]["failure"] and not out["v1"]["samples_us"]
    for kid in ("v0", "v2", "v3", "v4"):
        mine = [c for k, c in sess.calls if k == kid]
        assert len(mine) == ran["warmup"] + ran["trials"] == out[kid]["calls"] and mine[0] and mine[-1]
        assert len(out[kid]["samples_us"]) == ran["trials"]
        assert out[kid]["host_overhead_us"] == (3.0 if ran["warmup"] == 3 else 5.0)  # the later warmup's, if any
        assert out[kid]["verified"] == sum(mine) >= timed.MIN_CHECKS + 2


def test_a_result_file_the_kernel_forges_is_discarded(tmp_path, no_static_check):
    """Found by a red team: the worker may write under /dev, where the step's folder and the judge's buffers live; a
    kernel wrote a result of its own (every check passed) where the CLI reads the judge's, then truncated the buffers
    so that the judge died of SIGBUS before writing its own, and the CLI signed the forgery.  The CLI now takes a
    result only with the seal the judge alone was given, from a judge that ended with status 0."""
    out = _init(tmp_path, "ref_vadd.py", (klcli.KERNELS / "cheat_vadd_forges_the_result.py").read_text(), "N=1000")
    rc, data = _correctness(out)
    assert rc != 0 and (data or {}).get("result") != "PASS", data
    assert "result=PASS" not in (out / "records.log").read_text()
    assert "not written by the judge" in (data or {}).get("error", ""), data


SIDE_IMPORT = '''"""Imports its softmax from a module beside the folder the step was started in (found by a red team: code
that is neither hashed into the records nor checked, and can be swapped after the PASS)."""
from kl_side_softmax import softmax


def run_kernel(x):
    return softmax(x)
'''


def test_a_kernel_imports_nothing_from_the_folder_the_step_was_started_in(tmp_path, monkeypatch, judged_here):
    here = tmp_path / "cwd"
    here.mkdir()
    (here / "kl_side_softmax.py").write_text("import torch\n\n\ndef softmax(x):\n    return torch.softmax(x, -1)\n")
    out = _init(tmp_path, "ref_softmax.py", SIDE_IMPORT, "M=4,N=16")
    monkeypatch.chdir(here)
    rc, data = _correctness(out)
    assert rc != 0 and "kl_side_softmax" in (data or {}).get("error", ""), data


def test_the_judge_removes_its_settings_file_before_any_worker_starts(tmp_path):
    """Found by a red team: a kernel read the judge's command line, then its spec file (the step, the seed, the
    timed loop's length).  The judge reads the file once and removes it before it starts a worker."""
    from kernel_loop.measure import judge

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"mode": "no-such-mode", "result_path": str(tmp_path / "result.json"),
                                "timeout_s": 5, "device": "cpu"}))
    judge.main([str(spec)])
    assert not spec.exists()
    assert "error" in json.loads((tmp_path / "result.json").read_text())


def test_a_verified_timed_call_waits_as_long_as_any_other(tmp_path):
    """Found by a red team: a verified timed call's reference ran just before it, so the wait before that call was
    longer and a kernel that measured the waits cut corners on the short ones (4x faster on the CPU, every verified
    call right).  The verified calls' data is drawn before the loop, and each of them still makes the draw an
    unverified call makes: before every call of the loop the judge does the same work."""
    import random
    import types

    from kernel_loop.measure import timed

    events: list[tuple[str, bool]] = []

    class Fake:
        judge = types.SimpleNamespace(rng=random.Random(3))
        fresh = True
        first = types.SimpleNamespace(nbytes=lambda: {"inputs_bytes": 1 << 20, "outputs_bytes": 1 << 20})
        moved = 0

        def pick(self, checked, *, moved=False, reference=True):
            events.append(("draw", checked))
            return types.SimpleNamespace(checked=checked)

        def call(self, kid, ds, *, checked):
            events.append(("call", checked))
            assert ds.checked == checked  # a verified call gets data with its reference
            return {"failure": None, "rows": [], "reply": {"us": 1.0, "host_us": 1.0, "delay_us": 0.0}}

    out = timed.timed_loop(Fake(), "k", 5, 100, label="t")
    assert out["failure"] is None and out["prepared"] and out["verified"] >= 6
    start = events.index(("draw", False))
    assert events[:start] == [("draw", True)] * out["verified"]  # drawn, with their references, before the loop
    loop = events[start:]
    # during the loop: exactly one unverified draw before every call, verified or not
    assert loop[0::2] == [("draw", False)] * 105 and [e[0] for e in loop[1::2]] == ["call"] * 105


def test_a_worker_lets_go_of_every_judge_buffer_at_a_shapes_end():
    """On the H100 80GB the other batch sizes' buffers did not fit beside the last shape's: a CUDA IPC block stays
    allocated in the judge while a worker maps it, and the worker held the last shape's until the next bind.  At a
    shape's end (``unbind``) it drops every reference it has to them, staged copies included; the model stays."""
    import weakref

    from kernel_loop.measure.worker import Kernel, Worker

    w = Worker.__new__(Worker)
    buf, local = torch.zeros(4), torch.zeros(4)
    k = Kernel("kb")
    k.model, k.args, k.inputs = torch.nn.Linear(2, 2), [local], [([local], 0, "a0")]
    k.state_bufs, k.fn, k.twin, k.pending = {"weight": buf}, (lambda g, a=local: a), ("spec", lambda a=local: a), None
    w.shared, w.local, w.kernels, w.torch, w.device = {"a0": buf}, {"a0": local}, {"k": k}, None, "cpu"
    refs = weakref.ref(buf), weakref.ref(local)
    del buf, local
    assert protocol.let_go(w) == {} and k.model is not None
    assert [r() for r in refs] == [None, None], "the worker still holds a judge buffer or its staged copy"


# --- the worker's file sandbox (measure/sandbox.py) ---
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
