"""The skill as shipped: SKILL.md limits beyond the reference validator (front matter keys, description, size,
references), and the two layers of the helpers (at the end of this file)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ALLOWED_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}


def _split(repo):
    text = (repo / "SKILL.md").read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, "SKILL.md must start with a --- front matter block"
    return m.group(1), m.group(2), text


def test_front_matter_keys_and_name(repo):
    raw, _body, _ = _split(repo)
    meta = yaml.safe_load(raw)
    assert set(meta) <= ALLOWED_KEYS, f"keys outside the spec: {set(meta) - ALLOWED_KEYS}"
    assert meta["name"] == "kernel-loop"


def test_description_limits(repo):
    raw, _body, _ = _split(repo)
    meta = yaml.safe_load(raw)
    desc = meta["description"]
    assert 0 < len(desc) <= 1024
    assert "<" not in desc and ">" not in desc
    # quoted in the file, and key terms first
    assert re.search(r'^description: "', raw, re.M)
    assert desc.lower().startswith("gpu kernel optimization")


def test_size_and_reference_files_exist(repo):
    _raw, body, text = _split(repo)
    assert len(text.splitlines()) < 500
    for ref in set(re.findall(r"references/[A-Za-z0-9_]+\.md", body)):
        assert (repo / ref).is_file(), f"SKILL.md names {ref}, which does not exist"


def test_every_helper_command_named_in_skill_exists(repo):
    from kernel_loop.cli import STEPS

    _raw, body, _ = _split(repo)
    commands = {name.replace("next_version", "next") for name in STEPS}
    for used in set(re.findall(r"\$KL ([a-z]+)", body)):
        assert used in commands, f"SKILL.md uses '$KL {used}', which the front door does not have"


PLACEHOLDERS = {"<out>": "/tmp/kl-skill-out", "<skill folder>": "/tmp/skill", "<command>": "init", "NAME": "softmax",
                "TAG": "memory-bound", "PAGE-ID": "online-softmax", "ID": "online-softmax"}


def _commands(body: str, prefix: str) -> list[str]:
    """Every ``$KL ...`` (or ``$GATE ...``) command SKILL.md shows, in code blocks and inline code,
    with continuation lines joined, trailing comments dropped and placeholders filled in."""
    text = body.replace("\\\n", " ")
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(prefix + " "):
                found.append(line)
    for inline in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
        if inline.startswith(prefix + " "):
            found.append(inline)
    for ph, value in PLACEHOLDERS.items():
        found = [c.replace(ph, value) for c in found]
    return found


def test_every_kl_command_line_in_skill_md_parses(repo):
    """Each command SKILL.md tells the agent to run is accepted by the real parser (flags and values)."""
    import shlex

    from kernel_loop.cli import build_parser

    _raw, body, _ = _split(repo)
    cmds = _commands(body, "$KL")
    assert len(cmds) >= 10, cmds
    parser = build_parser()
    for cmd in cmds:
        argv = ["x" if a == "..." else a for a in shlex.split(cmd)[1:]]
        if argv in (["--help"], ["init", "--help"]):
            continue
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"SKILL.md shows a command the parser refuses: {cmd}") from exc


def test_every_gate_option_in_skill_md_exists(repo):
    import subprocess

    from kernel_loop import rundir

    _raw, body, _ = _split(repo)
    cmds = _commands(body, "$GATE")
    assert cmds
    helptext = subprocess.run(["bash", str(rundir.gate_script()), "--help"], capture_output=True, text=True).stdout
    for cmd in cmds:
        for opt in re.findall(r"(?<!\S)--[a-z-]+", cmd):
            assert opt in helptext, f"SKILL.md passes {opt} to the gate, whose --help does not list it: {cmd}"


def test_skill_md_stays_short(repo):
    _raw, body, text = _split(repo)
    assert len(text.splitlines()) <= 150, "SKILL.md should stay under about 150 lines: move detail to references/"


def test_a_remote_gpu_run_is_told_what_travels_and_what_needs_no_gpu(repo):
    """Issue 44, 9 and 10: the key init made on the GPU machine comes back in the archive, because the variable
    points inside the folder that travels (an agent trial on 2026-12-05 asked who brings it back); kbs runs where
    the run directory is, not on device time; a remote run plans one GPU session per version and one to benchmark."""
    _raw, body, _ = _split(repo)
    remote = body.split("**When the GPU is on another machine.**")[1].split("\n## ")[0]
    flat = " ".join(remote.split())
    assert "KERNEL_LOOP_RECORD_KEY=$PWD/keys/record.key` from that folder" in flat and "comes back in the archive" in flat
    assert "smaller `--dims` only with the user" in flat  # an agent's trial cut the shapes to fit its device time
    assert "`kbs`, `hypothesis`, the gate" in flat and "need no GPU" in flat
    assert "N+2 GPU sessions" in flat
    assert "correctness, profile and `kbs evidence` together" not in flat


# --- the helpers' layers ------------------------------------------------------------------------------
# The two layers of the helpers: loop steps on top (kernel_loop/steps/), support below.
#
# A step imports support modules, never another step; a support module never imports a step; the front
# door (cli.py) only dispatches.  Read from the source with ast, so a lazy import inside a function counts.

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
