"""A static read of an untrusted kernel file before it runs: refuse constructs that reach into the harness.

The kernel an agent writes (``vK/kernel.py`` or ``vK/kernel.cu``) runs in a worker process next to
the code that times and checks it. This module reads the source without running it (Python through
``ast``, CUDA C++ through regular expressions over text whose comments are blanked) and refuses the
plain ways a kernel could reach outside its own computation: importing the harness or process,
memory and introspection tools, reading the environment or the command line, opening files,
building code at run time, and rebinding attributes of imported modules (the timer, the comparison,
``torch`` itself).

This is a first filter, not the defence. It gives an honest mistake a clear, early, one-line
message and takes the cheap attacks off the table; it cannot see obfuscation that hides a name from a
static read (a name assembled at run time through a channel it does not know, a C name pasted
together by the preprocessor, machine code in a tensor, a library that does the forbidden thing on
the kernel's behalf). Those are handled elsewhere:
a separate judge process owns the inputs and the expected outputs, verifies what the kernel wrote,
and keeps the timing out of the kernel's reach, so a kernel that slips past this check still has
nothing to patch.

Every rule lives in ``RULES``, one ``Rule(kind, pattern, why)`` per entry; the checks below only say
how each kind is matched. Pure Python (``ast``, ``re``): importing this module imports no torch.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple

from kernel_loop.common import UsageError


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
_WHY_MARKER = ("names a harness file or a channel between processes (/dev/shm, /proc, records.log, the record "
               "key, the kernel-loop configuration or environment)")
_WHY_SHARE = "shares GPU memory with another process, such as the harness's own buffers"
_WHY_LOADLIB = "loads or looks up compiled code outside the kernel, the harness's own symbols included"
_WHY_HOOK = "runs at library load, unload or exit, outside the measured call"
_WHY_MEMORY = "reads or writes another process's memory"

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
    Rule("module", "posix", "the raw os module, which bypasses the os.* checks"),
    Rule("module", "nt", "the raw os module, which bypasses the os.* checks"),
    Rule("module", "shutil", _WHY_FS),
    Rule("module", "fcntl", _WHY_FD),
    Rule("module", "mmap", "maps files or another process's memory into the kernel"),

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
    Rule("attr", "torch.load", _WHY_DATA_FILE),
    Rule("attr", "torch.from_file", _WHY_DATA_FILE),
    Rule("attr", "numpy.load", _WHY_DATA_FILE),
    Rule("attr", "numpy.fromfile", _WHY_DATA_FILE),
    Rule("attr", "numpy.memmap", _WHY_DATA_FILE),
    Rule("attr", "numpy.loadtxt", _WHY_DATA_FILE),
    Rule("attr", "numpy.genfromtxt", _WHY_DATA_FILE),
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
        "builtins", "shutil")),

    # member: an attribute of any object, by name (`anything.__globals__`); the dunder and frame names
    # also as a bare name and as a string constant that is exactly that name.
    *(Rule("member", n, _WHY_INTRO) for n in (
        "__dict__", "__class__", "__bases__", "__base__", "__mro__", "__subclasses__", "__globals__",
        "__code__", "__closure__", "__builtins__", "__import__", "__getattribute__", "__loader__", "__spec__",
        "__self__", "__setattr__", "__delattr__")),
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

    # structure: constructs matched by shape, not by name
    Rule("structure", "monkeypatch", "rebinds an attribute of an imported module: every user of that module in "
                                     "the process, the harness's timing and comparison included, would see "
                                     "the replacement"),
    Rule("structure", "computed attribute", "an attribute named at run time, out of sight of this check; use a "
                                            "string literal"),
    Rule("structure", "star import", "binds names this check cannot see"),
    Rule("structure", "triton.compile", "compiles a kernel from a file this check cannot see; use @triton.jit"),
    Rule("structure", "syntax", "the file does not parse as Python, so this check cannot read it"),
)


def _rules(kind: str) -> dict[str, str]:
    return {r.pattern: r.why for r in RULES if r.kind == kind}


_MODULES = _rules("module")
_ATTRS = _rules("attr")
_MEMBERS = _rules("member")
_REEXPORTS = _rules("reexport")
_METHODS = _rules("method")
_BUILTINS = _rules("builtin")
_KEYWORDS = _rules("keyword")
_TEXTS = _rules("text")
_C_RULES = tuple((re.compile(r.pattern), r.why) for r in RULES if r.kind == "c")
_STRUCTURE = _rules("structure")
_ATTR_BUILTINS = ("getattr", "setattr", "delattr")


# --- the public API --------------------------------------------------------------------------------
def check_kernel_source(path: Path) -> None:
    """Raise UsageError naming the first refused construct of the kernel file; return None when it passes."""
    path = Path(path)
    found = findings(path)
    if found:
        raise UsageError(found[0].message(path.name))


def findings(path: Path) -> list[Finding]:
    """Every refused construct of the kernel file at ``path``, in source order."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the kernel file {path}: {exc.strerror or exc}") from exc
    found = _python_findings(data) if path.suffix == ".py" else _c_findings(data.decode("utf-8", "replace"),
                                                                              "in CUDA source")
    unique = {(f.line, f.what, f.why): f for f in found}
    return sorted(unique.values(), key=lambda f: f.line)


# --- CUDA C++ ---------------------------------------------------------------------------------------
def _blank_c(text: str) -> tuple[str, str]:
    """(code with comments blanked, code with comments and literal contents blanked); newlines are kept,
    so offsets and line numbers stay those of ``text``."""
    keep, code = list(text), list(text)
    i, n = 0, len(text)

    def blank(lo: int, hi: int, *targets: list[str]) -> None:
        for t in targets:
            for k in range(lo, hi):
                if t[k] != "\n":
                    t[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j, keep, code)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j, keep, code)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end
            blank(i + m.end(), end, code)
            i = end + len(m.group(1)) + 2
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():   # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n), code)
            i = j + 1
        else:
            i += 1
    return "".join(keep), "".join(code)


def _c_findings(text: str, where: str, line_of=None, markers_in_comments: bool = False) -> list[Finding]:
    """Findings for CUDA C++ ``text``; ``line_of(offset)`` maps an offset to a line of the file. The
    markers (harness files, channels) are looked for outside comments, or everywhere when
    ``markers_in_comments`` (a Python string is data: a ``//`` in it starts no comment)."""
    if line_of is None:
        def line_of(offset: int) -> int:
            return 1 + text.count("\n", 0, offset)
    keep, code = _blank_c(text)
    out = []
    for marker, why in _TEXTS.items():
        for m in re.finditer(re.escape(marker), text if markers_in_comments else keep):
            out.append(Finding(line_of(m.start()), f"refused: '{marker}' {where}", why))
    for rx, why in _C_RULES:
        for m in rx.finditer(code):
            shown = m.group(0).strip().replace("\r", "").replace("\n", "\\n")   # one line, always
            out.append(Finding(line_of(m.start()), f"refused: '{shown}' {where}", why))
    return out


# --- Python -----------------------------------------------------------------------------------------
def _module_rule(module: str) -> str | None:
    for name in _MODULES:
        if module == name or module.startswith(name + "."):
            return name
    return None


def _attr_rule(dotted: str) -> str | None:
    for pattern in _ATTRS:
        if fnmatchcase(dotted, pattern):
            return pattern
    return None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _local_names(scope: ast.AST) -> set[str]:
    """The names a function, lambda or comprehension binds locally. Python resolves them statically: a
    parameter named ``input`` is the kernel's own, never the builtin."""
    names: set[str] = set()
    declared_global: set[str] = set()
    args = getattr(scope, "args", None)
    if isinstance(args, ast.arguments):
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                names.add(a.arg)
    if isinstance(scope, _COMPREHENSIONS):
        stack: list[ast.AST] = [g.target for g in scope.generators]
    elif isinstance(scope, ast.Lambda):
        stack = []
    else:
        stack = list(scope.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue                                   # its body is a scope of its own
        elif isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global):
            declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names - declared_global


def _module_names(tree: ast.Module) -> set[str]:
    """Names every run of the module binds: top-level imports, defs, classes and plain assignments, less
    any name deleted anywhere (a conditional or deleted global falls back to the builtin)."""
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*")
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None) is not None:
            for target in getattr(stmt, "targets", None) or [stmt.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    deleted = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del)}
    return names - deleted


class _Checker(ast.NodeVisitor):
    def __init__(self, src: str, tree: ast.Module) -> None:
        self.src = src
        self.out: list[Finding] = []
        self.aliases: dict[str, str] = {}          # a name bound to a module, or to a name imported from one
        self.module_names = _module_names(tree)
        self.stack: list[set[str]] = []            # the local names of each enclosing function scope
        self.docstrings = self._docstrings(tree)
        self.literal_attr_calls: set[int] = set()  # getattr/setattr/delattr Names called with a literal name
        self._collect_aliases(tree)

    # -- helpers --
    def add(self, node: ast.AST, what: str, why: str, line: int | None = None) -> None:
        self.out.append(Finding(line or getattr(node, "lineno", 1), f"refused: {what}", why))

    def text(self, node: ast.AST) -> str:
        seg = " ".join((ast.get_source_segment(self.src, node) or "").split())
        return seg if len(seg) <= 60 else seg[:57] + "..."

    @staticmethod
    def _docstrings(tree: ast.Module) -> set[int]:
        ids = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
                first = node.body[0]
                if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                        and isinstance(first.value.value, str)):
                    ids.add(id(first.value))
        return ids

    def _collect_aliases(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        # `name = <module>.<attr>...` at module level makes ``name`` an alias too (`Event = torch.cuda.Event`)
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                dotted = self.dotted(stmt.value)
                if dotted:
                    self.aliases[stmt.targets[0].id] = dotted

    def chain_rule(self, node: ast.Attribute) -> str | None:
        """The attr rule that the chain ending at ``node`` matches, resolved or as written, whole or a tail."""
        parts = []
        base: ast.AST = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        written = ([base.id] if isinstance(base, ast.Name) else []) + parts[::-1]
        dotted = self.dotted(node)
        for names in ([dotted.split(".")] if dotted else []) + [written]:
            for start in range(len(names) - 1):
                hit = _attr_rule(".".join(names[start:]))
                if hit:
                    return hit
        return None

    def dotted(self, node: ast.AST) -> str | None:
        """The dotted name of an attribute chain rooted at an imported name (aliases resolved), else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def rooted_at_import(self, node: ast.AST) -> bool:
        """Whether ``node`` (a name, or attributes and subscripts of one) starts at an imported name."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return isinstance(node, ast.Name) and node.id in self.aliases

    def bound_by_kernel(self, name: str) -> bool:
        return name in self.module_names or any(name in scope for scope in self.stack)

    # -- scopes: defaults, decorators and annotations belong to the enclosing scope, the body to its own --
    def _visit_function(self, node: ast.AST) -> None:
        args = node.args
        outer = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        if not isinstance(node, ast.Lambda):
            outer += [*node.decorator_list, *(a.annotation for a in (*args.posonlyargs, *args.args,
                                                                     *args.kwonlyargs, args.vararg, args.kwarg)
                                               if a is not None and a.annotation is not None)]
            outer += [node.returns] if node.returns is not None else []
        for child in outer:
            self.visit(child)
        self.stack.append(_local_names(node))
        for child in (node.body if isinstance(node.body, list) else [node.body]):
            self.visit(child)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _visit_function

    def _visit_comprehension(self, node: ast.AST) -> None:
        self.visit(node.generators[0].iter)        # evaluated in the enclosing scope
        self.stack.append(_local_names(node))
        for i, gen in enumerate(node.generators):
            self.visit(gen.target)
            if i:
                self.visit(gen.iter)
            for cond in gen.ifs:
                self.visit(cond)
        for child in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
            self.visit(child)
        self.stack.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension

    # -- imports --
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            hit = _module_rule(a.name)
            if hit:
                text = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
                self.add(node, f"'{text}'", _MODULES[hit])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        hit = _module_rule(module) if not node.level else None
        if hit:
            self.add(node, f"'from {module} import {', '.join(a.name for a in node.names)}'", _MODULES[hit])
            return
        for a in node.names:
            text = f"'from {module} import {a.name}'"
            full = f"{module}.{a.name}"
            if a.name == "*":
                if module in ("os", "sys"):
                    self.add(node, text, _STRUCTURE["star import"])
            elif _module_rule(full):
                self.add(node, text, _MODULES[_module_rule(full)])
            elif _attr_rule(full):
                self.add(node, text, _ATTRS[_attr_rule(full)])
            elif a.name in _MEMBERS:
                self.add(node, text, _MEMBERS[a.name])
            elif a.name in _METHODS:
                self.add(node, text, _METHODS[a.name])

    # -- names, attributes, calls --
    def visit_Name(self, node: ast.Name) -> None:
        free = isinstance(node.ctx, ast.Load) and not self.bound_by_kernel(node.id)
        if free and node.id in _BUILTINS:
            self.add(node, f"'{node.id}'", _BUILTINS[node.id])
        elif node.id in _MEMBERS:
            self.add(node, f"'{node.id}'", _MEMBERS[node.id])
        elif free and node.id in _ATTR_BUILTINS and id(node) not in self.literal_attr_calls:
            self.add(node, f"'{node.id}' with a name that is not a string literal",
                     _STRUCTURE["computed attribute"])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        hit = self.chain_rule(node)
        if hit:
            self.add(node, f"'{self.text(node)}'", _ATTRS[hit])
        elif node.attr in _REEXPORTS and isinstance(node.value, (ast.Attribute, ast.Name)):
            self.add(node, f"'{self.text(node)}'", _REEXPORTS[node.attr])
        if node.attr in _MEMBERS:
            self.add(node, f"'{self.text(node)}'", _MEMBERS[node.attr])
        elif node.attr in _METHODS and not hit:
            self.add(node, f"'{self.text(node)}'", _METHODS[node.attr])
        self.generic_visit(node)
        if isinstance(node.ctx, (ast.Store, ast.Del)):   # after the chain's own findings (sys.modules[...].x)
            self._store(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.generic_visit(node)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._store(node)

    def _store(self, node: ast.AST) -> None:
        if self.rooted_at_import(node):
            self.add(node, f"assignment to '{self.text(node)}'", _STRUCTURE["monkeypatch"])

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _ATTR_BUILTINS and not self.bound_by_kernel(func.id):
            name_arg = node.args[1] if len(node.args) > 1 else None
            if isinstance(name_arg, ast.Constant) and isinstance(name_arg.value, str):
                self.literal_attr_calls.add(id(func))
                self._literal_attr(node, func.id, name_arg.value)
        for kw in node.keywords:
            if kw.arg in _KEYWORDS:
                self.add(node, f"keyword '{kw.arg}='", _KEYWORDS[kw.arg])
        if self.dotted(func) == "triton.compile" and not (node.args and isinstance(node.args[0], ast.Call)):
            self.add(node, f"'{self.text(node)}'", _STRUCTURE["triton.compile"])
        self.generic_visit(node)
        for arg in node.args:                      # a module named by string: `resolve("ctypes")`
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _module_rule(arg.value.strip()):
                self.add(arg, f"the module name {arg.value.strip()!r} passed to '{self.text(func)}'",
                         _MODULES[_module_rule(arg.value.strip())])

    def _literal_attr(self, node: ast.Call, builtin: str, name: str) -> None:
        """getattr/setattr/delattr with a literal name: the rules of ``obj.name`` written out."""
        obj, text = node.args[0], f"'{self.text(node)}'"
        dotted = self.dotted(obj)
        hit = _attr_rule(f"{dotted}.{name}") if dotted else None
        if hit:
            self.add(node, text, _ATTRS[hit])
        elif name in _MEMBERS:
            self.add(node, text, _MEMBERS[name])
        elif name in _METHODS:
            self.add(node, text, _METHODS[name])
        if builtin != "getattr" and self.rooted_at_import(obj):
            self.add(node, f"{builtin}() on '{self.text(obj)}'", _STRUCTURE["monkeypatch"])

    # -- string constants --
    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
        if not isinstance(value, str):
            return
        exact = value.strip()
        if exact in _MEMBERS or exact in _KEYWORDS:
            self.add(node, f"the string {exact!r}", _MEMBERS.get(exact) or _KEYWORDS[exact])
        first, last = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        if last - first == value.count("\n"):

            def line_of(offset: int) -> int:
                return first + value.count("\n", 0, offset)
        else:                                       # escapes or implicit joins: the constant's first line

            def line_of(offset: int) -> int:
                return first
        if id(node) in self.docstrings:             # prose: only the names of harness files and channels
            for marker, why in _TEXTS.items():
                if marker in value:
                    self.add(node, f"'{marker}' in a docstring", why, line_of(value.index(marker)))
            return
        self.out.extend(_c_findings(value, "in a string", line_of=line_of, markers_in_comments=True))


def _python_findings(data: bytes) -> list[Finding]:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 1
        detail = getattr(exc, "msg", None) or str(exc)
        return [Finding(line, f"refused: a file that does not parse ({detail})", _STRUCTURE["syntax"])]
    checker = _Checker(data.decode("utf-8", "replace"), tree)
    checker.visit(tree)
    return checker.out
