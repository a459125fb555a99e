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

Every rule lives in ``RULES``, one ``Rule(kind, pattern, why)`` per entry, in ``static_rules`` (with
``Finding``; both are re-exported here); this module holds the checks, which only say how each kind is
matched: the public API, the CUDA C++ scan and the Python ``ast`` walk. Pure Python (``ast``, ``re``):
importing this module imports no torch.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kernel_loop.common import UsageError
from kernel_loop.static_rules import (
    ATTR_BUILTINS,
    ATTRS,
    BUILTINS,
    C_RULES,
    KEYWORDS,
    MEMBERS,
    METHODS,
    MODULES,
    REEXPORTS,
    RULES,  # noqa: F401  (re-exported: the rule table and its types are part of this module's API)
    STRUCTURE,
    TEXTS,
    Finding,
    Rule,  # noqa: F401
    attr_rule,
    module_rule,
)


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
    for marker, why in TEXTS.items():
        for m in re.finditer(re.escape(marker), text if markers_in_comments else keep):
            out.append(Finding(line_of(m.start()), f"refused: '{marker}' {where}", why))
    for rx, why in C_RULES:
        for m in rx.finditer(code):
            shown = m.group(0).strip().replace("\r", "").replace("\n", "\\n")   # one line, always
            out.append(Finding(line_of(m.start()), f"refused: '{shown}' {where}", why))
    return out


# --- Python -----------------------------------------------------------------------------------------
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
        self.main_guard = {id(n) for c in ast.walk(tree) if isinstance(c, ast.Compare) and len(c.ops) == 1  # the
                           and isinstance(c.ops[0], (ast.Eq, ast.NotEq)) for n in (c.left, c.comparators[0])  # guard
                           if isinstance(n, ast.Name) and n.id == "__name__" and any(  # `__name__ == "__main__"`
                               isinstance(o, ast.Constant) and o.value == "__main__" for o in (c.left, c.comparators[0]))}
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
                hit = attr_rule(".".join(names[start:]))
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
        name = getattr(node, "name", "")
        if name in ("__torch_function__", "__torch_dispatch__"):  # defining the protocol, not only reading it
            self.add(node, f"'def {name}'", MEMBERS[name])
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
            hit = module_rule(a.name)
            if hit:
                text = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
                self.add(node, f"'{text}'", MODULES[hit])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        hit = module_rule(module) if not node.level else None
        if hit:
            self.add(node, f"'from {module} import {', '.join(a.name for a in node.names)}'", MODULES[hit])
            return
        for a in node.names:
            text = f"'from {module} import {a.name}'"
            full = f"{module}.{a.name}"
            if a.name == "*":
                if module in ("os", "sys"):
                    self.add(node, text, STRUCTURE["star import"])
            elif module_rule(full):
                self.add(node, text, MODULES[module_rule(full)])
            elif attr_rule(full):
                self.add(node, text, ATTRS[attr_rule(full)])
            elif a.name in MEMBERS:
                self.add(node, text, MEMBERS[a.name])
            elif a.name in METHODS:
                self.add(node, text, METHODS[a.name])
            elif a.name in REEXPORTS and module:  # `from torch.cuda.graphs import gc` (a red team's)
                self.add(node, text, REEXPORTS[a.name])

    # -- names, attributes, calls --
    def visit_Name(self, node: ast.Name) -> None:
        free = isinstance(node.ctx, ast.Load) and not self.bound_by_kernel(node.id)
        if free and node.id in BUILTINS:
            self.add(node, f"'{node.id}'", BUILTINS[node.id])
        elif node.id in MEMBERS:
            self.add(node, f"'{node.id}'", MEMBERS[node.id])
        elif free and node.id == "__name__" and id(node) not in self.main_guard:
            self.add(node, f"'{node.id}'", STRUCTURE["module name"])
        elif free and node.id in ATTR_BUILTINS and id(node) not in self.literal_attr_calls:
            self.add(node, f"'{node.id}' with a name that is not a string literal",
                     STRUCTURE["computed attribute"])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        hit = self.chain_rule(node)
        if hit:
            self.add(node, f"'{self.text(node)}'", ATTRS[hit])
        elif node.attr in REEXPORTS and isinstance(node.value, (ast.Attribute, ast.Name)):
            self.add(node, f"'{self.text(node)}'", REEXPORTS[node.attr])
        if node.attr in MEMBERS:
            self.add(node, f"'{self.text(node)}'", MEMBERS[node.attr])
        elif node.attr in METHODS and not hit:
            self.add(node, f"'{self.text(node)}'", METHODS[node.attr])
        self.generic_visit(node)
        if isinstance(node.ctx, (ast.Store, ast.Del)):   # after the chain's own findings (sys.modules[...].x)
            self._store(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.generic_visit(node)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._store(node)

    def _store(self, node: ast.AST) -> None:
        if self.rooted_at_import(node):
            self.add(node, f"assignment to '{self.text(node)}'", STRUCTURE["monkeypatch"])

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ATTR_BUILTINS and not self.bound_by_kernel(func.id):
            name_arg = node.args[1] if len(node.args) > 1 else None
            if isinstance(name_arg, ast.Constant) and isinstance(name_arg.value, str):
                self.literal_attr_calls.add(id(func))
                self._literal_attr(node, func.id, name_arg.value)
        for kw in node.keywords:
            if kw.arg in KEYWORDS:
                self.add(node, f"keyword '{kw.arg}='", KEYWORDS[kw.arg])
        if self.dotted(func) == "triton.compile" and not (node.args and isinstance(node.args[0], ast.Call)):
            self.add(node, f"'{self.text(node)}'", STRUCTURE["triton.compile"])
        self.generic_visit(node)
        for arg in node.args:                      # a module named by string: `resolve("ctypes")`
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and module_rule(arg.value.strip()):
                self.add(arg, f"the module name {arg.value.strip()!r} passed to '{self.text(func)}'",
                         MODULES[module_rule(arg.value.strip())])

    def _literal_attr(self, node: ast.Call, builtin: str, name: str) -> None:
        """getattr/setattr/delattr with a literal name: the rules of ``obj.name`` written out."""
        obj, text = node.args[0], f"'{self.text(node)}'"
        dotted = self.dotted(obj)
        hit = attr_rule(f"{dotted}.{name}") if dotted else None
        if hit:
            self.add(node, text, ATTRS[hit])
        elif name in MEMBERS:
            self.add(node, text, MEMBERS[name])
        elif name in METHODS:
            self.add(node, text, METHODS[name])
        if builtin != "getattr" and self.rooted_at_import(obj):
            self.add(node, f"{builtin}() on '{self.text(obj)}'", STRUCTURE["monkeypatch"])

    # -- string constants --
    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
        if not isinstance(value, str):
            return
        exact = value.strip()
        if exact in MEMBERS or exact in KEYWORDS:
            self.add(node, f"the string {exact!r}", MEMBERS.get(exact) or KEYWORDS[exact])
        first, last = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        if last - first == value.count("\n"):

            def line_of(offset: int) -> int:
                return first + value.count("\n", 0, offset)
        else:                                       # escapes or implicit joins: the constant's first line

            def line_of(offset: int) -> int:
                return first
        if id(node) in self.docstrings:             # prose: only the names of harness files and channels
            for marker, why in TEXTS.items():
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
        return [Finding(line, f"refused: a file that does not parse ({detail})", STRUCTURE["syntax"])]
    checker = _Checker(data.decode("utf-8", "replace"), tree)
    checker.visit(tree)
    return checker.out
