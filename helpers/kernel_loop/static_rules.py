"""The rule table of the static kernel check (``static_check``), and its two small data types.

``RULES`` holds every rule, one ``Rule(kind, pattern, why)`` per entry, grouped by kind (each group's
comment says how its patterns are matched); the reasons several rules share are the ``_WHY_*`` strings
above it.  ``Finding`` is one refused construct of a kernel file.  Below the table are the per-kind
lookups the checker uses (``MODULES``, ``ATTRS``, ... pattern -> reason; ``C_RULES`` compiled) and the
two pattern matchers ``module_rule`` and ``attr_rule``.  ``static_check`` re-exports ``RULES``, ``Rule``
and ``Finding``; this module imports nothing of the package.  Pure Python: no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import NamedTuple


@dataclass(frozen=True)
class Finding:
    """One refused construct: its line (1-based), what it is, and why it is refused."""

    line: int
    what: str
    why: str

    def message(self, name: str) -> str:
        return f"{name}:{self.line}: {self.what} ({self.why})"


class Rule(NamedTuple):
    kind: str      # how ``pattern`` is matched; see the table's section comments
    pattern: str
    why: str


# --- the reasons, shared by several rules ------------------------------------------------------------
_OUTSIDE = "a kernel must not reach outside its own computation"
_WHY_CTYPES = f"ctypes can rewrite the harness's memory; {_OUTSIDE}"
_WHY_HARNESS = ("the harness's own modules: importing them lets a kernel rebind the comparison, the timing "
                "or the hand-over of its results")
_WHY_IMPORTER = "loads a module by a computed name or from a path, out of sight of this check"
_WHY_PROCESS = "starts or detaches a process that runs outside the measured call and can outlive it"
_WHY_THREAD = "a background thread keeps running while the harness times and compares the kernel's results"
_WHY_MODULE_NAME = ("the name a module was imported under tells the harness's import from a user's (a red team's "
                    "kernel was right under one alone, a review's under another)")
_WHY_ENV = ("an environment variable can switch the kernel's behaviour between checked and timed runs, and "
            "exposes the harness's settings; a kernel gets everything it needs as arguments")
_WHY_ENV_SET = "changes the environment the harness and its other children run with"
_WHY_FD = "raw file descriptors reach the harness's pipes and files"
_WHY_FS = "explores or changes the file system outside the kernel (the run directory, /proc, records)"
_WHY_FILE = "file access outside the kernel's own source: a kernel gets its data as arguments"
_WHY_DATA_FILE = "loads data from a file: stored results in place of computation"
_WHY_FRAME = "frame access reaches the harness's locals (expected outputs, timers) up the call stack"
_WHY_INTRO = ("introspection that reaches objects, globals or code the kernel was not given, or hides a name "
              "from this check")
_WHY_NAMESPACE = "the namespace as a dict: names looked up by string, out of sight of this check"
_WHY_CODEGEN = "runs code built at run time, which this check cannot read"
_WHY_SYSHOOK = "installs a hook that runs inside the harness's own code"
_WHY_IMPORTPATH = "changes where imports come from, for the harness's imports too"
_WHY_MARK = ("reads how the process around the kernel is set up (the modes torch runs under): a tenth red team's "
             "kernel told the judge's worker from a user's by it")
_WHY_MARKER = ("names a harness file or a channel between processes (/dev/shm, /proc, records.log, the record "
               "key, the kernel-loop configuration or environment)")
_WHY_SHARE = "shares GPU memory with another process, such as the harness's own buffers"
_WHY_LOADLIB = "loads or looks up compiled code outside the kernel, the harness's own symbols included"
_WHY_HOOK = "runs at library load, unload or exit, outside the measured call"
_WHY_MEMORY = "reads or writes another process's memory"
_WHY_PY_FROM_C = ("runs or imports Python from compiled code (Python's C API, pybind11's exec, eval or import), where "
                  "this check of the kernel's Python cannot see it; take dtypes from C++ (at::ScalarType, "
                  "torch::kFloat32), pass Python objects in as arguments, release the GIL with py::gil_scoped_release")
_WHY_MODE = ("a torch function or dispatch mode (or a tensor type that intercepts torch calls) runs inside the "
             "harness's own torch calls, after the timed call: a kernel returns plain tensors")
_WHY_BUILT_NAME = ("looks attributes up by names built at run time (os.fork, a frame's locals, the timer), out of "
                   "sight of this check; write the attribute out")

RULES: tuple[Rule, ...] = (
    # module: an import of this module or any submodule of it (`import X`, `from X import Y`, and
    # `from P import X` when P.X is the module); also its name as a string argument of any call.
    Rule("module", "kernel_loop", _WHY_HARNESS),
    Rule("module", "ctypes", _WHY_CTYPES),
    Rule("module", "_ctypes", _WHY_CTYPES),
    Rule("module", "cffi", f"cffi calls and patches native memory like ctypes; {_OUTSIDE}"),
    Rule("module", "gc", "gc.get_objects() and get_referrers() reach every live object, the harness's included"),
    Rule("module", "inspect", "inspect walks the call stack into the harness's frames and globals"),
    Rule("module", "importlib", _WHY_IMPORTER),
    Rule("module", "imp", _WHY_IMPORTER),
    Rule("module", "runpy", _WHY_IMPORTER),
    Rule("module", "zipimport", _WHY_IMPORTER),
    Rule("module", "pydoc", _WHY_IMPORTER),
    Rule("module", "pkgutil", _WHY_IMPORTER),
    Rule("module", "code", _WHY_CODEGEN),
    Rule("module", "codeop", _WHY_CODEGEN),
    Rule("module", "multiprocessing", _WHY_PROCESS),
    Rule("module", "torch.multiprocessing", _WHY_PROCESS),
    Rule("module", "subprocess", _WHY_PROCESS),
    Rule("module", "_posixsubprocess", _WHY_PROCESS),
    Rule("module", "pty", _WHY_PROCESS),
    Rule("module", "signal", "a signal handler can interrupt the harness or defeat its timeouts"),
    Rule("module", "atexit", "an exit hook runs after the measurement, in the harness's process"),
    Rule("module", "threading", _WHY_THREAD),
    Rule("module", "_thread", _WHY_THREAD),
    Rule("module", "concurrent", _WHY_THREAD),
    Rule("module", "socket", "network access: a kernel computes on its inputs only"),
    Rule("module", "pickle", "unpickling builds arbitrary callables and runs them"),
    Rule("module", "marshal", "marshal loads code objects, out of sight of this check"),
    Rule("module", "builtins", "rebinding a builtin changes every module of the process, the harness's included"),
    Rule("module", "__main__", "the process's main module tells the harness's worker from a user's script (a ninth "
                               "red team's kernel was right only under the worker)"),
    Rule("module", "posix", "the raw os module, which bypasses the os.* checks"),
    Rule("module", "nt", "the raw os module, which bypasses the os.* checks"),
    Rule("module", "shutil", _WHY_FS),
    Rule("module", "fcntl", _WHY_FD),
    Rule("module", "mmap", "maps files or another process's memory into the kernel"),
    Rule("module", "_io", _WHY_FILE),
    Rule("module", "glob", _WHY_FS),
    Rule("module", "linecache", "reads files by path (any file, not only source)"),
    Rule("module", "fileinput", _WHY_FILE),

    # attr: a dotted name after import aliases are resolved (`import numpy as np; np.load` is
    # numpy.load), matched with fnmatch against the whole chain and every tail of it of two names or
    # more (`os.path.os.environ` holds os.environ); also `from X import Y` when X.Y matches.
    Rule("attr", "sys.modules", "reaches every loaded module, the harness's included, to rebind its functions"),
    Rule("attr", "sys.argv", "the harness's command line (run directory, roles, seeds): a kernel gets its "
                             "data as arguments only"),
    Rule("attr", "sys.orig_argv", "the harness's command line: a kernel gets its data as arguments only"),
    Rule("attr", "sys._getframe", _WHY_FRAME),
    Rule("attr", "sys._current_frames", _WHY_FRAME),
    Rule("attr", "sys.settrace", _WHY_SYSHOOK),
    Rule("attr", "sys.setprofile", _WHY_SYSHOOK),
    Rule("attr", "sys.addaudithook", _WHY_SYSHOOK),
    Rule("attr", "sys.excepthook", _WHY_SYSHOOK),
    Rule("attr", "sys.displayhook", _WHY_SYSHOOK),
    Rule("attr", "sys.meta_path", _WHY_IMPORTPATH),
    Rule("attr", "sys.path_hooks", _WHY_IMPORTPATH),
    Rule("attr", "sys.path_importer_cache", _WHY_IMPORTPATH),
    Rule("attr", "sys.path", _WHY_IMPORTPATH),
    Rule("attr", "os.environ", _WHY_ENV),
    Rule("attr", "os.environb", _WHY_ENV),
    Rule("attr", "os.getenv", _WHY_ENV),
    Rule("attr", "os.getenvb", _WHY_ENV),
    Rule("attr", "os.path.expandvars", _WHY_ENV),
    Rule("attr", "posixpath.expandvars", _WHY_ENV),
    Rule("attr", "os.putenv", _WHY_ENV_SET),
    Rule("attr", "os.unsetenv", _WHY_ENV_SET),
    Rule("attr", "os.setsid", _WHY_PROCESS),
    Rule("attr", "os.setpgid", _WHY_PROCESS),
    Rule("attr", "os.fork", _WHY_PROCESS),
    Rule("attr", "os.forkpty", _WHY_PROCESS),
    Rule("attr", "os.system", _WHY_PROCESS),
    Rule("attr", "os.popen", _WHY_PROCESS),
    Rule("attr", "os.exec*", _WHY_PROCESS),
    Rule("attr", "os.spawn*", _WHY_PROCESS),
    Rule("attr", "os.posix_spawn*", _WHY_PROCESS),
    Rule("attr", "os.kill", "signals another process, such as the harness or the judge"),
    Rule("attr", "os.killpg", "signals another process group, such as the harness or the judge"),
    Rule("attr", "os.open", _WHY_FD),
    Rule("attr", "os.read", _WHY_FD),
    Rule("attr", "os.write", _WHY_FD),
    Rule("attr", "os.fdopen", _WHY_FD),
    Rule("attr", "os.dup", _WHY_FD),
    Rule("attr", "os.dup2", _WHY_FD),
    Rule("attr", "os.pipe", _WHY_FD),
    Rule("attr", "os.fstat", _WHY_FD),  # a tenth red team's kernel found the worker's socket among its descriptors
    Rule("attr", "os.fstatvfs", _WHY_FD),
    Rule("attr", "os.readlink", _WHY_FS),
    Rule("attr", "os.listdir", _WHY_FS),
    Rule("attr", "os.scandir", _WHY_FS),
    Rule("attr", "os.walk", _WHY_FS),
    Rule("attr", "os.fwalk", _WHY_FS),
    Rule("attr", "os.chdir", _WHY_FS),
    Rule("attr", "os.fchdir", _WHY_FS),
    Rule("attr", "os.remove", _WHY_FS),
    Rule("attr", "os.unlink", _WHY_FS),
    Rule("attr", "os.rename", _WHY_FS),
    Rule("attr", "os.replace", _WHY_FS),
    Rule("attr", "os.truncate", _WHY_FS),
    Rule("attr", "os.symlink", _WHY_FS),
    Rule("attr", "os.link", _WHY_FS),
    Rule("attr", "torch.overrides.TorchFunctionMode", _WHY_MODE),
    Rule("attr", "torch.utils._python_dispatch.TorchDispatchMode", _WHY_MODE),
    Rule("attr", "torch._C._push_on_torch_function_stack", _WHY_MODE),
    Rule("attr", "torch._C._push_on_torch_dispatch_stack", _WHY_MODE),
    Rule("attr", "torch._C._len_torch_*_stack", _WHY_MARK),
    Rule("attr", "torch._C._get_*_stack_at", _WHY_MARK),
    Rule("attr", "torch.overrides._get_current_function_mode*", _WHY_MARK),
    Rule("attr", "operator.attrgetter", _WHY_BUILT_NAME),
    Rule("attr", "operator.methodcaller", _WHY_BUILT_NAME),
    Rule("attr", "traceback.walk_stack", _WHY_FRAME),
    Rule("attr", "traceback.walk_tb", _WHY_FRAME),
    Rule("attr", "traceback.StackSummary", _WHY_FRAME),
    Rule("attr", "io.FileIO", _WHY_FILE),
    Rule("attr", "io.open", _WHY_FILE),
    Rule("attr", "io.open_code", _WHY_FILE),
    Rule("attr", "torch.load", _WHY_DATA_FILE),
    Rule("attr", "torch.from_file", _WHY_DATA_FILE),
    Rule("attr", "numpy.load", _WHY_DATA_FILE),
    Rule("attr", "numpy.fromfile", _WHY_DATA_FILE),
    Rule("attr", "numpy.memmap", _WHY_DATA_FILE),
    Rule("attr", "numpy.loadtxt", _WHY_DATA_FILE),
    Rule("attr", "numpy.genfromtxt", _WHY_DATA_FILE),
    Rule("attr", "numpy.fromregex", _WHY_DATA_FILE),
    Rule("attr", "numpy.lib.npyio", _WHY_DATA_FILE),
    Rule("attr", "torch.utils.cpp_extension.load", "builds sources from files this check cannot see; put the "
                                                   "source in the kernel file and build it with load_inline"),
    Rule("attr", "torch.ops.load_library", _WHY_LOADLIB),
    Rule("attr", "torch.classes.load_library", _WHY_LOADLIB),

    # reexport: a refused module reached as an attribute of another module, around the import check
    # (`numpy.core._internal.ctypes`, `os.path.os` is checked by the attr rules on every chain suffix)
    *(Rule("reexport", n, "reaches a refused module through another module's attribute, around the import "
                          "check") for n in (
        "kernel_loop", "ctypes", "_ctypes", "cffi", "gc", "inspect", "importlib", "runpy", "pkgutil",
        "multiprocessing", "subprocess", "threading", "_thread", "atexit", "socket", "pickle", "marshal",
        "builtins", "shutil", "glob", "linecache")),

    # member: an attribute of any object, by name (`anything.__globals__`); the dunder and frame names
    # also as a bare name and as a string constant that is exactly that name.
    *(Rule("member", n, _WHY_INTRO) for n in (
        "__dict__", "__class__", "__bases__", "__base__", "__mro__", "__subclasses__", "__globals__",
        "__code__", "__closure__", "__builtins__", "__import__", "__getattribute__", "__loader__", "__spec__",
        "__self__", "__setattr__", "__delattr__")),
    *(Rule("member", n, _WHY_MODE) for n in ("__torch_function__", "__torch_dispatch__")),
    Rule("member", "__module__", _WHY_MODULE_NAME),
    *(Rule("member", n, _WHY_FRAME) for n in (
        "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "gi_frame", "cr_frame", "ag_frame",
        "tb_frame")),

    # method: an attribute of any object, by name, that opens or reads a file (pathlib.Path, io, tarfile ...)
    *(Rule("method", n, _WHY_FILE) for n in ("read_text", "read_bytes", "write_text", "write_bytes", "open")),

    # builtin: a builtin function, called or referenced, where no enclosing function binds the name
    Rule("builtin", "eval", _WHY_CODEGEN),
    Rule("builtin", "exec", _WHY_CODEGEN),
    Rule("builtin", "compile", _WHY_CODEGEN),
    Rule("builtin", "__import__", "imports a module by a computed name, out of sight of this check"),
    Rule("builtin", "globals", _WHY_NAMESPACE),
    Rule("builtin", "locals", _WHY_NAMESPACE),
    Rule("builtin", "vars", _WHY_NAMESPACE),
    Rule("builtin", "open", _WHY_FILE),
    Rule("builtin", "breakpoint", "starts a debugger that stops the measured call or drives the harness"),
    Rule("builtin", "input", "reads the harness's standard input"),

    # keyword: a keyword argument of any call, by name (also a string constant that is exactly it)
    Rule("keyword", "start_new_session", "detaches a child process from the harness's process group, so its "
                                         "timeout cannot stop it"),
    Rule("keyword", "preexec_fn", "runs code in a new child process before it starts"),

    # text: a substring of any string constant of a .py file, and of a .cu file's text (comments blanked)
    Rule("text", "/dev/shm", _WHY_MARKER),
    Rule("text", "/proc/", _WHY_MARKER),
    Rule("text", "records.log", _WHY_MARKER),
    Rule("text", "record.key", _WHY_MARKER),
    Rule("text", ".config/kernel-loop", _WHY_MARKER),
    Rule("text", "KERNEL_LOOP", _WHY_MARKER),
    Rule("text", "kernel_loop", _WHY_MARKER),

    # c: a regular expression over CUDA C++ code (a .cu file, and every string constant of a .py file
    # but docstrings), with comments and the contents of string and character literals blanked
    Rule("c", r"\b(?:secure_)?getenv\b", _WHY_ENV),
    Rule("c", r"\b(?:setenv|putenv|unsetenv|clearenv)\b", _WHY_ENV_SET),
    Rule("c", r"\b(?:dlopen|dlmopen|dlsym|dlvsym)\b", _WHY_LOADLIB),
    Rule("c", r"\b(?:v?fork|setsid|daemon|posix_spawnp?)\s*\(", _WHY_PROCESS),
    Rule("c", r"\b(?:system|popen)\s*\(", _WHY_PROCESS),
    Rule("c", r"\bexec(?:v|l|ve|vp|vpe|le|lp)\s*\(", _WHY_PROCESS),
    Rule("c", r"\b(?:ptrace|process_vm_readv|process_vm_writev)\b", _WHY_MEMORY),
    Rule("c", r"\bsyscall\b", "a raw system call, out of sight of this check"),
    Rule("c", r"\bkill\s*\(", "signals another process, such as the harness or the judge"),
    Rule("c", r"\b(?:fopen|freopen|fdopen|open|openat|creat)\s*\(", _WHY_FILE),
    Rule("c", r"\b(?:std::)?(?:i|o)?fstream\b", _WHY_FILE),
    Rule("c", r"__attribute__\s*\(\(\s*(?:__)?(?:constructor|destructor)", _WHY_HOOK),
    Rule("c", r"\b(?:atexit|at_quick_exit|on_exit)\s*\(", _WHY_HOOK),
    Rule("c", r"\bpthread_create\b", _WHY_THREAD),
    Rule("c", r"\bstd::(?:thread|jthread|async)\b", _WHY_THREAD),
    Rule("c", r"\bcudaIpc\w*", _WHY_SHARE),
    Rule("c", r"\bcuIpc\w*", _WHY_SHARE),
    Rule("c", r"\bcuMem(?:Import|Export)\w*ShareableHandle\b", _WHY_SHARE),
    Rule("c", r"\w\\\r?\n\w", "a line splice inside a word hides a name from this check"),
    Rule("c", r"\bPy(?:Run|Eval|Sys)_\w+|\bPy_CompileString\w*|\bPyImport_\w+", _WHY_PY_FROM_C),
    Rule("c", r"::\s*(?:exec|eval|eval_file|globals)\b|\b(?:exec|eval_file)\s*(?:<[^>;]*>)?\s*\(|"
              r"\bmodule_?\s*::\s*import\b", _WHY_PY_FROM_C),

    # structure: constructs matched by shape, not by name
    Rule("structure", "monkeypatch", "rebinds an attribute of an imported module: every user of that module in "
                                     "the process, the harness's timing and comparison included, would see "
                                     "the replacement"),
    Rule("structure", "module name", _WHY_MODULE_NAME + "; only `if __name__ == \"__main__\":` may read it"),
    Rule("structure", "computed attribute", "an attribute named at run time, out of sight of this check; use a "
                                            "string literal"),
    Rule("structure", "star import", "binds names this check cannot see"),
    Rule("structure", "triton.compile", "compiles a kernel from a file this check cannot see; use @triton.jit"),
    Rule("structure", "syntax", "the file does not parse as Python, so this check cannot read it"),
)


def _rules(kind: str) -> dict[str, str]:
    return {r.pattern: r.why for r in RULES if r.kind == kind}


MODULES = _rules("module")
ATTRS = _rules("attr")
MEMBERS = _rules("member")
REEXPORTS = _rules("reexport")
METHODS = _rules("method")
BUILTINS = _rules("builtin")
KEYWORDS = _rules("keyword")
TEXTS = _rules("text")
C_RULES = tuple((re.compile(r.pattern), r.why) for r in RULES if r.kind == "c")
STRUCTURE = _rules("structure")
ATTR_BUILTINS = ("getattr", "setattr", "delattr")


# --- matching a name against the module and attr rules ---------------------------------------------
def module_rule(module: str) -> str | None:
    for name in MODULES:
        if module == name or module.startswith(name + "."):
            return name
    return None


def attr_rule(dotted: str) -> str | None:
    for pattern in ATTRS:
        if fnmatchcase(dotted, pattern):
            return pattern
    return None
