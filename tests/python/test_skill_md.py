"""SKILL.md limits beyond the reference validator: front matter keys, description, size, references."""

from __future__ import annotations

import re

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
    """Issue 44, 9 and 10: the key init made on the GPU machine comes back with the first archive; kbs evidence
    runs where the run directory is, not on device time."""
    _raw, body, _ = _split(repo)
    remote = body.split("**When the GPU is on another machine.**")[1].split("\n## ")[0]
    flat = " ".join(remote.split())
    assert "first archive" in flat and "key" in flat
    assert "`kbs evidence` needs no GPU" in flat
    assert "correctness, profile and `kbs evidence` together" not in flat
