"""The two layers of the helpers: loop steps on top (kernel_loop/steps/), support below.

A step imports support modules, never another step; a support module never imports a step; the front
door (cli.py) only dispatches.  Read from the source with ast, so a lazy import inside a function counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "helpers" / "kernel_loop"
STEP_DIR = PKG / "steps"
MAX_LINES = 520  # "about 500": a module past this is doing more than one job


def _steps() -> set[str]:
    return {p.stem for p in STEP_DIR.glob("*.py") if p.stem != "__init__"}


def _imported(path: Path, source: str | None = None) -> set[str]:
    """Absolute names (kernel_loop.x.y) of the package modules a file imports (``source``: its text, when
    the file at ``path`` is only where that text would live)."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    package = list(rel.parts[:-1])
    out: set[str] = set()
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            if not mod.startswith("kernel_loop"):
                continue
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("kernel_loop"))
    return out


def _is_step(name: str, steps: set[str]) -> str | None:
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] == "steps" and parts[2] in steps:
        return parts[2]
    return None


def test_no_step_imports_another_step():
    steps = _steps()
    assert {"init", "correctness", "profile", "benchmark", "report", "status"} <= steps
    bad = []
    for path in STEP_DIR.glob("*.py"):
        for name in _imported(path):
            other = _is_step(name, steps)
            if other and other != path.stem:
                bad.append(f"steps/{path.name} imports the step {other}")
    assert not bad, bad


def test_support_modules_never_import_a_step():
    steps = _steps()
    bad = []
    for path in PKG.rglob("*.py"):
        if STEP_DIR in path.parents or path.name == "cli.py":
            continue
        bad += [f"{path.relative_to(PKG)} imports {n}" for n in _imported(path) if _is_step(n, steps)]
    assert not bad, bad


def test_the_layer_check_sees_a_step_import():
    """The checker itself: a step module that imports another step is caught (relative and absolute)."""
    names = _imported(STEP_DIR / "_probe.py", "from .correctness import run_correctness\n"
                                              "from kernel_loop.steps import report\n")
    steps = _steps()
    assert {_is_step(n, steps) for n in names} >= {"correctness", "report"}


def test_no_module_is_too_long():
    long = [f"{p.relative_to(PKG)}: {n} lines" for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not long, long
