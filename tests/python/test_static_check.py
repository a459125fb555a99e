"""The static check of kernel source (kernel_loop.static_check): the first filter against kernels that
reach into the harness.

Each refusal test writes a small kernel that stands for one attack, and asserts the one-line message
names the right line and the construct. The honest kernels of the packs and the examples must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import KERNELS, PACKED_KERNELS, REPO, read_pack
from kernel_loop.common import UsageError
from kernel_loop.static_check import RULES, Finding, check_kernel_source, findings


def _write(tmp_path, text, name="kernel.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def _refused(tmp_path, text, line, needle, name="kernel.py"):
    """Assert the kernel is refused, first at ``line``, with ``needle`` in the one-line message."""
    path = _write(tmp_path, text, name)
    with pytest.raises(UsageError) as err:
        check_kernel_source(path)
    msg = str(err.value)
    assert msg.startswith(f"{name}:{line}: refused: "), msg
    assert needle in msg, msg
    assert "\n" not in msg and msg.endswith(")"), msg
    return msg


def _passes(tmp_path, text, name="kernel.py"):
    path = _write(tmp_path, text, name)
    assert findings(path) == []
    assert check_kernel_source(path) is None


# --- the message and the API ---------------------------------------------------------------------
def test_import_ctypes_message_names_line_construct_and_cause(tmp_path):
    """A kernel that imports ctypes to write into the harness's memory (the expected outputs, a timer)."""
    msg = _refused(tmp_path, "import torch\nimport ctypes\n", 2, "'import ctypes'")
    assert msg == ("kernel.py:2: refused: 'import ctypes' (ctypes can rewrite the harness's memory; "
                   "a kernel must not reach outside its own computation)")


def test_findings_lists_every_refused_construct_in_source_order(tmp_path):
    """A kernel with several attacks: findings() reports all of them, check_kernel_source the first."""
    path = _write(tmp_path, """
        import os
        import torch
        torch.allclose = lambda *a, **k: True
        MODE = os.environ.get("MODE")
        import gc
    """)
    found = findings(path)
    assert [f.line for f in found] == [3, 4, 5]
    assert all(isinstance(f, Finding) and f.what.startswith("refused: ") and f.why for f in found)
    with pytest.raises(UsageError, match=r"^kernel.py:3: refused: assignment to 'torch.allclose'"):
        check_kernel_source(path)


def test_rules_live_in_one_table():
    """Every rule is one (kind, pattern, why) entry of RULES, each with a reason to show."""
    assert len(RULES) > 100
    assert all(r.kind and r.pattern and len(r.why) > 20 for r in RULES)
    assert len({(r.kind, r.pattern) for r in RULES}) == len(RULES)


def test_the_module_imports_no_torch():
    """The check runs before any kernel code and beside steps that must not load torch."""
    code = "import sys, kernel_loop.static_check; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(REPO / "helpers")})


def test_a_file_that_does_not_parse_is_refused_with_its_line(tmp_path):
    """A kernel this check cannot read (a syntax error) is not vouched for."""
    _refused(tmp_path, "import torch\n\ndef run_kernel(x:\n    pass\n", 3, "does not parse")


def test_an_unreadable_file_is_a_usage_error(tmp_path):
    """A missing kernel file gives one clear line, not a traceback."""
    with pytest.raises(UsageError, match="cannot read the kernel file"):
        check_kernel_source(tmp_path / "missing.py")


# --- imports -------------------------------------------------------------------------------------
@pytest.mark.parametrize("stmt", [
    "import kernel_loop", "from kernel_loop import compare", "from kernel_loop.handoff import deliver",
    "import kernel_loop.trials as t", "import ctypes.util", "import gc", "import inspect", "import importlib",
    "from importlib import import_module", "import multiprocessing", "from multiprocessing import Process",
    "import subprocess", "import signal", "import atexit", "import threading", "import _thread",
    "import socket", "import pickle", "import marshal", "import builtins", "from torch import multiprocessing",
    "from concurrent import futures", "import runpy", "import pkgutil"])
def test_imports_that_reach_outside_the_kernel_are_refused(tmp_path, stmt):
    """A kernel that imports the harness, or a module for memory, process, thread, signal, exit-hook,
    network, deserialization or import-machinery access."""
    _refused(tmp_path, f"import torch\n\n{stmt}\n", 3, f"'{stmt.split(' as ')[0]}")


def test_plain_sys_and_os_with_harmless_attributes_pass(tmp_path):
    """An honest kernel may read the Python version or build a path; only the listed attributes are refused."""
    _passes(tmp_path, """
        import os
        import sys

        BIG = sys.maxsize if sys.platform == "linux" and sys.version_info >= (3, 8) else 0
        HERE = os.path.join(os.path.dirname(__file__), "x")
        WINDOWS = os.name == "nt"
    """)


def test_star_import_of_os_is_refused(tmp_path):
    """A kernel that binds os.environ and os.system without naming them."""
    _refused(tmp_path, "from os import *\n", 1, "from os import *")


# --- sys and os attributes -----------------------------------------------------------------------
def test_rebinding_the_handoff_through_sys_modules_is_refused(tmp_path):
    """A kernel that rebinds the hand-over function through sys.modules."""
    _refused(tmp_path, """
        import sys

        sys.modules["kernel_loop.handoff"].deliver = lambda *a: None
    """, 3, "'sys.modules'")


def test_reading_the_command_line_is_refused(tmp_path):
    """A kernel that reads sys.argv to learn whether it is being checked or timed."""
    _refused(tmp_path, """
        import sys
        import torch

        TIMED = "--timing" in sys.argv
    """, 4, "'sys.argv'")


@pytest.mark.parametrize("attr", ["_getframe(1)", "settrace(None)", "setprofile(None)", "meta_path",
                                  "path_hooks", "path.insert(0, '/tmp')", "path"])
def test_sys_hooks_frames_and_import_paths_are_refused(tmp_path, attr):
    """A kernel that climbs into the harness's frames, hooks its execution, or redirects its imports."""
    name = attr.split("(")[0].split(".")[0]
    _refused(tmp_path, f"import sys\n\nX = sys.{attr}\n", 3, f"'sys.{name}'")


def test_an_environment_switch_is_refused(tmp_path):
    """A kernel whose behaviour switches on an environment variable (checked run vs timed run)."""
    _refused(tmp_path, """
        import os

        def run_kernel(x):
            if os.environ.get("KL_TIMING"):
                return x
            return x * 2
    """, 4, "'os.environ'")


@pytest.mark.parametrize("call", [
    "getenv('X')", "putenv('X', '1')", "unsetenv('X')", "setsid()", "fork()", "forkpty()", "system('id')",
    "popen('id')", "execv('/bin/sh', [])", "execvp('sh', [])", "spawnl(0, 'sh')", "kill(1, 9)",
    "killpg(1, 9)", "open('f', 0)", "read(3, 10)", "write(1, b'x')", "fdopen(3)", "readlink('x')",
    "listdir('.')", "scandir('.')", "walk('.')", "chdir('..')"])
def test_os_process_descriptor_and_filesystem_calls_are_refused(tmp_path, call):
    """A kernel that spawns or signals processes, uses raw descriptors, or explores the run directory."""
    name = call.split("(")[0]
    _refused(tmp_path, f"import os\n\n\ndef run_kernel(x):\n    os.{call}\n", 5, f"'os.{name}")


def test_from_os_import_environ_is_refused_at_the_import(tmp_path):
    """A kernel that hides the environment read behind a from-import."""
    _refused(tmp_path, "from os import environ\n\nX = environ['A']\n", 1, "'from os import environ'")


def test_module_aliases_are_resolved(tmp_path):
    """A kernel that renames os (import os as o, or o = os) to hide o.environ."""
    _refused(tmp_path, "import os as o\n\nX = o.environ\n", 3, "'o.environ'")
    _refused(tmp_path, "import sys\nsm = sys\nX = sm.modules\n", 3, "'sm.modules'")


def test_os_reached_through_another_module_is_refused(tmp_path):
    """Obfuscation: os.path.os.environ (os.path re-exports os), so no `os.environ` chain is written."""
    _refused(tmp_path, "import os.path as p\n\nE = p.os.environ\n", 3, "'p.os.environ'")


def test_ctypes_reached_through_another_module_is_refused(tmp_path):
    """Obfuscation: numpy's internals re-export ctypes, so `import ctypes` never appears; and a red team's
    `from torch.cuda.graphs import gc` (torch's module imports gc, so the name is an attribute of it)."""
    _refused(tmp_path, "import numpy as np\n\nM = np.core._internal.ctypes.memmove\n", 3,
             "'np.core._internal.ctypes'")
    _refused(tmp_path, "import torch\nfrom torch.cuda.graphs import gc as _g\n", 2,
             "'from torch.cuda.graphs import gc'")


@pytest.mark.parametrize("kw", ["start_new_session", "preexec_fn"])
def test_detaching_keywords_are_refused(tmp_path, kw):
    """A kernel that starts a child outside the harness's process group, beyond the reach of its timeout."""
    _refused(tmp_path, f"import torch\n\nlaunch = print\nlaunch('x', {kw}=True)\n", 4, f"'{kw}='")


# --- introspection -------------------------------------------------------------------------------
@pytest.mark.parametrize("attr", [
    "__dict__", "__class__", "__bases__", "__mro__", "__subclasses__", "__globals__", "__code__",
    "__closure__", "__builtins__", "__import__", "__getattribute__", "__loader__", "__spec__",
    "f_back", "f_globals", "f_locals", "gi_frame", "tb_frame"])
def test_introspection_attributes_are_refused(tmp_path, attr):
    """A kernel that walks from its own objects to the harness's globals, frames or class graph."""
    _refused(tmp_path, f"def run_kernel(x):\n    return x\n\n\nY = run_kernel.{attr}\n", 5, f".{attr}'")


@pytest.mark.parametrize("probe, line, needle", [
    ("import __main__\n\nJUDGED = __main__.__file__.endswith('worker.py')\n", 1, "'import __main__'"),
    ("import torch\n\nJUDGED = torch._C._len_torch_function_stack() > 0\n", 3, "'torch._C._len_torch_function_stack'"),
    ("import os\nimport stat\n\nJUDGED = stat.S_ISSOCK(os.fstat(3).st_mode)\n", 4, "'os.fstat'")])
def test_probes_of_the_process_around_the_kernel_are_refused(tmp_path, probe, line, needle):
    """Red teams' kernels right only where a mark of the judge's worker showed: its __main__ module, the device mode
    ModelNew was built under, the socket among its descriptors.  The static check names each (the first filter; a
    user-like process for the checked calls would be the defence)."""
    _refused(tmp_path, probe, line, needle)


def test_the_subclasses_escape_is_refused(tmp_path):
    """The classic escape: ().__class__.__bases__[0].__subclasses__() to find a loader or a Popen."""
    _refused(tmp_path, "import torch\nSUBS = ().__class__.__bases__[0].__subclasses__()\n", 2, "__class__")


def test_builtins_as_a_bare_name_is_refused(tmp_path):
    """A kernel that fetches eval from the module's __builtins__ mapping."""
    _refused(tmp_path, "import torch\n\nE = __builtins__['eval']\n", 3, "'__builtins__'")


# --- builtins ------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", ["eval('1')", "exec('x = 1')", "compile('1', 'f', 'eval')", "globals()",
                                  "locals()", "vars()", "open('x.bin', 'rb')", "breakpoint()", "input()"])
def test_code_namespace_file_and_terminal_builtins_are_refused(tmp_path, call):
    """A kernel that runs code built at run time, reads a namespace by string, opens a file or waits on
    the terminal."""
    name = call.split("(")[0]
    _refused(tmp_path, f"import torch\n\n\ndef run_kernel(x):\n    y = {call}\n    return x\n", 5, f"'{name}'")


def test_dunder_import_of_ctypes_is_refused(tmp_path):
    """Obfuscation: __import__('ctypes') in place of an import statement."""
    msg = _refused(tmp_path, "import torch\n\nC = __import__('ctypes')\n", 3, "'__import__'")
    assert "computed name" in msg
    assert any("'ctypes'" in f.what for f in findings(tmp_path / "kernel.py"))


def test_importlib_import_module_is_refused(tmp_path):
    """Obfuscation: importlib.import_module('ctypes')."""
    _refused(tmp_path, "import torch\nimport importlib\nC = importlib.import_module('ctypes')\n", 2,
             "'import importlib'")


def test_exec_of_a_file_is_refused(tmp_path):
    """Obfuscation: exec(open('payload.py').read()) runs code this check never saw."""
    path = _write(tmp_path, "import torch\n\nexec(open('payload.py').read())\n")
    found = findings(path)
    assert [f.what for f in found][:2] == ["refused: 'exec'", "refused: 'open'"]
    _refused(tmp_path, "import torch\n\nexec(open('payload.py').read())\n", 3, "'exec'")


def test_globals_builtins_lookup_is_refused(tmp_path):
    """Obfuscation: globals()['__builtins__'] to reach eval or __import__ by string."""
    path = _write(tmp_path, "import torch\n\nB = globals()['__builtins__']\n")
    assert {f.what for f in findings(path)} >= {"refused: 'globals'", "refused: the string '__builtins__'"}
    _refused(tmp_path, "import torch\n\nB = globals()['__builtins__']\n", 3, "'globals'")


def test_getattr_with_a_computed_name_is_refused(tmp_path):
    """Obfuscation: getattr(torch, 'all' + 'close') hides the attribute's name from a static read."""
    _refused(tmp_path, "import torch\n\nF = getattr(torch, 'all' + 'close')\n", 3, "not a string literal")


def test_setattr_and_delattr_with_computed_names_are_refused(tmp_path):
    """Obfuscation: setattr/delattr with a name assembled at run time."""
    _refused(tmp_path, "import torch\nn = 'x'\nsetattr(torch, n, 1)\n", 3, "'setattr' with a name")
    _refused(tmp_path, "import torch\nn = 'x'\ndelattr(torch, n)\n", 3, "'delattr' with a name")


def test_getattr_with_a_literal_name_is_checked_like_an_attribute(tmp_path):
    """getattr(obj, 'literal') is fine, unless the literal names a refused attribute."""
    _passes(tmp_path, "import torch\n\nDT = getattr(torch, 'float32')\n")
    _refused(tmp_path, "import os\n\nE = getattr(os, 'environ')\n", 3, "getattr(os, 'environ')")
    _refused(tmp_path, "def f():\n    pass\n\n\nG = getattr(f, '__globals__')\n", 5, "__globals__")


def test_a_builtin_taken_as_a_value_is_refused(tmp_path):
    """Obfuscation: e = eval, then e(...), so no call of eval appears."""
    _refused(tmp_path, "import torch\n\nrun = eval\n", 3, "'eval'")
    _refused(tmp_path, "import torch\n\ng = getattr\n", 3, "'getattr' with a name")


def test_a_builtin_smuggled_through_a_default_argument_is_refused(tmp_path):
    """Obfuscation: def f(e=eval) binds the builtin in the enclosing scope, where it is refused."""
    _refused(tmp_path, "import torch\n\n\ndef f(eval=eval):\n    return eval('1')\n", 4, "'eval'")


def test_a_conditional_global_does_not_shadow_a_builtin(tmp_path):
    """Obfuscation: `if False: eval = None` leaves the global unbound, so eval(...) is the builtin."""
    _refused(tmp_path, "if False:\n    eval = None\nX = eval('1')\n", 3, "'eval'")


def test_the_kernels_own_names_shadow_builtins(tmp_path):
    """KernelBench forward(self, input), a local `vars`, and `from re import compile` are the kernel's own."""
    _passes(tmp_path, """
        import torch
        from re import compile
        from torch import nn

        PATTERN = compile("x")


        class ModelNew(nn.Module):
            def forward(self, input):
                vars = [input]
                return torch.relu(vars[0]) + sum(open for open in (0,))
    """)


# --- loading code and data from outside the kernel file ------------------------------------------
@pytest.mark.parametrize("expr, shown", [
    ("Path(__file__).with_name('y.txt').read_text()", "read_text"),
    ("Path('/tmp/y.bin').read_bytes()", "read_bytes"),
    ("Path('y.bin').open('rb')", ".open"),
    ("np.load('y.npy')", "np.load"),
    ("np.fromfile('y.bin')", "np.fromfile"),
    ("torch.load('y.pt')", "torch.load"),
    ("torch.ops.load_library('libcheat.so')", "torch.ops.load_library"),
])
def test_loading_files_is_refused(tmp_path, expr, shown):
    """A kernel that loads stored results, or a prebuilt library, instead of computing."""
    _refused(tmp_path, f"""
        from pathlib import Path

        import numpy as np
        import torch

        Y = {expr}
    """, 6, shown)


def test_cpp_extension_load_from_files_is_refused(tmp_path):
    """A kernel that builds sources from files the check never reads (the non-inline load)."""
    _refused(tmp_path, "import torch\nfrom torch.utils.cpp_extension import load\n", 2,
             "from torch.utils.cpp_extension import load'")
    _refused(tmp_path, "import torch.utils.cpp_extension\n\n"
                       "ext = torch.utils.cpp_extension.load(name='e', sources=['e.cu'])\n", 3,
             "torch.utils.cpp_extension.load'")
    _refused(tmp_path, "import torch.utils.cpp_extension as ce\n\next = ce.load(name='e', sources=['e.cu'])\n",
             3, "'ce.load'")


def test_triton_compile_from_a_path_is_refused(tmp_path):
    """A kernel that compiles a Triton or PTX file the check cannot see."""
    _refused(tmp_path, "import triton\n\nK = triton.compile('/tmp/kernel.ttir')\n", 3, "triton.compile")


@pytest.mark.parametrize("marker", ["/dev/shm", "/proc/", "records.log", "record.key", ".config/kernel-loop",
                                    "KERNEL_LOOP"])
def test_strings_naming_harness_files_and_channels_are_refused(tmp_path, marker):
    """A kernel that names a harness file, the record key, shared memory or /proc in a string."""
    _refused(tmp_path, f"import torch\n\nWHERE = 'x/{marker}y'\n", 3, f"'{marker}'")


# --- monkeypatching ------------------------------------------------------------------------------
@pytest.mark.parametrize("src, line, target", [
    ("import torch\n\ntorch.cuda.Event.elapsed_time = lambda s, e: 1e-6\n", 3, "torch.cuda.Event.elapsed_time"),
    ("import time\n\ntime.perf_counter = lambda: 0.0\n", 3, "time.perf_counter"),
    ("import torch\n\ntorch.allclose = lambda *a, **k: True\n", 3, "torch.allclose"),
    ("import torch as t\n\nt.x.y = 1\n", 3, "t.x.y"),
    ("from torch.cuda import Event\n\nEvent.record = print\n", 3, "Event.record"),
    ("import torch\n\ntorch.cuda.Event.elapsed_time += 0\n", 3, "torch.cuda.Event.elapsed_time"),
    ("import torch\n\ntorch.softmax: object = print\n", 3, "torch.softmax"),
    ("import torch\n\ndel torch.testing.assert_close\n", 3, "torch.testing.assert_close"),
    ("import torch\n\nEv = torch.cuda.Event\nEv.elapsed_time = print\n", 4, "Ev.elapsed_time"),
    ("from kernel_tools import REGISTRY\n\nREGISTRY['compare'] = print\n", 3, "REGISTRY['compare']"),
    ("import torch\n\n\ndef run_kernel(x):\n    torch.Tensor.copy_ = print\n", 5, "torch.Tensor.copy_"),
])
def test_rebinding_attributes_of_imported_modules_is_refused(tmp_path, src, line, target):
    """A kernel that patches the timer (CUDA events, perf_counter), the comparison (torch.allclose) or
    any other attribute of a module the harness shares with it."""
    msg = _refused(tmp_path, src, line, f"assignment to '{target}'")
    assert "rebinds an attribute of an imported module" in msg


def test_setattr_on_a_module_is_refused(tmp_path):
    """A kernel that patches torch.allclose through setattr with a literal name."""
    _refused(tmp_path, "import torch\n\nsetattr(torch, 'allclose', print)\n", 3, "setattr() on 'torch'")


def test_assigning_the_kernels_own_objects_is_fine(tmp_path):
    """self.x, a local object's attributes, and a class the kernel defines are its own to change."""
    _passes(tmp_path, """
        import torch
        from torch import nn


        class Cache:
            hits = 0


        Cache.hits = 1


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = torch.ones(1)
                self.ws = {}

            def forward(self, x):
                self.ws[x.shape] = x
                buf = torch.empty_like(x)
                buf[0] = 1.0
                return x * self.scale
    """)


# --- C/CUDA source, in .cu files and in strings of a .py -----------------------------------------
@pytest.mark.parametrize("stmt, shown", [
    ('const char* v = getenv("X");', "getenv"), ('setenv("X", "1", 1);', "setenv"),
    ('putenv((char*)"X=1");', "putenv"), ('void* h = dlopen("libx.so", 0);', "dlopen"),
    ('void* s = dlsym(nullptr, "compare");', "dlsym"), ("int p = fork();", "fork"), ("vfork();", "vfork"),
    ("setsid();", "setsid"), ('system("id");', "system("), ('popen("id", "r");', "popen("),
    ('execv("/bin/sh", nullptr);', "execv("), ('execl("/bin/sh", "sh", nullptr);', "execl("),
    ('execve("/bin/sh", nullptr, nullptr);', "execve("), ('execvp("sh", nullptr);', "execvp("),
    ("ptrace(0, 0, 0, 0);", "ptrace"), ('FILE* f = fopen("y.bin", "rb");', "fopen("),
    ('int fd = open("y.bin", 0);', "open("), ('std::ifstream in("y.bin");', "std::ifstream"),
    ('mmap(0, 4096, 1, 1, open("/proc/self/mem", 0), 0);', "/proc/"),
    ('const char* s = "/dev/shm/x";', "/dev/shm"), ('const char* s = "run/records.log";', "records.log"),
    ('const char* s = "record.key";', "record.key"), ('const char* s = "KERNEL_LOOP_RECORD_KEY";', "KERNEL_LOOP"),
    ('const char* s = "kernel_loop.handoff";', "kernel_loop"),
    ("__attribute__((constructor)) static void early() {}", "__attribute__((constructor"),
    ("__attribute__((destructor)) static void late() {}", "__attribute__((destructor"),
    ("atexit(late);", "atexit("), ("pthread_create(&t, 0, f, 0);", "pthread_create"),
    ("std::thread t(f);", "std::thread"), ("cudaIpcGetMemHandle(&h, p);", "cudaIpcGetMemHandle"),
    ("cuMemImportFromShareableHandle(&h, p, t);", "cuMemImportFromShareableHandle"),
])
def test_cuda_source_constructs_are_refused(tmp_path, stmt, shown):
    """A .cu kernel that reads the environment, loads code, starts processes or threads, opens files,
    runs at load or exit, or shares GPU memory with another process."""
    msg = _refused(tmp_path, f"#include <cuda_runtime.h>\n\nstatic void hook() {{\n    {stmt}\n}}\n", 4, shown,
                   name="kernel.cu")
    assert "in CUDA source" in msg


def test_cuda_comments_and_string_literals_are_handled(tmp_path):
    """Words in comments and in messages are not calls; a harness path in a literal still is refused."""
    _passes(tmp_path, """
        // we never call getenv() or system() here; /* fork() */ neither
        #include <cstdio>
        /* a block comment naming records.log and
           /proc/self is only prose */
        __global__ void k(float* y) { if (threadIdx.x == 0) printf("fork() failed? no: %f\\n", y[0]); }
        extern "C" void solve(float* y, int N) { k<<<1, 32>>>(y); }
    """, name="kernel.cu")
    _refused(tmp_path, """
        // a comment
        static const char* p =
            "/proc/self/maps";  /* the literal is refused */
    """, 3, "'/proc/'", name="kernel.cu")


def test_a_line_splice_inside_a_name_is_refused(tmp_path):
    """Obfuscation: get\\<newline>env, which the preprocessor joins back into getenv."""
    path = tmp_path / "kernel.cu"
    path.write_text('#include <cstdlib>\nint f() { return get\\\nenv("X") != 0; }\n#define A(x) x \\\n  + 1\n')
    with pytest.raises(UsageError, match=r"^kernel.cu:2: refused: .* \(a line splice inside a word"):
        check_kernel_source(path)
    assert len(findings(path)) == 1      # the splice after a space, in the macro, is the usual kind


def test_c_source_in_a_python_string_is_refused_at_its_line(tmp_path):
    """A KernelBench-style kernel whose load_inline source reads the environment in C++."""
    msg = _refused(tmp_path, '''
        import torch
        from torch.utils.cpp_extension import load_inline

        CUDA_SRC = r"""
        #include <torch/extension.h>
        #include <cstdlib>
        torch::Tensor f(torch::Tensor x) {
            if (std::getenv("TIMED")) return x;
            return x * 2;
        }
        """
        _ext = load_inline(name="e", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=CUDA_SRC,
                           functions=["f"])
    ''', 8, "'getenv' in a string")
    assert "environment variable" in msg


@pytest.mark.parametrize("call, needle", [
    ('PyRun_SimpleString("import ctypes")', "'PyRun_SimpleString'"),
    ('PyImport_ImportModule("ctypes")', "'PyImport_ImportModule'"),
    ('Py_CompileString(src, "k", Py_file_input)', "'Py_CompileString'"),
    ('py::exec(src)', "'::exec'"),
    ('pybind11::module_::import("ctypes")', "'module_::import'"),
    ('p :: eval(src)', "':: eval'"),
    ('exec(src)', "'exec('"),
    ('py::module::import("os")', "'module::import'"),
    ('PySys_GetObject("modules")', "'PySys_GetObject'")])
def test_python_run_from_a_c_extension_is_refused(tmp_path, call, needle):
    """A review's find: a load_inline extension whose init ran Python (PyRun_SimpleString of a hex-coded script)
    passed the check, which reads the kernel's Python but not Python run from compiled code."""
    msg = _refused(tmp_path, f'''
        from torch.utils.cpp_extension import load_inline

        SRC = r"""
        #include <Python.h>
        static PyObject* go(PyObject*, PyObject*) {{ {call}; Py_RETURN_NONE; }}
        """
        _ext = load_inline(name="e", cpp_sources=SRC, no_implicit_headers=True)
    ''', 5, f"{needle} in a string")
    assert "compiled code" in msg


def test_c_rules_do_not_apply_to_docstrings(tmp_path):
    """A docstring is prose ('we fork (split) the row'); only harness names in it are refused."""
    _passes(tmp_path, '"""v2: we fork (split) each row over 4 blocks and open() nothing."""\nimport torch\n')
    _refused(tmp_path, '"""Reads records.log."""\nimport torch\n', 1, "'records.log' in a docstring")


# --- honest kernels pass, the reaching cheats are refused ----------------------------------------
def _pack_members():
    return sorted(name for pack in PACKED_KERNELS.glob("*.txt") for name in read_pack(pack))


HONEST_MEMBERS = [n for n in _pack_members() if not n.startswith(("cheat_", "kb_cheat_"))]
EXAMPLE_KERNELS = [(loop.parent.name, name) for loop in sorted((REPO / "examples").glob("*/loop.json"))
                   for name in json.loads(loop.read_text())["files"] if "kernel" in name]


@pytest.mark.parametrize("name", HONEST_MEMBERS)
def test_every_honest_pack_member_passes(name):
    """The kernels and references of tests/python/kernels (the deliberately broken ones too: they fail
    by computing wrongly, not by reaching into the harness)."""
    assert findings(KERNELS / name) == [], name


@pytest.mark.parametrize("example, name", EXAMPLE_KERNELS, ids=[f"{e}/{n}" for e, n in EXAMPLE_KERNELS])
def test_every_example_kernel_passes(tmp_path, example, name):
    """Each version of the bundled example runs (Triton, CUDA C++, KernelBench load_inline)."""
    text = json.loads((REPO / "examples" / example / "loop.json").read_text())["files"][name]
    path = tmp_path / name.replace("/", "_")
    path.write_text(text)
    assert findings(path) == [], f"{example}/{name}"


def test_the_examples_and_packs_hold_kernels():
    """The two honest sweeps above really cover Triton, CUDA C++ and KernelBench kernels."""
    assert len(EXAMPLE_KERNELS) >= 15 and any(n.endswith(".cu") for _, n in EXAMPLE_KERNELS)
    assert {"triton_softmax.py", "cu_vadd.cu", "kb_new.py", "cute_dsl_vadd.py"} <= set(HONEST_MEMBERS)


def test_the_comparator_patching_cheat_is_refused():
    """adversarial.txt's cheat that rebinds kernel-loop's comparison through sys.modules."""
    with pytest.raises(UsageError, match=r"^cheat_patch_comparator.py:19: refused: 'sys.modules'"):
        check_kernel_source(KERNELS / "cheat_patch_comparator.py")
    assert any("torch.allclose" in f.what for f in findings(KERNELS / "cheat_patch_comparator.py"))


def test_the_clock_patching_cheat_is_refused():
    """adversarial.txt's cheat that freezes perf_counter, fakes CUDA event times and slows the baselines."""
    found = findings(KERNELS / "cheat_patch_clock.py")
    assert [f.what for f in found] == ["refused: assignment to 'time.perf_counter'",
                                       "refused: assignment to 'torch.cuda.Event.elapsed_time'",
                                       "refused: assignment to 'torch.softmax'"]
    with pytest.raises(UsageError, match=r"^cheat_patch_clock.py:9: "):
        check_kernel_source(KERNELS / "cheat_patch_clock.py")


def test_typical_honest_kernels_pass(tmp_path):
    """Triton with autotune and TRITON-free helpers, a CUDA C++ solve with runtime calls and device printf,
    and a KernelBench ModelNew built with load_inline."""
    _passes(tmp_path, """
        import math

        import torch
        import triton
        import triton.language as tl


        @triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=4)], key=["N"])
        @triton.jit
        def _add(x_ptr, y_ptr, o_ptr, N, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < N
            tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


        def run_kernel(x, y, out, N):
            _add[lambda meta: (triton.cdiv(N, meta["BLOCK"]),)](x, y, out, N)
            assert math.isfinite(float(N)) and torch.cuda.is_available() in (True, False)
    """)
    _passes(tmp_path, """
        #include <cuda_runtime.h>
        #include <cuda_fp16.h>
        #include <cstdio>

        __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
            extern __shared__ float buf[];
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i == 0) printf("n = %d\\n", n);
            if (i < n) { buf[threadIdx.x] = x[i]; y[i] = buf[threadIdx.x] * 2.f; }
        }

        extern "C" void solve(const float* x, float* y, int N) {
            cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024);
            cudaMemcpyAsync(y, x, 0, cudaMemcpyDeviceToDevice, 0);
            k<<<(N + 255) / 256, 256, 256 * sizeof(float)>>>(x, y, N);
        }
    """, name="kernel.cu")
    _passes(tmp_path, '''
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        SRC = r"""
        #include <torch/extension.h>
        #include <ATen/cuda/CUDAContext.h>
        __global__ void relu(const float* x, float* y, long n) {
            long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
            if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
        }
        torch::Tensor relu_cuda(torch::Tensor x) {
            auto y = torch::empty_like(x);
            relu<<<(x.numel() + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
                x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
            return y;
        }
        """
        _ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                           cuda_sources=SRC, functions=["relu_cuda"], extra_cuda_cflags=["-O3"], verbose=False)


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()

            def forward(self, x):
                return _ext.relu_cuda(x.contiguous())
    ''')


# --- names built at run time, frames through traceback, files through io (seen on the H200, 2026-12-04) ------
@pytest.mark.parametrize("text, line, needle", [
    ("import operator\nimport os\n\nFORK = operator.attrgetter('fo' + 'rk')(os)\n", 4, "'operator.attrgetter'"),
    ("from operator import methodcaller\n", 1, "'from operator import methodcaller'"),
    ("import traceback\n\nFRAMES = [f for f, _ in traceback.walk_stack(None)]\n", 3, "'traceback.walk_stack'"),
    ("import io\n\nDATA = io.FileIO('/etc/hostname').read()\n", 3, "'io.FileIO'"),
    ("import glob\n", 1, "'import glob'"),
    ("import linecache\n", 1, "'import linecache'"),
    ("import functools\n\nOBJ = functools.reduce(getattr, ['a', 'b'], object())\n", 3, "'getattr' with a name"),
])
def test_names_built_at_run_time_frames_and_raw_files_are_refused(tmp_path, text, line, needle):
    """The forms an adversarial kernel used to reach os.fork and the worker's timer (attrgetter with built
    strings, traceback.walk_stack) and to read and write files (io.FileIO, glob, linecache).  The sandbox is
    what stops them (writes outside the worker's folder, processes ended with the step, the timer's results
    cross-checked); this check names them early, in one line."""
    _refused(tmp_path, text, line, needle)


def test_operator_and_traceback_for_honest_uses_pass(tmp_path):
    _passes(tmp_path, """
        import operator
        import traceback

        import torch


        def run_kernel(x):
            try:
                return operator.mul(x, 2.0)
            except RuntimeError:
                traceback.print_exc()
                raise
    """)


@pytest.mark.parametrize("src, shown", [
    ("import numpy as np\n\nX = np.fromregex('/pr' + 'oc/1/cmdline', '(.*)', [('a', 'S9')])\n", "'np.fromregex'"),
    ("import os\n\nX = os.path.expandvars('$HOME')\n", "'os.path.expandvars'"),
])
def test_a_red_teams_readers_of_files_and_the_environment_are_named(tmp_path, src, shown):
    """Found by a red team: numpy.fromregex read the judge's command line (a path built from pieces, so no
    '/proc/' string), and os.path.expandvars read the environment.  The static check names both (the judge
    also removes its settings file before a worker starts)."""
    _refused(tmp_path, src, 3, shown)


@pytest.mark.parametrize("text, line", [
    ('import re\n\nU = re.fullmatch(r".+_[0-9a-f]{12}", __name__)\n', 3),
    ('RIGHT = __name__ == "kernel"\n', 1),
    ('NAME = str(__name__)\n', 1),
    ('class M:\n    def f(self):\n        return type(self).__module__ == "kernel"\n', 3),  # a review's
    ('class M:\n    N = __module__\n', 2)])
def test_the_module_name_is_refused_but_in_the_main_guard(tmp_path, text, line):
    """A red team's kernel was right only under the harness's module name, a review's only under the name the harness
    gives it now: the name a module was imported under says nothing a kernel may compute from."""
    _refused(tmp_path, text, line, "__name__'" if "__name__" in text else "__module__'")


def test_the_main_guard_and_names_of_objects_pass(tmp_path):
    _passes(tmp_path, 'import torch\n\n\ndef f(x):\n    return x\n\n\nN = f.__name__\n\nif __name__ == "__main__":\n'
                      '    print(f(torch.ones(2)), N)\nif "__main__" != __name__:\n    pass\n')
